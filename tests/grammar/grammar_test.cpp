// The grammar engine (src/grammar/, lockstep/grammar.hpp): GBNF reading and its refusals, the
// byte matcher on text (UTF-8 classes, repetitions, negation), JSON Schema refusals, and the token
// mask against a token-by-token check over vocabularies whose tokens end mid-character.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

#include "lockstep/error.hpp"
#include "lockstep/grammar.hpp"

namespace lockstep {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Whether the grammar matches `text` in full.
bool matches(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  GrammarMatcher m(g, TokenVocabulary::bytes());
  return m.accept_bytes(text) && m.accepting();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Gbnf, ReadsRulesAlternativesGroupsAndRepetitions) {
  const auto g = Grammar::from_gbnf(R"(# a comment
root ::= item ("," item)* # another
item ::= [a-c]+ | "x"{2,3} | ("y" | "z")? "!"
)");
  EXPECT_TRUE(matches(g, "abc"));
  EXPECT_TRUE(matches(g, "a,xx,xxx,!,y!,z!"));
  EXPECT_FALSE(matches(g, "x"));
  EXPECT_FALSE(matches(g, "xxxx"));
  EXPECT_FALSE(matches(g, "a,"));
  EXPECT_FALSE(matches(g, "d"));
}

TEST(Gbnf, ClassesNegationEscapesAndUtf8) {
  const auto g = Grammar::from_gbnf(R"(root ::= "\"" [^"\\\x00-\x1f]* "\"" [\u00e9-\u00ea] "\t\x41\U0001F600" . [^a])");
  EXPECT_TRUE(matches(g, "\"h\xC3\xA9llo \xE2\x82\xAC\"\xC3\xA9\tA\xF0\x9F\x98\x80zb"));
  EXPECT_TRUE(matches(g, "\"\"\xC3\xAA\tA\xF0\x9F\x98\x80\xE4\xB8\xAD\xF0\x9F\x98\x80"));
  EXPECT_FALSE(matches(g, "\"\"\xC3\xAB\tA\xF0\x9F\x98\x80zb"));  // U+00EB is past the range
  EXPECT_FALSE(matches(g, "\"\"\xC3\xA9\tA\xF0\x9F\x98\x80za"));
  EXPECT_FALSE(matches(g, "\"\xC3\"\"\xC3\xA9\tA\xF0\x9F\x98\x80zb"));  // a lone lead byte is no character
  // A character split over two steps is matched byte by byte.
  GrammarMatcher m(Grammar::from_gbnf("root ::= [\\u0100-\\u07ff]"), TokenVocabulary::bytes());
  EXPECT_TRUE(m.accept_bytes("\xC4"));
  EXPECT_FALSE(m.accepting());
  EXPECT_TRUE(m.accept_bytes("\x80"));
  EXPECT_TRUE(m.accepting());
  EXPECT_FALSE(m.can_continue());
}

TEST(Gbnf, ErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of([] { Grammar::from_gbnf("root ::= \"a\"\nitem ::= [ab"); }),
            "grammar: line 2, column 10: unterminated character class: expected ']'");
  EXPECT_EQ(error_of([] { Grammar::from_gbnf("root ::= \"a\" )\n"); }),
            "grammar: line 1, column 14: expected the end of the line, found ')'");
  EXPECT_EQ(error_of([] { Grammar::from_gbnf("root := \"a\"\n"); }),
            "grammar: line 1, column 6: expected '::=' after the rule name 'root'");
  EXPECT_EQ(error_of([] { Grammar::from_gbnf("root ::= \"\\q\"\n"); }),
            "grammar: line 1, column 11: unknown escape '\\q'");
  EXPECT_EQ(error_of([] { Grammar::from_gbnf("root ::= item\n"); }),
            "grammar: the grammar uses rule 'item' but never defines it");
  EXPECT_EQ(error_of([] { Grammar::from_gbnf("root ::= root \"a\" | \"b\"\n"); }),
            "grammar: the grammar's rule 'root' is left-recursive (it can reach itself without matching a byte, "
            "through 'root')");
  EXPECT_EQ(error_of([] { Grammar::from_gbnf("root ::= [^\\x00-\\U0010FFFF]\n"); }),
            "grammar: the grammar's rule 'root' can match no text at all");
  EXPECT_EQ(error_of([] { Grammar::from_gbnf("item ::= \"a\"\n"); }), "grammar: the grammar has no rule 'root' to start from");
  EXPECT_EQ(error_of([] { Grammar::from_gbnf("root ::= \"a\"{2000}\n"); }),
            "grammar: line 1, column 14: a repetition count above 1000 is not supported");
  EXPECT_EQ(error_of([] { Grammar::from_gbnf("root ::= \"a\"\nroot ::= \"b\"\n"); }),
            "grammar: line 2, column 1: the rule 'root' is defined twice");
}

TEST(Gbnf, LlamaCppGrammarsParse) {
  const std::string dir = std::string(LOCKSTEP_SOURCE_DIR) + "/tests/grammar/data/llama_cpp/";
  const auto json = Grammar::from_gbnf(read_text(dir + "json.gbnf"));
  EXPECT_TRUE(matches(json, "{\"a\": [1, -2.5e3, \"x\\u00e9\", true, null], \"b\": {}}"));
  EXPECT_FALSE(matches(json, "{\"a\": }"));
  const auto arithmetic = Grammar::from_gbnf(read_text(dir + "arithmetic.gbnf"));
  EXPECT_TRUE(matches(arithmetic, "(a +2) *b3 = x\n"));
  EXPECT_TRUE(matches(arithmetic, "1+2=3\n"));
  const auto list = Grammar::from_gbnf(read_text(dir + "list.gbnf"));
  EXPECT_TRUE(matches(list, "- one\n- two \xC3\xA9\n"));
  EXPECT_FALSE(matches(list, "- one\xC2\x85\n"));  // U+0085 is excluded
}

TEST(JsonSchema, ObjectsArraysEnumsAndOptionalFields) {
  const auto g = Grammar::from_json_schema(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "maxLength": 3},
      "kind": {"enum": ["a", "b\"c", 3]},
      "tags": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2},
      "note": {"type": ["string", "null"]}
    },
    "required": ["name", "kind"],
    "additionalProperties": false
  })");
  EXPECT_TRUE(matches(g, R"({"name": "ab","kind": "a"})"));
  EXPECT_TRUE(matches(g, R"({"name":"","kind":3,"tags":[1, -20],"note":null})"));
  EXPECT_TRUE(matches(g, R"({"name":"x","kind":"b\"c","note":"hi"})"));
  EXPECT_FALSE(matches(g, R"({"name":"abcd","kind":"a"})"));
  EXPECT_FALSE(matches(g, R"({"kind":"a"})"));
  EXPECT_FALSE(matches(g, R"({"name":"a","kind":"a","tags":[]})"));
  EXPECT_FALSE(matches(g, R"({"name":"a","kind":"a","tags":[1,2,3]})"));
  EXPECT_FALSE(matches(g, R"({"name":"a","kind":"a","tags":[1.5]})"));
}

TEST(JsonSchema, RefsFormatsAndAnyOf) {
  const auto g = Grammar::from_json_schema(R"({
    "$defs": {"node": {"type": "object", "properties": {"v": {"type": "number"},
              "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}, "required": ["v", "next"]}},
    "type": "object",
    "properties": {"head": {"$ref": "#/$defs/node"}, "when": {"type": "string", "format": "date-time"},
                   "id": {"type": "string", "format": "uuid"}},
    "required": ["head"]
  })");
  EXPECT_TRUE(matches(g, R"({"head":{"v":1e5,"next":{"v":-0.25,"next":null}}})"));
  EXPECT_TRUE(matches(g, R"({"head":{"v":1,"next":null},"when":"2024-02-28T23:59:01.5+02:00"})"));
  EXPECT_TRUE(matches(g, R"({"head":{"v":1,"next":null},"id":"0123abcd-0000-4000-8000-00000000abcd"})"));
  EXPECT_FALSE(matches(g, R"({"head":{"v":1,"next":null},"when":"2024-02-30T23:59:01Z"})"));
  EXPECT_FALSE(matches(g, R"({"head":{"v":1,"next":null},"when":"0000-02-03T23:59:01Z"})"));  // no year 0
  EXPECT_TRUE(matches(g, R"({"head":{"v":1,"next":null},"when":"0001-02-03T23:59:01Z"})"));
  EXPECT_FALSE(matches(g, R"({"head":{"v":01,"next":null}})"));
}

TEST(JsonSchema, RefusesWhatItDoesNotSupportNamingIt) {
  EXPECT_EQ(error_of([] { Grammar::from_json_schema(R"({"type": "object", "properties": {"age": {"type": "integer", "minimum": 0}}})"); }),
            "schema: /properties/age: 'minimum' is not supported");
  EXPECT_EQ(error_of([] { Grammar::from_json_schema(R"({"type": "string", "format": "email"})"); }),
            "schema: /format: the string format 'email' is not supported (date, time, date-time, uuid are)");
  EXPECT_EQ(error_of([] { Grammar::from_json_schema(R"({"$ref": "#/$defs/missing"})"); }),
            "schema: /$ref: '$ref' names '#/$defs/missing', which the schema does not define");
  EXPECT_EQ(error_of([] { Grammar::from_json_schema(R"({"type": "strange"})"); }), "schema: /type: unknown type 'strange'");
  EXPECT_EQ(error_of([] { Grammar::from_json_schema(R"({"type": "array", "items": false, "minItems": 1})"); }),
            "schema: grammar: the grammar's rule 'root' can match no text at all");
  EXPECT_NE(error_of([] { Grammar::from_json_schema("{\"type\": "); }).find("schema: not valid JSON"), std::string::npos);
}

TEST(JsonObject, AnyObject) {
  const auto g = Grammar::json_object();
  EXPECT_TRUE(matches(g, R"({})"));
  EXPECT_TRUE(matches(g, R"({"a":[{"b":null}], "c": "\ud7ff"})"));
  EXPECT_FALSE(matches(g, R"([])"));
  EXPECT_FALSE(matches(g, R"({"a":"\ud800"})"));  // a lone surrogate escape is refused
}

// Random tokens of 1 to 4 bytes drawn from a small alphabet with multi-byte characters, so that
// tokens end inside characters; the mask must be exactly the tokens accept() takes.
TEST(TokenMask, EqualsTokenByTokenCheck) {
  const std::vector<std::string> pieces = {"{", "}", "\"", ":", ",", " ", "a", "1", "-", ".", "e", "[", "]",
                                           "\xC3", "\xA9", "\xE2\x82", "\xAC", "n", "u", "l", "\\", "t", "r"};
  std::mt19937 rng(7);
  std::vector<std::string> vocab;
  vocab.push_back("");  // a control token
  for (int i = 0; i < 600; ++i) {
    std::string t;
    const int len = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < len; ++k) t += pieces[rng() % pieces.size()];
    vocab.push_back(t);
  }
  for (const auto& p : pieces) vocab.push_back(p);
  const auto v = TokenVocabulary::from_bytes(vocab);
  const auto g = Grammar::from_json_schema(R"({"type":"object","properties":{"a":{"type":"string"},
      "b":{"type":"array","items":{"type":"number"}}},"required":["a"]})");
  for (int walk = 0; walk < 20; ++walk) {
    GrammarMatcher m(g, v);
    for (int step = 0; step < 40; ++step) {
      const std::span<const uint64_t> mask = m.allowed_tokens();
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < v->size(); ++id) {
        const bool bit = (mask[static_cast<size_t>(id) / 64] >> (id % 64)) & 1;
        ASSERT_EQ(bit, m.allowed(id)) << "token " << id << " '" << vocab[static_cast<size_t>(id)] << "' step " << step;
        if (bit) allowed.push_back(id);
      }
      if (allowed.empty()) break;
      ASSERT_TRUE(m.accept(allowed[rng() % allowed.size()]));
    }
  }
}


// A branch that can never finish is no branch: its first byte is not allowed.
TEST(Gbnf, DeadEndsAreNotAllowed) {
  GrammarMatcher m(Grammar::from_gbnf("root ::= \"a\" never | \"b\" \"c\"?\nnever ::= [^\\x00-\\U0010FFFF] | \"x\" never\n"),
                   TokenVocabulary::bytes());
  EXPECT_FALSE(m.allowed('a'));
  EXPECT_TRUE(m.allowed('b'));
  const auto g = Grammar::from_json_schema(R"({"anyOf": [{"type": "array", "items": false, "minItems": 1}, {"type": "null"}]})");
  GrammarMatcher n(g, TokenVocabulary::bytes());
  EXPECT_FALSE(n.allowed('['));
  EXPECT_TRUE(n.allowed('n'));
}


TEST(JsonSchema, PatternSubset) {
  const auto g = Grammar::from_json_schema(R"({"type": "string", "pattern": "^[A-Z]{2}-\\d{3}(x|yz)?$"})");
  EXPECT_TRUE(matches(g, R"("AB-123")"));
  EXPECT_TRUE(matches(g, R"("QZ-000yz")"));
  EXPECT_FALSE(matches(g, R"("AB-12")"));
  EXPECT_FALSE(matches(g, R"("ab-123")"));
  // Characters JSON escapes are written escaped; an unanchored pattern may have anything around it.
  const auto q = Grammar::from_json_schema(R"({"type": "string", "pattern": "[\"\\\\]\\t"})");
  EXPECT_TRUE(matches(q, R"("ab\"\u0009cd")"));
  EXPECT_TRUE(matches(q, R"("\\\u0009")"));
  EXPECT_FALSE(matches(q, R"("ab")"));
  // A negated class with \d leaves out non-ASCII characters (Python's \d takes U+0665, ECMAScript's not).
  const auto n = Grammar::from_json_schema(R"({"type": "string", "pattern": "^[^a-z\\d]$"})");
  EXPECT_TRUE(matches(n, R"("Q")"));
  EXPECT_FALSE(matches(n, "\"\xD9\xA5\""));
  EXPECT_FALSE(matches(n, R"("7")"));
  EXPECT_EQ(error_of([] { Grammar::from_json_schema(R"({"type": "string", "pattern": "^(a)\\1$"})"); }),
            "schema: /pattern: 'pattern' the escape '\\1' at character 5 is not supported");
  EXPECT_EQ(error_of([] { Grammar::from_json_schema(R"({"type": "string", "pattern": "^(?=a)$"})"); }),
            "schema: /pattern: 'pattern' a group other than (...) and (?:...) at character 3 is not supported");
  EXPECT_EQ(error_of([] { Grammar::from_json_schema(R"({"type": "string", "pattern": "a+?"})"); }),
            "schema: /pattern: 'pattern' a lazy or possessive quantifier at character 3 is not supported");
}

// The fuzzer's find: a rule that may match nothing, repeated inside itself, holds exponentially
// many parses of "qqq...". Each step expands every (position, parent) once (before, equal paths
// through the empty alternatives were walked one by one: one input ran for minutes), and a state
// of more than ByteAutomaton::kMaxStacks parses is refused, naming why, instead of growing on.
TEST(Gbnf, AGrammarTooAmbiguousIsRefusedWhenItGetsThere) {
  const auto g = Grammar::from_gbnf("root ::= [a-z] root{3,3} (\"x\" [0-9]*)? | # nothing\n");
  GrammarMatcher m(g, TokenVocabulary::bytes());
  std::string refused;
  int taken = 0;
  try {
    for (; taken < 300; ++taken) {
      ASSERT_TRUE(m.accept_bytes("q"));
      m.allowed_tokens();
    }
  } catch (const Error& e) {
    refused = e.what();
  }
  EXPECT_GT(taken, 3);
  EXPECT_NE(refused.find("parses of the text so far at once: the grammar is too ambiguous"), std::string::npos)
      << "taken " << taken << ": " << refused;
  // An unambiguous grammar of the same shape goes on as long as asked.
  GrammarMatcher fine(Grammar::from_gbnf("root ::= [a-z] root | \"x\"\n"), TokenVocabulary::bytes());
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(fine.accept_bytes("q"));
  EXPECT_TRUE(fine.accept_bytes("x"));
  EXPECT_TRUE(fine.accepting());
}

}  // namespace
}  // namespace lockstep
