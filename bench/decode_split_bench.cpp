// What a batched decoding step of s256 (32 sessions, 100 cached positions each) costs on two
// threads cut two ways, its matmuls and attention only (the norms, RoPE and SwiGLU are a few
// percent): /0 as lanes (each thread its 16 sessions through every layer, every weight read by
// both threads, no waiting), /1 split along outputs (each matmul's panels and each layer's heads
// halved between the threads, all 32 rows at once so every weight is read once a step, and the
// threads meet after each matmul and each attention: 5 times a layer). Both read the same keys
// and values. tokens/s counts the 32 tokens of a step.
#include <benchmark/benchmark.h>

#include <atomic>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "core/rng.hpp"
#include "kernels/simd/dispatch.hpp"
#include "kernels/simd/kernels.hpp"

namespace lockstep {
namespace {

// Two threads meet: each waits until the other has arrived at the same count.
class SpinBarrier {
 public:
  void wait() {
    const int64_t gen = gen_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) == 1) {
      arrived_.store(0, std::memory_order_relaxed);
      gen_.store(gen + 1, std::memory_order_release);
      return;
    }
    while (gen_.load(std::memory_order_acquire) == gen) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
  }

 private:
  std::atomic<int> arrived_{0};
  std::atomic<int64_t> gen_{0};
};

void BM_DecodeStepSplit(benchmark::State& state) {
  const bool split = state.range(0) == 1;
  constexpr int64_t kSessions = 32, kLayers = 6, kHeads = 8, kHd = 32, kD = 256, kFf = 768, kCap = 256, kKeys = 100;
  const simd::Kernels& k = simd::best_kernels();
  struct Layer {
    simd::PackedMatrix qkv, wo, gate_up, down;
  };
  auto pack = [&](int64_t K, int64_t N, uint64_t seed) {
    std::vector<float> w(static_cast<size_t>(K * N));
    for (size_t j = 0; j < w.size(); ++j) w[j] = static_cast<float>(random_normal(seed, 0, j));
    return simd::pack_matrix(k, w.data(), K, N, N);
  };
  std::vector<Layer> layers;
  for (int64_t l = 0; l < kLayers; ++l)
    layers.push_back({pack(kD, 3 * kD, 4 * l), pack(kD, kD, 4 * l + 1), pack(kD, 2 * kFf, 4 * l + 2), pack(kFf, kD, 4 * l + 3)});
  // Each session's cache as the fast path lays it out: keys [layer][cap / 16][kv_dim][16], values
  // [layer][cap / 16][heads][16][head_dim].
  const int64_t layer_floats = 2 * kCap * kD;
  std::vector<float> cache(static_cast<size_t>(kSessions * kLayers * layer_floats));
  for (size_t i = 0; i < cache.size(); ++i) cache[i] = static_cast<float>(random_normal(77, 0, i));
  std::vector<float> x(kSessions * kD), qkv(kSessions * 3 * kD), att(kSessions * kD), o(kSessions * kD),
      gu(kSessions * 2 * kFf), h(kSessions * kFf);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(random_normal(78, 0, i));
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>(random_normal(79, 0, i));
  const int64_t scratch_floats = k.attention_queries_scratch(1, kKeys, kHd);
  std::vector<std::vector<float>> scratch(2, std::vector<float>(static_cast<size_t>(scratch_floats)));
  const float scale = 1.0f / 8.0f;

  auto attention = [&](int64_t s0, int64_t s1, int64_t h0, int64_t h1, int64_t l, float* sc) {
    for (int64_t s = s0; s < s1; ++s) {
      const float* kt = cache.data() + (s * kLayers + l) * layer_floats;
      const float* v = kt + kCap * kD;
      for (int64_t hh = h0; hh < h1; ++hh)
        k.attention_queries(qkv.data() + s * 3 * kD + hh * kHd, 3 * kD, &kKeys, 1, kt + hh * kHd * simd::kKeysPerBlock,
                            simd::key_block_stride(kD), v + hh * kHd * simd::kKeysPerBlock, kHd,
                            simd::key_block_stride(kD), static_cast<int32_t>(kHd), scale,
                            att.data() + s * kD + hh * kHd, kD, sc);
    }
  };
  auto half = [](const simd::PackedMatrix& b, int t) {
    const int64_t mid = b.panels / 2;
    return t == 0 ? std::pair<int64_t, int64_t>{0, mid} : std::pair<int64_t, int64_t>{mid, b.panels};
  };
  SpinBarrier barrier;
  // One step on thread t.
  auto step = [&](int t) {
    float* sc = scratch[static_cast<size_t>(t)].data();
    for (int64_t l = 0; l < kLayers; ++l) {
      const Layer& w = layers[static_cast<size_t>(l)];
      if (!split) {
        const int64_t r0 = t * kSessions / 2, R = kSessions / 2;
        k.matmul(x.data() + r0 * kD, kD, R, w.qkv, 0, w.qkv.panels, qkv.data() + r0 * 3 * kD, 3 * kD);
        attention(r0, r0 + R, 0, kHeads, l, sc);
        k.matmul(att.data() + r0 * kD, kD, R, w.wo, 0, w.wo.panels, o.data() + r0 * kD, kD);
        k.matmul(x.data() + r0 * kD, kD, R, w.gate_up, 0, w.gate_up.panels, gu.data() + r0 * 2 * kFf, 2 * kFf);
        k.matmul(h.data() + r0 * kFf, kFf, R, w.down, 0, w.down.panels, o.data() + r0 * kD, kD);
      } else {
        auto [a0, a1] = half(w.qkv, t);
        k.matmul(x.data(), kD, kSessions, w.qkv, a0, a1, qkv.data(), 3 * kD);
        barrier.wait();
        attention(0, kSessions, t * kHeads / 2, (t + 1) * kHeads / 2, l, sc);
        barrier.wait();
        std::tie(a0, a1) = half(w.wo, t);
        k.matmul(att.data(), kD, kSessions, w.wo, a0, a1, o.data(), kD);
        barrier.wait();
        std::tie(a0, a1) = half(w.gate_up, t);
        k.matmul(x.data(), kD, kSessions, w.gate_up, a0, a1, gu.data(), 2 * kFf);
        barrier.wait();
        std::tie(a0, a1) = half(w.down, t);
        k.matmul(h.data(), kFf, kSessions, w.down, a0, a1, o.data(), kD);
        barrier.wait();
      }
    }
  };
  std::atomic<int64_t> go{0}, done{0};
  std::atomic<bool> quit{false};
  std::thread helper([&] {
    for (int64_t seen = 0;;) {
      while (go.load(std::memory_order_acquire) == seen && !quit.load(std::memory_order_acquire)) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
      }
      if (quit.load()) return;
      ++seen;
      step(1);
      done.fetch_add(1, std::memory_order_release);
    }
  });
  int64_t steps = 0;
  for (auto _ : state) {
    go.fetch_add(1, std::memory_order_release);
    step(0);
    ++steps;
    while (done.load(std::memory_order_acquire) != steps) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
  }
  quit.store(true);
  helper.join();
  benchmark::DoNotOptimize(o.data());
  state.counters["tokens"] = benchmark::Counter(static_cast<double>(kSessions), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(split ? "split along outputs, 2 threads" : "lanes, 2 threads");
}
BENCHMARK(BM_DecodeStepSplit)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace lockstep
