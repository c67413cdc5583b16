// The fast forward pass: the reference's arithmetic with SIMD kernels on the thread pool. All
// rows of a call go through each matmul together (the tokens they compute stacked as the rows of
// one matrix); each phase splits its work among the workers along independent outputs (tokens,
// (token, head) pairs, column panels), never inside a reduction, and a barrier separates phases.
// A row may continue from keys and values it computed before (a session or a cached prefix):
// position t's arithmetic reads positions <= t only, so its bits are the same either way. Every
// output's bits are the reference's whatever the thread count, the batch, the cache or the SIMD
// target.
#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "kernels/simd/dispatch.hpp"
#include "kernels/simd/kernels.hpp"
#include "kernels/simd/matmul_split.hpp"
#include "kernels/simd/packed_weights.hpp"
#include "model/kv_pool_impl.hpp"
#include "model/model_impl.hpp"

namespace lockstep {
namespace {

using simd::Kernels;
using simd::matmul_part;

// Where one row's keys and values live: layer l's keys at keys + l * layer_stride (transposed,
// row stride ld = capacity), its values at values + l * layer_stride ([capacity][kv_dim]).
struct KvView {
  float* keys = nullptr;
  float* values = nullptr;
  int64_t layer_stride = 0;  // 0 for a fresh row: one layer's scratch, reused by every layer
  int64_t ld = 0;
};

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
      v.layer_stride = static_cast<int64_t>(w.cache->capacity) * kv_dim;
      v.ld = w.cache->capacity;
    } else {
      v.keys = scratch;
      v.values = scratch + static_cast<int64_t>(w.out_end) * kv_dim;
      v.layer_stride = 0;
      v.ld = w.out_end;
      scratch += 2 * static_cast<int64_t>(w.out_end) * kv_dim;
    }
    p.kv.push_back(v);
    p.tokens += w.out_end - w.start;
    p.longest = std::max<int64_t>(p.longest, w.out_end);
  }
  (void)n_layers;
  return p;
}

// Attention's work: up to kQueriesPerItem consecutive tokens of one row for one head, which
// share the loads of the row's keys and values. Cost: the keys its queries read.
constexpr int kQueriesPerItem = 3;
struct AttentionItem {
  int64_t token;
  int32_t count;
  int32_t head;
  int64_t cost;
};

std::vector<AttentionItem> attention_items(const Plan& p, std::span<const RowWork> rows, int32_t heads) {
  std::vector<AttentionItem> items;
  for (size_t r = 0; r < rows.size(); ++r) {
    const int64_t first = p.first[r], count = rows[r].out_end - rows[r].start;
    for (int64_t t = 0; t < count; t += kQueriesPerItem) {
      const int32_t n = static_cast<int32_t>(std::min<int64_t>(kQueriesPerItem, count - t));
      int64_t cost = 0;
      for (int32_t i = 0; i < n; ++i) cost += p.token_pos[static_cast<size_t>(first + t + i)] + 1;
      for (int32_t h = 0; h < heads; ++h) items.push_back({first + t, n, h, cost});
    }
  }
  return items;
}

// Items [begin, end) of worker w of n, balanced by cost.
std::pair<int64_t, int64_t> item_share(const std::vector<AttentionItem>& items, int w, int n) {
  int64_t total = 0;
  for (const AttentionItem& it : items) total += it.cost;
  const int64_t lo = total * w / n, hi = total * (w + 1) / n;
  int64_t begin = -1, end = static_cast<int64_t>(items.size()), cost = 0;
  for (int64_t u = 0; u < static_cast<int64_t>(items.size()); ++u) {
    if (begin < 0 && cost >= lo) begin = u;
    if (cost >= hi) {
      end = u;
      break;
    }
    cost += items[static_cast<size_t>(u)].cost;
  }
  if (begin < 0) begin = end;
  return {begin, end};
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

namespace {
size_t padded_key_floats(int32_t layers, int32_t dim, int32_t cap) {
  return (static_cast<size_t>(layers) * static_cast<size_t>(dim) * static_cast<size_t>(cap) + 15) / 16 * 16;
}
}  // namespace

KvCache::KvCache(int32_t layers, int32_t dim, int32_t cap)
    : capacity(cap), n_layers(layers), kv_dim(dim), key_floats_(padded_key_floats(layers, dim, cap)) {
  owned_ = simd::aligned_floats(key_floats_ + static_cast<size_t>(layers) * dim * cap);
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
  const size_t n = static_cast<size_t>(positions);
  for (int32_t l = 0; l < n_layers; ++l) {
    for (int32_t e = 0; e < kv_dim; ++e)
      std::memcpy(layer_keys(l) + static_cast<int64_t>(e) * capacity,
                  src.layer_keys(l) + static_cast<int64_t>(e) * src.capacity, n * sizeof(float));
    std::memcpy(layer_values(l), src.layer_values(l), n * static_cast<size_t>(kv_dim) * sizeof(float));
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
  const simd::PackedWeights& pw = *m.packed;
  const Kernels& k = *pw.kernels;
  const bool bf16 = m.precision == Precision::bf16;
  const int64_t d = c.d_model, hd = c.head_dim(), q_dim = c.q_dim(), kv_dim = c.kv_dim();
  const int64_t ff = c.d_ff, vocab = c.vocab_size, half = hd / 2;
  const int64_t qkv_ld = q_dim + 2 * kv_dim;
  const int32_t group = c.n_heads / c.n_kv_heads;
  const float* p = m.parameters.data();

  int64_t fresh = 0;  // scratch floats for the keys and values of rows without a cache
  for (const RowWork& r : rows)
    if (!r.cache) fresh += 2 * static_cast<int64_t>(r.out_end) * kv_dim;
  int64_t longest = 0, tokens = 0, outputs = 0;
  bool want_logits = false;
  for (const RowWork& r : rows) {
    longest = std::max<int64_t>(longest, r.out_end);
    tokens += r.out_end - r.start;
    outputs += r.out_end - r.out_begin;
    want_logits = want_logits || r.logits != nullptr;
  }
  // Threads beyond what the work can use cost a barrier wait per phase each; the split never
  // changes a bit, so a small call runs on fewer threads than its default allows: one per
  // ~2 MFLOP of matmul work. A call that names its thread count gets exactly that.
  const int64_t per_token_flops =
      2 * (static_cast<int64_t>(c.n_layers) * (d * (qkv_ld + 2 * ff) + q_dim * d + ff * d)) + 2 * d * vocab;
  const int64_t useful = 1 + tokens * per_token_flops / (int64_t{2} << 20);
  const int n_threads = exact ? std::max(1, threads)
                              : static_cast<int>(std::clamp<int64_t>(useful, 1, std::max(1, threads)));
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
                           n_threads * kQueriesPerItem * longest,  // scores
                           outputs * d,            // out_x
                           want_logits ? outputs * vocab : 0};  // out_logits
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

  const Plan plan = make_plan(rows, kv_dim, c.n_layers, kv_scratch);
  const std::vector<AttentionItem> items = attention_items(plan, rows, c.n_heads);
  const int64_t R = plan.tokens;
  const int64_t R_out = static_cast<int64_t>(plan.out_token.size());
  ThreadPool& pool = m.thread_pool();
  Barrier barrier(n_threads);

  pool.run(n_threads, [&](int w, int n) {
    const auto [t0, t1] = static_range(R, w, n);
    // x[t] = embed[ids[t]]
    for (int64_t t = t0; t < t1; ++t) {
      const RowWork& row = rows[static_cast<size_t>(plan.token_row[static_cast<size_t>(t)])];
      const int32_t id = row.ids[static_cast<size_t>(plan.token_pos[static_cast<size_t>(t)])];
      std::copy_n(p + m.registry.embed() + static_cast<int64_t>(id) * d, d, x + t * d);
    }
    for (int32_t l = 0; l < c.n_layers; ++l) {
      const ParameterRegistry::Layer& lw = m.registry.layer(l);
      const simd::PackedWeights::Layer& pl = pw.layers[static_cast<size_t>(l)];
      // x = x + (the previous layer's MLP output); xn = rmsnorm(x)
      if (l > 0) k.add(x + t0 * d, o + t0 * d, (t1 - t0) * d);
      k.rmsnorm_rows(x + t0 * d, p + lw.attn_norm, xn + t0 * d, nullptr, t1 - t0, d, c.norm_eps);
      if (bf16) k.round_bf16(xn + t0 * d, xn + t0 * d, (t1 - t0) * d);
      barrier.wait();
      // [q | k | v] = xn @ [wq | wk | wv]
      matmul_part(k, xn, d, R, pl.qkv, qkv, qkv_ld, w, n);
      barrier.wait();
      // RoPE on q and k at each token's position; keys (transposed) and values into the row's store.
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t pos = plan.token_pos[static_cast<size_t>(t)];
        const KvView& kv = plan.kv[static_cast<size_t>(plan.token_row[static_cast<size_t>(t)])];
        float* row = qkv + t * qkv_ld;
        const float* cos_row = m.rope_cos.data() + pos * half;
        const float* sin_row = m.rope_sin.data() + pos * half;
        k.rope(row, c.n_heads, static_cast<int32_t>(hd), cos_row, sin_row);
        k.rope(row + q_dim, c.n_kv_heads, static_cast<int32_t>(hd), cos_row, sin_row);
        float* keys = kv.keys + l * kv.layer_stride;
        for (int64_t e = 0; e < kv_dim; ++e) keys[e * kv.ld + pos] = row[q_dim + e];
        std::memcpy(kv.values + l * kv.layer_stride + pos * kv_dim, row + q_dim + kv_dim,
                    static_cast<size_t>(kv_dim) * sizeof(float));
      }
      barrier.wait();
      // Attention: each query over its row's positions [0, pos].
      {
        const auto [u0, u1] = item_share(items, w, n);
        float* scratch = scores + static_cast<int64_t>(w) * kQueriesPerItem * plan.longest;
        for (int64_t u = u0; u < u1; ++u) {
          const AttentionItem& it = items[static_cast<size_t>(u)];
          const KvView& kv = plan.kv[static_cast<size_t>(plan.token_row[static_cast<size_t>(it.token)])];
          const int64_t g = it.head / group;
          int64_t keys[kQueriesPerItem];
          for (int32_t i = 0; i < it.count; ++i) keys[i] = plan.token_pos[static_cast<size_t>(it.token + i)] + 1;
          float* out = att + it.token * q_dim + it.head * hd;
          k.attention_queries(qkv + it.token * qkv_ld + it.head * hd, qkv_ld, keys, it.count,
                              kv.keys + l * kv.layer_stride + g * hd * kv.ld, kv.ld,
                              kv.values + l * kv.layer_stride + g * hd, kv_dim, static_cast<int32_t>(hd),
                              m.attention_scale, out, q_dim, scratch);
          if (bf16)
            for (int32_t i = 0; i < it.count; ++i) k.round_bf16(out + i * q_dim, out + i * q_dim, hd);
        }
      }
      barrier.wait();
      // o = att @ wo
      matmul_part(k, att, q_dim, R, pl.wo, o, d, w, n);
      barrier.wait();
      // x = x + o; xn = rmsnorm(x)
      k.add(x + t0 * d, o + t0 * d, (t1 - t0) * d);
      k.rmsnorm_rows(x + t0 * d, p + lw.mlp_norm, xn + t0 * d, nullptr, t1 - t0, d, c.norm_eps);
      if (bf16) k.round_bf16(xn + t0 * d, xn + t0 * d, (t1 - t0) * d);
      barrier.wait();
      // [gate | up] = xn @ [w_gate | w_up]; h = silu(gate) * up
      matmul_part(k, xn, d, R, pl.gate_up, gu, 2 * ff, w, n);
      barrier.wait();
      for (int64_t t = t0; t < t1; ++t) {
        k.swiglu(gu + t * 2 * ff, gu + t * 2 * ff + ff, h + t * ff, ff);
        if (bf16) k.round_bf16(h + t * ff, h + t * ff, ff);
      }
      barrier.wait();
      // o = h @ w_down (added to x by the next layer, or below)
      matmul_part(k, h, ff, R, pl.w_down, o, d, w, n);
      barrier.wait();
    }
    // Outputs: x = x + o; hidden = rmsnorm(x, final_norm) at the asked positions.
    const auto [r0, r1] = static_range(R_out, w, n);
    for (int64_t i = r0; i < r1; ++i) {
      const int64_t t = plan.out_token[static_cast<size_t>(i)];
      k.add(x + t * d, o + t * d, d);
      k.rmsnorm(x + t * d, p + m.registry.final_norm(), out_x + i * d, d, c.norm_eps);
      const RowWork& row = rows[static_cast<size_t>(plan.token_row[static_cast<size_t>(t)])];
      const int64_t slot = plan.out_slot[static_cast<size_t>(i)];
      if (row.hidden) std::copy_n(out_x + i * d, d, row.hidden + slot * d);
      if (bf16) k.round_bf16(out_x + i * d, out_x + i * d, d);
    }
    if (!want_logits) return;
    barrier.wait();
    matmul_part(k, out_x, d, R_out, pw.head, out_logits, vocab, w, n);
    barrier.wait();
    for (int64_t i = r0; i < r1; ++i) {
      const int64_t t = plan.out_token[static_cast<size_t>(i)];
      const RowWork& row = rows[static_cast<size_t>(plan.token_row[static_cast<size_t>(t)])];
      if (row.logits)
        std::copy_n(out_logits + i * vocab, vocab, row.logits + plan.out_slot[static_cast<size_t>(i)] * vocab);
    }
  });
}

}  // namespace lockstep
