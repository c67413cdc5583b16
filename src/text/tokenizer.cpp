// Tokenizer (include/lockstep/tokenizer.hpp): model.json's `tokenizer` entry, the file's SHA-256,
// and the kind of tokenizer the entry's `type` names (text/tokenizer_impl.hpp).
#include "lockstep/tokenizer.hpp"

#include "core/sha256.hpp"
#include "format/mapped_file.hpp"
#include "lockstep/error.hpp"
#include "lockstep/format.hpp"
#include "text/tokenizer_entry.hpp"
#include "text/tokenizer_impl.hpp"

namespace lockstep {

namespace {

constexpr size_t max_tokenizer_file = size_t{256} << 20;

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::sentencepiece(const std::string& path) {
  text::require_sentencepiece(path);
  const std::string bytes = format::read_text_file(path, max_tokenizer_file);
  std::unique_ptr<Impl> impl = text::load_sentencepiece(bytes, path);
  impl->file = path;
  impl->sha256 = sha256_hex(bytes.data(), bytes.size());
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

std::unique_ptr<Tokenizer> Tokenizer::hf_json(const std::string& path) {
  text::require_hf_tokenizer(path);
  const std::string bytes = format::read_text_file(path, max_tokenizer_file);
  std::unique_ptr<Impl> impl = text::load_hf_tokenizer(bytes, path);
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
  const std::string type = t.is_object() && t.contains("type") && t["type"].is_string() ? t["type"].get<std::string>() : "";
  if ((type != "sentencepiece" && type != "huggingface") || !t.contains("file") || !t["file"].is_string() ||
      !t.contains("sha256") || !t["sha256"].is_string())
    throw Error(ErrorKind::format, json_path +
                                       ": 'tokenizer' must be {\"type\": \"sentencepiece\" or \"huggingface\", \"file\", \"sha256\"}");
  const bool hf = type == "huggingface";
  if (hf)
    text::require_hf_tokenizer(json_path + " names a tokenizer");
  else
    text::require_sentencepiece(json_path + " names a tokenizer");
  const std::string file = t["file"].get<std::string>();
  if (file.empty() || file.find('/') != std::string::npos || file[0] == '.')
    throw Error(ErrorKind::format, json_path + ": tokenizer file '" + file + "' is not a plain name in the directory");
  const std::string path = dir + "/" + file;
  const std::string bytes = format::read_text_file(path, max_tokenizer_file);
  const std::string digest = sha256_hex(bytes.data(), bytes.size());
  if (digest != t["sha256"].get<std::string>())
    throw Error(ErrorKind::format, path + ": SHA-256 is " + digest + " but model.json says " + t["sha256"].get<std::string>());
  std::unique_ptr<Impl> impl = hf ? text::load_hf_tokenizer(bytes, path) : text::load_sentencepiece(bytes, path);
  impl->file = file;
  impl->sha256 = digest;
  // Every id the model can give must have a piece, and every piece an id. A tokenizer.json may
  // hold fewer tokens than the model's vocab_size (Qwen2's embedding is padded to 151,936 for
  // about 151,665 tokens): the ids past it are never produced by text and decode to nothing.
  const nlohmann::json* vocab = j.contains("config") && j["config"].is_object() && j["config"].contains("vocab_size")
                                    ? &j["config"]["vocab_size"]
                                    : nullptr;
  if (vocab && vocab->is_number_integer() &&
      (hf ? vocab->get<int64_t>() < impl->size() : vocab->get<int64_t>() != impl->size()))
    throw Error(ErrorKind::format, path + ": the tokenizer holds " + std::to_string(impl->size()) +
                                       " pieces but the model's vocab_size is " + std::to_string(vocab->get<int64_t>()));
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return impl_->encode(text, add_special_tokens);
}
std::string Tokenizer::decode(std::span<const int32_t> ids) const { return impl_->decode(ids); }
int32_t Tokenizer::bos() const { return impl_->bos(); }
int32_t Tokenizer::eos() const { return impl_->eos(); }
int32_t Tokenizer::unk() const { return impl_->unk(); }
int32_t Tokenizer::size() const { return impl_->size(); }
const char* Tokenizer::type() const { return impl_->type(); }
const std::string& Tokenizer::file() const { return impl_->file; }
const std::string& Tokenizer::sha256() const { return impl_->sha256; }
Tokenizer::Piece Tokenizer::piece(int32_t id) const { return impl_->piece(id); }
std::string Tokenizer::token_text(int32_t id) const { return impl_->token_text(id); }
std::string Tokenizer::token_bytes(int32_t id) const { return impl_->token_bytes(id); }

}  // namespace lockstep
