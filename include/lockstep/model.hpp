// A loaded model and its forward pass.
//
// A Model is immutable once built and may be called from several threads at once; each call
// allocates its own workspace. Every entry point gives the same bits on every device, thread
// count, batch composition and SIMD target (docs/ARITHMETIC.md).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lockstep/config.hpp"
#include "lockstep/error.hpp"

namespace lockstep {

enum class Device {
  cpu,        // SIMD kernels on the thread pool
  reference,  // single-threaded scalar kernels: docs/ARITHMETIC.md in code
  cuda,       // an NVIDIA GPU (docs/CUDA.md): calls only, in builds with LOCKSTEP_CUDA
};

// "cpu" / "reference"; "cuda" where this build has the CUDA backend (whether a GPU is there is
// found at the first call on it); "metal", and "cuda" elsewhere, are refused as not built in.
// Throws Error.
Device parse_device(std::string_view name);
const char* device_name(Device device) noexcept;

class ThreadPool;

// Worker threads shared by the models that hold them. `threads` 0 means one per physical core
// available to the process (affinity and cgroup quota respected); at most 1024.
std::shared_ptr<ThreadPool> make_thread_pool(int threads = 0);
int thread_pool_size(const ThreadPool& pool) noexcept;
// One per physical core available to this process.
int default_thread_count();
inline constexpr int max_threads = 1024;

struct ModelOptions {
  Device device = Device::cpu;  // default for calls that do not say
  int threads = 0;              // default thread count for calls; 0: pool size
  std::optional<Precision> precision;  // override the model's own precision
  std::shared_ptr<ThreadPool> pool;    // share a pool; null: the model makes its own on first use
  // The SIMD target the cpu device uses ("AVX2", "AVX3", "portable", ...; see simd_targets());
  // empty: the best this CPU runs. Every target gives the same bits; this is for tests and
  // benchmarks. An unknown or unsupported name throws Error.
  std::string simd_target;
};

// The SIMD targets this build compiled and this CPU runs, best first ("portable" last).
std::vector<std::string> simd_targets();

struct LoadOptions : ModelOptions {
  bool trained = false;  // a checkpoint's trained weights instead of its EMA averages
};

struct CallOptions {
  std::optional<Device> device;
  std::optional<int> threads;  // 1..1024; at most the pool's size is used
};

// Token ids, row-major [rows, cols].
struct IdsView {
  const int32_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int32_t at(int64_t r, int64_t c) const { return data[r * cols + c]; }
};

// One row of a batched forward call. Positions [0, ids.size()) are the row's tokens; outputs are
// written for positions [out_begin, out_end) only, and no position after out_end - 1 is
// computed (the model is causal).
struct RowRequest {
  std::span<const int32_t> ids;
  int32_t out_begin = 0;
  int32_t out_end = 0;
  float* logits = nullptr;  // [out_end - out_begin, vocab] or null: the head is skipped
  float* hidden = nullptr;  // [out_end - out_begin, d_model] or null
};

class Model {
 public:
  // `path` is a model directory, a checkpoint step directory, a checkpoint location (its newest
  // complete step) or a model.json file.
  static std::shared_ptr<const Model> load(std::string_view path, const LoadOptions& options = {});
  // Flat f32 parameters in registry order; copied, checked finite.
  static std::shared_ptr<const Model> from_parameters(const ModelConfig& config,
                                                      std::span<const float> parameters,
                                                      const ModelOptions& options = {});
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const;
  const ParameterRegistry& registry() const;
  std::span<const float> parameters() const;  // flat f32, registry order
  const std::string& parameters_sha256() const;
  // The arithmetic profile the model computes (model.json's; profile_name() for a model built in
  // memory): a static string, as find_profile returns.
  const char* profile() const;
  Precision precision() const;
  const std::string& weight_format() const;  // "float32", or the packed format it was read from
  const ModelSource& source() const;
  // The ids that end a generation (model.json's `eos_token_ids`; empty: none, as for a model
  // built in memory). Generator stops right after one unless GenerateOptions::ignore_eos.
  std::span<const int32_t> eos_token_ids() const;
  Device default_device() const;
  int default_threads() const;
  // The pool calls on the cpu device run on; made on first use when none was given.
  std::shared_ptr<ThreadPool> pool() const;

  // f32 [B, T, vocab] for ids [B, T], 1 <= T <= length. With `lengths` (one per row, each in
  // [1, T]) row b is real at [0, lengths[b]) and its padding positions are +0.0; padding ids are
  // not read.
  std::vector<float> logits(const IdsView& ids, std::span<const int32_t> lengths = {},
                            const CallOptions& call = {}) const;
  // The final normalised hidden state, f32 [B, T, d_model]; same rules as logits.
  std::vector<float> hidden(const IdsView& ids, std::span<const int32_t> lengths = {},
                            const CallOptions& call = {}) const;
  // Bits of the mean next-token loss over ids [batch, length + 1]: columns [0, length) are the
  // inputs, columns [1, length] the targets; -100 in the last column is ignored.
  uint32_t loss_bits(const IdsView& ids, const CallOptions& call = {}) const;
  float loss(const IdsView& ids, const CallOptions& call = {}) const;
  // Each position's next-token loss for ids [rows, T + 1] (rows >= 1, 1 <= T <= length): f32
  // [rows, T], the cross-entropy of position t's logits at target ids[r, t + 1]. A -100 target
  // (last column only) gives NaN. For evaluations that sum over more rows than one batch.
  std::vector<float> token_losses(const IdsView& ids, const CallOptions& call = {}) const;
  // Greedy next token after each row's last (real) position; ties go to the lowest id and NaN
  // is never chosen.
  std::vector<int32_t> next_bytes(const IdsView& ids, std::span<const int32_t> lengths = {},
                                  const CallOptions& call = {}) const;

  // The general entry point every call above goes through; rows are independent and each gets
  // the bits it would get alone.
  void forward(std::span<const RowRequest> rows, const CallOptions& call = {}) const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The greedy choice over one row of logits: highest value, ties to the lowest index, NaN never
// chosen. Throws Error when every value is NaN.
int32_t greedy_choice(std::span<const float> logits);

}  // namespace lockstep
