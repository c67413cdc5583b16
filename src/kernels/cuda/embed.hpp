// The embedding gather (docs/ARITHMETIC.md, "The forward pass", step 1): x[r] = embed[ids[r]], a
// copy. One thread per element of x [rows, d]; no arithmetic.
#pragma once

#include "kernels/cuda/arith.hpp"

namespace lockstep::cuda {

struct EmbedArgs {
  const int32_t* ids;  // [rows]
  const float* embed;  // [vocab, d]
  float* x;            // [rows, d]
  int64_t rows;
  int32_t d;
};

inline constexpr int32_t kEmbedThreads = 256;

inline int64_t embed_blocks(const EmbedArgs& a) {
  return (a.rows * a.d + kEmbedThreads - 1) / kEmbedThreads;
}

LOCKSTEP_HD inline void embed_body(const EmbedArgs& a, ThreadAt at) {
  const int64_t e = at.block_x * kEmbedThreads + at.thread;
  if (e >= a.rows * a.d) return;
  const int64_t r = e / a.d, i = e % a.d;
  a.x[e] = a.embed[static_cast<int64_t>(a.ids[r]) * a.d + i];
}

}  // namespace lockstep::cuda
