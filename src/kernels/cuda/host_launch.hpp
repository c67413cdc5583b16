// The CUDA kernels' bodies run on the host: each launch a loop over the grid's blocks, and within
// a block over its phases, each phase run for every thread of the block in turn before the next
// (what the device's __syncthreads between them guarantees), with the block's shared memory one
// struct and each thread's registers (the matmul's accumulators) kept per thread across phases.
// The same functions as the device runs (kernels/cuda/*.hpp), compiled by the host compiler:
// the tests compare these runs with the reference kernels by memcmp on every machine, GPU or not.
#pragma once

#include <memory>
#include <vector>

#include "kernels/cuda/forward_plan.hpp"

namespace lockstep::cuda {

struct HostLaunch {
  void embed(const EmbedArgs& a) {
    for (int64_t bx = 0; bx < embed_blocks(a); ++bx)
      for (int32_t t = 0; t < kEmbedThreads; ++t) embed_body(a, {bx, 0, t});
  }

  void rmsnorm(const RmsNormArgs& a) {
    for (int64_t bx = 0; bx < a.rows; ++bx) {
      RmsNormShared shared{};
      for (int32_t t = 0; t < kNormThreads; ++t) rmsnorm_phase_scale(a, {bx, 0, t}, shared);
      for (int32_t t = 0; t < kNormThreads; ++t) rmsnorm_phase_apply(a, {bx, 0, t}, shared);
    }
  }

  void matmul(const MatmulArgs& a) {
    auto shared = std::make_unique<MatmulShared>();
    std::vector<MatmulAccumulators> acc(kMatmulThreads);
    const int64_t tiles = matmul_k_tiles(a);
    for (int64_t by = 0; by < matmul_blocks_y(a); ++by) {
      for (int64_t bx = 0; bx < matmul_blocks_x(a); ++bx) {
        auto at = [&](int32_t t) { return ThreadAt{bx, static_cast<int32_t>(by), t}; };
        for (int32_t t = 0; t < kMatmulThreads; ++t) matmul_begin(acc[static_cast<size_t>(t)]);
        for (int64_t kt = 0; kt < tiles; ++kt) {
          for (int32_t t = 0; t < kMatmulThreads; ++t) matmul_load(a, at(t), kt, *shared);
          for (int32_t t = 0; t < kMatmulThreads; ++t) matmul_step(a, at(t), kt, *shared, acc[static_cast<size_t>(t)]);
        }
        for (int32_t t = 0; t < kMatmulThreads; ++t) matmul_store(a, at(t), acc[static_cast<size_t>(t)]);
      }
    }
  }

  void rope(const RopeArgs& a) {
    for (int64_t bx = 0; bx < rope_blocks(a); ++bx)
      for (int32_t t = 0; t < kRopeThreads; ++t) rope_body(a, {bx, 0, t});
  }

  void attention(const AttentionArgs& a) {
    auto shared = std::make_unique<AttentionShared>();
    for (int64_t bx = 0; bx < a.rows; ++bx) {
      for (int32_t h = 0; h < a.n_heads; ++h) {
        for (int32_t t = 0; t < kAttentionThreads; ++t) attention_phase_query(a, {bx, h, t}, *shared);
        for (int32_t t = 0; t < kAttentionThreads; ++t) attention_phase_scores(a, {bx, h, t}, *shared);
        for (int32_t t = 0; t < kAttentionThreads; ++t) attention_phase_max(a, {bx, h, t}, *shared);
        for (int32_t t = 0; t < kAttentionThreads; ++t) attention_phase_exp(a, {bx, h, t}, *shared);
        for (int32_t t = 0; t < kAttentionThreads; ++t) attention_phase_sum(a, {bx, h, t});
      }
    }
  }

  void swiglu(const SwigluArgs& a) {
    for (int64_t bx = 0; bx < swiglu_blocks(a); ++bx)
      for (int32_t t = 0; t < kSwigluThreads; ++t) swiglu_body(a, {bx, 0, t});
  }
};

// The whole forward pass of `rows` on the host through HostLaunch: the CUDA path's bits, for
// tests on machines without a GPU. Writes each row's logits and hidden states as asked.
void host_forward(const ModelView& model, std::span<const RowSpec> rows);

}  // namespace lockstep::cuda
