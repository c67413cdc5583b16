// The in-process side of bench/serve_bench.py: run_calls on the models the script serves, built
// from the same seed and dimensions as its `lockstep init`, so that the socket's cost is what the
// script's round trip adds to these times.
//
//   lockstep_bench --benchmark_filter=ServeInProcess
//
// Models: tiny (lockstep init --seed 1 --d-model 16 --n-layers 2 --n-heads 2 --d-ff 32
// --length 32) and s256 (--seed 1 --d-model 256 --n-layers 6 --n-heads 8 --d-ff 768
// --length 256). Layout: full window, logits only (serve --output logits). Arguments: calls per
// run_calls, then worker threads (serve --cpu-cores; 0: one per core); items per second is calls
// per second.
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <vector>

#include "lockstep/call.hpp"
#include "lockstep/model.hpp"

namespace {

lockstep::ModelConfig bench_config(bool s256) {
  lockstep::ModelConfig c;
  c.vocab_size = 256;
  c.length = s256 ? 256 : 32;
  c.d_model = s256 ? 256 : 16;
  c.n_layers = s256 ? 6 : 2;
  c.n_heads = s256 ? 8 : 2;
  c.n_kv_heads = c.n_heads;
  c.d_ff = s256 ? 768 : 32;
  return c;
}

void run_calls_bench(benchmark::State& state, bool s256) {
  const lockstep::ModelConfig config = bench_config(s256);
  lockstep::ModelOptions options;
  options.threads = static_cast<int>(state.range(1));
  const auto model = lockstep::Model::from_parameters(config, lockstep::init_parameters(config, 1), options);
  const lockstep::CallLayout layout(config, {"logits"}, false);
  const size_t n = static_cast<size_t>(state.range(0));
  std::vector<std::vector<uint8_t>> in(n, std::vector<uint8_t>(layout.input_bytes()));
  std::vector<std::vector<uint8_t>> out(n, std::vector<uint8_t>(layout.output_bytes()));
  for (size_t i = 0; i < n; ++i)
    for (size_t t = 0; t < static_cast<size_t>(config.length); ++t) {
      const int32_t id = static_cast<int32_t>((i * 31 + t * 7) % 256);
      std::memcpy(in[i].data() + 4 * t, &id, 4);
    }
  std::vector<std::span<const uint8_t>> ins(in.begin(), in.end());
  std::vector<std::span<uint8_t>> outs(out.begin(), out.end());
  lockstep::run_calls(*model, layout, ins, outs);  // the pool starts here, not in the timing
  for (auto _ : state) {
    const auto results = lockstep::run_calls(*model, layout, ins, outs);
    benchmark::DoNotOptimize(results.data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void BM_ServeInProcess_tiny(benchmark::State& state) { run_calls_bench(state, false); }
void BM_ServeInProcess_s256(benchmark::State& state) { run_calls_bench(state, true); }

}  // namespace

BENCHMARK(BM_ServeInProcess_tiny)->ArgsProduct({{1, 8}, {1, 0}})->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ServeInProcess_s256)->ArgsProduct({{1, 8}, {1, 0}})->UseRealTime()->Unit(benchmark::kMillisecond);
