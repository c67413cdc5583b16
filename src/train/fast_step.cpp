#include "train/fast_step.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "kernels/ref/math.hpp"
#include "kernels/ref/ops.hpp"
#include "kernels/simd/dispatch.hpp"
#include "kernels/simd/matmul_split.hpp"

namespace lockstep::train {
namespace {

using simd::AlignedFloats;
using simd::MatrixPart;
using simd::PackedMatrix;
using simd::aligned_floats;
using simd::matmul_at_part;


// backward_blocks(): the head, the final norm, then per layer (from the last) these tensors in
// the order the backward finishes their chains, then the embedding.
enum LayerBlock : int64_t { kDown, kGate, kUp, kMlpNorm, kWo, kWq, kWk, kWv, kAttnNorm, kLayerBlocks };
constexpr int64_t kHeadBlock = 0, kFinalNormBlock = 1;
int64_t layer_block(const ModelConfig& c, int32_t l, LayerBlock b) { return 2 + (c.n_layers - 1 - l) * kLayerBlocks + b; }
int64_t embed_block(const ModelConfig& c) { return 2 + int64_t{c.n_layers} * kLayerBlocks; }

const simd::Kernels& choose(const std::string& name) {
  if (name.empty()) return simd::best_kernels();
  for (const simd::Kernels* k : simd::supported_kernels())
    if (name == k->name) return *k;
  throw Error(ErrorKind::unsupported, "SIMD target '" + name + "' is not available here");
}

// A packed matrix whose storage fits the largest [K, N] it will hold, reshaped per use.
void reshape(PackedMatrix& m, int64_t K, int64_t N) {
  m.K = K;
  m.N = N;
  m.panels = (N + m.panel - 1) / m.panel;
}

// dst[i] = src[i], i < n (a few dozen floats: no call).
void copy_floats(const float* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
}

}  // namespace

struct FastStep::Workspace {
  struct Layer {
    PackedMatrix qkv, wo, gu, down;          // forward: W
    PackedMatrix qkv_t, wo_t, gu_t, down_t;  // backward: W^T
  };
  struct Cache {
    // q [rows][kv heads][L][group * hd], k and v [rows][kv heads][L][hd]: each head group's rows
    // contiguous, as the attention kernels read them.
    AlignedFloats x_in, xn1, inv1, q, k, v, att, x_mid, xn2, inv2, gu, h;
  };
  int64_t rows = 0;
  std::vector<Layer> layers;
  PackedMatrix head, head_t;
  std::vector<Cache> cache;
  AlignedFloats x, xnf, invf, logits, losses;
  AlignedFloats dx, dbranch, dxn, dwide, dh, wtemp, attn_scratch;
  AlignedFloats dy_round[2];  // bf16: alternate rounded dy, as dy_packed
  AlignedFloats at_scratch;  // per worker: at_floats each, for matmul_at
  int64_t at_floats = 0;
  int64_t attn_floats = 0;  // per worker, for attention_sequence and attention_backward
  std::unique_ptr<std::atomic<int64_t>[]> tickets;  // one per dynamic phase of a step
  int64_t n_tickets = 0;
  PackedMatrix dy_packed[2];  // alternate dy of consecutive weight gradients (begin_emit)
  int threads = 0;
};

FastStep::FastStep(const ModelConfig& config, Precision precision, const std::string& simd_target)
    : config_(config), registry_(config), bf16_(precision == Precision::bf16), kernels_(&choose(simd_target)),
      ws_(std::make_unique<Workspace>()) {}

FastStep::~FastStep() = default;

std::vector<std::pair<int64_t, int64_t>> FastStep::backward_blocks(const ModelConfig& config) {
  const ParameterRegistry reg(config);
  const int64_t d = config.d_model, ff = config.d_ff, qd = config.q_dim(), kv = config.kv_dim();
  std::vector<std::pair<int64_t, int64_t>> out;
  out.push_back({reg.head(), d * config.vocab_size});
  out.push_back({reg.final_norm(), d});
  for (int32_t l = config.n_layers - 1; l >= 0; --l) {  // kLayerBlocks, in this order
    const auto& lw = reg.layer(l);
    out.push_back({lw.w_down, ff * d});
    out.push_back({lw.w_gate, d * ff});
    out.push_back({lw.w_up, d * ff});
    out.push_back({lw.mlp_norm, d});
    out.push_back({lw.wo, qd * d});
    out.push_back({lw.wq, d * qd});
    out.push_back({lw.wk, d * kv});
    out.push_back({lw.wv, d * kv});
    out.push_back({lw.attn_norm, d});
  }
  out.push_back({reg.embed(), int64_t{config.vocab_size} * d});
  return out;
}

float FastStep::loss_and_gradient(ThreadPool& pool, int threads, const RopeTables<float>& rope,
                                  std::span<const float> params, const int32_t* ids, int64_t rows, float* grad,
                                  const BatchPart* part) {
  const ModelConfig& c = config_;
  const ParameterRegistry& reg = registry_;
  const simd::Kernels& k = *kernels_;
  Workspace& ws = *ws_;
  const int64_t L = c.length, R = rows * L, d = c.d_model, hd = c.head_dim(), qd = c.q_dim(), kv = c.kv_dim();
  const int64_t ff = c.d_ff, V = c.vocab_size, half = hd / 2, qkv_ld = qd + 2 * kv;
  const int32_t group = c.n_heads / c.n_kv_heads;
  const float eps = c.norm_eps;
  const float scale = ref::attention_scale<float>(static_cast<int32_t>(hd));
  const int64_t wide = std::max({2 * ff, qkv_ld, V, d});
  const int nt = std::max(1, threads);
  const bool bf16 = bf16_;
  PhaseTimes* const times = times_;
  if (times) times->lap(PhaseTimes::other);
  auto sz = [](int64_t n) { return static_cast<size_t>(n); };

  // ---- workspace (allocated once per batch shape; nothing in the parallel region allocates) ----
  if (ws.rows != rows || ws.threads < nt) {
    ws.rows = rows;
    ws.threads = nt;
    ws.layers.clear();
    for (int32_t l = 0; l < c.n_layers; ++l) {
      Workspace::Layer pl;
      pl.qkv = simd::allocate_packed(k, d, qkv_ld);
      pl.wo = simd::allocate_packed(k, qd, d);
      pl.gu = simd::allocate_packed(k, d, 2 * ff);
      pl.down = simd::allocate_packed(k, ff, d);
      pl.qkv_t = simd::allocate_packed(k, qkv_ld, d);
      pl.wo_t = simd::allocate_packed(k, d, qd);
      pl.gu_t = simd::allocate_packed(k, 2 * ff, d);
      pl.down_t = simd::allocate_packed(k, d, ff);
      ws.layers.push_back(std::move(pl));
    }
    ws.head = simd::allocate_packed(k, d, V);
    ws.head_t = simd::allocate_packed(k, V, d);
    ws.cache.clear();
    for (int32_t l = 0; l < c.n_layers; ++l) {
      Workspace::Cache a;
      a.x_in = aligned_floats(sz(R * d));
      a.xn1 = aligned_floats(sz(R * d));
      a.inv1 = aligned_floats(sz(R));
      a.q = aligned_floats(sz(R * qd));
      a.k = aligned_floats(sz(R * kv));
      a.v = aligned_floats(sz(R * kv));
      a.att = aligned_floats(sz(R * qd));
      a.x_mid = aligned_floats(sz(R * d));
      a.xn2 = aligned_floats(sz(R * d));
      a.inv2 = aligned_floats(sz(R));
      a.gu = aligned_floats(sz(R * 2 * ff));
      a.h = aligned_floats(sz(R * ff));
      ws.cache.push_back(std::move(a));
    }
    ws.x = aligned_floats(sz(R * d));
    ws.xnf = aligned_floats(sz(R * d));
    ws.invf = aligned_floats(sz(R));
    ws.logits = aligned_floats(sz(R * V));
    ws.losses = aligned_floats(sz(R));
    ws.dx = aligned_floats(sz(R * d));
    ws.dbranch = aligned_floats(sz(R * d));
    ws.dxn = aligned_floats(sz(R * d));
    ws.dwide = aligned_floats(sz(R * wide));
    ws.dh = aligned_floats(sz(R * std::max(ff, qd)));
    ws.at_floats = k.matmul_at_scratch_floats(std::max({d, ff, qd}));
    ws.at_scratch = aligned_floats(sz(nt * ws.at_floats));
    if (bf16)
      for (AlignedFloats& buffer : ws.dy_round) buffer = aligned_floats(sz(R * wide));
    ws.wtemp = aligned_floats(sz(d * wide));
    ws.attn_floats = std::max(k.attention_sequence_scratch(L, static_cast<int32_t>(hd)),
                              k.attention_backward_scratch(L, group, static_cast<int32_t>(hd)));
    ws.attn_scratch = aligned_floats(sz(nt * ws.attn_floats));
    for (PackedMatrix& buffer : ws.dy_packed) buffer = simd::allocate_packed(k, R, wide);
    // Forward: one phase before the layers, two per layer; backward: one, then six per layer.
    ws.n_tickets = 8 * static_cast<int64_t>(c.n_layers) + 2;
    ws.tickets = std::make_unique<std::atomic<int64_t>[]>(sz(ws.n_tickets));
  }
  for (int64_t i = 0; i < ws.n_tickets; ++i) ws.tickets[i].store(0, std::memory_order_relaxed);

  // Targets and their count, before the parallel region.
  std::vector<int32_t> inputs(sz(R)), targets(sz(R));
  int64_t count = 0;
  for (int64_t r = 0; r < R; ++r) {
    inputs[sz(r)] = ids[(r / L) * (L + 1) + r % L];
    targets[sz(r)] = ids[(r / L) * (L + 1) + r % L + 1];
    count += targets[sz(r)] != ignored_target;
  }
  if (part) count = part->count;
  const bool cont = part != nullptr && part->continued;  // chains over rows continue from grad
  const float countf = static_cast<float>(count);
  const float* p = params.data();
  Barrier barrier(nt);
  // Pipelined chains: between two barriers, worker 0 sends block `sent` (final here) and
  // receives block `wanted` (to continue here); -1: none.
  const bool linked = part != nullptr && (part->receive || part->send);
  // Linked ranks compute the fused gradients (gate|up, q|k|v) part by part, straight into each
  // part's gradient, so that each part travels as soon as its chains end and the next rank
  // continues them in place (no copies through wtemp); when every part is whole panels of dy.
  const int64_t panel = k.panel_width;
  const bool by_parts = linked && ff % panel == 0 && qd % panel == 0 && kv % panel == 0;
  const size_t n_blocks = linked ? backward_blocks(c).size() : 0;

  pool.run(nt, [&](int w, int n) {
    // Worker 0 (the calling thread) times the phases.
    auto lap = [&](PhaseTimes::Phase phase) {
      if (times && w == 0) times->lap(phase);
    };
    // ---- pack the weights: W for the forward, W^T for the backward ----
    {
      auto pack = [&](const MatrixPart* parts, int n_parts, PackedMatrix& out) {
        const auto [p0, p1] = static_range(out.panels, w, n);
        simd::pack_panels(parts, n_parts, out, p0, p1, bf16);
      };
      auto pack_t = [&](const MatrixPart* parts, int n_parts, PackedMatrix& out) {
        const auto [p0, p1] = static_range(out.panels, w, n);
        simd::pack_transposed_panels(parts, n_parts, out, p0, p1, bf16);
      };
      for (int32_t l = 0; l < c.n_layers; ++l) {
        const auto& lw = reg.layer(l);
        Workspace::Layer& pl = ws.layers[sz(l)];
        const MatrixPart qkv[] = {{p + lw.wq, qd}, {p + lw.wk, kv}, {p + lw.wv, kv}};
        const MatrixPart wo[] = {{p + lw.wo, d}};
        const MatrixPart gu[] = {{p + lw.w_gate, ff}, {p + lw.w_up, ff}};
        const MatrixPart down[] = {{p + lw.w_down, d}};
        pack(qkv, 3, pl.qkv);
        pack(wo, 1, pl.wo);
        pack(gu, 2, pl.gu);
        pack(down, 1, pl.down);
        if (grad) {
          pack_t(qkv, 3, pl.qkv_t);
          pack_t(wo, 1, pl.wo_t);
          pack_t(gu, 2, pl.gu_t);
          pack_t(down, 1, pl.down_t);
        }
      }
      const MatrixPart head[] = {{p + reg.head(), V}};
      pack(head, 1, ws.head);
      if (grad) pack_t(head, 1, ws.head_t);
    }
    barrier.wait();  // the packed weights
    lap(PhaseTimes::pack);

    // Work between two barriers is handed out dynamically: rows in chunks of whole row tiles, or
    // attention's (row, head) items, each taken by whichever worker asks next (tickets, one
    // counter per such phase, in the same order in every worker). A chunk runs a whole chain of
    // per-row steps and row-wise matmuls (c rows = a rows @ W) that reads only its own rows, so
    // a faster worker takes more chunks and nothing waits inside the chain. Which worker computes
    // a row never changes its bits. Barriers remain where a phase reads rows other chunks wrote:
    // attention (whole sequences), the weight gradients and the norm weights' gradients (sums
    // over every row), and the embedding gradient.
    int64_t phase = 0;
    auto for_items = [&](int64_t items, auto&& body) {
      std::atomic<int64_t>& ticket = ws.tickets[sz(phase++)];
      for (int64_t i = ticket.fetch_add(1, std::memory_order_relaxed); i < items;
           i = ticket.fetch_add(1, std::memory_order_relaxed))
        body(i);
    };
    // Rows per chunk: about 48, whole row tiles of the matmul kernel. A chunk's rows of the widest
    // activation (gu, 2 d_ff) stay in L2 while its chain runs, and a step has enough chunks for
    // the workers to even out (s256 on 2 threads: 96 rows measured about 4% slower, 24 the same).
    const int64_t chunk = (48 + k.row_block - 1) / k.row_block * k.row_block, chunks = (R + chunk - 1) / chunk;
    auto for_row_chunks = [&](auto&& body) {  // body(r0, r1)
      for_items(chunks, [&](int64_t i) { body(i * chunk, std::min(R, (i + 1) * chunk)); });
    };
    // c [r0, r1) = a [r0, r1) @ b.
    auto rows_matmul = [&](int64_t r0, int64_t r1, const float* a, int64_t lda, const PackedMatrix& b, float* c,
                           int64_t ldc) { k.matmul(a + r0 * lda, lda, r1 - r0, b, 0, b.panels, c + r0 * ldc, ldc); };

    // The residual stream lives in the caches: layer l's input is cache[l].x_in (the embedding
    // rows for l = 0), its middle x_mid, and its output the next layer's x_in (x after the last
    // layer). Each branch's matmul writes where the sum goes, then the stream before it is
    // added in (x + branch and branch + x are the same IEEE sum).
    float* x = ws.x.get();
    float* attn_scratch = ws.attn_scratch.get() + static_cast<int64_t>(w) * ws.attn_floats;

    // Each dy of a weight gradient dW = x^T @ dy is, as its rows are made, rounded into dy_round
    // (bf16) and packed into dy_packed by the worker that made them, while they are in its cache;
    // a barrier, then weight_grad reads it (and input_grad the rounded rows). Two of each,
    // because a worker may emit the next dy while another still reads the last (whose rows, of
    // another width, overlap); the one after next is emitted only after a barrier that follows
    // every worker's reading. dy_read: what weight_grad and input_grad read; dy_write: what
    // emit_rows fills.
    int dy_read = 0, dy_write = 1;
    int64_t emit_n = 0;
    auto begin_emit = [&](int64_t N) {  // every worker, once per emitting phase
      dy_write = dy_read ^ 1;
      if (w == 0) reshape(ws.dy_packed[dy_write], R, N);  // read only after the phase's barrier
      emit_n = N;
    };
    auto dy_emitted = [&] { dy_read = dy_write; };  // after the barrier that ends an emitting phase
    auto emit_rows = [&](const float* dy, int64_t r0, int64_t r1) {
      const int64_t N = emit_n;
      const float* rows_of = dy;
      if (bf16) {
        k.round_bf16(dy + r0 * N, ws.dy_round[dy_write].get() + r0 * N, (r1 - r0) * N);
        rows_of = ws.dy_round[dy_write].get();
      }
      simd::pack_rows(rows_of, N, r0, r1, ws.dy_packed[dy_write].data.get(), R, k.panel_width);
    };

    // One layer's attention input from its residual rows: norm, the fused q/k/v matmul, RoPE,
    // then q, k and v into their per-head-group rows.
    auto attention_input = [&](int32_t l, int64_t r0, int64_t r1) {
      const auto& lw = reg.layer(l);
      Workspace::Cache& a = ws.cache[sz(l)];
      k.rmsnorm_rows(a.x_in.get() + r0 * d, p + lw.attn_norm, a.xn1.get() + r0 * d, a.inv1.get() + r0, r1 - r0, d, eps);
      if (bf16) k.round_bf16(a.xn1.get() + r0 * d, a.xn1.get() + r0 * d, (r1 - r0) * d);
      rows_matmul(r0, r1, a.xn1.get(), d, ws.layers[sz(l)].qkv, ws.dwide.get(), qkv_ld);  // [R, qd + 2 kv]
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t b = r / L, t = r % L;
        float* row = ws.dwide.get() + r * qkv_ld;
        k.rope(row, c.n_heads, static_cast<int32_t>(hd), rope.cos.data() + t * half, rope.sin.data() + t * half);
        k.rope(row + qd, c.n_kv_heads, static_cast<int32_t>(hd), rope.cos.data() + t * half, rope.sin.data() + t * half);
        for (int64_t g = 0; g < c.n_kv_heads; ++g) {
          const int64_t at = (b * c.n_kv_heads + g) * L + t;
          copy_floats(row + g * group * hd, group * hd, a.q.get() + at * group * hd);
          copy_floats(row + qd + g * hd, hd, a.k.get() + at * hd);
          copy_floats(row + qd + kv + g * hd, hd, a.v.get() + at * hd);
        }
      }
    };
    // The final norm, the head and each position's loss (and dlogits in place when training,
    // emitted as the head's dy).
    auto head_and_loss = [&](int64_t r0, int64_t r1) {
      k.rmsnorm_rows(x + r0 * d, p + reg.final_norm(), ws.xnf.get() + r0 * d, ws.invf.get() + r0, r1 - r0, d, eps);
      if (bf16) k.round_bf16(ws.xnf.get() + r0 * d, ws.xnf.get() + r0 * d, (r1 - r0) * d);
      rows_matmul(r0, r1, ws.xnf.get(), d, ws.head, ws.logits.get(), V);
      for (int64_t r = r0; r < r1; ++r) {
        float* z = ws.logits.get() + r * V;
        const int32_t t = targets[sz(r)];
        if (t == ignored_target) {
          if (grad) std::fill_n(z, V, 0.0f);
          continue;
        }
        if (grad) {
          ws.losses[sz(r)] = k.cross_entropy_backward(z, static_cast<int32_t>(V), t, countf, ws.dwide.get() + r * V);
          std::copy_n(ws.dwide.get() + r * V, V, z);
        } else {
          ws.losses[sz(r)] = k.cross_entropy(z, static_cast<int32_t>(V), t);
        }
      }
      if (grad) emit_rows(ws.logits.get(), r0, r1);
    };

    // ---- forward: phases end before and after each layer's attention ----
    for_row_chunks([&](int64_t r0, int64_t r1) {
      float* x0 = ws.cache[0].x_in.get();
      for (int64_t r = r0; r < r1; ++r)
        std::copy_n(p + reg.embed() + static_cast<int64_t>(inputs[sz(r)]) * d, d, x0 + r * d);
      attention_input(0, r0, r1);
    });
    barrier.wait();
    for (int32_t l = 0; l < c.n_layers; ++l) {
      const Workspace::Layer& pl = ws.layers[sz(l)];
      Workspace::Cache& a = ws.cache[sz(l)];
      const float* mlp_norm = p + reg.layer(l).mlp_norm;
      float* x_out = l + 1 < c.n_layers ? ws.cache[sz(l + 1)].x_in.get() : x;
      for_items(rows * c.n_kv_heads, [&](int64_t u) {  // (row, key/value head)
        const int64_t b = u / c.n_kv_heads, g = u % c.n_kv_heads;
        float* out = a.att.get() + b * L * qd + g * group * hd;
        k.attention_sequence(a.q.get() + u * L * group * hd, group * hd, a.k.get() + u * L * hd, a.v.get() + u * L * hd,
                             hd, L, group, static_cast<int32_t>(hd), scale, out, qd, attn_scratch);
        if (bf16)
          for (int64_t t = 0; t < L; ++t) k.round_bf16(out + t * qd, out + t * qd, group * hd);
      });
      barrier.wait();
      if (grad && l + 1 == c.n_layers) begin_emit(V);
      for_row_chunks([&](int64_t r0, int64_t r1) {
        const int64_t m = r1 - r0;
        rows_matmul(r0, r1, a.att.get(), qd, pl.wo, a.x_mid.get(), d);
        k.add(a.x_mid.get() + r0 * d, a.x_in.get() + r0 * d, m * d);
        k.rmsnorm_rows(a.x_mid.get() + r0 * d, mlp_norm, a.xn2.get() + r0 * d, a.inv2.get() + r0, m, d, eps);
        if (bf16) k.round_bf16(a.xn2.get() + r0 * d, a.xn2.get() + r0 * d, m * d);
        rows_matmul(r0, r1, a.xn2.get(), d, pl.gu, a.gu.get(), 2 * ff);
        for (int64_t r = r0; r < r1; ++r) {
          k.swiglu(a.gu.get() + r * 2 * ff, a.gu.get() + r * 2 * ff + ff, a.h.get() + r * ff, ff);
          if (bf16) k.round_bf16(a.h.get() + r * ff, a.h.get() + r * ff, ff);
        }
        rows_matmul(r0, r1, a.h.get(), ff, pl.down, x_out, d);
        k.add(x_out + r0 * d, a.x_mid.get() + r0 * d, m * d);
        if (l + 1 < c.n_layers) {
          attention_input(l + 1, r0, r1);
        } else {
          head_and_loss(r0, r1);
        }
      });
      if (l + 1 < c.n_layers) barrier.wait();
    }
    if (!grad) {
      lap(PhaseTimes::forward);
      return;
    }
    barrier.wait();
    dy_emitted();
    lap(PhaseTimes::forward);

    // ---- backward ----
    // dW [K, N] = x^T @ dy over all R rows, with x [R, K] read in place by matmul_at and dy the
    // last one emitted; split statically by outputs, at the start of a phase whose row chunks
    // then absorb the difference.
    float* at_scratch = ws.at_scratch.get() + static_cast<int64_t>(w) * ws.at_floats;
    auto weight_grad = [&](const float* xs, int64_t K, float* dw) {
      lap(PhaseTimes::backward_rows);
      const PackedMatrix& dy = ws.dy_packed[dy_read];
      matmul_at_part(k, xs, K, K, dy, dw, dy.N, at_scratch, w, n, cont);
      lap(PhaseTimes::weight_chains);
    };
    // Columns [col, col + N) of dW = x^T @ dy (whole panels of dy) into dw [K, N]: worker w's
    // share of the panels. The same chains as weight_grad's, for these columns.
    auto weight_grad_columns = [&](const float* xs, int64_t K, int64_t col, int64_t N, float* dw) {
      lap(PhaseTimes::backward_rows);
      const PackedMatrix& dy = ws.dy_packed[dy_read];
      const auto [q0, q1] = static_range(N / panel, w, n);
      if (q0 < q1)
        (cont ? k.matmul_at_continue : k.matmul_at)(xs, K, K, dy, col / panel + q0, col / panel + q1, dw - col, N,
                                                     at_scratch);
      lap(PhaseTimes::weight_chains);
    };
    // dx [r0, r1) = dy [r0, r1) @ W^T (packed); dy rounded under bf16 (emit_rows has left it so).
    auto input_grad = [&](int64_t r0, int64_t r1, const float* dy, int64_t N, const PackedMatrix& wt, float* dxo) {
      rows_matmul(r0, r1, bf16 ? ws.dy_round[dy_read].get() : dy, N, wt, dxo, wt.N);
    };
    // One norm's backward over rows [r0, r1): dx = rmsnorm backward of dyn, or dx += it
    // (`accumulate`); the new dx is then emitted when the phase emits.
    auto norm_rows = [&](int64_t r0, int64_t r1, const float* xs, const float* inv, const float* wn, const float* dyn,
                         bool accumulate) {
      float* out = accumulate ? ws.dbranch.get() : ws.dx.get();
      k.rmsnorm_backward_rows(xs + r0 * d, wn, dyn + r0 * d, inv + r0, out + r0 * d, r1 - r0, d);
      if (accumulate) k.add(ws.dx.get() + r0 * d, out + r0 * d, (r1 - r0) * d);
    };
    // The norm weight's gradient sums over every row: after the barrier of its norm_rows, by
    // columns; dxn keeps the norm's dy until then.
    auto norm_weight = [&](const float* xs, const float* inv, float* dw) {
      lap(PhaseTimes::backward_rows);
      const auto [i0, i1] = static_range(d, w, n);
      (cont ? k.rmsnorm_backward_weight_continue : k.rmsnorm_backward_weight)(xs, inv, ws.dxn.get(), dw, R, d, i0,
                                                                               i1);
      lap(PhaseTimes::weight_chains);
    };
    // Scatters wtemp [K, sum N_i] into the gradients of the parts, after the barrier that
    // completes wtemp; wtemp is next written two barriers later.
    auto scatter = [&](int64_t K, std::initializer_list<std::pair<float*, int64_t>> parts) {
      lap(PhaseTimes::backward_rows);
      int64_t total = 0;
      for (const auto& part : parts) total += part.second;
      const auto [k0, k1] = static_range(K, w, n);
      for (int64_t kk = k0; kk < k1; ++kk) {
        int64_t col = 0;
        for (const auto& [dst, N] : parts) {
          std::copy_n(ws.wtemp.get() + kk * total + col, N, dst + kk * N);
          col += N;
        }
      }
      lap(PhaseTimes::weight_chains);
    };

    // Continuing chains: wtemp [K, sum N_i] first takes the parts' accumulators (after every
    // reader of its last use, which the phase barrier before each call below follows), then a
    // barrier, then weight_grad continues them.
    auto gather = [&](int64_t K, std::initializer_list<std::pair<const float*, int64_t>> parts) {
      if (!cont) return;
      lap(PhaseTimes::backward_rows);
      int64_t total = 0;
      for (const auto& part_ : parts) total += part_.second;
      const auto [k0, k1] = static_range(K, w, n);
      for (int64_t kk = k0; kk < k1; ++kk) {
        int64_t col = 0;
        for (const auto& [src, N] : parts) {
          std::copy_n(src + kk * N, N, ws.wtemp.get() + kk * total + col);
          col += N;
        }
      }
      barrier.wait();
      lap(PhaseTimes::weight_chains);
    };

    // Sends the blocks `sent` (their chains final here, once every worker is past the barrier)
    // and receives the blocks `wanted` (before any worker continues their chains): each block
    // travels as soon as it is final and arrives as late as it can, so that the next rank lags
    // by about one tensor's chain, not one layer's.
    auto hand_over = [&](std::initializer_list<int64_t> sent, std::initializer_list<int64_t> wanted) {
      if (!linked) return;
      lap(PhaseTimes::backward_rows);
      barrier.wait();
      if (w == 0) {
        if (part->send)
          for (const int64_t i : sent) part->send(static_cast<size_t>(i));
        lap(PhaseTimes::send);
        if (cont && part->receive)
          for (const int64_t i : wanted) part->receive(static_cast<size_t>(i));
      }
      barrier.wait();
      lap(PhaseTimes::receive);
    };

    hand_over({}, {kHeadBlock});
    weight_grad(ws.xnf.get(), d, grad + reg.head());
    hand_over({kHeadBlock}, {});  // sent as soon as its chains end, before this rank's row work
    begin_emit(d);
    for_row_chunks([&](int64_t r0, int64_t r1) {
      input_grad(r0, r1, ws.logits.get(), V, ws.head_t, ws.dxn.get());
      norm_rows(r0, r1, x, ws.invf.get(), p + reg.final_norm(), ws.dxn.get(), false);
      emit_rows(ws.dx.get(), r0, r1);
    });
    barrier.wait();
    dy_emitted();
    hand_over({}, {kFinalNormBlock});
    norm_weight(x, ws.invf.get(), grad + reg.final_norm());

    for (int32_t l = c.n_layers - 1; l >= 0; --l) {
      const auto& lw = reg.layer(l);
      const Workspace::Layer& pl = ws.layers[sz(l)];
      const Workspace::Cache& a = ws.cache[sz(l)];
      float* dgu = ws.dwide.get();   // [R, 2 ff] = [dgate | dup]
      float* dqkv = ws.dwide.get();  // [R, qd + 2 kv] = [dq | dk | dv]
      auto block = [&](LayerBlock b) { return layer_block(c, l, b); };
      // The last chain finished before: the final norm's, or the attention norm's of the layer above.
      hand_over({l + 1 < c.n_layers ? layer_block(c, l + 1, kAttnNorm) : kFinalNormBlock}, {block(kDown)});
      // x_out = x_mid + h @ w_down
      weight_grad(a.h.get(), ff, grad + lw.w_down);
      hand_over({block(kDown)}, {});
      begin_emit(2 * ff);
      for_row_chunks([&](int64_t r0, int64_t r1) {
        input_grad(r0, r1, ws.dx.get(), d, pl.down_t, ws.dh.get());
        for (int64_t r = r0; r < r1; ++r)
          k.swiglu_backward(a.gu.get() + r * 2 * ff, a.gu.get() + r * 2 * ff + ff, ws.dh.get() + r * ff,
                            dgu + r * 2 * ff, dgu + r * 2 * ff + ff, ff);
        emit_rows(dgu, r0, r1);
      });
      barrier.wait();
      dy_emitted();
      if (by_parts) {
        hand_over({}, {block(kGate)});
        weight_grad_columns(a.xn2.get(), d, 0, ff, grad + lw.w_gate);
        hand_over({block(kGate)}, {block(kUp)});
        weight_grad_columns(a.xn2.get(), d, ff, ff, grad + lw.w_up);
        hand_over({block(kUp)}, {});
      } else {
        hand_over({}, {block(kGate), block(kUp)});
        gather(d, {{grad + lw.w_gate, ff}, {grad + lw.w_up, ff}});
        weight_grad(a.xn2.get(), d, ws.wtemp.get());
      }
      begin_emit(d);
      for_row_chunks([&](int64_t r0, int64_t r1) {
        input_grad(r0, r1, dgu, 2 * ff, pl.gu_t, ws.dxn.get());
        norm_rows(r0, r1, a.x_mid.get(), a.inv2.get(), p + lw.mlp_norm, ws.dxn.get(), true);
        emit_rows(ws.dx.get(), r0, r1);
      });
      barrier.wait();
      dy_emitted();
      if (by_parts) {
        hand_over({}, {block(kMlpNorm)});
      } else {
        scatter(d, {{grad + lw.w_gate, ff}, {grad + lw.w_up, ff}});
        hand_over({block(kGate), block(kUp)}, {block(kMlpNorm)});
      }
      norm_weight(a.x_mid.get(), a.inv2.get(), grad + lw.mlp_norm);
      hand_over({block(kMlpNorm)}, {block(kWo)});
      // x_mid = x_in + att @ wo
      weight_grad(a.att.get(), qd, grad + lw.wo);
      hand_over({block(kWo)}, {});
      for_row_chunks([&](int64_t r0, int64_t r1) {
        input_grad(r0, r1, ws.dx.get(), d, pl.wo_t, ws.dh.get());  // datt in dh
      });
      barrier.wait();
      for_items(rows * c.n_kv_heads, [&](int64_t task) {
        const int64_t b = task / c.n_kv_heads, g = task % c.n_kv_heads;
        const int64_t row0 = b * L, qo = g * group * hd, ko = g * hd;
        k.attention_backward(a.q.get() + task * L * group * hd, group * hd, a.k.get() + task * L * hd,
                             a.v.get() + task * L * hd, hd, ws.dh.get() + row0 * qd + qo, qd,
                             dqkv + row0 * qkv_ld + qo, qkv_ld, dqkv + row0 * qkv_ld + qd + ko,
                             dqkv + row0 * qkv_ld + qd + kv + ko, qkv_ld, L, group, static_cast<int32_t>(hd), scale,
                             attn_scratch);
      });
      barrier.wait();
      begin_emit(qkv_ld);
      for_row_chunks([&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t t = r % L;
          k.rope_backward(dqkv + r * qkv_ld, c.n_heads, static_cast<int32_t>(hd), rope.cos.data() + t * half,
                          rope.sin.data() + t * half);
          k.rope_backward(dqkv + r * qkv_ld + qd, c.n_kv_heads, static_cast<int32_t>(hd), rope.cos.data() + t * half,
                          rope.sin.data() + t * half);
        }
        emit_rows(dqkv, r0, r1);
      });
      barrier.wait();
      dy_emitted();
      if (by_parts) {
        hand_over({}, {block(kWq)});
        weight_grad_columns(a.xn1.get(), d, 0, qd, grad + lw.wq);
        hand_over({block(kWq)}, {block(kWk)});
        weight_grad_columns(a.xn1.get(), d, qd, kv, grad + lw.wk);
        hand_over({block(kWk)}, {block(kWv)});
        weight_grad_columns(a.xn1.get(), d, qd + kv, kv, grad + lw.wv);
        hand_over({block(kWv)}, {});
      } else {
        hand_over({}, {block(kWq), block(kWk), block(kWv)});
        gather(d, {{grad + lw.wq, qd}, {grad + lw.wk, kv}, {grad + lw.wv, kv}});
        weight_grad(a.xn1.get(), d, ws.wtemp.get());
      }
      if (l > 0) begin_emit(d);
      for_row_chunks([&](int64_t r0, int64_t r1) {
        input_grad(r0, r1, dqkv, qkv_ld, pl.qkv_t, ws.dxn.get());
        norm_rows(r0, r1, a.x_in.get(), a.inv1.get(), p + lw.attn_norm, ws.dxn.get(), true);
        if (l > 0) emit_rows(ws.dx.get(), r0, r1);
      });
      barrier.wait();
      if (l > 0) dy_emitted();
      if (by_parts) {
        hand_over({}, {block(kAttnNorm)});
      } else {
        scatter(d, {{grad + lw.wq, qd}, {grad + lw.wk, kv}, {grad + lw.wv, kv}});
        hand_over({block(kWq), block(kWk), block(kWv)}, {block(kAttnNorm)});
      }
      norm_weight(a.x_in.get(), a.inv1.get(), grad + lw.attn_norm);
    }
    // d_embed[v] = sum of dx[r] over the rows whose id is v, in increasing r.
    hand_over({layer_block(c, 0, kAttnNorm)}, {embed_block(c)});
    {
      const auto [v0, v1] = static_range(V, w, n);
      float* de = grad + reg.embed();
      if (!cont) std::fill(de + v0 * d, de + v1 * d, 0.0f);
      for (int64_t r = 0; r < R; ++r) {
        const int32_t id = inputs[sz(r)];
        if (id >= v0 && id < v1) k.add(de + static_cast<int64_t>(id) * d, ws.dx.get() + r * d, d);
      }
    }
    lap(PhaseTimes::weight_chains);
  });

  if (linked) {
    if (part->send) part->send(static_cast<size_t>(embed_block(c)));
    if (times) times->lap(PhaseTimes::send);
    if (cont && part->receive) part->receive(n_blocks);  // the loss total, into part->total
    if (times) times->lap(PhaseTimes::receive);
  }
  float total = part ? part->total : 0.0f;
  for (int64_t r = 0; r < R; ++r)
    if (targets[sz(r)] != ignored_target) total = total + ws.losses[sz(r)];
  return part ? total : total / countf;
}

}  // namespace lockstep::train
