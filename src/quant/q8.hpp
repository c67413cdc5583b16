// Packed int8 weights ("q8"): each matrix [K, N] (in_out) is stored as int8 values with one f32
// scale per output column. Loading expands every weight exactly to the f32 value the packing
// defines, w = float(q) * scale[n] (one rounded multiply), so every path computes from the same
// f32 weights. Vectors (norm weights) stay f32. docs/FORMAT.md, "Packed weights". The codec alone:
// the weights file that holds its values, and the names it gives them, are format/weights.hpp's.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace lockstep::quant {

// scale[n] = max_k |w[k, n]| / 127 (f32, 0 for an all-zero column);
// q[k, n] = round-half-even(w[k, n] / scale[n]) clamped to [-127, 127] (0 where scale is 0).
void pack_q8(const float* w, int64_t K, int64_t N, int8_t* q, float* scale);
// w[k, n] = float(q[k, n]) * scale[n].
void expand_q8(const int8_t* q, const float* scale, int64_t K, int64_t N, float* w);

// One matrix as the file holds it: q [K, N] row-major, scale [N].
struct Q8Matrix {
  int64_t K = 0, N = 0;
  std::vector<int8_t> q;
  std::vector<float> scale;
};
// A q8 model's matrices by their registry offset (what the loader read), so that the kernels can
// compute from the packed bytes rather than the expanded floats.
using Q8Matrices = std::unordered_map<int64_t, Q8Matrix>;

}  // namespace lockstep::quant
