// A model's matrices in the fast path's layout, packed once at load: which matrices a model has
// and how they are fused is the model's to say; the panel layouts and the arena they lie in are
// the kernels' (kernels/simd/kernels.hpp, kernels/simd/weight_arena.hpp).
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "kernels/simd/kernels.hpp"
#include "kernels/simd/weight_arena.hpp"
#include "lockstep/config.hpp"
#include "quant/gguf_blocks.hpp"
#include "quant/q4.hpp"
#include "quant/q8.hpp"

namespace lockstep {

struct PackedWeights {
  const simd::Kernels* kernels = nullptr;
  // Holds every matrix's panels (and q8/q4 scales), back to back on huge pages where the system
  // gives them; declared first, so that it outlives the matrices that point into it.
  std::unique_ptr<simd::WeightArena> arena;
  struct Layer {
    simd::PackedMatrix qkv;      // [d_model, q_dim + 2 kv_dim] = [wq | wk | wv]
    simd::PackedMatrix wo;       // [q_dim, d_model]
    simd::PackedMatrix gate_up;  // [d_model, 2 d_ff] = [w_gate | w_up]
    simd::PackedMatrix w_down;   // [d_ff, d_model]
  };
  std::vector<Layer> layers;
  simd::PackedMatrix head;  // [d_model, vocab]
};

// Packs the matrices of `weights` (flat, registry order) for `kernels` (the best supported
// target when null). Concatenating columns changes no output's chain, so the fused matrices give
// the bits of the separate ones. `bf16_storage`: the weights are bf16 values (precision bf16),
// kept as 16-bit halves. `q8`: the int8 values and scales `weights` were expanded from (by
// registry offset); a fused matrix whose parts are all there is kept as int8 panels
// (PackedMatrix::q8), computing the same bits from a quarter of the bytes; any other (a :load
// parameter, bf16 storage) is packed from `weights`. `q4` likewise, as 4-bit panels.
// `packed`, when given, is called after each fused matrix is packed, with the matrix and its
// parts ({registry offset, columns}, in column order), before the next is read: a caller can give
// back the parts' f32 pages as it goes, so that packing needs no second full copy of the weights.
// `blocks`: an int8dot model's matrices in GGUF blocks (by registry offset), kept as blocks
// (PackedMatrix::blocks) and computed by integer block dot products.
using PackedParts = std::span<const std::pair<int64_t, int64_t>>;
std::shared_ptr<const PackedWeights> pack_weights(
    const ModelConfig& config, const ParameterRegistry& registry, const float* weights,
    const simd::Kernels* kernels = nullptr, bool bf16_storage = false,
    const quant::Q8Matrices* q8 = nullptr, const quant::Q4Matrices* q4 = nullptr,
    const std::function<void(const simd::PackedMatrix&, PackedParts)>& packed = nullptr,
    const quant::BlockMatrices* blocks = nullptr);

// The kernels a model's weights were packed for (the best supported target when null).
const simd::Kernels& kernels_for(const PackedWeights* packed);

}  // namespace lockstep
