// Attention of a batched decoding step, as lockstep serve's continuous batching runs it: one
// query per session and head over that session's cached keys and values, for every layer, with
// each session's cache laid out as a session holds it (per layer: keys in blocks of 16 positions
// [capacity / 16][kv_dim][16], then values [capacity][kv_dim]). 32 sessions of s256 hold 96 MiB of cache, so the keys and
// values come from beyond the L2 cache, as in the server; one session's stay in it (the kernel's
// own cost). Args {shape (0: s256, 1: l768), keys per query, sessions}; counters: multiply-adds
// (of QK^T and PV) per second, and nanoseconds per (query, head).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "kernels/simd/dispatch.hpp"
#include "kernels/simd/kernels.hpp"

namespace lockstep {
namespace {

void BM_DecodeAttention(benchmark::State& state) {
  const bool large = state.range(0) == 1;
  const int64_t keys = state.range(1);
  const int64_t sessions = state.range(2), capacity = 256, layers = large ? 12 : 6, heads = large ? 12 : 8;
  const int64_t hd = large ? 64 : 32, kv_dim = heads * hd, qkv_ld = 3 * kv_dim;
  const int64_t layer_stride = 2 * capacity * kv_dim;
  const simd::Kernels& k = simd::best_kernels();
  std::vector<float> cache(static_cast<size_t>(sessions * layers * layer_stride));
  for (size_t i = 0; i < cache.size(); ++i) cache[i] = static_cast<float>(random_normal(11, 0, i));
  std::vector<float> qkv(static_cast<size_t>(sessions * qkv_ld)), out(static_cast<size_t>(sessions * kv_dim));
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = static_cast<float>(random_normal(12, 0, i));
  std::vector<float> scratch(static_cast<size_t>(k.attention_queries_scratch(1, keys, static_cast<int32_t>(hd))));
  const float scale = 1.0f / 8.0f;
  for (auto _ : state) {
    for (int64_t l = 0; l < layers; ++l)
      for (int64_t s = 0; s < sessions; ++s) {
        const float* kt = cache.data() + (s * layers + l) * layer_stride;
        const float* v = kt + capacity * kv_dim;
        for (int64_t h = 0; h < heads; ++h)
          k.attention_queries(qkv.data() + s * qkv_ld + h * hd, qkv_ld, &keys, 1, kt + h * hd * simd::kKeysPerBlock,
                              simd::key_block_stride(kv_dim), v + h * hd * simd::kKeysPerBlock, hd,
                              simd::key_block_stride(kv_dim), static_cast<int32_t>(hd), scale,
                              out.data() + s * kv_dim + h * hd, kv_dim, scratch.data());
      }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(std::string(large ? "l768" : "s256") + (sessions == 1 ? ", in L2" : ""));
  const double products = 2.0 * static_cast<double>(sessions * layers * heads * hd * keys);
  state.counters["mul_adds"] = benchmark::Counter(products, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["ns_per_head"] =
      benchmark::Counter(static_cast<double>(sessions * layers * heads), benchmark::Counter::kIsIterationInvariantRate |
                                                                          benchmark::Counter::kInvert);
}
BENCHMARK(BM_DecodeAttention)->ArgsProduct({{0, 1}, {37, 100, 200}, {1, 32}})->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace lockstep
