// sample_token on one vocabulary of logits (vocab 256, a decoding step's): the candidates'
// sort, the weights' exp and the f64 sums, at temperature 0.8 alone and with top-p 0.9.
#include <benchmark/benchmark.h>

#include <vector>

#include "core/rng.hpp"
#include "lockstep/sampling.hpp"

namespace lockstep {
namespace {

void BM_SampleToken(benchmark::State& state) {
  std::vector<float> logits(256);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(3.0 * random_normal(7, 0, i));
  SamplingOptions o;
  o.temperature = 0.8f;
  o.top_p = state.range(0) ? 0.9f : 1.0f;
  int64_t step = 0;
  for (auto _ : state) benchmark::DoNotOptimize(sample_token(logits, o, step++));
  state.counters["tokens"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SampleToken)->Arg(0)->Arg(1);

}  // namespace
}  // namespace lockstep
