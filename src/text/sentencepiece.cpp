// SentencePiece models through Debian's libsentencepiece (text/tokenizer_impl.hpp).
#include <sentencepiece_processor.h>

#include <algorithm>
#include <cctype>

#include "lockstep/error.hpp"
#include "text/tokenizer_impl.hpp"

namespace lockstep::text {
namespace {

// A piece's text with SentencePiece's space (U+2581) as ' ': what the piece stands for in text.
std::string with_spaces(std::string_view piece) {
  const std::string_view space = "\xE2\x96\x81";
  std::string out;
  for (size_t at = 0; at < piece.size();) {
    if (piece.compare(at, space.size(), space) == 0) {
      out += ' ';
      at += space.size();
    } else {
      out += piece[at++];
    }
  }
  return out;
}

struct SentencePiece final : Tokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
  // The special pieces (control and unknown: <s>, </s>, <unk>) as (text, id), longest first.
  std::vector<std::pair<std::string, int32_t>> specials;

  void find_specials() {
    for (int id = 0; id < sp.GetPieceSize(); ++id)
      if ((sp.IsControl(id) || sp.IsUnknown(id)) && !sp.IdToPiece(id).empty())
        specials.emplace_back(sp.IdToPiece(id), id);
    std::stable_sort(specials.begin(), specials.end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  }

  void encode_piece(std::string_view text, std::vector<int32_t>& out) const {
    std::vector<int> ids;
    const auto status = sp.Encode(std::string(text), &ids);
    if (!status.ok()) throw Error(ErrorKind::invalid_argument, "the tokenizer cannot encode the text: " + status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  }

  // The special pieces' strings in the text become their ids, as Hugging Face's Llama tokenizers
  // split them out first (a rendered chat template writes `</s>`); the text between them is
  // encoded piece by piece, each with SentencePiece's own rules (its leading-space prefix too,
  // as transformers' legacy Llama tokenizer and its tokenizer.json's Prepend normalizer do).
  std::vector<int32_t> encode(std::string_view text, bool add_special) const override {
    // Llama's SentencePiece models expect BOS before a text (what every front end did by hand).
    std::vector<int32_t> out;
    if (add_special && sp.bos_id() >= 0) out.push_back(sp.bos_id());
    size_t from = 0;
    for (size_t at = 0; at < text.size();) {
      const auto hit = std::find_if(specials.begin(), specials.end(),
                                    [&](const auto& s) { return text.compare(at, s.first.size(), s.first) == 0; });
      if (hit == specials.end()) {
        ++at;
        continue;
      }
      if (at > from) encode_piece(text.substr(from, at - from), out);
      out.push_back(hit->second);
      at += hit->first.size();
      from = at;
    }
    if (from < text.size()) encode_piece(text.substr(from), out);
    return out;
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::vector<int> v;
    for (int32_t id : ids) {
      if (id < 0 || id >= sp.GetPieceSize())
        throw Error(ErrorKind::invalid_argument, "token id " + std::to_string(id) + " is not in the tokenizer's " +
                                                     std::to_string(sp.GetPieceSize()) + " pieces");
      v.push_back(id);
    }
    std::string text;
    const auto status = sp.Decode(v, &text);
    if (!status.ok()) throw Error(ErrorKind::invalid_argument, "the tokenizer cannot decode the ids: " + status.ToString());
    return text;
  }

  int32_t bos() const override { return sp.bos_id(); }
  int32_t eos() const override { return sp.eos_id(); }
  int32_t unk() const override { return sp.unk_id(); }
  int32_t size() const override { return sp.GetPieceSize(); }
  const char* type() const override { return "sentencepiece"; }

  Tokenizer::Piece piece(int32_t id) const override {
    Tokenizer::Piece p;
    p.text = sp.IdToPiece(id);
    p.score = sp.GetScore(id);
    p.type = sp.IsUnknown(id) ? 2 : sp.IsControl(id) ? 3 : sp.IsByte(id) ? 6 : sp.IsUnused(id) ? 5 : 1;
    return p;
  }

  std::string token_bytes(int32_t id) const override {
    if (id < 0 || id >= sp.GetPieceSize() || sp.IsControl(id) || sp.IsUnknown(id) || sp.IsUnused(id)) return {};
    const std::string text = sp.IdToPiece(id);
    if (sp.IsByte(id)) return std::string(1, static_cast<char>(std::stoi(text.substr(3, 2), nullptr, 16)));
    return with_spaces(text);
  }

  std::string token_text(int32_t id) const override {
    if (id < 0 || id >= sp.GetPieceSize()) return std::string("<").append(std::to_string(id)).append(">");
    std::string text = sp.IdToPiece(id);
    if (sp.IsByte(id)) {  // "<0xE3>" -> "bytes:\xe3", as a byte model's token shows
      std::string hex = text.size() == 6 ? text.substr(3, 2) : text;
      for (char& c : hex) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return std::string("bytes:\\x").append(hex);
    }
    if (sp.IsControl(id) || sp.IsUnknown(id)) return text;
    return with_spaces(text);
  }
};

}  // namespace

void require_sentencepiece(const std::string&) {}

std::unique_ptr<Tokenizer::Impl> load_sentencepiece(const std::string& bytes, const std::string& path) {
  auto impl = std::make_unique<SentencePiece>();
  const auto status = impl->sp.LoadFromSerializedProto(bytes);
  if (!status.ok()) throw Error(ErrorKind::format, path + ": not a SentencePiece model: " + status.ToString());
  impl->find_specials();
  return impl;
}

}  // namespace lockstep::text
