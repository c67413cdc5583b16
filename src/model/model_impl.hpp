// What a loaded model holds. Immutable after construction except for the lazily made pool.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/thread_pool.hpp"
#include "kernels/simd/kernels.hpp"
#include "lockstep/kv_pool.hpp"
#include "lockstep/model.hpp"
#include "quant/gguf_blocks.hpp"
#include "quant/q4.hpp"
#include "quant/q8.hpp"

namespace lockstep {

struct PackedWeights;
namespace cuda {
class DeviceModel;
struct ModelView;
}

// Scratch memory for the fast path's calls, kept between calls so that a call's buffers are not
// fresh pages each time (the page faults otherwise cost a sixth of a prefill's matmul time).
// Calls on several threads each hold their own block.
class ScratchPool {
 public:
  struct Block {
    simd::AlignedFloats data;
    size_t capacity = 0;  // floats
  };
  // A block of at least `floats`: a free one when one is large enough, else a new one.
  Block take(size_t floats);
  // Returns a block; the pool keeps a few, the largest.
  void give(Block block) noexcept;

 private:
  std::mutex mutex_;
  std::vector<Block> free_;
};

// A block held for one call, given back when it goes.
class ScratchLease {
 public:
  ScratchLease(ScratchPool& pool, size_t floats) : pool_(pool), block_(pool.take(floats)) {}
  ~ScratchLease() { pool_.give(std::move(block_)); }
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;
  float* data() const { return block_.data.get(); }

 private:
  ScratchPool& pool_;
  ScratchPool::Block block_;
};

struct Model::Impl {
  ModelConfig config;
  ParameterRegistry registry;
  // f32, registry order, as given or expanded. Every matrix the fast path
  // reads packed (f32 panels hold the very values; q8/q4 panels give them as float(q) * scale)
  // has its whole pages given back to the system as it is packed, so the process holds the packed
  // form, `embed` (which the fast path looks rows up in) and the norms: about the f32 bytes for an
  // f32 model, a quarter for q8. full_parameters() expands them again, from the panels, bit for
  // bit, when something asks (the reference path, parameters(), a trainer). bf16 panels are
  // rounded: their matrices keep the low 16 bits of each value beside them (Released::low), so
  // that a bf16 model too holds about the f32 bytes. Read matrices only through full_parameters().
  mutable std::vector<float> parameters;
  // bf16: the parameters rounded to bf16 (what the reference path's matmuls read), made on first
  // use from `parameters`; the fast path reads the packed 16-bit halves instead.
  mutable std::vector<float> bf16_parameters;
  mutable std::once_flag bf16_once;
  mutable std::atomic<bool> bf16_made{false};
  std::string sha256;
  Precision precision = Precision::f32;
  std::string weight_format = "float32";
  const char* profile = profile_name();  // model.json's (find_profile)
  ModelSource source;
  std::vector<int32_t> eos_token_ids;  // model.json's, each within the vocabulary
  Device device = Device::cpu;
  int threads = 0;  // 0: the pool's size
  std::vector<float> rope_cos, rope_sin;  // [length, head_dim / 2]
  float attention_scale = 1.0f;
  std::shared_ptr<const PackedWeights> packed;  // the fast path's layout of the weights

  mutable std::mutex pool_mutex;
  mutable std::shared_ptr<ThreadPool> pool;
  mutable ScratchPool scratch;

  // `q8`: the int8 values and scales `params` were expanded from (a q8 model's file); under
  // precision f32 the fast path then computes from them, packed (kernels.hpp, PackedMatrix::q8),
  // each matrix's entry erased once packed (loading holds the file's values and the panels of
  // about one matrix at a time, not both copies whole).
  // `read_sha256`: `params` come from read_weights(give_back_packed), checked and hashed to it
  // there, the pages of their q8/q4 matrices already given back.
  // `blocks`: an int8dot model's matrices in GGUF blocks (`params` holding them dequantized), which
  // both devices compute from (the reference from the file's rows, the fast path from their
  // packed form); the model then computes profile lockstep-int8dot-1, under precision f32 only.
  Impl(const ModelConfig& c, std::vector<float> params, const ModelOptions& options,
       quant::Q8Matrices* q8 = nullptr, quant::Q4Matrices* q4 = nullptr,
       const std::string* read_sha256 = nullptr, std::shared_ptr<const quant::BlockMatrices> blocks = nullptr);
  std::shared_ptr<const quant::BlockMatrices> blocks;  // null unless the profile is int8dot

  const float* matmul_weights() const {
    return precision == Precision::bf16 ? bf16_weights().data() : full_parameters().data();
  }
  const std::vector<float>& bf16_weights() const;  // bf16_parameters, made once, thread-safely
  // Bytes of weights this model holds now: `parameters`' pages not given back, the bf16 copy
  // once made, and the packed panels with their scales. What a served model costs in memory.
  size_t resident_weight_bytes() const;
  // `parameters` with every value there (expanding released matrices once, thread-safely).
  const std::vector<float>& full_parameters() const;
  // The released page ranges of `parameters` (element offsets) and where they are packed.
  struct Released {
    int64_t begin, end;  // elements [begin, end) of `parameters`
    const simd::PackedMatrix* packed;
    int64_t column0;     // the matrix's first column in `packed`
    int64_t offset, N;   // the matrix: parameters[offset + k N + n]
    // bf16 panels hold each value rounded (ref::round_bf16): the f32 value is the panel's bits
    // plus its low 16 bits kept here, less one bf16 step where the rounding went up. That is
    // known from the low bits but at a tie (low bits 0x8000), where `ties_up` lists the
    // elements (ascending) that went up. Empty for f32, q8 and q4 panels, which hold the values.
    std::vector<uint16_t> low;  // [end - begin]
    std::vector<int64_t> ties_up;
    // A matrix in GGUF blocks (profile lockstep-int8dot-1): restored by dequantizing its rows,
    // as the reader did (quant::dequantize_range), not from `packed`.
    const quant::BlockRows* rows = nullptr;
  };
  std::vector<Released> released;
  mutable std::once_flag restore_once;
  mutable std::atomic<bool> restored{false};
  // The weights on the GPU (forward_cuda.cpp), copied there once: at load for a model whose
  // device is cuda, else at its first call on it.
  mutable std::mutex cuda_mutex;
  mutable std::shared_ptr<const cuda::DeviceModel> cuda_model;
  const cuda::DeviceModel& on_cuda() const;
  // The cuda device computes lockstep-f32-1 alone: a model of an int8dot profile is refused there
  // (at load and per call), never computed from its dequantized copy with other bits.
  [[noreturn]] static void refuse_cuda_for_blocks(const char* profile);
  ThreadPool& thread_pool() const;
  // Threads a call runs with: its own request, else the model's default, else the pool's size.
  int threads_for(const CallOptions& call) const;
};

// The keys and values of one sequence for every layer, in the fast path's layout: both in blocks
// of 16 positions with capacity rounded up to whole blocks, keys [n_layers][capacity / 16][kv_dim]
// [16] (key j's e-th value at (j / 16) * kv_dim * 16 + e * 16 + j % 16: attention's lanes run
// along j), values [n_layers][capacity / 16][kv_heads][16][head_dim] (each head's 16 rows in a
// run: simd::value_row); positions [0, n) of a layer are one contiguous prefix of its memory, its
// first key_blocks(n) blocks. Both live in one block: a slab of a KvPool (given back when the
// cache goes; capacity is then the pool's window), or the cache's own allocation. The values
// start 64-byte aligned after the keys.
struct KvCache {
  int32_t capacity = 0;
  int32_t n_layers = 0;
  int32_t kv_dim = 0;
  // Its own memory.
  KvCache(const ModelConfig& c, int32_t capacity);
  KvCache(int32_t n_layers, int32_t kv_dim, int32_t capacity);
  // A slab of `pool` taken by the caller (KvPool::Impl::take...), given back on destruction.
  KvCache(std::shared_ptr<KvPool> pool, float* slab);
  // A slab of `pool`, taken with KvPool::Impl::take (which may ask a prefix cache to evict).
  explicit KvCache(std::shared_ptr<KvPool> pool);
  ~KvCache();
  KvCache(KvCache&& other) noexcept;
  KvCache& operator=(KvCache&& other) noexcept;

  // Copies `source`'s first `positions` (same n_layers and kv_dim, capacities at least
  // `positions`) into this cache: per layer the keys' and the values' whole blocks below
  // `positions` (the last one whole, its positions past `positions` included).
  void copy_from(const KvCache& source, int32_t positions);
  KvCache copy(int32_t positions) const;  // a cache of its own holding this one's first `positions`
  float* keys() const { return data_; }
  float* values() const { return data_ + key_floats_; }
  // One layer's keys: key_blocks(capacity) blocks, key_block_stride(kv_dim) floats apart.
  int64_t key_layer_floats() const { return simd::key_blocks(capacity) * simd::key_block_stride(kv_dim); }
  float* layer_keys(int32_t l) const { return keys() + static_cast<int64_t>(l) * key_layer_floats(); }
  // One layer's values: as many floats as its keys.
  float* layer_values(int32_t l) const { return values() + static_cast<int64_t>(l) * key_layer_floats(); }
  // The keys' and the values' whole blocks.
  size_t bytes() const { return 2 * key_floats_ * sizeof(float); }
  // The pool its memory is a slab of; null when it is its own.
  const KvPool* pool() const { return pool_.get(); }

 private:
  void release() noexcept;
  simd::AlignedFloats owned_;
  std::shared_ptr<KvPool> pool_;  // where data_ goes back to, when it is a slab
  float* data_ = nullptr;
  size_t key_floats_ = 0;  // the keys' part, whole blocks (kv_key_floats)
};

// One row of the fast forward pass: positions [start, out_end) of ids are computed; those before
// `start` must already be in `cache`. A row without a cache (start 0) keeps its keys and values
// only for the call. Outputs as RowRequest's.
struct RowWork {
  std::span<const int32_t> ids;
  int32_t start = 0;
  int32_t out_begin = 0;
  int32_t out_end = 0;
  float* logits = nullptr;
  float* hidden = nullptr;
  KvCache* cache = nullptr;
};

// The single-threaded scalar forward pass (forward_ref.cpp): every row alone, from position 0.
void forward_reference(const Model::Impl& model, std::span<const RowRequest> rows);
// The forward pass on the GPU (forward_cuda.cpp), bit-identical to the reference.
void forward_cuda(const Model::Impl& model, std::span<const RowRequest> rows);
// What kernels/cuda reads of the model (its parameters, offsets and RoPE tables; pointers into
// `model`): the GPU's upload, and the host run of the CUDA kernels in the tests.
cuda::ModelView cuda_view(const Model::Impl& model);
// The SIMD, multithreaded forward pass (forward_fast.cpp), bit-identical to the reference.
// `threads` is the most it uses: a small call runs on fewer (one per ~2 MFLOP of matmul work),
// unless `exact` (a call that named its thread count gets exactly that many).
void forward_fast(const Model::Impl& model, std::span<const RowWork> rows, int threads, bool exact = false);

}  // namespace lockstep
