// SentencePiece in a build without it (LOCKSTEP_TOKENIZER=OFF; the aarch64 cross build, where
// Debian's libsentencepiece-dev cannot be installed beside the host's). It lives outside the
// text/*.cpp glob and replaces text/sentencepiece.cpp. Models without a tokenizer (byte
// vocabularies) work as in a full build; one whose model.json names a SentencePiece tokenizer is
// refused, naming the file and the reason, never loaded without its tokenizer.
#include "lockstep/error.hpp"
#include "text/tokenizer_impl.hpp"

namespace lockstep::text {

void require_sentencepiece(const std::string& what) {
  throw Error(ErrorKind::unsupported, what + ": this lockstep was built without SentencePiece (LOCKSTEP_TOKENIZER=OFF; "
                                             "Debian: libsentencepiece-dev), so it has no SentencePiece tokenizer");
}

std::unique_ptr<Tokenizer::Impl> load_sentencepiece(const std::string&, const std::string& path) {
  require_sentencepiece(path);
  return nullptr;
}

}  // namespace lockstep::text
