// What each kind of tokenizer implements behind lockstep::Tokenizer (include/lockstep/tokenizer.hpp):
// a SentencePiece model (text/sentencepiece.cpp) or a Hugging Face tokenizer.json (text/hf_*.cpp).
// The facade (text/tokenizer.cpp) reads model.json's entry, checks the file's SHA-256 and picks
// one by the entry's `type`; a build without a library has a stub in its place
// (text/no_tokenizer/, text/no_hf/) whose require_* refuses, naming the file and the reason.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lockstep/tokenizer.hpp"

namespace lockstep {

struct Tokenizer::Impl {
  virtual ~Impl() = default;
  // add_special: the file's own rule (SentencePiece: BOS; tokenizer.json: its post-processor).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special) const = 0;
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual int32_t bos() const = 0;
  virtual int32_t eos() const = 0;
  virtual int32_t unk() const = 0;
  virtual int32_t size() const = 0;
  virtual const char* type() const = 0;
  virtual Piece piece(int32_t id) const = 0;
  virtual std::string token_text(int32_t id) const = 0;
  virtual std::string token_bytes(int32_t id) const = 0;
  std::string file, sha256;
};

namespace text {

// `bytes`: the file's contents; `path`: its name for errors.
void require_sentencepiece(const std::string& what);
std::unique_ptr<Tokenizer::Impl> load_sentencepiece(const std::string& bytes, const std::string& path);
void require_hf_tokenizer(const std::string& what);
std::unique_ptr<Tokenizer::Impl> load_hf_tokenizer(const std::string& bytes, const std::string& path);

}  // namespace text
}  // namespace lockstep
