// The fast forward pass: the reference's arithmetic with SIMD kernels on the thread pool. All
// rows of a call go through each matmul together (the tokens they compute stacked as the rows of
// one matrix); each phase cuts its work into items along independent outputs (tokens, (token,
// head) pairs, column panels), never inside a reduction; each thread takes its own share of a
// phase's items first (the same tokens' rows in every phase of a prefill) and then helps the
// others, and a phase starts when the one before it is complete (ThreadPool::run_phases). A
// thread that its neighbours deschedule takes fewer items, and holds no one up unless it holds
// an item.
// A row may continue from keys and values it computed before (a session or a cached prefix):
// position t's arithmetic reads positions <= t only, so its bits are the same either way. Every
// output's bits are the reference's whatever the thread count, the batch, the cache or the SIMD
// target.
#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "kernels/ref/blocks.hpp"
#include "kernels/simd/block_matrix.hpp"
#include "kernels/simd/dispatch.hpp"
#include "kernels/simd/kernels.hpp"
#include "core/thread_pool.hpp"
#include "model/kv_pool_impl.hpp"
#include "model/matmul_items.hpp"
#include "model/model_impl.hpp"
#include "model/packed_weights.hpp"

namespace lockstep {
namespace {

using simd::Kernels;

// Where one row's keys and values live: layer l's keys at keys + l * key_layer_stride, its values
// at values + l * value_layer_stride, both in blocks of 16 positions (simd::kKeysPerBlock; keys
// [capacity / 16][kv_dim][16], values [capacity / 16][kv_heads][16][head_dim]: kernels.hpp). Both
// strides are 0 for a fresh row: one layer's scratch, reused by every layer.
struct KvView {
  float* keys = nullptr;
  float* values = nullptr;
  int64_t key_layer_stride = 0;
  int64_t value_layer_stride = 0;
};

// Scratch floats of a fresh row's keys and values (whole blocks of both) for one layer, n positions.
int64_t fresh_kv_floats(int64_t n, int64_t kv_dim) {
  return 2 * simd::key_blocks(n) * simd::key_block_stride(kv_dim);
}

// The tokens a call computes: row r's positions [start[r], end[r]) are tokens
// [first[r], first[r] + end[r] - start[r]).
struct Plan {
  std::vector<int64_t> first;
  std::vector<int32_t> token_row, token_pos;
  std::vector<int64_t> out_token;  // tokens whose outputs are asked for, row by row
  std::vector<int64_t> out_slot;   // their index in their row's outputs: t - out_begin
  std::vector<KvView> kv;
  int64_t tokens = 0;
  int64_t longest = 0;  // the most keys any query reads
};

Plan make_plan(std::span<const RowWork> rows, int64_t kv_dim, int32_t n_layers, float* scratch) {
  Plan p;
  for (size_t r = 0; r < rows.size(); ++r) {
    const RowWork& w = rows[r];
    p.first.push_back(p.tokens);
    for (int32_t t = w.start; t < w.out_end; ++t) {
      p.token_row.push_back(static_cast<int32_t>(r));
      p.token_pos.push_back(t);
    }
    for (int32_t t = w.out_begin; t < w.out_end; ++t) {
      p.out_token.push_back(p.tokens + (t - w.start));
      p.out_slot.push_back(t - w.out_begin);
    }
    KvView v;
    if (w.cache) {
      v.keys = w.cache->keys();
      v.values = w.cache->values();
      v.key_layer_stride = w.cache->key_layer_floats();
      v.value_layer_stride = w.cache->key_layer_floats();
    } else {
      v.keys = scratch;
      v.values = scratch + simd::key_blocks(w.out_end) * simd::key_block_stride(kv_dim);
      scratch += fresh_kv_floats(w.out_end, kv_dim);
    }
    p.kv.push_back(v);
    p.tokens += w.out_end - w.start;
    p.longest = std::max<int64_t>(p.longest, w.out_end);
  }
  (void)n_layers;
  return p;
}

// Attention's work: up to kQueriesPerItem consecutive tokens of one row for one head, which
// share the row's keys and values: a prefill's tile reads each block of them once from memory
// for all its queries (attention_queries). Cost: the keys its queries read.
constexpr int kQueriesPerItem = 48;
static_assert(kQueriesPerItem <= simd::kMaxTileQueries);
struct AttentionItem {
  int64_t token;
  int32_t count;
  int32_t head;
  int64_t cost;
  bool heads = false;  // count consecutive heads (from `head`) of `token`, not count tokens
};

// A row's items head by head, its tiles in order within each: consecutive items read the same
// head's keys and values, which the last tile left in the caches. Tile by tile with the heads
// inner, every item read another head's, and at 4096 positions (2 MB a head on l768, 25 MB a
// layer) each came from memory: `BM_WindowAttention/1/4096/48` ran 1.15-1.4x slower in that
// order (bench/README.md). Threads' static shares then split a row's heads between them.
//
// A row of one token (a decode step) takes instead one item per key/value head, its `group` query
// heads together: each head alone read the group's keys and values again, group times a token. On
// Zen 5, one decode step's attention at 4096 positions with 8 key/value heads of 64 (a one-off
// timing) ran 1.3x faster for groups of 4, 1.7x for 3, 2x for 8, and l768's whole step at 4096
// positions 1.19x with groups of 3 and 1.13x with 4 (medians of 7 alternating rounds;
// bench/README.md); groups of 4 to 8 have since gained again on AVX-512 (attention_queries).
// The kernels give the group's heads the single query's bits (attention_queries with equal
// lengths). Only where the call's groups are at least its threads: one session's step on
// more threads than key/value heads would leave threads idle that per-head items keep busy.
std::vector<AttentionItem> attention_items(const Plan& p, std::span<const RowWork> rows, int32_t heads,
                                           int32_t group, int n_threads) {
  int64_t decode_rows = 0;
  for (const RowWork& w : rows) decode_rows += (w.out_end - w.start == 1) ? 1 : 0;
  const bool by_group = group > 1 && decode_rows * (heads / group) >= n_threads;
  std::vector<AttentionItem> items;
  for (size_t r = 0; r < rows.size(); ++r) {
    const int64_t first = p.first[r], count = rows[r].out_end - rows[r].start;
    if (count == 1 && by_group) {
      const int64_t keys = p.token_pos[static_cast<size_t>(first)] + 1;
      for (int32_t h0 = 0; h0 < heads; h0 += group)  // at most kQueriesPerItem heads an item
        for (int32_t h = h0; h < h0 + group; h += kQueriesPerItem) {
          const int32_t n = std::min(kQueriesPerItem, h0 + group - h);
          items.push_back({first, n, h, n * keys, true});
        }
      continue;
    }
    const size_t head0 = items.size();  // head 0's tiles, then each other head's copy of them
    for (int64_t t = 0; t < count; t += kQueriesPerItem) {
      const int32_t n = static_cast<int32_t>(std::min<int64_t>(kQueriesPerItem, count - t));
      int64_t cost = 0;
      for (int32_t i = 0; i < n; ++i) cost += p.token_pos[static_cast<size_t>(first + t + i)] + 1;
      items.push_back({first + t, n, 0, cost});
    }
    const size_t tiles = items.size() - head0;
    for (int32_t h = 1; h < heads; ++h)
      for (size_t i = 0; i < tiles; ++i) {
        AttentionItem it = items[head0 + i];
        it.head = h;
        items.push_back(it);
      }
  }
  return items;
}

// Attention items grouped into runs of consecutive items, each of at least kAttentionWork
// multiply-adds (keys x head_dim) where the call has that much: group g is items
// [begin[g], begin[g + 1]).
constexpr int64_t kAttentionWork = 64 << 10;
std::vector<int64_t> attention_groups(const std::vector<AttentionItem>& items, int64_t head_dim) {
  std::vector<int64_t> begin{0};
  int64_t work = 0;
  for (size_t u = 0; u < items.size(); ++u) {
    work += items[u].cost * head_dim;
    if (work >= kAttentionWork && u + 1 < items.size()) {
      begin.push_back(static_cast<int64_t>(u + 1));
      work = 0;
    }
  }
  begin.push_back(static_cast<int64_t>(items.size()));
  return begin;
}

// Rows [t0, t1) of a [*, K] (row stride lda) quantized per block of 32 (ref::quantize_activations'
// bits) into qx [*, K] and dx [*, K / 32]: the int8dot profile's activations.
void quantize_rows(const Kernels& k, const float* a, int64_t lda, int64_t t0, int64_t t1, int64_t K, int8_t* qx,
                   float* dx) {
  const int64_t blocks = K / quant::kBlockValues;
  k.quantize_activations(a + t0 * lda, lda, t1 - t0, K, qx + t0 * K, dx + t0 * blocks);
}

// The quantized activations of a phase's input, when the phase that wrote its rows quantized them
// too (each row once: the norms, SwiGLU and the outputs own whole rows).
struct Quantized {
  const int8_t* qx = nullptr;  // [rows, K]
  const float* dx = nullptr;   // [rows, K / 32]
};

// A matrix in GGUF blocks (profile lockstep-int8dot-1): rows [0, M) of `q` when given, else the
// item's rows quantized here (attention's output, whose rows no item owns whole: a row's
// quantization depends on the row alone, so each item quantizing it gets the same integers),
// then the integer kernel over the item's groups.
void matmul_blocks_item(const Kernels& k, const float* a, int64_t lda, int64_t M, const simd::PackedMatrix& b,
                        int64_t g0, int64_t g1, float* c, int64_t ldc, Quantized q) {
  const int64_t K = b.K;
  if (!q.qx) {
    thread_local std::vector<int8_t> qx;
    thread_local std::vector<float> dx;
    qx.resize(static_cast<size_t>(M * K));
    dx.resize(static_cast<size_t>(M * K / quant::kBlockValues));
    quantize_rows(k, a, lda, 0, M, K, qx.data(), dx.data());
    q = {qx.data(), dx.data()};
  }
  k.matmul_blocks(q.qx, q.dx, M, *b.blocks, g0, g1, c, ldc);
}

// Item i of s: its panels over its rows, each output one whole chain (the kernel's).
void matmul_item(const Kernels& k, const float* a, int64_t lda, int64_t M, const simd::PackedMatrix& b, float* c,
                 int64_t ldc, const MatmulItems& s, int64_t i, Quantized q = {}) {
  const auto [panels, rows] = matmul_item_range(M, b, s, i);
  const auto [p0, p1] = panels;
  const auto [r0, r1] = rows;
  if (r0 >= r1 || p0 >= p1) return;
  if (b.blocks) {
    if (q.qx) q = {q.qx + r0 * b.K, q.dx + r0 * (b.K / quant::kBlockValues)};
    return matmul_blocks_item(k, a + r0 * lda, lda, r1 - r0, b, p0, p1, c + r0 * ldc, ldc, q);
  }
  k.matmul(a + r0 * lda, lda, r1 - r0, b, p0, p1, c + r0 * ldc, ldc);
}

// Tokens per item of the per-token phases (norms, RoPE, SwiGLU, outputs): at most 4 items per
// thread, and at least kTokenWork floats of width `width` per item where there are tokens enough
// (one token of a decode step is one item, which runs on the calling thread).
constexpr int64_t kTokenWork = 8 << 10;
int64_t tokens_per_item(int64_t tokens, int64_t width, int n) {
  return std::max<int64_t>({1, (tokens + 4 * n - 1) / (4 * n), std::min<int64_t>(tokens, kTokenWork / std::max<int64_t>(1, width))});
}

}  // namespace

ScratchPool::Block ScratchPool::take(size_t floats) {
  {
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].capacity >= floats) {
        Block b = std::move(free_[i]);
        free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
        return b;
      }
    }
  }
  // Powers of two (from 4 KiB): a run's need varies call by call, and blocks of a few sizes
  // are reused where exact sizes would each be a new allocation (the blocks a single runner ever
  // allocates sum to at most twice the largest).
  const size_t capacity = std::bit_ceil(std::max<size_t>(floats, 1024));
  return {simd::aligned_floats(capacity), capacity};
}

void ScratchPool::give(Block block) noexcept {
  constexpr size_t kKept = 4;
  try {
    std::lock_guard lock(mutex_);
    free_.push_back(std::move(block));
    std::sort(free_.begin(), free_.end(), [](const Block& a, const Block& b) { return a.capacity > b.capacity; });
    if (free_.size() > kKept) free_.resize(kKept);
  } catch (...) {
  }
}

KvCache::KvCache(int32_t layers, int32_t dim, int32_t cap)
    : capacity(cap), n_layers(layers), kv_dim(dim), key_floats_(kv_key_floats(layers, dim, cap)) {
  owned_ = simd::aligned_floats(key_floats_ + kv_value_floats(layers, dim, cap));
  data_ = owned_.get();
}

KvCache::KvCache(const ModelConfig& c, int32_t cap) : KvCache(c.n_layers, c.kv_dim(), cap) {}

KvCache::KvCache(std::shared_ptr<KvPool> pool, float* slab) : pool_(std::move(pool)), data_(slab) {
  const KvPool::Impl& p = pool_->impl();
  capacity = p.capacity;
  n_layers = p.n_layers;
  kv_dim = p.kv_dim;
  key_floats_ = p.key_floats;
}

KvCache::KvCache(std::shared_ptr<KvPool> pool) : KvCache(pool, pool->impl().take()) {}

KvCache::~KvCache() { release(); }

void KvCache::release() noexcept {
  if (pool_ && data_) pool_->impl().give(data_);
  pool_.reset();
  owned_.reset();
  data_ = nullptr;
}

KvCache::KvCache(KvCache&& o) noexcept
    : capacity(o.capacity), n_layers(o.n_layers), kv_dim(o.kv_dim), owned_(std::move(o.owned_)),
      pool_(std::move(o.pool_)), data_(o.data_), key_floats_(o.key_floats_) {
  o.data_ = nullptr;
}

KvCache& KvCache::operator=(KvCache&& o) noexcept {
  if (this != &o) {
    release();
    capacity = o.capacity;
    n_layers = o.n_layers;
    kv_dim = o.kv_dim;
    owned_ = std::move(o.owned_);
    pool_ = std::move(o.pool_);
    data_ = o.data_;
    key_floats_ = o.key_floats_;
    o.data_ = nullptr;
  }
  return *this;
}

void KvCache::copy_from(const KvCache& src, int32_t positions) {
  // A layer's keys of positions [0, positions): its first key_blocks(positions) blocks, one
  // contiguous run; its values likewise.
  const size_t floats = static_cast<size_t>(simd::key_blocks(positions) * simd::key_block_stride(kv_dim));
  for (int32_t l = 0; l < n_layers; ++l) {
    std::memcpy(layer_keys(l), src.layer_keys(l), floats * sizeof(float));
    std::memcpy(layer_values(l), src.layer_values(l), floats * sizeof(float));
  }
}

KvCache KvCache::copy(int32_t positions) const {
  KvCache out(n_layers, kv_dim, capacity);
  out.copy_from(*this, positions);
  return out;
}

void forward_fast(const Model::Impl& m, std::span<const RowWork> rows, int threads, bool exact) {
  if (rows.empty()) return;
  const ModelConfig& c = m.config;
  const PackedWeights& pw = *m.packed;
  const Kernels& k = *pw.kernels;
  const bool bf16 = m.precision == Precision::bf16;
  const bool int8dot = m.blocks != nullptr;  // profile lockstep-int8dot-1: some matrices in GGUF blocks
  const int64_t d = c.d_model, hd = c.head_dim(), q_dim = c.q_dim(), kv_dim = c.kv_dim();
  const int64_t ff = c.d_ff, vocab = c.vocab_size, half = hd / 2;
  const int64_t qkv_ld = q_dim + 2 * kv_dim;
  const int32_t group = c.n_heads / c.n_kv_heads;
  const float* p = m.parameters.data();

  int64_t fresh = 0;  // scratch floats for the keys and values of rows without a cache
  for (const RowWork& r : rows)
    if (!r.cache) fresh += fresh_kv_floats(r.out_end, kv_dim);
  int64_t longest = 0, tokens = 0, outputs = 0;
  bool want_logits = false;
  for (const RowWork& r : rows) {
    longest = std::max<int64_t>(longest, r.out_end);
    tokens += r.out_end - r.start;
    outputs += r.out_end - r.out_begin;
    want_logits = want_logits || r.logits != nullptr;
  }
  // Threads beyond what the work can use cost a wake-up and a look at every phase; the split never
  // changes a bit, so a small call runs on fewer threads than its default allows: one per
  // ~2 MFLOP of matmul work. A call that names its thread count gets exactly that.
  const int64_t per_token_flops =
      2 * (static_cast<int64_t>(c.n_layers) * (d * (qkv_ld + 2 * ff) + q_dim * d + ff * d)) + 2 * d * vocab;
  const int64_t useful = 1 + tokens * per_token_flops / (int64_t{2} << 20);
  const int n_threads = exact ? std::max(1, threads)
                              : static_cast<int>(std::clamp<int64_t>(useful, 1, std::max(1, threads)));
  const int64_t scores_per_thread = k.attention_queries_scratch(kQueriesPerItem, longest, static_cast<int32_t>(hd));
  // Every buffer of the call, carved from one block of the model's scratch pool (64-byte aligned
  // pieces). Nothing inside the parallel region allocates.
  const int64_t sizes[] = {fresh,
                           tokens * d,             // x
                           tokens * d,             // xn
                           tokens * qkv_ld,        // qkv
                           tokens * q_dim,         // att
                           tokens * 2 * ff,        // gu
                           tokens * ff,            // h
                           tokens * d,             // o
                           n_threads * scores_per_thread,  // attention's scores and blocks
                           outputs * d,            // out_x
                           want_logits ? outputs * vocab : 0,  // out_logits
                           // int8dot: one input's quantized rows (int8 [tokens, max(d, d_ff)]) and scales
                           int8dot ? (tokens * std::max(d, ff) + 3) / 4 : 0,
                           int8dot ? tokens * std::max(d, ff) / quant::kBlockValues : 0};
  auto padded = [](int64_t n) { return (std::max<int64_t>(n, 1) + 15) / 16 * 16; };
  int64_t total = 0;
  for (int64_t n : sizes) total += padded(n);
  const ScratchLease lease(m.scratch, static_cast<size_t>(total));
  float* buffers[std::size(sizes)];
  {
    float* next = lease.data();
    for (size_t i = 0; i < std::size(sizes); ++i) {
      buffers[i] = next;
      next += padded(sizes[i]);
    }
  }
  float* const kv_scratch = buffers[0];
  float* const x = buffers[1];
  float* const xn = buffers[2];
  float* const qkv = buffers[3];
  float* const att = buffers[4];
  float* const gu = buffers[5];
  float* const h = buffers[6];
  float* const o = buffers[7];
  float* const scores = buffers[8];
  float* const out_x = buffers[9];
  float* const out_logits = buffers[10];
  int8_t* const qx = reinterpret_cast<int8_t*>(buffers[11]);
  float* const dx = buffers[12];
  // The phase that writes a block matrix's input rows quantizes them for it (rows [t0, t1) of
  // `a`, K wide); the matmul phase after it reads them. One buffer serves every input in turn,
  // each read by the phase after the one that wrote it.
  auto quantize_for = [&](const simd::PackedMatrix& b, const float* a, int64_t K, int64_t t0, int64_t t1) {
    if (b.blocks) quantize_rows(k, a, K, t0, t1, K, qx, dx);
  };
  auto quantized = [&](const simd::PackedMatrix& b) { return b.blocks ? Quantized{qx, dx} : Quantized{}; };

  const Plan plan = make_plan(rows, kv_dim, c.n_layers, kv_scratch);
  const std::vector<AttentionItem> items = attention_items(plan, rows, c.n_heads, group, n_threads);
  const std::vector<int64_t> groups = attention_groups(items, hd);
  const int64_t R = plan.tokens;
  const int64_t R_out = static_cast<int64_t>(plan.out_token.size());
  ThreadPool& pool = m.thread_pool();

  // Phases, in order; each phase's items are independent outputs, each thread's own share first,
  // then whichever are left (ThreadPool::run_phases), and a phase starts once the one before it
  // is complete. Nine per layer, then the outputs, the head and the copy of the logits.
  enum Step { kNorm, kQkv, kRope, kAttention, kWo, kMlpNorm, kGateUp, kSwiglu, kDown, kSteps };
  const int64_t layer_phases = static_cast<int64_t>(c.n_layers) * kSteps;
  const int64_t n_phases = layer_phases + 3;
  const int64_t tc = tokens_per_item(R, d, n_threads), tc_out = tokens_per_item(R_out, d, n_threads);
  const int64_t token_items = (R + tc - 1) / tc, out_items = (R_out + tc_out - 1) / tc_out;
    MatmulItems qkv_items, wo_items, gate_up_items, down_items;  // every layer's are alike
  if (!pw.layers.empty()) {
    const PackedWeights::Layer& pl0 = pw.layers[0];
    qkv_items = matmul_items(R, pl0.qkv, k, n_threads);
    wo_items = matmul_items(R, pl0.wo, k, n_threads);
    gate_up_items = matmul_items(R, pl0.gate_up, k, n_threads);
    down_items = matmul_items(R, pl0.w_down, k, n_threads);
  }
  const MatmulItems head_items = matmul_items(R_out, pw.head, k, n_threads);
  auto phase_items = [&](int64_t phase) -> int64_t {
    if (phase >= layer_phases) {
      if (phase == layer_phases) return out_items;
      return want_logits ? (phase == layer_phases + 1 ? head_items.count() : out_items) : 0;
    }
    switch (phase % kSteps) {
      case kQkv: return qkv_items.count();
      case kAttention: return static_cast<int64_t>(groups.size()) - 1;
      case kWo: return wo_items.count();
      case kGateUp: return gate_up_items.count();
      case kDown: return down_items.count();
      default: return token_items;
    }
  };

  auto layer_step = [&](int32_t l, int step, int64_t item, int slot) {
    const ParameterRegistry::Layer& lw = m.registry.layer(l);
    const PackedWeights::Layer& pl = pw.layers[static_cast<size_t>(l)];
    const int64_t t0 = item * tc, t1 = std::min(R, t0 + tc);
    switch (step) {
      case kNorm:  // x = embed[ids] (layer 0) or x + the previous layer's MLP output; xn = rmsnorm(x)
        if (l == 0) {
          for (int64_t t = t0; t < t1; ++t) {
            const RowWork& row = rows[static_cast<size_t>(plan.token_row[static_cast<size_t>(t)])];
            const int32_t id = row.ids[static_cast<size_t>(plan.token_pos[static_cast<size_t>(t)])];
            std::copy_n(p + m.registry.embed() + static_cast<int64_t>(id) * d, d, x + t * d);
          }
        } else {
          k.add(x + t0 * d, o + t0 * d, (t1 - t0) * d);
        }
        k.rmsnorm_rows(x + t0 * d, p + lw.attn_norm, xn + t0 * d, nullptr, t1 - t0, d, c.norm_eps);
        if (bf16) k.round_bf16(xn + t0 * d, xn + t0 * d, (t1 - t0) * d);
        quantize_for(pl.qkv, xn, d, t0, t1);
        return;
      case kQkv:  // [q | k | v] = xn @ [wq | wk | wv]
        return matmul_item(k, xn, d, R, pl.qkv, qkv, qkv_ld, qkv_items, item, quantized(pl.qkv));
      case kRope:  // RoPE on q and k at each token's position; keys (in blocks) and values stored
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t pos = plan.token_pos[static_cast<size_t>(t)];
          const KvView& kv = plan.kv[static_cast<size_t>(plan.token_row[static_cast<size_t>(t)])];
          float* row = qkv + t * qkv_ld;
          if (c.qkv_bias) k.add(row, p + lw.bq, qkv_ld);  // [bq | bk | bv], one add per output
          const float* cos_row = m.rope_cos.data() + pos * half;
          const float* sin_row = m.rope_sin.data() + pos * half;
          k.rope(row, c.n_heads, static_cast<int32_t>(hd), cos_row, sin_row);
          k.rope(row + q_dim, c.n_kv_heads, static_cast<int32_t>(hd), cos_row, sin_row);
          // Each head's value row into its block's run of 16 rows.
          float* values =
              kv.values + l * kv.value_layer_stride + simd::value_row(pos, hd, simd::key_block_stride(kv_dim));
          for (int32_t g = 0; g < c.n_kv_heads; ++g)
            std::memcpy(values + g * hd * simd::kKeysPerBlock, row + q_dim + kv_dim + g * hd,
                        static_cast<size_t>(hd) * sizeof(float));
        }
        // Keys into their blocks of 16 positions, a run of one row's tokens (consecutive
        // positions) within one block at a time with the key dimension outer: each dimension's
        // 16 floats get the run's positions side by side.
        for (int64_t a = t0; a < t1;) {
          const int32_t r = plan.token_row[static_cast<size_t>(a)];
          const int64_t pos = plan.token_pos[static_cast<size_t>(a)];
          const int64_t in_block = pos % simd::kKeysPerBlock;
          int64_t b = a + 1;
          while (b < t1 && b - a < simd::kKeysPerBlock - in_block && plan.token_row[static_cast<size_t>(b)] == r) ++b;
          const KvView& kv = plan.kv[static_cast<size_t>(r)];
          float* keys = kv.keys + l * kv.key_layer_stride + simd::key_column(pos, simd::key_block_stride(kv_dim));
          for (int64_t e = 0; e < kv_dim; ++e)
            for (int64_t t = a; t < b; ++t) keys[e * simd::kKeysPerBlock + (t - a)] = qkv[t * qkv_ld + q_dim + e];
          a = b;
        }
        return;
      case kAttention: {  // each query over its row's positions [0, pos]
        float* scratch = scores + static_cast<int64_t>(slot) * scores_per_thread;
        for (int64_t u = groups[static_cast<size_t>(item)]; u < groups[static_cast<size_t>(item) + 1]; ++u) {
          const AttentionItem& it = items[static_cast<size_t>(u)];
          const KvView& kv = plan.kv[static_cast<size_t>(plan.token_row[static_cast<size_t>(it.token)])];
          const int64_t g = it.head / group;
          int64_t keys[kQueriesPerItem];
          for (int32_t i = 0; i < it.count; ++i)
            keys[i] = plan.token_pos[static_cast<size_t>(it.heads ? it.token : it.token + i)] + 1;
          // Queries (and outputs) i apart: consecutive tokens of one head, or a token's heads.
          const int64_t q_step = it.heads ? hd : qkv_ld, out_step = it.heads ? hd : q_dim;
          float* out = att + it.token * q_dim + it.head * hd;
          k.attention_queries(qkv + it.token * qkv_ld + it.head * hd, q_step, keys, it.count,
                              kv.keys + l * kv.key_layer_stride + g * hd * simd::kKeysPerBlock,
                              simd::key_block_stride(kv_dim),
                              kv.values + l * kv.value_layer_stride + g * hd * simd::kKeysPerBlock, hd,
                              simd::key_block_stride(kv_dim), static_cast<int32_t>(hd),
                              m.attention_scale, out, out_step, scratch);
          if (bf16)
            for (int32_t i = 0; i < it.count; ++i) k.round_bf16(out + i * out_step, out + i * out_step, hd);
        }
        return;
      }
      case kWo:  // o = att @ wo
        return matmul_item(k, att, q_dim, R, pl.wo, o, d, wo_items, item);
      case kMlpNorm:  // x = x + (o [+ bo]); xn = rmsnorm(x)
        if (c.o_bias)
          for (int64_t t = t0; t < t1; ++t) k.add(o + t * d, p + lw.bo, d);
        k.add(x + t0 * d, o + t0 * d, (t1 - t0) * d);
        k.rmsnorm_rows(x + t0 * d, p + lw.mlp_norm, xn + t0 * d, nullptr, t1 - t0, d, c.norm_eps);
        if (bf16) k.round_bf16(xn + t0 * d, xn + t0 * d, (t1 - t0) * d);
        quantize_for(pl.gate_up, xn, d, t0, t1);
        return;
      case kGateUp:  // [gate | up] = xn @ [w_gate | w_up]
        return matmul_item(k, xn, d, R, pl.gate_up, gu, 2 * ff, gate_up_items, item, quantized(pl.gate_up));
      case kSwiglu:  // h = silu(gate) * up
        for (int64_t t = t0; t < t1; ++t) {
          k.swiglu(gu + t * 2 * ff, gu + t * 2 * ff + ff, h + t * ff, ff);
          if (bf16) k.round_bf16(h + t * ff, h + t * ff, ff);
        }
        quantize_for(pl.w_down, h, ff, t0, t1);
        return;
      default:  // kDown: o = h @ w_down (added to x by the next layer, or by the outputs)
        return matmul_item(k, h, ff, R, pl.w_down, o, d, down_items, item, quantized(pl.w_down));
    }
  };

  pool.run_phases(n_threads, n_phases, phase_items, [&](int64_t phase, int64_t item, int slot) {
    if (phase < layer_phases) {
      layer_step(static_cast<int32_t>(phase / kSteps), static_cast<int>(phase % kSteps), item, slot);
      return;
    }
    const int64_t i0 = item * tc_out, i1 = std::min(R_out, i0 + tc_out);
    if (phase == layer_phases) {
      // Outputs: x = x + o; hidden = rmsnorm(x, final_norm) at the asked positions.
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t t = plan.out_token[static_cast<size_t>(i)];
        k.add(x + t * d, o + t * d, d);
        k.rmsnorm(x + t * d, p + m.registry.final_norm(), out_x + i * d, d, c.norm_eps);
        const RowWork& row = rows[static_cast<size_t>(plan.token_row[static_cast<size_t>(t)])];
        const int64_t slot_out = plan.out_slot[static_cast<size_t>(i)];
        if (row.hidden) std::copy_n(out_x + i * d, d, row.hidden + slot_out * d);
        if (bf16) k.round_bf16(out_x + i * d, out_x + i * d, d);
      }
      quantize_for(pw.head, out_x, d, i0, i1);
    } else if (phase == layer_phases + 1) {
      matmul_item(k, out_x, d, R_out, pw.head, out_logits, vocab, head_items, item, quantized(pw.head));
    } else {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t t = plan.out_token[static_cast<size_t>(i)];
        const RowWork& row = rows[static_cast<size_t>(plan.token_row[static_cast<size_t>(t)])];
        if (row.logits)
          std::copy_n(out_logits + i * vocab, vocab, row.logits + plan.out_slot[static_cast<size_t>(i)] * vocab);
      }
    }
  });
}

}  // namespace lockstep
