// lockstep.lowbit's packed tensor: a matrix [K, N] stored as int8 values with one f32 scale per
// output column ("q8", docs/FORMAT.md, "Packed weights"), as `lockstep export --pack q8` writes
// it. The named-parameter dicts of LanguageModelInference and LanguageModelHostTrainer accept it
// and expand it exactly (convert.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::python {

struct PackedTensor {
  std::string format;      // "q8": the only packed format lockstep defines
  int64_t rows = 0;        // K
  int64_t cols = 0;        // N
  std::vector<int8_t> q;   // [K, N], row-major
  std::vector<float> scale;  // [N]

  // float(q[k, n]) * scale[n], one f32 multiply each (quant::expand_q8).
  std::vector<float> expand() const;
};

}  // namespace lockstep::python
