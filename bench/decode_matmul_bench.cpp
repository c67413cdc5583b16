// The matmuls of one batched decoding step of s256 on one thread (a lane of the HTTP API's
// continuous batching: bench/generation_engine_bench.cpp): rows [1, 8, 16, 32] through every
// layer's qkv, wo, gate_up and down and the head, 20 MiB of packed f32 weights that stream from
// the last-level cache once per call. flops over BM_FmaPeak/1 is the share of the FMA peak.
#include <benchmark/benchmark.h>

#include <vector>

#include "core/rng.hpp"
#include "kernels/simd/dispatch.hpp"
#include "kernels/simd/kernels.hpp"

namespace lockstep {
namespace {

struct Shape {
  int64_t K, N;
};

void BM_DecodeStepMatmuls(benchmark::State& state) {
  const int64_t M = state.range(0);
  const simd::Kernels& k = simd::best_kernels();
  // s256: d 256, d_ff 768, 6 layers, vocab 256 (gate and up packed side by side).
  std::vector<Shape> shapes;
  for (int layer = 0; layer < 6; ++layer) shapes.insert(shapes.end(), {{256, 768}, {256, 256}, {256, 1536}, {768, 256}});
  shapes.push_back({256, 256});
  std::vector<simd::PackedMatrix> packed;
  double flops = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto [K, N] = shapes[i];
    std::vector<float> w(static_cast<size_t>(K * N));
    for (int64_t j = 0; j < K * N; ++j) w[static_cast<size_t>(j)] = static_cast<float>(random_normal(i, 0, static_cast<uint64_t>(j)));
    packed.push_back(simd::pack_matrix(k, w.data(), K, N, N));
    flops += 2.0 * static_cast<double>(M * K * N);
  }
  std::vector<float> a(static_cast<size_t>(M * 768)), c(static_cast<size_t>(M * 1536));
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(random_normal(99, 0, i));
  for (auto _ : state) {
    for (const auto& b : packed) k.matmul(a.data(), b.K, M, b, 0, b.panels, c.data(), b.N);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["flops"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_DecodeStepMatmuls)->Arg(1)->Arg(8)->Arg(16)->Arg(32)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace lockstep
