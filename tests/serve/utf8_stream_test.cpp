// Streamed text never splits a UTF-8 sequence; invalid bytes become U+FFFD, one per maximal
// invalid subpart (the policy of Python's errors="replace", which the HTTP tests compare with).
#include <gtest/gtest.h>

#include <string>

#include "serve/utf8_stream.hpp"

namespace lockstep::serve {
namespace {

const std::string fffd = "\xEF\xBF\xBD";

TEST(Utf8Stream, HoldsAnIncompleteCharacterUntilItCompletes) {
  Utf8Stream s;
  EXPECT_EQ(s.push("a"), "a");
  EXPECT_EQ(s.push("\xE2"), "");
  EXPECT_EQ(s.push("\x82"), "");
  EXPECT_EQ(s.push("\xAC"), "\xE2\x82\xAC");  // the euro sign, whole
  EXPECT_EQ(s.push("\xF0\x9F"), "");
  EXPECT_EQ(s.push("\x98\x80z"), "\xF0\x9F\x98\x80z");
  EXPECT_EQ(s.finish(), "");
}

TEST(Utf8Stream, InvalidBytesBecomeReplacementCharacters) {
  EXPECT_EQ(valid_utf8("\xFF"), fffd);
  EXPECT_EQ(valid_utf8("\x80" "a"), fffd + "a");
  EXPECT_EQ(valid_utf8("\xC0\xAF"), fffd + fffd);       // overlong lead: never valid
  EXPECT_EQ(valid_utf8("\xE2\x82" "a"), fffd + "a");    // a truncated sequence: one U+FFFD
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), fffd + fffd + fffd);  // a surrogate
  EXPECT_EQ(valid_utf8("\xF4\x90\x80\x80"), fffd + fffd + fffd + fffd);  // past U+10FFFF
  EXPECT_EQ(valid_utf8("\xE2\x82"), fffd);              // cut at the end
}

TEST(Utf8Stream, PiecesJoinToTheWholeDecoding) {
  const std::string bytes = "h\xC3\xA9\xE2\x82\xAC\xFF\xE2\x82" "b\xF0\x9F\x98\x80\xC0";
  Utf8Stream s;
  std::string joined;
  for (char c : bytes) joined += s.push(std::string(1, c));
  joined += s.finish();
  EXPECT_EQ(joined, valid_utf8(bytes));
  EXPECT_EQ(joined, "h\xC3\xA9\xE2\x82\xAC" + fffd + fffd + "b\xF0\x9F\x98\x80" + fffd);
}

}  // namespace
}  // namespace lockstep::serve
