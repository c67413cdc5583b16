// sample_token on vocabularies of logits (vocab 256, a decoding step's): the candidates' sort,
// the weights' exp and the f64 sums, at temperature 0.8 alone and with top-p 0.9. The logits
// change from call to call (64 sets in turn), as a decode's do: on one set repeated, the branch
// predictor learns the sort's comparisons and std::sort looked four times faster than in a server.
#include <benchmark/benchmark.h>

#include <span>
#include <vector>

#include "core/rng.hpp"
#include "lockstep/sampling.hpp"

namespace lockstep {
namespace {

void BM_SampleToken(benchmark::State& state) {
  constexpr size_t kVocab = 256, kSets = 64;
  std::vector<float> logits(kVocab * kSets);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(3.0 * random_normal(7, 0, i));
  SamplingOptions o;
  o.temperature = 0.8f;
  o.top_p = state.range(0) ? 0.9f : 1.0f;
  int64_t step = 0;
  for (auto _ : state) {
    const std::span<const float> set(logits.data() + static_cast<size_t>(step) % kSets * kVocab, kVocab);
    benchmark::DoNotOptimize(sample_token(set, o, step++));
  }
  state.counters["tokens"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SampleToken)->Arg(0)->Arg(1);

}  // namespace
}  // namespace lockstep
