// Structured output's cost in decoding: BM_StructuredDecode/{model}/{schema} generates 64 tokens
// after an 8-token prompt at temperature 1 through Generator, without (schema 0) and with
// (schema 1) a JSON Schema whose answers are longer than 64 tokens (20 objects exactly), so both
// run the same number of steps. The ratio tokens/s with / without is the figure
// (bench/README.md, "Structured output"). Model 0: the shipped fortunes model (bytes); model 1:
// a SmolLM2-135M-shaped model (d_model 576, 30 layers, 9 heads, 3 key/value heads, d_ff 1536,
// vocabulary 49,152) with random weights and a made-up byte-level BPE-like vocabulary (the 256
// bytes, then letter runs with and without a leading space, digit runs and punctuation runs of 2
// to 8 bytes), so that the mask walks a trie of a real vocabulary's size and shape.
#include <benchmark/benchmark.h>

#include <set>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "lockstep/config.hpp"
#include "lockstep/generator.hpp"
#include "lockstep/grammar.hpp"
#include "lockstep/model.hpp"

namespace lockstep {
namespace {

constexpr const char* kSchema = R"({"type":"array","minItems":20,"maxItems":20,"items":{"type":"object",
  "properties":{"name":{"type":"string","maxLength":12},"id":{"type":"integer"},"ok":{"type":"boolean"}},
  "required":["name","id","ok"],"additionalProperties":false}})";

std::vector<std::string> bpe_like_vocabulary(size_t size) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (int b = 0; b < 256; ++b) {
    out.emplace_back(1, static_cast<char>(b));
    seen.insert(out.back());
  }
  const std::string letters = "etaoinshrdlucmfwypvbgkqjxz", digits = "0123456789", punct = "\",:{}[] .-_!?'";
  for (uint64_t i = 0; out.size() < size; ++i) {
    const uint64_t kind = random_below(10, 11, 0, i);
    const size_t len = 2 + random_below(7, 11, 1, i);
    std::string t = kind < 4 ? " " : "";
    const std::string& from = kind < 8 ? letters : kind < 9 ? digits : punct;
    while (t.size() < len) {
      // Letters skewed to the frequent ones, as text is.
      const uint64_t r = random_below(from.size() * from.size(), 11, 2 + t.size(), i);
      t += from[static_cast<size_t>(r / from.size() < from.size() / 2 ? r % (from.size() / 2 + 1) : r % from.size())];
    }
    if (seen.insert(t).second) out.push_back(t);
  }
  return out;
}

struct Subject {
  std::shared_ptr<const Model> model;
  std::shared_ptr<const TokenVocabulary> vocabulary;
};

const Subject& subject(int which) {
  static const Subject fortunes{Model::load(std::string(LOCKSTEP_SOURCE_DIR) + "/examples/models/fortunes"),
                                TokenVocabulary::bytes()};
  if (which == 0) return fortunes;
  static const Subject smol = [] {
    ModelConfig c;
    c.vocab_size = 49152;
    c.length = 256;
    c.d_model = 576;
    c.n_layers = 30;
    c.n_heads = 9;
    c.n_kv_heads = 3;
    c.d_ff = 1536;
    ModelOptions o;
    o.threads = 1;
    return Subject{Model::from_parameters(c, init_parameters(c, 1), o),
                   TokenVocabulary::from_bytes(bpe_like_vocabulary(49152))};
  }();
  return smol;
}

void BM_StructuredDecode(benchmark::State& state) {
  const Subject& s = subject(static_cast<int>(state.range(0)));
  GenerateOptions o;
  o.max_tokens = 64;
  if (state.range(1)) {
    o.grammar = Grammar::from_json_schema(kSchema);
    o.vocabulary = s.vocabulary;
  }
  const std::vector<int32_t> prompt = {'D', 'a', 't', 'a', ':', ' ', '\n', '\n'};
  uint64_t seed = 0, tokens = 0;
  for (auto _ : state) {
    o.sampling = SamplingOptions{1.0f, 0, 1.0f, ++seed};
    Generator g(s.model, prompt, o, CallOptions{Device::cpu, 1});
    while (g.next()) ++tokens;
  }
  state.counters["tokens"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_StructuredDecode)->Args({0, 0})->Args({0, 1})->Args({1, 0})->Args({1, 1})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace lockstep
