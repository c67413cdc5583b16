// A build without Oniguruma and utf8proc (LOCKSTEP_HF_TOKENIZER=OFF: the aarch64 cross build without
// their :arm64 packages, which runs this in test_arm): a model whose model.json names a
// tokenizer.json, and such a file, are refused with an error naming the file and why.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "lockstep/error.hpp"
#include "lockstep/tokenizer.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

TEST(NoTokenizer, ATokenizerJsonIsRefusedWithoutOniguruma) {
  test::TempDir dir;
  std::ofstream(dir / "model.json") << R"({"format": "lockstep.model", "tokenizer": {"type": "huggingface",
        "file": "tokenizer.json", "sha256": "00"}})";
  try {
    Tokenizer::for_model(dir.path());
    FAIL() << "a model naming a tokenizer.json was accepted without Oniguruma";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(std::string(e.what()).find(dir / "model.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("LOCKSTEP_HF_TOKENIZER=OFF"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Tokenizer::hf_json(dir / "tokenizer.json"), Error);
}

}  // namespace
}  // namespace lockstep
