// Masked sampling (GenerateOptions::grammar): the Generator's draw is sample_token on the logits
// with every refused token at exactly -inf, computed here by hand from a Session and a
// GrammarMatcher, bit for bit (memcmp of the logits) and token for token, at several thread
// counts; stopping at the first whole match for a model without end-of-sequence ids; an
// unconstrained generation is untouched (the golden tests pin its text).
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "lockstep/error.hpp"
#include "lockstep/generator.hpp"
#include "lockstep/grammar.hpp"
#include "lockstep/model.hpp"
#include "lockstep/sampling.hpp"
#include "lockstep/session.hpp"

namespace lockstep {
namespace {

std::shared_ptr<const Model> fortunes() {
  static const auto model = Model::load(std::string(LOCKSTEP_SOURCE_DIR) + "/examples/models/fortunes");
  return model;
}

constexpr const char* kSchema = R"({"type":"object","properties":{"name":{"type":"string","maxLength":10},
  "n":{"type":"integer"},"ok":{"type":"boolean"}},"required":["name","n"],"additionalProperties":false})";

TEST(MaskedSampling, EqualsTheSamplerOnMaskedLogits) {
  const auto model = fortunes();
  const std::vector<int32_t> prompt = {'Q', ':', ' '};
  GenerateOptions o;
  o.sampling = SamplingOptions{1.0f, 0, 1.0f, 0};
  o.max_tokens = 100;
  o.grammar = Grammar::from_json_schema(kSchema);
  o.vocabulary = TokenVocabulary::bytes();
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    o.sampling.seed = seed;
    o.sampling.top_k = seed % 3 == 0 ? 5 : 0;
    o.sampling.top_p = seed % 2 == 0 ? 0.9f : 1.0f;
    // By hand: the session's logits, the matcher's mask, sample_token.
    Session session(model);
    GrammarMatcher matcher(o.grammar, o.vocabulary);
    std::vector<float> logits(256);
    session.append(prompt, logits.data());
    std::vector<int32_t> want;
    std::vector<std::vector<float>> want_logits;
    for (int32_t step = 0; step < o.max_tokens; ++step) {
      const auto allowed = matcher.allowed_tokens();
      for (size_t i = 0; i < logits.size(); ++i)
        if (!((allowed[i / 64] >> (i % 64)) & 1)) logits[i] = -std::numeric_limits<float>::infinity();
      const int32_t token = sample_token(logits, o.sampling, step);
      want.push_back(token);
      want_logits.push_back(logits);
      ASSERT_TRUE(matcher.accept(token));
      if (matcher.accepting()) break;  // fortunes has no end-of-sequence id: the first whole match ends it
      const int32_t one[1] = {token};
      session.append(one, logits.data());
    }
    ASSERT_TRUE(matcher.accepting()) << "seed " << seed << " did not finish in " << o.max_tokens << " tokens";
    for (const int threads : {1, 2, 3, 7}) {
      Generator g(model, prompt, o, CallOptions{std::nullopt, threads});
      std::vector<int32_t> got;
      while (const auto t = g.next()) {
        const size_t k = got.size();
        got.push_back(*t);
        ASSERT_LT(k, want_logits.size());
        ASSERT_EQ(0, std::memcmp(g.logits().data(), want_logits[k].data(), 256 * sizeof(float)))
            << "seed " << seed << " threads " << threads << " step " << k;
      }
      EXPECT_EQ(got, want) << "seed " << seed << " threads " << threads;
      EXPECT_EQ(g.stop_reason(), StopReason::grammar);
    }
  }
}

TEST(MaskedSampling, GreedyAnswerIsAWholeMatch) {
  GenerateOptions o;
  o.max_tokens = 200;
  o.grammar = Grammar::from_gbnf("root ::= \"fortune: \" [a-z ]{1,30} \".\"\n");
  o.vocabulary = TokenVocabulary::bytes();
  std::string text;
  const StopReason r = generate(fortunes(), std::vector<int32_t>{'A'}, o, [&](int32_t t) { text += static_cast<char>(t); });
  EXPECT_EQ(r, StopReason::grammar);
  EXPECT_EQ(text.rfind("fortune: ", 0), 0u) << text;
  EXPECT_EQ(text.back(), '.');
}

TEST(MaskedSampling, LengthBeforeTheEndSaysMaxTokens) {
  GenerateOptions o;
  o.max_tokens = 3;
  o.grammar = Grammar::from_json_schema(kSchema);
  o.vocabulary = TokenVocabulary::bytes();
  Generator g(fortunes(), std::vector<int32_t>{'A'}, o);
  while (g.next()) {
  }
  EXPECT_EQ(g.generated(), 3);
  EXPECT_EQ(g.stop_reason(), StopReason::max_tokens);
}

TEST(MaskedSampling, NoAllowedTokenIsAnErrorNotADraw) {
  // The vocabulary cannot spell "z": the only token bytes are "a".
  std::vector<std::string> bytes(256);
  bytes['a'].push_back('a');
  GenerateOptions o;
  o.grammar = Grammar::from_gbnf("root ::= \"a\" \"z\"\n");
  o.vocabulary = TokenVocabulary::from_bytes(bytes);
  Generator g(fortunes(), std::vector<int32_t>{'A'}, o);
  EXPECT_EQ(g.next(), std::optional<int32_t>('a'));
  try {
    g.next();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the grammar allows no token here (after 1 generated tokens)"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(g.done());
  EXPECT_FALSE(g.next());
}

TEST(MaskedSampling, RefusesAVocabularyOfAnotherSize) {
  GenerateOptions o;
  o.grammar = Grammar::json_object();
  o.vocabulary = TokenVocabulary::bytes(100);
  EXPECT_THROW(Generator(fortunes(), std::vector<int32_t>{'A'}, o), Error);
}

}  // namespace
}  // namespace lockstep
