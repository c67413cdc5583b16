// Tokenizer: SentencePiece models through Debian's libsentencepiece (tokenizer.hpp).
#include "lockstep/tokenizer.hpp"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cctype>

#include <nlohmann/json.hpp>

#include "core/sha256.hpp"
#include "format/mapped_file.hpp"
#include "lockstep/error.hpp"
#include "lockstep/format.hpp"
#include "text/tokenizer_entry.hpp"

namespace lockstep {

struct Tokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
  std::string file, sha256;
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::sentencepiece(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  const std::string bytes = format::read_text_file(path, size_t{256} << 20);
  const auto status = impl->sp.LoadFromSerializedProto(bytes);
  if (!status.ok()) throw Error(ErrorKind::format, path + ": not a SentencePiece model: " + status.ToString());
  impl->file = path;
  impl->sha256 = sha256_hex(bytes.data(), bytes.size());
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

std::unique_ptr<Tokenizer> Tokenizer::for_model(std::string_view model_path) {
  const text::TokenizerEntry named = text::read_tokenizer_entry(model_path);
  if (named.entry.is_null()) return nullptr;
  const std::string& dir = named.model_dir;
  const std::string& json_path = named.json_path;
  const nlohmann::json& j = named.model_json;
  const nlohmann::json& t = named.entry;
  if (!t.is_object() || t.value("type", "") != "sentencepiece" || !t.contains("file") || !t["file"].is_string() ||
      !t.contains("sha256") || !t["sha256"].is_string())
    throw Error(ErrorKind::format, json_path + ": 'tokenizer' must be {\"type\": \"sentencepiece\", \"file\", \"sha256\"}");
  const std::string file = t["file"].get<std::string>();
  if (file.empty() || file.find('/') != std::string::npos || file[0] == '.')
    throw Error(ErrorKind::format, json_path + ": tokenizer file '" + file + "' is not a plain name in the directory");
  const std::string path = dir + "/" + file;
  const std::string bytes = format::read_text_file(path, size_t{256} << 20);
  const std::string digest = sha256_hex(bytes.data(), bytes.size());
  if (digest != t["sha256"].get<std::string>())
    throw Error(ErrorKind::format, path + ": SHA-256 is " + digest + " but model.json says " + t["sha256"].get<std::string>());
  auto impl = std::make_unique<Impl>();
  const auto status = impl->sp.LoadFromSerializedProto(bytes);
  if (!status.ok()) throw Error(ErrorKind::format, path + ": not a SentencePiece model: " + status.ToString());
  impl->file = file;
  impl->sha256 = digest;
  // Every id the model can give must have a piece, and every piece an id.
  const nlohmann::json* vocab = j.contains("config") && j["config"].is_object() && j["config"].contains("vocab_size")
                                    ? &j["config"]["vocab_size"]
                                    : nullptr;
  if (vocab && vocab->is_number_integer() && vocab->get<int64_t>() != impl->sp.GetPieceSize())
    throw Error(ErrorKind::format, path + ": the tokenizer holds " + std::to_string(impl->sp.GetPieceSize()) +
                                       " pieces but the model's vocab_size is " + std::to_string(vocab->get<int64_t>()));
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const auto status = impl_->sp.Encode(std::string(text), &ids);
  if (!status.ok()) throw Error(ErrorKind::invalid_argument, "the tokenizer cannot encode the text: " + status.ToString());
  return {ids.begin(), ids.end()};
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::vector<int> v;
  for (int32_t id : ids) {
    if (id < 0 || id >= impl_->sp.GetPieceSize())
      throw Error(ErrorKind::invalid_argument, "token id " + std::to_string(id) + " is not in the tokenizer's " +
                                                   std::to_string(impl_->sp.GetPieceSize()) + " pieces");
    v.push_back(id);
  }
  std::string text;
  const auto status = impl_->sp.Decode(v, &text);
  if (!status.ok()) throw Error(ErrorKind::invalid_argument, "the tokenizer cannot decode the ids: " + status.ToString());
  return text;
}

int32_t Tokenizer::bos() const { return impl_->sp.bos_id(); }
int32_t Tokenizer::eos() const { return impl_->sp.eos_id(); }
int32_t Tokenizer::unk() const { return impl_->sp.unk_id(); }
int32_t Tokenizer::size() const { return impl_->sp.GetPieceSize(); }
const std::string& Tokenizer::file() const { return impl_->file; }
const std::string& Tokenizer::sha256() const { return impl_->sha256; }

Tokenizer::Piece Tokenizer::piece(int32_t id) const {
  Piece p;
  p.text = impl_->sp.IdToPiece(id);
  p.score = impl_->sp.GetScore(id);
  p.type = impl_->sp.IsUnknown(id) ? 2 : impl_->sp.IsControl(id) ? 3 : impl_->sp.IsByte(id) ? 6 : impl_->sp.IsUnused(id) ? 5 : 1;
  return p;
}

std::string Tokenizer::token_text(int32_t id) const {
  if (id < 0 || id >= impl_->sp.GetPieceSize()) return std::string("<").append(std::to_string(id)).append(">");
  std::string text = impl_->sp.IdToPiece(id);
  if (impl_->sp.IsByte(id)) {  // "<0xE3>" -> "bytes:\xe3", as a byte model's token shows
    std::string hex = text.size() == 6 ? text.substr(3, 2) : text;
    for (char& c : hex) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return std::string("bytes:\\x").append(hex);
  }
  if (impl_->sp.IsControl(id) || impl_->sp.IsUnknown(id)) return text;
  const std::string_view space = "\xE2\x96\x81";  // U+2581, SentencePiece's space
  std::string out;
  for (size_t at = 0; at < text.size();) {
    if (text.compare(at, space.size(), space) == 0) {
      out += ' ';
      at += space.size();
    } else {
      out += text[at++];
    }
  }
  return out;
}

}  // namespace lockstep
