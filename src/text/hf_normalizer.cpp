// tokenizer.json's `normalizer`: null, or NFC (Qwen2) through utf8proc, never hand-written tables.
// utf8proc 2.8 follows Unicode 15.0, as Hugging Face's unicode-normalization crate does for the
// characters these tests use; a character newer than both tables is left as it is by each.
#include <utf8proc.h>

#include <cstdlib>

#include "lockstep/error.hpp"
#include "text/hf.hpp"

namespace lockstep::text::hf {

std::string Normalizer::apply(std::string_view text) const {
  if (!nfc || text.empty()) return std::string(text);
  utf8proc_uint8_t* out = nullptr;
  // An explicit length (no UTF8PROC_NULLTERM): a NUL in the text is a character like any other.
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) throw Error(ErrorKind::invalid_argument, std::string("the text cannot be normalized (NFC): ") + utf8proc_errmsg(n));
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

Normalizer read_normalizer(const Node& n) {
  Normalizer out;
  if (n.null()) return out;
  const std::string type = n.type();
  if (type == "NFC") {
    out.nfc = true;
    return out;
  }
  // A Sequence of one NFC is NFC; anything longer is refused rather than half applied.
  if (type == "Sequence") {
    const Node list = n.at("normalizers");
    const json& a = list.array();
    if (a.empty()) return out;
    if (a.size() > 1) list.refuse("holds " + std::to_string(a.size()) + " normalizers; only one (NFC) is supported");
    if (list.at(size_t{0}).type() == "NFC") return out.nfc = true, out;
    list.at(size_t{0}).unsupported_type();
  }
  n.unsupported_type();
}

}  // namespace lockstep::text::hf
