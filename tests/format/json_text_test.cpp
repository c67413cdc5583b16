// The nesting bound on outside JSON (format/json_text.hpp): brackets are counted outside strings
// only, the first one past the bound is named by its offset, and a document nested 100,000 deep
// is refused before nlohmann parses it (its copies and dump() would overflow the stack).
#include <gtest/gtest.h>

#include <string>

#include "format/json_text.hpp"
#include "lockstep/error.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

using format::json_too_deep_at;
using format::kMaxJsonDepth;
constexpr size_t npos = std::string::npos;

std::string nested(int depth, const std::string& inside = "") {
  std::string s;
  for (int i = 0; i < depth; ++i) s += i % 2 ? "{\"k\":" : "[";
  s += inside.empty() ? "1" : inside;
  for (int i = depth - 1; i >= 0; --i) s += i % 2 ? "}" : "]";
  return s;
}

TEST(JsonDepth, TheBoundItselfPassesAndOneMoreLevelIsNamed) {
  EXPECT_EQ(json_too_deep_at(nested(kMaxJsonDepth)), npos);
  const std::string deeper = nested(kMaxJsonDepth + 1);
  const size_t at = json_too_deep_at(deeper);
  ASSERT_NE(at, npos);
  EXPECT_TRUE(deeper[at] == '[' || deeper[at] == '{') << at;
  EXPECT_EQ(json_too_deep_at(deeper.substr(0, at)), npos);  // the first bracket past the bound
  EXPECT_EQ(json_too_deep_at("[[[]]]", 2), 2u);
  EXPECT_EQ(json_too_deep_at("[[],[],[]]", 2), npos);  // siblings do not add up
  EXPECT_EQ(json_too_deep_at(""), npos);
  EXPECT_EQ(json_too_deep_at("]]]]"), npos);  // not JSON: the parser refuses it
}

TEST(JsonDepth, BracketsInsideStringsDoNotCount) {
  EXPECT_EQ(json_too_deep_at("[\"[[[[\"]", 1), npos);
  EXPECT_EQ(json_too_deep_at("[\"a\\\"[[[[\"]", 1), npos);  // an escaped quote does not end the string
  EXPECT_EQ(json_too_deep_at("[\"a\\\\\",[[]]]", 2), 8u);   // an escaped backslash does not escape the quote
  EXPECT_EQ(json_too_deep_at(nested(3, "\"" + std::string(1000, '[') + "\""), 3), npos);
}

TEST(JsonDepth, CheckRefusesNamingTheFileAndTheOffset) {
  EXPECT_NO_THROW(format::check_json_depth(nested(10), "f.json"));
  try {
    format::check_json_depth(nested(100000), "f.json");
    FAIL() << "a document nested 100,000 deep passed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::format);
    EXPECT_EQ(std::string(e.what()), "f.json: JSON nested deeper than 64 arrays and objects (at byte 192)");  // 32 "[" and 32 "{\"k\":"
  }
}

}  // namespace
}  // namespace lockstep
