// tokenizer.json's `post_processor` (what add_special_tokens puts around a text's ids) and
// `decoder` (ids' tokens back to text). Byte-level BPE needs: TemplateProcessing (Llama 3's
// <|begin_of_text|>), ByteLevel (which only trims offsets, so it leaves ids alone), a Sequence of
// them; and the ByteLevel decoder.
#include "text/hf.hpp"

namespace lockstep::text::hf {

namespace {

// TemplateProcessing's `single`: [{"SpecialToken": {"id": name}}, {"Sequence": {"id": "A"}}, ...].
void read_template(const Node& n, PostProcessor& out) {
  const Node specials = n.at("special_tokens");
  specials.object();
  const Node single = n.at("single");
  out.single.clear();
  for (size_t i = 0; i < single.array().size(); ++i) {
    const Node piece = single.at(i);
    PostProcessor::Piece p;
    if (piece.has("Sequence")) {
      if (piece.at("Sequence").at("id").str() != "A") piece.at("Sequence").at("id").refuse("must be \"A\" in `single`");
      p.sequence = true;
    } else if (piece.has("SpecialToken")) {
      const Node name = piece.at("SpecialToken").at("id");
      if (!specials.v->contains(name.str())) name.refuse("\"" + name.str() + "\" is not in special_tokens");
      const Node ids = specials.at(name.str().c_str()).at("ids");
      for (size_t k = 0; k < ids.array().size(); ++k) p.ids.push_back(ids.at(k).id());
    } else {
      piece.refuse("must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
    out.single.push_back(std::move(p));
  }
  n.at("pair").array();  // a pair of texts is never encoded here; only its shape is checked
}

void read_processor(const Node& n, PostProcessor& out) {
  const std::string type = n.type();
  if (type == "ByteLevel") return;  // offsets only
  if (type == "TemplateProcessing") return read_template(n, out);
  if (type == "Sequence") {
    const Node list = n.at("processors");
    for (size_t i = 0; i < list.array().size(); ++i) read_processor(list.at(i), out);
    return;
  }
  n.unsupported_type();
}

void read_decoder_step(const Node& n) {
  const std::string type = n.type();
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    const Node list = n.at("decoders");
    for (size_t i = 0; i < list.array().size(); ++i) read_decoder_step(list.at(i));
    return;
  }
  n.unsupported_type();
}

}  // namespace

void PostProcessor::apply(std::vector<int32_t>& ids) const {
  if (single.empty()) return;
  std::vector<int32_t> out;
  out.reserve(ids.size() + single.size());
  for (const Piece& p : single) {
    if (p.sequence) out.insert(out.end(), ids.begin(), ids.end());
    else out.insert(out.end(), p.ids.begin(), p.ids.end());
  }
  ids.swap(out);
}

PostProcessor read_post_processor(const Node& n) {
  PostProcessor out;
  if (!n.null()) read_processor(n, out);
  return out;
}

void read_decoder(const Node& n) {
  // Without a decoder Hugging Face joins tokens with spaces: wrong for byte-level BPE, refused.
  if (n.null()) n.refuse("is null; byte-level BPE needs the ByteLevel decoder");
  read_decoder_step(n);
}

// Hugging Face's ByteLevel decoder: a token all of whose characters are in the byte-level
// alphabet becomes those bytes, any other token (an added token such as "<|im_start|>" with a
// character outside it) its own UTF-8; the bytes of all tokens together are then read as UTF-8,
// each invalid part as U+FFFD (from_utf8_lossy).
std::string byte_level_bytes(const std::string& token) {
  std::string mapped;
  for (size_t at = 0; at < token.size();) {
    size_t len = 1;
    const int b = byte_of(next_char(token, at, &len));
    if (b < 0) return token;
    mapped += static_cast<char>(b);
    at += len;
  }
  return mapped;
}

std::string byte_level_decode(const std::vector<const std::string*>& tokens) {
  std::string bytes;
  for (const std::string* t : tokens) bytes += byte_level_bytes(*t);
  return lossy_utf8(bytes);
}

}  // namespace lockstep::text::hf
