// The two orders of a query's or key's RoPE pairs. Hugging Face's checkpoints (and llama.cpp's
// NeoX rotation, which its qwen2 architecture uses) pair element i of a head with i + head_dim / 2;
// lockstep pairs 2i with 2i + 1 (docs/ARITHMETIC.md, "RoPE"), as llama.cpp's llama files do.
#pragma once

#include <cstdint>

namespace lockstep::format {

// Row (output) j of a lockstep query or key projection, heads of `head_dim`, is row
// neox_row(j, head_dim) of the NeoX-ordered one: h * hd + 2i + e <- h * hd + e * hd / 2 + i.
inline int64_t neox_row(int64_t j, int64_t head_dim) {
  const int64_t h = j / head_dim, r = j % head_dim;
  return h * head_dim + (r % 2) * (head_dim / 2) + r / 2;
}

}  // namespace lockstep::format
