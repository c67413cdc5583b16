// A build without SentencePiece (LOCKSTEP_TOKENIZER=OFF: the aarch64 cross build, which runs this
// in test_arm): a model without a tokenizer has none, as in a full build; one whose model.json
// names a tokenizer, and a SentencePiece file, are refused with an error naming the file and why,
// never loaded without their tokenizer.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "lockstep/error.hpp"
#include "lockstep/tokenizer.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(NoTokenizer, AModelWithoutOneHasNoneAndOneNamingATokenizerIsRefused) {
  test::TempDir dir;
  write(dir / "model.json", R"({"format": "lockstep.model", "tokenizer": null})");
  EXPECT_EQ(Tokenizer::for_model(dir.path()), nullptr);
  write(dir / "model.json", R"({"format": "lockstep.model", "tokenizer": {"type": "sentencepiece",
        "file": "tokenizer.model", "sha256": "00"}})");
  try {
    Tokenizer::for_model(dir.path());
    FAIL() << "a model naming a tokenizer was accepted without SentencePiece";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(std::string(e.what()).find(dir / "model.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("without SentencePiece"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Tokenizer::sentencepiece(dir / "tokenizer.model"), Error);
}

}  // namespace
}  // namespace lockstep
