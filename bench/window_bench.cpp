// Long windows: prefill (one full-window forward) and decode at the end of the window (a session
// appending one token at position length - 1) of s256 and l768 with the window at 256, 1024, 2048
// and 4096, and one layer's prefill attention alone, three queries at a time (the kernel before
// tiling) against tiles of queries. bench/run.sh's `window` stage runs them and
// bench/window_report.py prints how each falls as the window grows (bench/README.md).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.hpp"
#include "kernels/simd/dispatch.hpp"
#include "kernels/simd/kernels.hpp"
#include "lockstep/model.hpp"
#include "lockstep/session.hpp"
#include "bench/simd_target.hpp"

namespace lockstep {
namespace {

// bench/forward_bench.cpp's s256 (0) and l768 (1), with the window `length`.
ModelConfig window_config(int which, int32_t length) {
  ModelConfig c;
  c.vocab_size = 256;
  c.length = length;
  if (which == 0) {
    c.d_model = 256;
    c.n_layers = 6;
    c.n_heads = 8;
    c.d_ff = 768;
  } else {
    c.d_model = 768;
    c.n_layers = 12;
    c.n_heads = 12;
    c.d_ff = 2048;
  }
  c.n_kv_heads = c.n_heads;
  return c;
}

std::string window_label(int which, int32_t length) {
  return std::string(which == 0 ? "s256" : "l768") + " window " + std::to_string(length);
}

// Weights per shape, drawn once per process (they do not depend on the window: the RoPE tables
// are the model's, not the parameters').
const std::vector<float>& window_parameters(int which) {
  static std::mutex mutex;
  static std::map<int, std::vector<float>> cache;
  std::lock_guard lock(mutex);
  auto it = cache.find(which);
  if (it == cache.end()) it = cache.emplace(which, init_parameters(window_config(which, 256), 1)).first;
  return it->second;
}

std::vector<int32_t> window_ids(int32_t length) {
  std::vector<int32_t> ids(static_cast<size_t>(length));
  for (int32_t t = 0; t < length; ++t)
    ids[static_cast<size_t>(t)] = static_cast<int32_t>(random_below(256, 3, 0, static_cast<uint64_t>(t)));
  return ids;
}

using bench::has_simd_target;

// A full-window forward on one thread in the SIMD target named (empty: the best this CPU runs),
// the last position's logits out.
void window_prefill(benchmark::State& state, int which, int32_t length, const std::string& target) {
  const ModelConfig c = window_config(which, length);
  ModelOptions options;
  options.threads = 1;
  options.simd_target = target;
  const auto model = Model::from_parameters(c, window_parameters(which), options);
  const std::vector<int32_t> ids = window_ids(length);
  RowRequest r;
  r.ids = ids;
  r.out_begin = length - 1;
  r.out_end = length;
  std::vector<float> logits(static_cast<size_t>(c.vocab_size));
  r.logits = logits.data();
  // One forward before the clock: the model's scratch pool then holds the call's buffers, as in
  // any run past its first call. At window 4096 (one timed iteration) the first call's page faults
  // on those buffers (hundreds of MB, zeroed by the kernel) were 5% of the figure.
  model->forward({&r, 1}, {Device::cpu, 1});
  for (auto _ : state) {
    model->forward({&r, 1}, {Device::cpu, 1});
    benchmark::DoNotOptimize(logits.data());
  }
  state.SetLabel(window_label(which, length) + (target.empty() ? "" : " " + target));
  state.counters["tokens"] = benchmark::Counter(length, benchmark::Counter::kIsIterationInvariantRate);
}

// Args {shape, length}.
void BM_WindowPrefill(benchmark::State& state) {
  window_prefill(state, static_cast<int>(state.range(0)), static_cast<int32_t>(state.range(1)), "");
}

// The same forward in the library's AVX2 code on a CPU with AVX-512 too (issue 40's window ratio
// is asked of an AVX2 CPU): the same instructions, not the same caches or clocks. Args {shape, length}.
void BM_WindowPrefillAvx2(benchmark::State& state) {
  if (!has_simd_target("AVX2")) {
    state.SkipWithError("no AVX2 on this CPU or in this build");
    return;
  }
  window_prefill(state, static_cast<int>(state.range(0)), static_cast<int32_t>(state.range(1)), "AVX2");
}

// Decode at the end of the window on one thread: a session holding length - 1 positions appends
// one token (at position length - 1, reading every key and value of the window), then is
// truncated back, 16 appends per iteration. Args {shape, length}.
void BM_WindowDecode(benchmark::State& state) {
  const int which = static_cast<int>(state.range(0));
  const int32_t length = static_cast<int32_t>(state.range(1));
  const ModelConfig c = window_config(which, length);
  ModelOptions options;
  options.threads = 1;
  const auto model = Model::from_parameters(c, window_parameters(which), options);
  const std::vector<int32_t> ids = window_ids(length);
  Session session(model, {Device::cpu, 1});
  session.append({ids.data(), static_cast<size_t>(length - 1)});
  constexpr int kSteps = 16;
  std::vector<float> logits(static_cast<size_t>(c.vocab_size));
  for (auto _ : state) {
    for (int i = 0; i < kSteps; ++i) {
      session.append({ids.data() + length - 1, 1}, logits.data());
      session.truncate(length - 1);
    }
    benchmark::DoNotOptimize(logits.data());
  }
  state.SetLabel(window_label(which, length));
  state.counters["tokens"] = benchmark::Counter(kSteps, benchmark::Counter::kIsIterationInvariantRate);
}

void window_args(benchmark::internal::Benchmark* b) {
  for (int which : {0, 1})
    for (int length : {256, 1024, 2048, 4096}) b->Args({which, length});
}
BENCHMARK(BM_WindowPrefill)->Apply(window_args)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_WindowPrefillAvx2)->Args({1, 256})->Args({1, 4096})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_WindowDecode)->Apply(window_args)->UseRealTime()->Unit(benchmark::kMillisecond);

// One layer's attention of a full-window prefill on one thread, as the fast path calls it (keys
// in blocks of 16 positions [length / 16][kv_dim][16], values [length / 16][heads][16][head_dim],
// queries in the fused qkv rows, outputs [length][q_dim]): `queries` consecutive queries of one
// head per call. 3 is the kernel before tiling (three queries sharing each key's loads, every key
// and value streamed once per three queries); more take the tiled kernel. flops: 2 per
// multiply-add of QK^T and PV over the t + 1 keys of each query. Args {shape, length, queries}.
void BM_WindowAttention(benchmark::State& state) {
  const int which = static_cast<int>(state.range(0));
  const int64_t T = state.range(1);
  const int queries = static_cast<int>(state.range(2));
  const ModelConfig c = window_config(which, static_cast<int32_t>(T));
  const int64_t heads = c.n_heads, hd = c.d_model / c.n_heads, qd = heads * hd, qkv_ld = 3 * qd;
  const simd::Kernels& k = simd::best_kernels();
  std::vector<float> qkv(static_cast<size_t>(T * qkv_ld)), kt(static_cast<size_t>(simd::key_blocks(T) * simd::key_block_stride(qd))),
      values(kt.size()), out(static_cast<size_t>(T * qd));
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = static_cast<float>(random_normal(7, 0, i));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t e = 0; e < qd; ++e) {
      kt[static_cast<size_t>(t / 16 * qd * 16 + e * 16 + t % 16)] = qkv[static_cast<size_t>(t * qkv_ld + qd + e)];
      values[static_cast<size_t>(t / 16 * qd * 16 + e / hd * hd * 16 + t % 16 * hd + e % hd)] =
          qkv[static_cast<size_t>(t * qkv_ld + 2 * qd + e)];
    }
  std::vector<float> scratch(static_cast<size_t>(k.attention_queries_scratch(queries, T, static_cast<int32_t>(hd))));
  const float scale = 1.0f / 8.0f;
  std::vector<int64_t> n(static_cast<size_t>(queries));
  for (auto _ : state) {
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t = 0; t < T; t += queries) {
        const int count = static_cast<int>(std::min<int64_t>(queries, T - t));
        for (int i = 0; i < count; ++i) n[static_cast<size_t>(i)] = t + i + 1;
        k.attention_queries(qkv.data() + t * qkv_ld + h * hd, qkv_ld, n.data(), count, kt.data() + h * hd * 16,
                            simd::key_block_stride(qd), values.data() + h * hd * 16, hd, simd::key_block_stride(qd),
                            static_cast<int32_t>(hd), scale,
                            out.data() + t * qd + h * hd, qd, scratch.data());
      }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(window_label(which, static_cast<int32_t>(T)) + (queries == 3 ? " (3 queries)" : " (tiles)"));
  const double products = static_cast<double>(heads) * hd * T * (T + 1) / 2;
  state.counters["flops"] = benchmark::Counter(4.0 * products, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_WindowAttention)->ArgsProduct({{0, 1}, {256, 2048, 4096}, {3, 48}})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace lockstep
