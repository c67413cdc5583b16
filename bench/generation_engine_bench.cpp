// The HTTP API's continuous batching without the network: `clients` generations of s256 (the
// model bench/http_bench.py serves: lockstep init --seed 1 --d-model 256 --n-layers 6
// --n-heads 8 --d-ff 768 --length 256), each 200 tokens from the prompt "The " at temperature
// 0.8, run by one GenerationEngine until all end; a new generation takes a finished one's place
// until the iteration's tokens are done, as the benchmark's clients do. Items per second are
// tokens per second over all generations, so the HTTP benchmark's figures divided by these are
// what the server's sockets, events and clients cost. Args: {clients, threads (0: one per core)}.
#include <benchmark/benchmark.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "lockstep/config.hpp"
#include "lockstep/generator.hpp"
#include "lockstep/model.hpp"
#include "serve/generation_engine.hpp"
#include "serve/metrics.hpp"

namespace lockstep {
namespace {

void BM_GenerationEngine(benchmark::State& state) {
  ModelConfig c;
  c.vocab_size = 256;
  c.length = 256;
  c.d_model = 256;
  c.n_layers = 6;
  c.n_heads = 8;
  c.n_kv_heads = 8;
  c.d_ff = 768;
  ModelOptions options;
  options.threads = static_cast<int>(state.range(1));
  const auto model = Model::from_parameters(c, init_parameters(c, 1), options);
  const int clients = static_cast<int>(state.range(0));
  constexpr int32_t kTokens = 200;
  const std::vector<int32_t> prompt{'T', 'h', 'e', ' '};
  serve::Metrics metrics;
  serve::GenerationEngine engine(64, 64, {}, metrics);
  std::mutex mutex;
  std::condition_variable cv;
  uint64_t seed = 0;
  int64_t tokens = 0;
  for (auto _ : state) {
    // clients generations in flight; 4 * clients in all per iteration.
    int started = 0, done = 0;
    const int total = 4 * clients;
    std::function<void()> start_one = [&] {
      auto job = std::make_shared<serve::GenerationJob>();
      GenerateOptions g;
      g.sampling.temperature = 0.8f;
      g.sampling.seed = seed++;
      g.max_tokens = kTokens;
      job->generator = std::make_unique<Generator>(model, prompt, g);
      job->max_tokens = kTokens;
      job->on_token = [](int32_t, std::span<const float>) {};
      job->on_done = [&](serve::Finish, const std::string&) {
        std::lock_guard lock(mutex);
        ++done;
        if (started < total) {
          ++started;
          start_one();
        }
        cv.notify_all();
      };
      engine.submit(job);
    };
    {
      std::lock_guard lock(mutex);
      for (; started < clients; ++started) start_one();
    }
    std::unique_lock lock(mutex);
    cv.wait(lock, [&] { return done == total; });
    tokens += int64_t{total} * kTokens;
  }
  state.SetItemsProcessed(tokens);
}
BENCHMARK(BM_GenerationEngine)->ArgsProduct({{1, 8, 32}, {0}})->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace lockstep
