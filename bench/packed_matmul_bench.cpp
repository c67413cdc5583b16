// The decode matmul alone (one row, M = 1) over one m1024 layer's four fused matrices (qkv
// [1024, 3072], wo [1024, 1024], gate_up [1024, 5632], w_down [2816, 1024]: 12.6 M weights) by
// storage, on one thread: the expansion's cost per weight without the rest of a decode step.
// The q4 layer's 7.9 MB stay in the last-level cache on most machines, so this shows the kernel's
// compute bound; BM_DecodeM1024 (forward_bench.cpp) shows it against DRAM.
#include <benchmark/benchmark.h>

#include <vector>

#include "core/rng.hpp"
#include "kernels/simd/dispatch.hpp"
#include "kernels/simd/kernels.hpp"
#include "quant/q4.hpp"
#include "quant/q8.hpp"

namespace lockstep {
namespace {

struct Shape {
  int64_t K, N;
};
constexpr Shape kLayer[] = {{1024, 3072}, {1024, 1024}, {1024, 5632}, {2816, 1024}};

std::vector<float> normal_floats(int64_t n, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(random_normal(seed, 0, static_cast<uint64_t>(i)));
  return v;
}

simd::PackedMatrix pack_as(const simd::Kernels& k, int storage, const std::vector<float>& w, int64_t K, int64_t N) {
  if (storage == 2) {
    std::vector<int8_t> q(w.size());
    std::vector<float> scale(static_cast<size_t>(N));
    quant::pack_q8(w.data(), K, N, q.data(), scale.data());
    const simd::Q8Part part{q.data(), scale.data(), N};
    return simd::pack_q8_concat(k, &part, 1, K);
  }
  if (storage == 3) {
    std::vector<uint8_t> packed(static_cast<size_t>(K * quant::q4_row_bytes(N)));
    std::vector<float> scale(static_cast<size_t>(quant::q4_groups(K) * N));
    quant::pack_q4(w.data(), K, N, packed.data(), scale.data());
    const simd::Q4Part part{packed.data(), scale.data(), N};
    return simd::pack_q4_concat(k, &part, 1, K);
  }
  return simd::pack_matrix(k, w.data(), K, N, N, storage == 1);
}

// Args {storage (0 f32, 1 bf16, 2 q8, 3 q4), target (0 the best this CPU runs, 1 the next, ...),
// layers (1: the layer stays in cache where it fits; 24: m1024's 24 layers, read from DRAM as
// decoding reads them)}.
void BM_PackedMatvec(benchmark::State& state) {
  const int storage = static_cast<int>(state.range(0));
  const auto targets = simd::supported_kernels();
  const size_t which = static_cast<size_t>(state.range(1));
  if (which >= targets.size()) {
    state.SkipWithError("no such target here");
    return;
  }
  const simd::Kernels& k = *targets[which];
  std::vector<simd::PackedMatrix> mats;
  std::vector<std::vector<float>> xs, ys;
  int64_t weights = 0;
  uint64_t seed = 7;
  const int64_t layers = state.range(2);
  for (const Shape& s : kLayer) {
    const std::vector<float> w = normal_floats(s.K * s.N, seed++);
    for (int64_t l = 0; l < layers; ++l) {
      mats.push_back(pack_as(k, storage, w, s.K, s.N));
      xs.push_back(normal_floats(s.K, seed++));
      ys.emplace_back(static_cast<size_t>(s.N));
      weights += s.K * s.N;
    }
  }
  for (auto _ : state) {
    for (size_t i = 0; i < mats.size(); ++i)
      k.matmul(xs[i].data(), mats[i].K, 1, mats[i], 0, mats[i].panels, ys[i].data(), mats[i].N);
    benchmark::ClobberMemory();
  }
  static const char* const kNames[] = {"f32", "bf16", "q8", "q4"};
  state.SetLabel(std::string(kNames[storage]) + " " + k.name);
  state.counters["weights"] = benchmark::Counter(static_cast<double>(weights), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_PackedMatvec)->ArgsProduct({{0, 1, 2, 3}, {0, 1, 2}, {1, 24}})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace lockstep
