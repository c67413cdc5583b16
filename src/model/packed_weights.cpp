// Planning and packing a model's matrices (packed_weights.hpp) with the kernels' packers.
#include "model/packed_weights.hpp"

#include <algorithm>
#include <initializer_list>

#include "kernels/simd/block_matrix.hpp"
#include "kernels/simd/dispatch.hpp"
#include "lockstep/error.hpp"

namespace lockstep {

namespace {

// How the concatenation of the matrices at registry offsets `offsets` (widths N, sharing K) is
// stored: as 4-bit or int8 panels when every part has that form (and the storage is not bf16),
// else from the floats.
struct FusedPlan {
  int64_t K = 0, N = 0;
  simd::PanelStorage storage = simd::PanelStorage::f32;
  std::vector<simd::MatrixPart> parts;
  std::vector<simd::Q8Part> q8_parts;
  std::vector<simd::Q4Part> q4_parts;
  std::vector<simd::BlockPart> block_parts;  // an int8dot model's matrices in GGUF blocks
};

FusedPlan plan_fused(const float* w, const quant::Q8Matrices* q8, const quant::Q4Matrices* q4,
                     const quant::BlockMatrices* blocks, bool bf16,
                     std::initializer_list<std::pair<int64_t, int64_t>> offsets, int64_t K) {
  FusedPlan plan;
  plan.K = K;
  for (const auto& [offset, N] : offsets) {
    plan.N += N;
    plan.parts.push_back({w + offset, N});
    if (blocks) {
      const auto it = blocks->find(offset);
      if (it != blocks->end() && it->second.K == K && it->second.N == N)
        plan.block_parts.push_back({it->second.rows.data(), it->second.type, N});
    }
    if (q4 && !bf16) {
      const auto it = q4->find(offset);
      if (it != q4->end() && it->second.K == K && it->second.N == N)
        plan.q4_parts.push_back({it->second.packed.data(), it->second.scale.data(), N});
    }
    if (!q8 || bf16) continue;
    const auto it = q8->find(offset);
    if (it != q8->end() && it->second.K == K && it->second.N == N)
      plan.q8_parts.push_back({it->second.q.data(), it->second.scale.data(), N});
  }
  // The profile computes a fused matrix's outputs each by its own matrix's rule, but the kernels
  // take one form per fused matrix: a mix of blocks and floats is refused (no importer makes one).
  if (!plan.block_parts.empty() && plan.block_parts.size() != plan.parts.size())
    throw Error(ErrorKind::unsupported,
                "a fused matrix ([wq | wk | wv] or [w_gate | w_up]) has some parts in GGUF blocks and some in floats; "
                "lockstep computes them only all in blocks or all in floats");
  const auto k_parts = std::count_if(plan.block_parts.begin(), plan.block_parts.end(),
                                     [](const simd::BlockPart& p) { return quant::is_k_quant(p.type); });
  if (k_parts != 0 && k_parts != static_cast<std::ptrdiff_t>(plan.block_parts.size()))
    throw Error(ErrorKind::unsupported,
                "a fused matrix ([wq | wk | wv] or [w_gate | w_up]) mixes K-quant parts (Q4_K, Q5_K, Q6_K) with Q8_0, "
                "Q4_0 or Q5_0 ones; lockstep computes a fused matrix's blocks all of one kind (llama-quantize gives the "
                "parts of one the same kind)");
  plan.storage = plan.q4_parts.size() == plan.parts.size()   ? simd::PanelStorage::q4
                 : plan.q8_parts.size() == plan.parts.size() ? simd::PanelStorage::q8
                 : bf16                                      ? simd::PanelStorage::bf16
                                                             : simd::PanelStorage::f32;
  return plan;
}

simd::PackedMatrix pack_planned(const simd::Kernels& k, const FusedPlan& plan,
                                simd::WeightArena* arena) {
  const int n = static_cast<int>(plan.parts.size());
  if (!plan.block_parts.empty()) {
    simd::PackedMatrix out;
    out.K = plan.K;
    out.N = plan.N;
    out.blocks = std::make_shared<const simd::BlockMatrix>(simd::pack_blocks(plan.block_parts.data(), n, plan.K));
    out.panel = simd::kBlockGroup;
    out.panels = out.blocks->groups;
    return out;
  }
  switch (plan.storage) {
    case simd::PanelStorage::q4:
      return simd::pack_q4_concat(k, plan.q4_parts.data(), n, plan.K, arena);
    case simd::PanelStorage::q8:
      return simd::pack_q8_concat(k, plan.q8_parts.data(), n, plan.K, arena);
    case simd::PanelStorage::bf16:
    case simd::PanelStorage::f32: break;
  }
  const bool bf16 = plan.storage == simd::PanelStorage::bf16;
  return simd::pack_concat(k, plan.parts.data(), n, plan.K, bf16, arena);
}

}  // namespace

std::shared_ptr<const PackedWeights> pack_weights(
    const ModelConfig& c, const ParameterRegistry& reg, const float* w, const simd::Kernels* kernels,
    bool bf16, const quant::Q8Matrices* q8, const quant::Q4Matrices* q4,
    const std::function<void(const simd::PackedMatrix&, PackedParts)>& packed, const quant::BlockMatrices* blocks) {
  auto out = std::make_shared<PackedWeights>();
  out->kernels = kernels ? kernels : &simd::best_kernels();
  const simd::Kernels& k = *out->kernels;
  const int64_t d = c.d_model, q = c.q_dim(), kv = c.kv_dim(), ff = c.d_ff;
  // Every matrix is planned first, so that the arena is sized exactly (its huge pages then hold
  // nothing but weights), then packed in order.
  struct Planned {
    simd::PackedMatrix* into;
    std::vector<std::pair<int64_t, int64_t>> parts;  // {registry offset, columns}
    FusedPlan plan;
  };
  std::vector<Planned> plans;
  auto plan = [&](simd::PackedMatrix& into, std::initializer_list<std::pair<int64_t, int64_t>> parts,
                  int64_t K) {
    plans.push_back({&into, parts, plan_fused(w, q8, q4, blocks, bf16, parts, K)});
  };
  out->layers.resize(static_cast<size_t>(c.n_layers));
  for (int32_t l = 0; l < c.n_layers; ++l) {
    const ParameterRegistry::Layer& L = reg.layer(l);
    PackedWeights::Layer& layer = out->layers[static_cast<size_t>(l)];
    plan(layer.qkv, {{L.wq, q}, {L.wk, kv}, {L.wv, kv}}, d);
    plan(layer.wo, {{L.wo, d}}, q);
    plan(layer.gate_up, {{L.w_gate, ff}, {L.w_up, ff}}, d);
    plan(layer.w_down, {{L.w_down, d}}, ff);
  }
  plan(out->head, {{reg.head(), c.vocab_size}}, d);
  size_t bytes = 0;
  for (const Planned& p : plans)
    if (p.plan.block_parts.empty()) bytes += simd::arena_bytes(k, p.plan.storage, p.plan.K, p.plan.N);
  out->arena = std::make_unique<simd::WeightArena>(bytes);
  for (const Planned& p : plans) {
    *p.into = pack_planned(k, p.plan, out->arena.get());
    if (packed) packed(*p.into, PackedParts(p.parts));
  }
  return out;
}

const simd::Kernels& kernels_for(const PackedWeights* packed) {
  return packed && packed->kernels ? *packed->kernels : simd::best_kernels();
}

}  // namespace lockstep
