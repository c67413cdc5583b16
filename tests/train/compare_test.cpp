// compare_models and `lockstep eval MODEL --against BASE`: a model against itself (KL exactly 0,
// top-1 100%), against a perturbed copy (every figure recomputed here directly from Model::logits
// over the same windows), llama-perplexity's chunks, and the refusals.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "format/json_text.hpp"
#include "lockstep/format.hpp"
#include "lockstep/tokenizer.hpp"
#include "lockstep/training_run.hpp"
#include "support/test_util.hpp"
#include "train/train_support.hpp"

namespace lockstep {
namespace {

const std::string kBin = LOCKSTEP_BINARY;

bool has(const std::string& text, const std::string& want) { return text.find(want) != std::string::npos; }

ModelConfig small_config(int32_t vocab = 256) {
  ModelConfig c = test::tiny_config(16);
  c.vocab_size = vocab;
  return c;
}

// The parameters with each value moved by up to `scale` of itself (deterministic).
std::vector<float> perturbed(std::vector<float> params, float scale) {
  for (size_t i = 0; i < params.size(); ++i) {
    const float u = static_cast<float>(static_cast<int64_t>(i * 2654435761u % 2001u) - 1000) / 1000.0f;
    params[i] = params[i] * (1.0f + scale * u);
  }
  return params;
}

// A small random model and a copy with its parameters moved by up to 20%.
std::pair<std::shared_ptr<const Model>, std::shared_ptr<const Model>> base_and_perturbed() {
  const ModelConfig c = small_config();
  const auto params = init_parameters(c, 3);
  return {Model::from_parameters(c, params), Model::from_parameters(c, perturbed(params, 0.2f))};
}

std::vector<int32_t> text_ids(int64_t n, uint64_t seed) {
  const std::string text = test::text_data(n, seed);
  return std::vector<int32_t>(text.begin(), text.end());
}

// The figures computed the plain way: each window's logits from Model::logits, each position's
// distributions in long double.
struct Direct {
  long double kl = 0, base_nll = 0, other_nll = 0, max_kl = 0;
  int64_t agree = 0, count = 0;
};
void add_window(const Model& base, const Model& other, const std::vector<int32_t>& ids, int64_t begin, int64_t count,
                int64_t first, Direct& d) {
  const int64_t V = base.config().vocab_size;
  const IdsView view{ids.data() + begin, 1, count - 1};
  const std::vector<float> p = base.logits(view), q = other.logits(view);
  for (int64_t t = first; t < count - 1; ++t) {
    auto log_softmax = [&](const std::vector<float>& l) {
      const float* row = l.data() + t * V;
      long double max = *std::max_element(row, row + V), sum = 0;
      for (int64_t i = 0; i < V; ++i) sum += std::exp(static_cast<long double>(row[i]) - max);
      std::vector<long double> out(static_cast<size_t>(V));
      for (int64_t i = 0; i < V; ++i) out[static_cast<size_t>(i)] = row[i] - max - std::log(sum);
      return out;
    };
    const auto lp = log_softmax(p), lq = log_softmax(q);
    long double kl = 0;
    for (int64_t i = 0; i < V; ++i) kl += std::exp(lp[static_cast<size_t>(i)]) * (lp[static_cast<size_t>(i)] - lq[static_cast<size_t>(i)]);
    d.kl += kl;
    d.max_kl = std::max(d.max_kl, kl);
    const size_t target = static_cast<size_t>(ids[static_cast<size_t>(begin + t + 1)]);
    d.base_nll -= lp[target];
    d.other_nll -= lq[target];
    const auto argmax = [&](const std::vector<long double>& v) { return std::max_element(v.begin(), v.end()) - v.begin(); };
    d.agree += argmax(lp) == argmax(lq) ? 1 : 0;
    ++d.count;
  }
}

TEST(CompareModels, AModelAgainstItselfHasNoDivergence) {
  const ModelConfig c = small_config();
  const auto model = Model::from_parameters(c, init_parameters(c, 3));
  const auto ids = text_ids(301, 1);
  const ModelComparison r = compare_models(*model, *model, ids);
  EXPECT_EQ(r.predictions, 300);
  EXPECT_EQ(r.windows, 19);  // 300 / 16 rounded up
  EXPECT_EQ(r.window_tokens, 17);
  EXPECT_EQ(r.kl_mean, 0.0);
  EXPECT_EQ(r.kl_max, 0.0);
  EXPECT_EQ(r.kl_min, 0.0);
  EXPECT_EQ(r.top1_agreement, 1.0);
  EXPECT_EQ(r.base_nll, r.other_nll);
  EXPECT_EQ(r.rms_dp, 0.0);
  EXPECT_GT(r.base_nll, 0.0);
}

TEST(CompareModels, APerturbedCopyMatchesADirectComputation) {
  const auto [base, other] = base_and_perturbed();
  const auto ids = text_ids(301, 1);
  int64_t progress_done = 0;
  const ModelComparison r =
      compare_models(*base, *other, ids, {}, [&](int64_t done, int64_t total) {
        EXPECT_EQ(total, 300);
        progress_done = done;
      });
  EXPECT_EQ(progress_done, 300);
  Direct d;
  for (int64_t begin = 0; begin + 1 < 301; begin += 16)
    add_window(*base, *other, ids, begin, std::min<int64_t>(17, 301 - begin), 0, d);
  ASSERT_EQ(d.count, r.predictions);
  const double n = static_cast<double>(d.count);
  EXPECT_GT(r.kl_mean, 1e-6);
  EXPECT_NEAR(r.kl_mean, static_cast<double>(d.kl) / n, 1e-12);
  EXPECT_NEAR(r.kl_max, static_cast<double>(d.max_kl), 1e-12);
  EXPECT_NEAR(r.base_nll, static_cast<double>(d.base_nll) / n, 1e-12);
  EXPECT_NEAR(r.other_nll, static_cast<double>(d.other_nll) / n, 1e-12);
  EXPECT_EQ(r.top1_agreement, static_cast<double>(d.agree) / n);
  EXPECT_LT(r.top1_agreement, 1.0);
  EXPECT_GT(r.kl_error, 0.0);
  EXPECT_LE(r.kl_min, r.kl_median);
  EXPECT_LE(r.kl_median, r.kl_p99);
  EXPECT_LE(r.kl_p99, r.kl_p999);
  EXPECT_LE(r.kl_p999, r.kl_max);
}

TEST(CompareModels, SecondHalfWindowsAreLlamaPerplexityChunks) {
  const auto [base, other] = base_and_perturbed();
  const auto ids = text_ids(100, 2);
  ComparisonOptions o;
  o.windows = ComparisonWindows::second_half;
  o.context = 12;  // 8 chunks of 12 (4 ids left over), positions 6..10 scored
  const ModelComparison r = compare_models(*base, *other, ids, o);
  EXPECT_EQ(r.windows, 8);
  EXPECT_EQ(r.predictions, 8 * 5);
  EXPECT_EQ(r.first_scored, 6);
  Direct d;
  for (int64_t w = 0; w < 8; ++w) add_window(*base, *other, ids, w * 12, 12, 6, d);
  EXPECT_NEAR(r.kl_mean, static_cast<double>(d.kl) / 40.0, 1e-12);
  EXPECT_NEAR(r.other_nll, static_cast<double>(d.other_nll) / 40.0, 1e-12);
  o.context = 17;
  EXPECT_THROW(
      {
        try {
          compare_models(*base, *other, ids, o);
        } catch (const Error& e) {
          EXPECT_TRUE(has(e.what(), "context must be in [3, 16]")) << e.what();
          throw;
        }
      },
      Error);
}

TEST(CompareModels, RefusesDifferentVocabularies) {
  const auto base = Model::from_parameters(small_config(256), init_parameters(small_config(256), 1));
  const auto other = Model::from_parameters(small_config(300), init_parameters(small_config(300), 1));
  const auto ids = text_ids(40, 1);
  try {
    compare_models(*base, *other, ids);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "vocabularies differ: the base model has vocab_size 256, the model has 300")) << e.what();
  }
}

TEST(CliEvalAgainst, PrintsTheComparisonAndRefusesBadInput) {
  test::TempDir dir;
  const ModelConfig c = small_config();
  const auto params = init_parameters(c, 5);
  write_model_directory(dir / "base", c, params, {});
  write_model_directory(dir / "same", c, params, {});
  write_model_directory(dir / "moved", c, perturbed(params, 0.2f), {});
  write_model_directory(dir / "wide", small_config(300), init_parameters(small_config(300), 5), {});
  test::write_file(dir / "text.txt", test::text_data(500, 4));

  const auto same = test::run_command({kBin, "eval", dir / "same", "--against", dir / "base", "--data", dir / "text.txt"});
  ASSERT_EQ(same.status, 0) << same.err;
  for (const char* want : {"data       ", "500 tokens, 499 predictions in 32 windows of up to 17 tokens",
                           "arithmetic f64 from each model's f32 logits", "KL(base||model) mean       0 ± 0 nats\n",
                           "KL maximum                 0\n", "top-1 agreement            100.000 ± 0.000 %",
                           "ln(PPL(model)/PPL(base))   0 ± 0\n"})
    EXPECT_TRUE(has(same.out, want)) << want << "\n" << same.out;
  EXPECT_TRUE(has(same.out, "base       " + dir / "base\n")) << same.out;

  const auto moved = test::run_command({kBin, "eval", dir / "moved", "--against", dir / "base", "--data",
                                        dir / "text.txt", "--windows", "second-half", "--context", "12"});
  ASSERT_EQ(moved.status, 0) << moved.err;
  EXPECT_TRUE(has(moved.out, "41 windows of 12 tokens, positions 6 to 10 scored (llama-perplexity's chunks)")) << moved.out;
  EXPECT_FALSE(has(moved.out, "KL(base||model) mean       0 ± 0 nats\n")) << moved.out;

  struct Bad {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Bad> bad = {
      {{"eval", dir / "wide", "--against", dir / "base", "--data", dir / "text.txt"},
       "the models' vocabularies differ: the base model '" + dir / "base" + "' has vocab_size 256, the model '" +
           dir / "wide" + "' has 300"},
      {{"eval", dir / "same", "--against", dir / "missing", "--data", dir / "text.txt"}, dir / "missing"},
      {{"eval", dir / "same", "--against", dir / "base", "--data", dir / "missing.txt"}, dir / "missing.txt"},
      {{"eval", dir / "same", "--data", dir / "text.txt", "--windows", "second-half"},
       "--windows and --context apply to a comparison: give --against BASE"},
      {{"eval", dir / "same", "--against", dir / "base", "--data", dir / "text.txt", "--context", "8"},
       "--context applies to --windows second-half"},
      {{"eval", dir / "same", "--against", dir / "base", "--data", dir / "text.txt", "--windows", "second-half",
        "--context", "40"},
       "context must be in [3, 16]"},
  };
  for (const Bad& b : bad) {
    std::vector<std::string> argv = {kBin};
    argv.insert(argv.end(), b.args.begin(), b.args.end());
    const auto r = test::run_command(argv);
    EXPECT_NE(r.status, 0) << b.message;
    EXPECT_TRUE(has(r.err, b.message)) << b.message << "\n" << r.err;
    EXPECT_EQ(r.out, "") << b.message;
  }
}

// Gives the model directory `dir` the tokenizer.json at `tokenizer` (model.json's `tokenizer`).
void attach_tokenizer(const std::string& dir, const std::string& tokenizer) {
  std::filesystem::copy_file(tokenizer, dir + "/tokenizer.json");
  const auto sum = test::run_command({"sha256sum", dir + "/tokenizer.json"});
  ASSERT_EQ(sum.status, 0) << sum.err;
  nlohmann::json j = lockstep::format::parse_json(test::read_file(dir + "/model.json"));
  j["tokenizer"] = {{"type", "huggingface"}, {"file", "tokenizer.json"}, {"sha256", sum.out.substr(0, 64)}};
  test::write_file(dir + "/model.json", j.dump(2) + "\n");
}

TEST(CliEvalAgainst, TokenizersMustBeTheSame) {
  test::TempDir dir;
  const auto made = test::run_command(
      {LOCKSTEP_PYTHON, std::string(LOCKSTEP_SOURCE_DIR) + "/tests/grammar/make_bpe_tokenizer.py", dir / "tokenizer.json"});
  ASSERT_EQ(made.status, 0) << made.err;
  std::unique_ptr<Tokenizer> tokenizer;
  try {
    tokenizer = Tokenizer::hf_json(dir / "tokenizer.json");
  } catch (const Error& e) {
    GTEST_SKIP() << "this build reads no tokenizer.json: " << e.what();
  }
  int32_t vocab = 0;
  std::istringstream(made.out) >> vocab;
  const ModelConfig c = small_config(vocab);
  const auto params = init_parameters(c, 2);
  for (const char* name : {"base", "same", "plain"}) write_model_directory(dir / name, c, params, {});
  attach_tokenizer(dir / "base", dir / "tokenizer.json");
  attach_tokenizer(dir / "same", dir / "tokenizer.json");
  const std::string text = test::text_data(400, 9);
  test::write_file(dir / "text.txt", text);
  const size_t tokens = tokenizer->encode(text, false).size();

  // The same tokenizer: the text goes through it.
  const auto same = test::run_command({kBin, "eval", dir / "same", "--against", dir / "base", "--data", dir / "text.txt"});
  ASSERT_EQ(same.status, 0) << same.err;
  EXPECT_TRUE(has(same.out, std::to_string(tokens) + " tokens, " + std::to_string(tokens - 1) + " predictions"))
      << tokens << "\n" << same.out;
  EXPECT_TRUE(has(same.out, "KL(base||model) mean       0 ± 0 nats\n")) << same.out;
  // One without: refused, naming both.
  const auto r = test::run_command({kBin, "eval", dir / "plain", "--against", dir / "base", "--data", dir / "text.txt"});
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(has(r.err, "the models read text differently: the base model '" + dir / "base" +
                             "' has a huggingface tokenizer (tokenizer.json, sha256 "))
      << r.err;
  EXPECT_TRUE(has(r.err, "the model '" + dir / "plain" + "' has no tokenizer (its ids are bytes)")) << r.err;
}

// export-gguf --type q8_0 writes a matrix whose rows are not a multiple of 32 (w_down of d_ff 40)
// as F16: the imported int8dot model mixes blocks and floats, loads, and stays near its source.
TEST(CliEvalAgainst, AGgufOfBlocksAndFloatsLoadsAndCompares) {
  test::TempDir dir;
  auto ok = [](const test::CommandResult& r) { return r.status == 0 ? std::string() : r.err; };
  EXPECT_EQ(ok(test::run_command({kBin, "init", "--seed", "5", "--d-model", "32", "--n-layers", "1", "--n-heads", "2",
                                  "--d-ff", "40", "--length", "16", "-o", dir / "f32"})),
            "");
  EXPECT_EQ(ok(test::run_command({kBin, "export-gguf", dir / "f32", "-o", dir / "m.gguf", "--type", "q8_0"})), "");
  const auto imported = test::run_command({kBin, "import", "gguf", dir / "m.gguf", "-o", dir / "q8", "--ids-only"});
  ASSERT_EQ(imported.status, 0) << imported.err;
  EXPECT_TRUE(has(imported.out, "(Q8_0, F32, F16;")) << imported.out;
  test::write_file(dir / "text.txt", test::text_data(300, 3));
  const auto r = test::run_command({kBin, "eval", dir / "q8", "--against", dir / "f32", "--data", dir / "text.txt"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "299 predictions")) << r.out;
  EXPECT_FALSE(has(r.out, "KL(base||model) mean       0 ± 0 nats\n")) << r.out;
}

}  // namespace
}  // namespace lockstep
