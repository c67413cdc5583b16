// What a loaded model holds. Immutable after construction except for the lazily made pool.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/thread_pool.hpp"
#include "lockstep/model.hpp"

namespace lockstep {

namespace simd {
struct PackedWeights;
}

struct Model::Impl {
  ModelConfig config;
  ParameterRegistry registry;
  std::vector<float> parameters;  // f32, registry order, as given or expanded
  // The weights the matmuls read: `parameters` itself for f32, a copy rounded to bf16 for bf16.
  std::vector<float> bf16_parameters;
  std::string sha256;
  Precision precision = Precision::f32;
  std::string weight_format = "float32";
  ModelSource source;
  Device device = Device::cpu;
  int threads = 0;  // 0: the pool's size
  std::vector<float> rope_cos, rope_sin;  // [length, head_dim / 2]
  float attention_scale = 1.0f;
  std::shared_ptr<const simd::PackedWeights> packed;  // the fast path's layout of the weights

  mutable std::mutex pool_mutex;
  mutable std::shared_ptr<ThreadPool> pool;

  Impl(const ModelConfig& c, std::vector<float> params, const ModelOptions& options);

  const float* matmul_weights() const {
    return precision == Precision::bf16 ? bf16_parameters.data() : parameters.data();
  }
  ThreadPool& thread_pool() const;
  // Threads a call runs with: its own request, else the model's default, else the pool's size.
  int threads_for(const CallOptions& call) const;
};

// The single-threaded scalar forward pass (forward_ref.cpp): every row alone, from position 0.
void forward_reference(const Model::Impl& model, std::span<const RowRequest> rows);
// The SIMD, multithreaded forward pass (forward_fast.cpp), bit-identical to the reference.
void forward_fast(const Model::Impl& model, std::span<const RowRequest> rows, int threads);

}  // namespace lockstep
