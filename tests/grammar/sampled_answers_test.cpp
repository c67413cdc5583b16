// Sampled structured answers validate against their schemas with an independent validator
// (validate_answers.py: Debian's python3-jsonschema): 100 answers per schema at temperature 1,
// seeds 1..100 (LOCKSTEP_SAMPLED_ANSWERS=1000 for a long run), for the shipped fortunes model (a byte model without end-of-sequence ids) and a
// random-weight byte-level BPE model with an end-of-sequence id (its tokenizer.json trained here
// by make_bpe_tokenizer.py). max_tokens is generous: an answer it cuts fails the test.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <cstdlib>
#include <sstream>

#include "format/json_text.hpp"
#include "lockstep/format.hpp"
#include "lockstep/generator.hpp"
#include "lockstep/grammar.hpp"
#include "lockstep/model.hpp"
#include "lockstep/tokenizer.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

const std::string kDir = std::string(LOCKSTEP_SOURCE_DIR) + "/tests/grammar/";

// Answers per schema: 100, or LOCKSTEP_SAMPLED_ANSWERS for a long run (1000: bench/README.md).
int seeds() {
  const char* v = std::getenv("LOCKSTEP_SAMPLED_ANSWERS");
  return v && std::atoi(v) > 0 ? std::atoi(v) : 100;
}

struct Subject {
  std::string name;
  std::shared_ptr<const Model> model;
  std::shared_ptr<const TokenVocabulary> vocabulary;
  const Tokenizer* tokenizer = nullptr;  // null: a byte model
  std::vector<int32_t> prompt;
};

// Answers of every schema for `s`, as JSON lines for validate_answers.py.
std::string answers(const Subject& s, const nlohmann::json& schemas) {
  std::string lines;
  for (const auto& entry : schemas) {
    GenerateOptions o;
    o.max_tokens = 1500;
    o.grammar = Grammar::from_json_schema(entry["schema"].dump());
    o.vocabulary = s.vocabulary;
    for (int seed = 1; seed <= seeds(); ++seed) {
      o.sampling = SamplingOptions{1.0f, 0, 1.0f, static_cast<uint64_t>(seed)};
      Generator g(s.model, s.prompt, o);
      std::vector<int32_t> ids;
      while (const auto t = g.next())
        if (!g.end_of_sequence()) ids.push_back(*t);
      std::string text;
      if (s.tokenizer) {
        text = s.tokenizer->decode(ids);
      } else {
        for (const int32_t id : ids) text.push_back(static_cast<char>(id));
      }
      const char* finish = g.stop_reason() == StopReason::max_tokens ? "length" : "stop";
      lines += nlohmann::json{{"model", s.name}, {"schema", entry["name"]}, {"seed", seed}, {"text", text}, {"finish", finish}}
                   .dump() + "\n";
    }
  }
  return lines;
}

void validate(const test::TempDir& dir, const std::string& lines) {
  test::write_file(dir / "answers.jsonl", lines);
  const auto r = test::run_command({LOCKSTEP_PYTHON, kDir + "validate_answers.py", kDir + "data/schemas.json", dir / "answers.jsonl"});
  std::cout << r.out;
  EXPECT_EQ(r.status, 0) << r.out << r.err;
}

TEST(SampledAnswers, FortunesModelAnswersValidate) {
  const nlohmann::json schemas = lockstep::format::parse_json(test::read_file(kDir + "data/schemas.json"));
  Subject s{"fortunes", Model::load(std::string(LOCKSTEP_SOURCE_DIR) + "/examples/models/fortunes"),
            TokenVocabulary::bytes(), nullptr, {'J', 'S', 'O', 'N', ':', ' '}};
  test::TempDir dir;
  validate(dir, answers(s, schemas));
}

TEST(SampledAnswers, RandomBpeModelAnswersValidate) {
  const nlohmann::json schemas = lockstep::format::parse_json(test::read_file(kDir + "data/schemas.json"));
  test::TempDir dir;
  const auto made = test::run_command({LOCKSTEP_PYTHON, kDir + "make_bpe_tokenizer.py", dir / "tokenizer.json"});
  ASSERT_EQ(made.status, 0) << made.err;
  int32_t vocab = 0, end = 0;
  std::istringstream(made.out) >> vocab >> end;
  const auto init = test::run_command({LOCKSTEP_BINARY, "init", "--seed", "5", "--vocab-size", std::to_string(vocab),
                                       "--d-model", "32", "--n-layers", "2", "--n-heads", "2", "--d-ff", "48",
                                       "--length", "256", "-o", dir / "plain"});
  ASSERT_EQ(init.status, 0) << init.err;
  const auto plain = Model::load(dir / "plain");
  ModelMetadata meta;
  meta.eos_token_ids = {end};
  write_model_directory(dir / "bpe", plain->config(), plain->parameters(), meta);
  const auto tokenizer = Tokenizer::hf_json(dir / "tokenizer.json");
  Subject s{"random-bpe", Model::load(dir / "bpe"), TokenVocabulary::from_tokenizer(*tokenizer, vocab), tokenizer.get(),
            tokenizer->encode("JSON: ", false)};
  validate(dir, answers(s, schemas));
}


// llama.cpp's json, arithmetic and list grammars (tests/grammar/data/llama_cpp/, unchanged): 30
// answers each from the fortunes model at temperature 1 parse with python3-lark and the grammar
// translated by hand (check_lark.py, lark/*.lark).
TEST(SampledAnswers, LlamaCppGrammarsTextParsesWithLark) {
  const auto model = Model::load(std::string(LOCKSTEP_SOURCE_DIR) + "/examples/models/fortunes");
  std::string lines;
  for (const char* name : {"json", "arithmetic", "list"}) {
    GenerateOptions o;
    o.max_tokens = 2000;
    o.grammar = Grammar::from_gbnf(test::read_file(kDir + "data/llama_cpp/" + name + ".gbnf"));
    o.vocabulary = TokenVocabulary::bytes();
    for (int seed = 1; seed <= 30; ++seed) {
      o.sampling = SamplingOptions{1.0f, 0, 1.0f, static_cast<uint64_t>(seed)};
      std::string text;
      const StopReason r = generate(model, std::vector<int32_t>{'\n'}, o, [&](int32_t t) { text.push_back(static_cast<char>(t)); });
      lines += nlohmann::json{{"grammar", name}, {"seed", seed}, {"text", text},
                              {"finish", r == StopReason::max_tokens ? "length" : "stop"}}.dump() + "\n";
    }
  }
  test::TempDir dir;
  test::write_file(dir / "answers.jsonl", lines);
  const auto r = test::run_command({LOCKSTEP_PYTHON, kDir + "check_lark.py", dir / "answers.jsonl"});
  std::cout << r.out;
  EXPECT_EQ(r.status, 0) << r.out << r.err;
}

}  // namespace
}  // namespace lockstep
