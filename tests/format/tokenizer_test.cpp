// The tokenizer's streamed text (TextStream, include/lockstep/tokenizer.hpp) against the whole
// decoding, on a SentencePiece model trained here with `spm_train` (Debian's sentencepiece) with
// byte pieces, so that characters outside its pieces come as several byte tokens.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/error.hpp"
#include "lockstep/tokenizer.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

class TextStreamTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::system("command -v spm_train >/dev/null 2>&1") != 0) return;
    dir_ = new test::TempDir();
    std::string text;
    for (int i = 0; i < 40; ++i)
      text += "the quick brown fox jumps over the lazy dog number " + std::to_string(i) +
              "\na stitch in time saves nine, said the old tailor\n";
    test::write_file(*dir_ / "text.txt", text);
    const test::CommandResult r =
        test::run_command({"spm_train", "--input=" + (*dir_ / "text.txt"), "--model_prefix=" + (*dir_ / "sp"),
                           "--vocab_size=300", "--model_type=unigram", "--byte_fallback=true"});
    ASSERT_EQ(r.status, 0) << r.err;
    tokenizer_ = Tokenizer::sentencepiece(*dir_ / "sp.model").release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete dir_;
    tokenizer_ = nullptr;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!tokenizer_) GTEST_SKIP() << "spm_train (Debian's sentencepiece) is not installed";
  }

  // Id sequences: texts with characters outside the pieces (byte tokens), and random ids.
  static std::vector<std::vector<int32_t>> sequences() {
    const Tokenizer& t = *tokenizer_;
    std::vector<std::vector<int32_t>> out;
    const char* texts[] = {"the lazy fox", " naïve café — über straße, 東京 と 大阪 🦊!", "  two  spaces ",
                           "ψ", "a stitch\nin time", "€€€ end"};
    for (const char* text : texts) {
      std::vector<int32_t> ids = {t.bos()};
      for (int32_t id : t.encode(text, false)) ids.push_back(id);
      out.push_back(ids);
      out.push_back(t.encode(text, false));
    }
    for (uint64_t seed = 0; seed < 60; ++seed) {
      // Mostly byte pieces (ids 3..258: bytes 0..255), some controls and normal pieces.
      std::vector<int32_t> ids = test::random_ids(40, seed % 3 == 0 ? t.size() : 259, seed);
      out.push_back(ids);
    }
    return out;
  }

  static test::TempDir* dir_;
  static Tokenizer* tokenizer_;
};

test::TempDir* TextStreamTest::dir_ = nullptr;
Tokenizer* TextStreamTest::tokenizer_ = nullptr;

TEST_F(TextStreamTest, PiecesJoinToTheWholeDecodingAndNeverChange) {
  const Tokenizer& t = *tokenizer_;
  int held = 0;
  for (const std::vector<int32_t>& ids : sequences()) {
    for (size_t prompt : {size_t{0}, size_t{1}, ids.size() / 2, ids.size()}) {
      if (prompt > ids.size()) continue;
      const std::string whole = t.decode(ids);
      TextStream s(t, std::span<const int32_t>(ids).first(prompt));
      std::string given = s.prompt_text();
      EXPECT_TRUE(valid_utf8(given));
      for (size_t i = prompt; i < ids.size(); ++i) {
        const std::string piece = s.push(ids[i]);
        EXPECT_TRUE(valid_utf8(piece)) << "a piece splits a character";
        given += piece;
        // What is given out is a prefix of the decoding of every longer list.
        ASSERT_EQ(whole.compare(0, given.size(), given), 0) << "given text changed at token " << i;
        held += given.size() < t.decode(std::span<const int32_t>(ids).first(i + 1)).size();
      }
      given += s.finish();
      EXPECT_EQ(given, whole);
      EXPECT_EQ(s.prompt_text() + s.text(), whole);
      EXPECT_FALSE(s.stopped());
    }
  }
  EXPECT_GT(held, 0) << "no unfinished character was held back: the test does not test that";
}

TEST_F(TextStreamTest, StopStringsEndTheTextRightAfterThem) {
  const Tokenizer& t = *tokenizer_;
  std::vector<int32_t> ids = {t.bos()};
  for (int32_t id : t.encode("the quick brown fox jumps over the lazy dog", false)) ids.push_back(id);
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 3);
  const std::string head = TextStream(t, prompt).prompt_text();
  const std::string generated = t.decode(ids).substr(head.size());
  for (const std::vector<std::string>& stops : std::vector<std::vector<std::string>>{
           {"o"}, {"ox j"}, {"zzz", "over"}, {"lazy dog"}, {"e q"}, {"dog", "r t"}}) {
    size_t end = std::string::npos;
    for (const std::string& stop : stops)
      if (const size_t at = generated.find(stop); at != std::string::npos) end = std::min(end, at + stop.size());
    ASSERT_NE(end, std::string::npos);
    TextStream s(t, prompt, stops);
    std::string given;
    size_t pushed = 0;
    for (size_t i = prompt.size(); i < ids.size() && !s.stopped(); ++i, ++pushed) given += s.push(ids[i]);
    given += s.finish();
    EXPECT_TRUE(s.stopped()) << head << "|" << generated;
    EXPECT_EQ(given, generated.substr(0, end)) << stops[0];
    EXPECT_EQ(s.text(), given);
    EXPECT_EQ(s.push(ids.back()), "");  // nothing after the stop
    EXPECT_LT(pushed, ids.size() - prompt.size() + 1);
  }
  // A stop string in the prompt's text does not count; one spanning the prompt's end neither.
  const std::string spanning = head.substr(head.size() - 1) + generated.substr(0, 4);
  ASSERT_EQ(generated.find(spanning), std::string::npos) << spanning;
  TextStream s(t, prompt, {spanning});
  for (size_t i = prompt.size(); i < ids.size(); ++i) s.push(ids[i]);
  EXPECT_FALSE(s.stopped());
  EXPECT_THROW(TextStream(t, prompt, {""}), Error);
}

TEST_F(TextStreamTest, TokenTextShowsPiecesBytesAndControls) {
  const Tokenizer& t = *tokenizer_;
  EXPECT_EQ(t.token_text(t.bos()), "<s>");
  EXPECT_EQ(t.token_text(t.unk()), "<unk>");
  EXPECT_EQ(t.token_text(3), "bytes:\\x00");
  EXPECT_EQ(t.token_text(3 + 0xE3), "bytes:\\xe3");
  const std::vector<int32_t> the = t.encode(" the", false);
  ASSERT_FALSE(the.empty());
  EXPECT_EQ(t.token_text(the[0]).substr(0, 1), " ");
  EXPECT_EQ(t.token_text(t.size()), "<" + std::to_string(t.size()) + ">");
}


// Tokenizer::token_bytes (what a grammar matches, lockstep/grammar.hpp): a text's pieces' bytes
// joined are its decoding (which drops the first piece's leading space); a control piece has none.
TEST_F(TextStreamTest, TokenBytesJoinToTheDecodedText) {
  const Tokenizer& t = *tokenizer_;
  EXPECT_EQ(t.token_bytes(t.bos()), "");
  for (const char* text : {"the lazy fox", " naïve café — über straße, 東京 と 大阪 🦊!", "a stitch\nin time", "€€€ end"}) {
    const std::vector<int32_t> ids = t.encode(text, false);
    std::string joined;
    for (const int32_t id : ids) joined += t.token_bytes(id);
    const std::string decoded = t.decode(ids);
    EXPECT_TRUE(joined == decoded || joined == " " + decoded) << text << ": '" << joined << "' vs '" << decoded << "'";
  }
}

}  // namespace
}  // namespace lockstep
