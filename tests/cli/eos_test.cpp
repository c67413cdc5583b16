// End of sequence (model.json's eos_token_ids): the Generator and `lockstep generate` stop right
// after an end id (which `generate` does not print), go on with --ignore-eos / ignore_eos exactly
// as a model without end ids does, and an end id outside the vocabulary is refused at load.
#include <gtest/gtest.h>

#include <algorithm>

#include "lockstep/error.hpp"
#include "lockstep/format.hpp"
#include "lockstep/generator.hpp"
#include "lockstep/model.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

const std::string kBin = LOCKSTEP_BINARY;

std::string init_model(const test::TempDir& dir, const std::string& name, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv = {kBin, "init", "--seed", "9", "--d-model", "16", "--n-layers", "2", "--n-heads", "2",
                                   "--d-ff", "24", "--length", "24", "-o", dir / name};
  argv.insert(argv.end(), extra.begin(), extra.end());
  const auto r = test::run_command(argv);
  EXPECT_EQ(r.status, 0) << r.err;
  return dir / name;
}

// A copy of `model` (its configuration and weights) whose model.json names `ends`.
std::string with_ends(const test::TempDir& dir, const std::string& model, const std::string& name,
                      const std::vector<int32_t>& ends) {
  const auto m = Model::load(model);
  ModelMetadata meta;
  meta.eos_token_ids = ends;
  write_model_directory(dir / name, m->config(), m->parameters(), meta);
  return dir / name;
}

std::vector<int32_t> run_generator(std::shared_ptr<const Model> model, const std::vector<int32_t>& prompt,
                                   const GenerateOptions& options, StopReason* reason = nullptr) {
  std::vector<int32_t> out;
  const StopReason r = generate(std::move(model), prompt, options, [&](int32_t t) { out.push_back(t); });
  if (reason) *reason = r;
  return out;
}

// The first step whose token none before it is (at least `from`): an end id there ends the
// generation at that very step.
size_t first_new(const std::vector<int32_t>& tokens, size_t from) {
  for (size_t k = from; k < tokens.size(); ++k)
    if (std::find(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(k), tokens[k]) ==
        tokens.begin() + static_cast<std::ptrdiff_t>(k))
      return k;
  return tokens.size();
}

TEST(EndOfSequence, TheGeneratorStopsRightAfterAnEndIdUnlessIgnored) {
  test::TempDir dir;
  const std::string plain = init_model(dir, "plain");
  const std::vector<int32_t> prompt = {'x', 'y'};
  for (const float temperature : {0.0f, 1.0f}) {
    GenerateOptions g;
    g.sampling = {temperature, 0, 1.0f, 5};
    g.max_tokens = 16;
    StopReason reason{};
    const std::vector<int32_t> today = run_generator(Model::load(plain), prompt, g, &reason);
    ASSERT_EQ(today.size(), 16u);
    EXPECT_EQ(reason, StopReason::max_tokens);
    const size_t k = first_new(today, 3);
    ASSERT_LT(k, today.size()) << "the continuation repeats itself from step 3 on";
    int32_t absent = 0;  // an id the generation never gives, listed first
    while (std::find(today.begin(), today.end(), absent) != today.end()) ++absent;
    const auto ended =
        Model::load(with_ends(dir, plain, "ends" + std::to_string(static_cast<int>(temperature)), {absent, today[k]}));
    ASSERT_EQ(ended->eos_token_ids().size(), 2u);
    // Stops right after the end id, which it gives out; the tokens before are today's.
    const std::vector<int32_t> want(today.begin(), today.begin() + static_cast<std::ptrdiff_t>(k + 1));
    EXPECT_EQ(run_generator(ended, prompt, g, &reason), want) << "temperature " << temperature;
    EXPECT_EQ(reason, StopReason::eos);
    Generator step_by_step(ended, prompt, g);
    for (size_t i = 0; i <= k; ++i) {
      ASSERT_EQ(step_by_step.next(), std::optional<int32_t>(today[i]));
      EXPECT_EQ(step_by_step.end_of_sequence(), i == k);
    }
    EXPECT_EQ(step_by_step.next(), std::nullopt);
    EXPECT_EQ(step_by_step.generated(), static_cast<int32_t>(k + 1));
    // ignore_eos: today's tokens, bit for bit, to max_tokens.
    g.ignore_eos = true;
    EXPECT_EQ(run_generator(ended, prompt, g, &reason), today);
    EXPECT_EQ(reason, StopReason::max_tokens);
  }
}

TEST(EndOfSequence, GenerateStopsWithoutPrintingTheEndIdAndIgnoreEosGoesOn) {
  test::TempDir dir;
  const std::string plain = init_model(dir, "plain");
  const auto today = test::run_command({kBin, "generate", plain, "--prompt", "xy", "-n", "16"});
  ASSERT_EQ(today.status, 0) << today.err;
  ASSERT_EQ(today.out.size(), 2u + 16u + 1u);
  const std::string generated = today.out.substr(2, 16);
  std::vector<int32_t> bytes;
  for (unsigned char c : generated) bytes.push_back(c);
  const size_t k = first_new(bytes, 3);
  ASSERT_LT(k, bytes.size());
  const std::string ended = with_ends(dir, plain, "ended", {bytes[k]});
  auto r = test::run_command({kBin, "generate", ended, "--prompt", "xy", "-n", "16"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "xy" + generated.substr(0, k) + "\n") << "the end byte is not printed";
  r = test::run_command({kBin, "generate", ended, "--prompt", "xy", "-n", "16", "--ignore-eos"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, today.out);
  // The model without end ids: as before, with or without the flag.
  r = test::run_command({kBin, "generate", plain, "--prompt", "xy", "-n", "16", "--ignore-eos"});
  EXPECT_EQ(r.out, today.out);
  const auto help = test::run_command({kBin, "generate", "--help"});
  EXPECT_NE(help.out.find("--ignore-eos"), std::string::npos) << help.out;
}

TEST(EndOfSequence, GenerateWithTokenIdsPrintsNothingForTheEndId) {
  test::TempDir dir;
  const std::string plain = init_model(dir, "plain", {"--vocab-size", "300"});
  const auto today = test::run_command({kBin, "generate", plain, "--prompt-ids", "7,290", "-n", "10"});
  ASSERT_EQ(today.status, 0) << today.err;
  std::vector<int32_t> ids;
  {
    size_t at = 0;
    const std::string line = today.out.substr(0, today.out.size() - 1);
    while (at <= line.size()) {
      const size_t comma = std::min(line.find(',', at), line.size());
      ids.push_back(std::stoi(line.substr(at, comma - at)));
      at = comma + 1;
    }
  }
  ASSERT_EQ(ids.size(), 12u) << today.out;
  const std::vector<int32_t> generated(ids.begin() + 2, ids.end());
  const size_t k = first_new(generated, 2);
  ASSERT_LT(k, generated.size());
  const std::string ended = with_ends(dir, plain, "ended", {generated[k]});
  std::string want = "7,290";
  for (size_t i = 0; i < k; ++i) (want += ',') += std::to_string(generated[i]);
  auto r = test::run_command({kBin, "generate", ended, "--prompt-ids", "7,290", "-n", "10"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, want + "\n");
  r = test::run_command({kBin, "generate", ended, "--prompt-ids", "7,290", "-n", "10", "--ignore-eos"});
  EXPECT_EQ(r.out, today.out);
}

TEST(EndOfSequence, AnEndIdOutsideTheVocabularyIsRefusedAtLoad) {
  test::TempDir dir;
  const std::string plain = init_model(dir, "plain");
  const std::string ended = with_ends(dir, plain, "ended", {10});
  const std::string json_path = ended + "/model.json";
  const std::string text = test::read_file(json_path);
  const size_t at = text.find("\"eos_token_ids\"");
  ASSERT_NE(at, std::string::npos) << text;
  for (const std::string& bad : {std::string("[\n    10,\n    256\n  ]"), std::string("[-1]"), std::string("10"),
                                 std::string("[\"10\"]"), std::string("[10, 10]")}) {
    std::string edited = text;
    const size_t open = edited.find('[', at), close = edited.find(']', at);
    edited.replace(open, close + 1 - open, bad);
    test::write_file(json_path, edited);
    try {
      Model::load(ended);
      ADD_FAILURE() << "loaded with eos_token_ids " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("eos_token_ids"), std::string::npos) << e.what();
    }
    const auto r = test::run_command({kBin, "generate", ended, "--prompt", "xy", "-n", "4"});
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("eos_token_ids"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
  test::write_file(json_path, text.substr(0, text.find('[', at)) + "[\n    256\n  ]" +
                                  text.substr(text.find(']', at) + 1));
  const auto r = test::run_command({kBin, "generate", ended, "--prompt", "xy", "-n", "4"});
  EXPECT_NE(r.err.find("eos_token_ids[0] = 256 is outside the vocabulary (ids 0 to 255"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace lockstep
