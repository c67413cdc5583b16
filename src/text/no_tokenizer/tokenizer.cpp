// Tokenizer in a build without SentencePiece (LOCKSTEP_TOKENIZER=OFF; the aarch64 cross build,
// where Debian's libsentencepiece-dev cannot be installed beside the host's). It lives outside
// the text/*.cpp glob and replaces text/tokenizer.cpp. Models without a tokenizer (byte
// vocabularies) work as in a full build; one whose model.json names a tokenizer is refused,
// naming the file and the reason, never loaded without its tokenizer.
#include "lockstep/tokenizer.hpp"

#include "lockstep/error.hpp"
#include "lockstep/format.hpp"
#include "text/tokenizer_entry.hpp"

namespace lockstep {

namespace {
[[noreturn]] void no_tokenizer(const std::string& what) {
  throw Error(ErrorKind::unsupported, what + ": this lockstep was built without SentencePiece (LOCKSTEP_TOKENIZER=OFF; "
                                             "Debian: libsentencepiece-dev), so it has no tokenizer");
}
}  // namespace

// No Tokenizer is ever made in this build; Impl is empty.
struct Tokenizer::Impl {};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::sentencepiece(const std::string& path) { no_tokenizer(path); }

std::unique_ptr<Tokenizer> Tokenizer::for_model(std::string_view model_path) {
  const text::TokenizerEntry named = text::read_tokenizer_entry(model_path);
  if (named.entry.is_null()) return nullptr;
  no_tokenizer(named.json_path + " names a tokenizer");
}

// Unreachable: no Tokenizer exists without SentencePiece.
std::vector<int32_t> Tokenizer::encode(std::string_view) const { no_tokenizer("encode"); }
std::string Tokenizer::decode(std::span<const int32_t>) const { no_tokenizer("decode"); }
int32_t Tokenizer::bos() const { no_tokenizer("bos"); }
int32_t Tokenizer::eos() const { no_tokenizer("eos"); }
int32_t Tokenizer::unk() const { no_tokenizer("unk"); }
int32_t Tokenizer::size() const { no_tokenizer("size"); }
Tokenizer::Piece Tokenizer::piece(int32_t) const { no_tokenizer("piece"); }
const std::string& Tokenizer::file() const { no_tokenizer("file"); }
const std::string& Tokenizer::sha256() const { no_tokenizer("sha256"); }
std::string Tokenizer::token_text(int32_t) const { no_tokenizer("token_text"); }

}  // namespace lockstep
