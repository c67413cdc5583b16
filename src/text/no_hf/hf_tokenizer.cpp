// Hugging Face tokenizer.json in a build without Oniguruma and utf8proc (LOCKSTEP_HF_TOKENIZER=OFF;
// the aarch64 cross build when libonig-dev:arm64 or libutf8proc-dev:arm64 is not installed). It
// replaces text/hf_*.cpp: a model whose model.json names a tokenizer.json is refused, saying why.
#include "lockstep/error.hpp"
#include "text/tokenizer_impl.hpp"

namespace lockstep::text {

void require_hf_tokenizer(const std::string& what) {
  throw Error(ErrorKind::unsupported, what + ": this lockstep was built without Hugging Face tokenizers "
                                             "(LOCKSTEP_HF_TOKENIZER=OFF; Debian: libonig-dev, libutf8proc-dev)");
}

std::unique_ptr<Tokenizer::Impl> load_hf_tokenizer(const std::string&, const std::string& path) {
  require_hf_tokenizer(path);
  return nullptr;
}

}  // namespace lockstep::text
