// interop/gguf_vocab.hpp. The key names and their meaning are llama.cpp's (gguf-py's constants and
// src/llama-vocab.cpp); what each becomes:
// - gpt2: ids with token_type 3 (control) or 4 (user-defined) are tokenizer.json `added_tokens`
//   (special: control), split out of the text before the model as llama.cpp does; the others are
//   the BPE model's vocab; merges "a b" are the model's merges in their order (rank); `pre` picks
//   the normalizer and pre-tokenizer of the models it names (the regexes Hugging Face's files for
//   those models hold, which llama.cpp's hand-written splitters follow); add_bos_token and
//   add_eos_token become a TemplateProcessing around the text.
// - llama: a SentencePiece ModelProto (sentencepiece_model.proto) of model_type BPE: each token a
//   piece with its score and type, byte_fallback when there are <0xNN> byte pieces, the identity
//   normalizer with add_dummy_prefix from tokenizer.ggml.add_space_prefix, whitespace kept. That is
//   what a Llama tokenizer.model is (less its unused trainer fields), and SentencePiece's BPE
//   encoder (merge the adjacent pair whose joined piece scores highest, bytes for what no piece
//   covers) is the algorithm llama.cpp's SPM tokenizer reimplements.
#include "interop/gguf_vocab.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>

#include "format/json_text.hpp"
#include "interop/hf_chat_template.hpp"
#include "lockstep/error.hpp"
#include "text/utf8.hpp"
#include "text/tokenizer_impl.hpp"

namespace lockstep::interop {
namespace {

using ojson = nlohmann::ordered_json;

enum TokenType : int { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
enum : uint32_t { kBoolType = 7, kStringType = 8 };

[[noreturn]] void refuse(const std::string& what, const std::string& why, ErrorKind kind = ErrorKind::format) {
  throw Error(kind, what + ": " + why);
}

// The keys every vocabulary has, read and checked against each other.
struct Keys {
  std::vector<std::string> tokens;
  std::vector<int> types;  // kNormal where the file has no token_type
  std::optional<int32_t> bos, eos, unk, eot, eom;
};

bool is_integer_type(uint32_t t) { return t <= 5 || t == 10 || t == 11; }

const std::vector<std::string>& string_array(const format::GgufFile& f, const std::string& key, const std::string& what) {
  const format::GgufValue* v = f.find(key);
  if (!v) refuse(what, "has a vocabulary but no key '" + key + "'");
  if (!v->is_array() || v->array_type != kStringType) refuse(what, "key '" + key + "' is not an array of strings");
  return v->strings;
}

// An array of numbers of `count` elements, or nullopt when the key is absent.
std::optional<std::vector<double>> number_array(const format::GgufFile& f, const std::string& key, size_t count,
                                                const std::string& what, bool integers) {
  const format::GgufValue* v = f.find(key);
  if (!v) return std::nullopt;
  if (!v->is_array() || (integers ? !is_integer_type(v->array_type) : (v->array_type != 6 && v->array_type != 12)))
    refuse(what, "key '" + key + "' is not an array of " + (integers ? "integers" : "floats"));
  if (v->numbers.size() != count)
    refuse(what, "key '" + key + "' has " + std::to_string(v->numbers.size()) + " elements but tokenizer.ggml.tokens has " +
                     std::to_string(count));
  return v->numbers;
}

std::optional<int32_t> id_key(const format::GgufFile& f, const std::string& key, size_t count, const std::string& what) {
  const format::GgufValue* v = f.find(key);
  if (!v) return std::nullopt;
  if (!v->is_integer()) refuse(what, "key '" + key + "' is not an integer");
  if (v->i64 < 0 || static_cast<uint64_t>(v->i64) >= count)
    refuse(what, "key '" + key + "' is " + std::to_string(v->i64) + ", not a token id (the vocabulary has " +
                     std::to_string(count) + " tokens)");
  return static_cast<int32_t>(v->i64);
}

std::optional<bool> bool_key(const format::GgufFile& f, const std::string& key, const std::string& what) {
  const format::GgufValue* v = f.find(key);
  if (!v) return std::nullopt;
  if (v->type != kBoolType) refuse(what, "key '" + key + "' is not a bool");
  return v->u64 != 0;
}

Keys read_keys(const format::GgufFile& f, const std::string& what, int32_t vocab_size) {
  Keys k;
  k.tokens = string_array(f, "tokenizer.ggml.tokens", what);
  const size_t n = k.tokens.size();
  if (n != static_cast<size_t>(vocab_size))
    refuse(what, "tokenizer.ggml.tokens has " + std::to_string(n) + " tokens but the model's vocabulary (token_embd.weight, "
                     "llama.vocab_size) has " + std::to_string(vocab_size) + " ids");
  k.types.assign(n, kNormal);
  if (const auto types = number_array(f, "tokenizer.ggml.token_type", n, what, true)) {
    for (size_t i = 0; i < n; ++i) {
      const double t = (*types)[i];
      if (!(t >= 1 && t <= 6))
        refuse(what, "tokenizer.ggml.token_type[" + std::to_string(i) + "] is " + std::to_string(static_cast<int64_t>(t)) +
                         ", not a token type (1 normal to 6 byte)");
      k.types[i] = static_cast<int>(t);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (k.tokens[i].empty()) refuse(what, "tokenizer.ggml.tokens[" + std::to_string(i) + "] is empty");
    if (!text::valid_utf8(k.tokens[i])) refuse(what, "tokenizer.ggml.tokens[" + std::to_string(i) + "] is not valid UTF-8");
  }
  k.bos = id_key(f, "tokenizer.ggml.bos_token_id", n, what);
  k.eos = id_key(f, "tokenizer.ggml.eos_token_id", n, what);
  k.unk = id_key(f, "tokenizer.ggml.unknown_token_id", n, what);
  k.eot = id_key(f, "tokenizer.ggml.eot_token_id", n, what);
  k.eom = id_key(f, "tokenizer.ggml.eom_token_id", n, what);
  (void)id_key(f, "tokenizer.ggml.padding_token_id", n, what);  // checked; lockstep does not pad
  return k;
}

// ---- gpt2: a tokenizer.json ----

ojson byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", use_regex}};
}
ojson split(const std::string& regex) {
  return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
}

// The regexes of Llama 3's and Qwen2's tokenizer.json (llama.cpp writes the same with [sS] for the
// case-insensitive group); GPT-2's is ByteLevel's own; llama.cpp's `default` is four regexes in turn.
const char* const kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";

struct PreTokenizer {
  ojson normalizer = nullptr;
  ojson pre_tokenizer;
  bool ignore_merges = false, add_bos = false;
};

// llama.cpp's names for each (src/llama-vocab.cpp): the pre-tokenizers lockstep converts.
std::optional<PreTokenizer> pre_tokenizer(const std::string& pre) {
  PreTokenizer p;
  if (pre == "gpt-2") {
    p.pre_tokenizer = byte_level(true);
  } else if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
    p.pre_tokenizer = {{"type", "Sequence"}, {"pretokenizers", {split(kLlama3Regex), byte_level(false)}}};
    p.ignore_merges = p.add_bos = true;
  } else if (pre == "qwen2" || pre == "deepseek-r1-qwen") {
    p.normalizer = {{"type", "NFC"}};
    p.pre_tokenizer = {{"type", "Sequence"}, {"pretokenizers", {split(kQwen2Regex), byte_level(false)}}};
  } else if (pre == "smollm") {
    p.pre_tokenizer = {{"type", "Sequence"},
                       {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)}}};
  } else if (pre == "default" || pre.empty()) {
    p.pre_tokenizer = {{"type", "Sequence"},
                       {"pretokenizers",
                        {split(R"([\p{P}\$\+<=>\^~\|]+)"), split(kGpt2Regex), split(R"(\p{N}+)"), split("[0-9][0-9][0-9]"),
                         byte_level(false)}}};
  } else {
    return std::nullopt;
  }
  return p;
}

const char* const kPreNames[] = {"gpt-2", "llama-bpe", "qwen2", "smollm", "default"};

// Two stages equal in what they do to ids: trim_offsets (offsets only) is left out.
nlohmann::json ids_only(const nlohmann::json& j) {
  if (j.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& x : j) out.push_back(ids_only(x));
    return out;
  }
  if (!j.is_object()) return j;
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, x] : j.items())
    if (key != "trim_offsets") out[key] = ids_only(x);
  return out;
}

// The 256 bytes in order as GPT-2's byte strings, no merges: lockstep's byte vocabulary (what its
// own export-gguf writes for a model without a tokenizer).
bool is_byte_vocabulary(const Keys& k, const std::vector<std::string>& merges) {
  if (k.tokens.size() != 256 || !merges.empty()) return false;
  for (size_t b = 0; b < 256; ++b) {
    const uint32_t c = static_cast<uint32_t>(b);
    // bytes_to_unicode: printable Latin-1 stands for itself, the rest are 256 + their rank.
    const bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
    uint32_t cp = c;
    if (!printable) {
      uint32_t rank = 0;
      for (uint32_t x = 0; x < c; ++x)
        if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) ++rank;
      cp = 256 + rank;
    }
    std::string s;
    if (cp < 0x80) s = std::string(1, static_cast<char>(cp));
    else s = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    if (k.tokens[b] != s || k.types[b] != kNormal) return false;
  }
  return true;
}

std::string gpt2_tokenizer_json(const format::GgufFile& f, const Keys& k, const std::vector<std::string>& merges,
                                const PreTokenizer& pre, const std::string& what) {
  ojson vocab = ojson::object(), added = ojson::array();
  std::unordered_map<std::string, size_t> ids;
  // Every token is in the vocab, the added ones too (as GPT-2's <|endoftext|> is), so that its ids
  // run 0 to n - 1 and Hugging Face's reader gives each added token the id of its vocab entry.
  for (size_t i = 0; i < k.tokens.size(); ++i) {
    const std::string& t = k.tokens[i];
    if (k.types[i] == kControl || k.types[i] == kUserDefined)
      added.push_back({{"id", i}, {"content", t}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", false}, {"special", k.types[i] == kControl}});
    const auto [at, fresh] = ids.emplace(t, i);
    if (!fresh)
      refuse(what, "tokenizer.ggml.tokens[" + std::to_string(i) + "] ('" + t + "') is also token " + std::to_string(at->second));
    vocab[t] = i;
  }
  ojson pairs = ojson::array();
  for (size_t m = 0; m < merges.size(); ++m) {
    const std::string& s = merges[m];
    const std::string where = "tokenizer.ggml.merges[" + std::to_string(m) + "] ('" + s + "')";
    const size_t space = s.size() > 1 ? s.find(' ', 1) : std::string::npos;
    if (space == std::string::npos) refuse(what, where + " is not two tokens separated by a space");
    const std::string a = s.substr(0, space), b = s.substr(space + 1);
    for (const std::string* part : std::initializer_list<const std::string*>{&a, &b, nullptr}) {
      const std::string joined = part ? *part : a + b;
      if (!ids.count(joined))
        refuse(what, where + (part ? " names '" : " joins to '") + joined + "', which is not a token of the BPE vocabulary" +
                         (part ? "" : " (a merge must make a token)"));
    }
    pairs.push_back({a, b});
  }
  const bool add_bos = bool_key(f, "tokenizer.ggml.add_bos_token", what).value_or(pre.add_bos);
  const bool add_eos = bool_key(f, "tokenizer.ggml.add_eos_token", what).value_or(false);
  ojson post = byte_level(false);
  if (add_bos || add_eos) {
    ojson single = ojson::array(), specials = ojson::object();
    auto special = [&](const std::optional<int32_t>& id, const char* key) {
      if (!id) refuse(what, std::string("tokenizer.ggml.") + key + "_token is true but the file has no tokenizer.ggml." + key + "_token_id");
      const std::string& name = k.tokens[static_cast<size_t>(*id)];
      single.push_back({{"SpecialToken", {{"id", name}, {"type_id", 0}}}});
      specials[name] = {{"id", name}, {"ids", {*id}}, {"tokens", {name}}};
    };
    if (add_bos) special(k.bos, "add_bos");
    single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
    if (add_eos) special(k.eos, "add_eos");
    post = {{"type", "TemplateProcessing"}, {"single", single}, {"pair", single}, {"special_tokens", specials}};
  }
  ojson doc;
  doc["version"] = "1.0";
  doc["truncation"] = nullptr;
  doc["padding"] = nullptr;
  doc["added_tokens"] = added;
  doc["normalizer"] = pre.normalizer;
  doc["pre_tokenizer"] = pre.pre_tokenizer;
  doc["post_processor"] = post;
  doc["decoder"] = byte_level(true);
  doc["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                  {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                  {"ignore_merges", pre.ignore_merges}, {"vocab", vocab}, {"merges", pairs}};
  return doc.dump(1) + "\n";
}

// ---- llama: a SentencePiece ModelProto, written field by field (protobuf's wire format) ----

void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
void field_varint(std::string& out, uint32_t field, uint64_t v) {
  varint(out, uint64_t{field} << 3);
  varint(out, v);
}
void field_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  varint(out, uint64_t{field} << 3 | 2);
  varint(out, bytes.size());
  out += bytes;
}
void field_float(std::string& out, uint32_t field, float v) {
  varint(out, uint64_t{field} << 3 | 5);
  char b[4];
  std::memcpy(b, &v, 4);
  out.append(b, 4);
}

bool is_byte_piece(const std::string& t) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && hex(t[3]) && hex(t[4]) && t[5] == '>';
}

std::string llama_model_proto(const format::GgufFile& f, Keys& k, const std::string& what) {
  const size_t n = k.tokens.size();
  const auto scores = number_array(f, "tokenizer.ggml.scores", n, what, false);
  if (!scores) refuse(what, "has a 'llama' vocabulary but no key 'tokenizer.ggml.scores' (its merges come from the scores)");
  // The unknown piece: the one of type 2, else the one tokenizer.ggml.unknown_token_id names
  // (llama.cpp's converter marks Llama 2's <unk> control when tokenizer_config.json calls it special).
  std::optional<size_t> unk;
  size_t bytes = 0;
  std::unordered_map<std::string, size_t> seen;
  for (size_t i = 0; i < n; ++i) {
    const std::string at = "tokenizer.ggml.tokens[" + std::to_string(i) + "] ('" + k.tokens[i] + "')";
    if (!std::isfinite((*scores)[i])) refuse(what, "tokenizer.ggml.scores[" + std::to_string(i) + "] is not finite");
    if (k.types[i] == kUnknown) {
      if (unk) refuse(what, at + " is a second unknown token (the first is " + std::to_string(*unk) + ")");
      unk = i;
    }
    if (k.types[i] == kByte) {
      if (!is_byte_piece(k.tokens[i])) refuse(what, at + " has token_type 6 (byte) but is not of the form <0xNN>");
      ++bytes;
    }
    // llama.cpp's converter writes a user-defined token's U+2581 as a space; SentencePiece matches
    // user-defined pieces against the text with its spaces as U+2581.
    if (k.types[i] == kUserDefined) {
      std::string piece;
      for (char c : k.tokens[i]) piece += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
      k.tokens[i] = piece;
    }
    const auto [other, fresh] = seen.emplace(k.tokens[i], i);
    if (!fresh) refuse(what, at + " is also token " + std::to_string(other->second));
  }
  // Byte fallback spells any byte no piece covers as its <0xNN> piece: all 256 or none.
  if (bytes != 0 && bytes != 256)
    refuse(what, "has " + std::to_string(bytes) + " byte tokens (token_type 6); a byte-fallback vocabulary has all 256");
  if (!unk && k.unk) {
    unk = static_cast<size_t>(*k.unk);
    k.types[*unk] = kUnknown;
  }
  if (!unk) refuse(what, "has a 'llama' vocabulary without an unknown token (token_type 2 or tokenizer.ggml.unknown_token_id)");
  if (k.unk && static_cast<size_t>(*k.unk) != *unk)
    refuse(what, "tokenizer.ggml.unknown_token_id is " + std::to_string(*k.unk) + " but token " + std::to_string(*unk) +
                     " has token_type 2 (unknown)");
  if (bool_key(f, "tokenizer.ggml.add_eos_token", what).value_or(false))
    refuse(what, "tokenizer.ggml.add_eos_token is true: lockstep's SentencePiece tokenizer adds BOS alone", ErrorKind::unsupported);
  const bool add_bos = bool_key(f, "tokenizer.ggml.add_bos_token", what).value_or(true);
  const bool add_prefix = bool_key(f, "tokenizer.ggml.add_space_prefix", what).value_or(true);
  const bool remove_spaces = bool_key(f, "tokenizer.ggml.remove_extra_whitespaces", what).value_or(false);
  // SentencePiece takes BOS and EOS by their piece, and only a control piece as either.
  auto control_piece = [&](const std::optional<int32_t>& id) {
    return id && k.types[static_cast<size_t>(*id)] == kControl ? k.tokens[static_cast<size_t>(*id)] : std::string();
  };

  std::string proto;
  for (size_t i = 0; i < n; ++i) {
    std::string piece;
    field_bytes(piece, 1, k.tokens[i]);
    field_float(piece, 2, static_cast<float>((*scores)[i]));
    field_varint(piece, 3, static_cast<uint64_t>(k.types[i]));
    field_bytes(proto, 1, piece);
  }
  std::string trainer;
  field_varint(trainer, 3, 2);  // model_type BPE
  field_varint(trainer, 4, n);  // vocab_size
  field_varint(trainer, 35, bytes != 0 ? 1 : 0);  // byte_fallback
  field_bytes(trainer, 45, k.tokens[*unk]);  // unk_piece
  field_bytes(trainer, 46, add_bos ? control_piece(k.bos) : std::string());  // bos_piece: "" adds none
  field_bytes(trainer, 47, control_piece(k.eos));  // eos_piece
  field_bytes(trainer, 48, std::string());         // pad_piece: none
  field_bytes(proto, 2, trainer);
  std::string normalizer;
  field_bytes(normalizer, 1, "identity");
  field_varint(normalizer, 3, add_prefix ? 1 : 0);     // add_dummy_prefix
  field_varint(normalizer, 4, remove_spaces ? 1 : 0);  // remove_extra_whitespaces
  field_varint(normalizer, 5, 1);                      // escape_whitespaces
  field_bytes(proto, 3, normalizer);
  return proto;
}

// gpt2_keys_of's reading of the parsed file; `unsupported` refuses.
Gpt2Keys gpt2_keys_of(const nlohmann::json& doc, const std::function<void(const std::string&)>& unsupported,
                      int32_t vocab_size) {
  const nlohmann::json& model = doc.at("model");
  Gpt2Keys out;
  for (const char* name : kPreNames) {
    const PreTokenizer p = *pre_tokenizer(name);
    const nlohmann::json normalizer = doc.contains("normalizer") ? doc["normalizer"] : nlohmann::json();
    if (ids_only(format::parse_json(p.normalizer.dump())) == ids_only(normalizer) &&
        ids_only(format::parse_json(p.pre_tokenizer.dump())) == ids_only(doc.value("pre_tokenizer", nlohmann::json())) &&
        p.ignore_merges == model.value("ignore_merges", false))
      out.pre = name;
  }
  if (out.pre.empty())
    unsupported("its normalizer, pre_tokenizer and model.ignore_merges are not those of a tokenizer.ggml.pre llama.cpp "
                "names (gpt-2, llama-bpe, qwen2, smollm, default)");
  out.tokens.resize(static_cast<size_t>(vocab_size));
  out.types.assign(static_cast<size_t>(vocab_size), 0);
  auto place = [&](int64_t id, const std::string& token, int32_t type) {
    if (id < 0 || id >= vocab_size) unsupported("token '" + token + "' has id " + std::to_string(id) + ", outside the model's vocabulary");
    if (out.types[static_cast<size_t>(id)] != 0 && out.tokens[static_cast<size_t>(id)] != token)
      unsupported("id " + std::to_string(id) + " is both '" + out.tokens[static_cast<size_t>(id)] + "' and '" + token + "'");
    out.tokens[static_cast<size_t>(id)] = token;
    out.types[static_cast<size_t>(id)] = type;
  };
  for (const auto& [token, id] : model.at("vocab").items()) place(id.get<int64_t>(), token, kNormal);
  for (const auto& t : doc.value("added_tokens", nlohmann::json::array())) {
    const std::string content = t.at("content").get<std::string>();
    for (const char* flag : {"lstrip", "rstrip", "single_word"})
      if (t.value(flag, false)) unsupported("added token '" + content + "' has " + flag + " (a GGUF vocabulary has no such flag)");
    place(t.at("id").get<int64_t>(), content, t.value("special", false) ? kControl : kUserDefined);
  }
  // An id without a token, or with the "[PADi]" llama.cpp's converter writes for one, is unused.
  for (size_t i = 0; i < out.tokens.size(); ++i) {
    const std::string pad = "[PAD" + std::to_string(i) + "]";
    if (out.types[i] == 0 || (out.types[i] == kNormal && out.tokens[i] == pad)) out.tokens[i] = pad, out.types[i] = kUnused;
  }
  for (const auto& m : model.at("merges")) {
    const std::string a = m.is_string() ? m.get<std::string>().substr(0, m.get<std::string>().find(' ')) : m.at(0).get<std::string>();
    const std::string b = m.is_string() ? m.get<std::string>().substr(a.size() + 1) : m.at(1).get<std::string>();
    if (a.find(' ') != std::string::npos || b.find(' ') != std::string::npos)
      unsupported("merge ['" + a + "', '" + b + "'] holds a space, which tokenizer.ggml.merges cannot");
    out.merges.push_back(a + " " + b);
  }
  // The post-processor: a TemplateProcessing (alone or in a Sequence beside ByteLevel) of one
  // special token before the text and one after at most.
  std::vector<nlohmann::json> processors;
  const nlohmann::json post = doc.value("post_processor", nlohmann::json());
  if (!post.is_null()) {
    if (post.at("type") == "Sequence") processors.assign(post.at("processors").begin(), post.at("processors").end());
    else processors.push_back(post);
  }
  for (const nlohmann::json& p : processors) {
    if (p.at("type") != "TemplateProcessing") continue;
    bool after = false;
    for (const nlohmann::json& piece : p.at("single")) {
      if (piece.contains("Sequence")) {
        after = true;
        continue;
      }
      const nlohmann::json& ids = p.at("special_tokens").at(piece.at("SpecialToken").at("id").get<std::string>()).at("ids");
      int32_t& slot = after ? out.eos : out.bos;
      if (ids.size() != 1 || slot != -1) unsupported("its post_processor puts more than one token on a side of the text");
      slot = ids.at(0).get<int32_t>();
    }
  }
  return out;
}

}  // namespace

Gpt2Keys gpt2_keys_of(const std::string& tokenizer_json, const std::string& what, int32_t vocab_size) {
  auto unsupported = [&](const std::string& why) { refuse(what, why + "; GGUF export cannot write it", ErrorKind::unsupported); };
  nlohmann::json doc;
  try {
    doc = format::parse_json(tokenizer_json);
  } catch (const nlohmann::json::exception& e) {
    refuse(what, std::string("is not JSON: ") + e.what());
  }
  // The file loads (lockstep's reader checked it), so its keys have their types; only what GGUF
  // cannot say is looked at here (a key of another type is still an Error, not a crash).
  try {
    return gpt2_keys_of(doc, unsupported, vocab_size);
  } catch (const nlohmann::json::exception& e) {
    refuse(what, std::string("cannot be read as a tokenizer.json: ") + e.what());
  }
}

GgufVocabulary convert_gguf_vocabulary(const format::GgufFile& f, const std::string& what, int32_t vocab_size) {
  GgufVocabulary out;
  const format::GgufValue* model = f.find("tokenizer.ggml.model");
  if (!model || model->type != kStringType) refuse(what, "key 'tokenizer.ggml.model' is missing or not a string");
  out.model = model->text;
  if (out.model != "gpt2" && out.model != "llama")
    refuse(what, "its vocabulary is tokenizer.ggml.model '" + out.model + "'; lockstep converts 'gpt2' (byte-level BPE) and "
                 "'llama' (SentencePiece); import with --ids-only to take and give token ids", ErrorKind::unsupported);
  Keys k = read_keys(f, what, vocab_size);
  if (out.model == "gpt2") {
    if (const format::GgufValue* p = f.find("tokenizer.ggml.pre")) {
      if (p->type != kStringType) refuse(what, "key 'tokenizer.ggml.pre' is not a string");
      out.pre = p->text;
    }
    const std::optional<PreTokenizer> pre = pre_tokenizer(out.pre);
    if (!pre)
      refuse(what, "tokenizer.ggml.pre '" + out.pre + "' is not a pre-tokenizer lockstep converts (it converts gpt-2, "
                   "llama-bpe, qwen2, smollm and default); import with --ids-only to take and give token ids",
             ErrorKind::unsupported);
    const std::vector<std::string>& merges = string_array(f, "tokenizer.ggml.merges", what);
    if (!is_byte_vocabulary(k, merges)) {
      out.file = "tokenizer.json";
      out.type = "huggingface";
      out.bytes = gpt2_tokenizer_json(f, k, merges, *pre, what);
    }
  } else {
    out.file = "tokenizer.model";
    out.type = "sentencepiece";
    out.bytes = llama_model_proto(f, k, what);
  }
  // Loaded by lockstep's own reader now, so that what it would refuse is refused before anything
  // is written (and a build without the reader says so).
  if (!out.file.empty()) {
    const std::string as = what + " (its vocabulary as " + out.file + ")";
    if (out.type == "huggingface") {
      text::require_hf_tokenizer(as);
      (void)text::load_hf_tokenizer(out.bytes, as);
    } else {
      text::require_sentencepiece(as);
      (void)text::load_sentencepiece(out.bytes, as);
    }
  }
  for (const auto& id : {k.eos, k.eot, k.eom})
    if (id && std::find(out.eos_token_ids.begin(), out.eos_token_ids.end(), *id) == out.eos_token_ids.end())
      out.eos_token_ids.push_back(*id);
  if (const format::GgufValue* t = f.find("tokenizer.chat_template")) {
    if (t->type != kStringType || !text::valid_utf8(t->text))
      refuse(what, "key 'tokenizer.chat_template' is not a string of UTF-8");
    // The template's bos_token and eos_token are those tokens' strings (control tokens' are their text).
    auto text_of = [&](const std::optional<int32_t>& id) { return id ? k.tokens[static_cast<size_t>(*id)] : std::string(); };
    out.chat_template = chat_template_file(t->text, text_of(k.bos), text_of(k.eos), what + ": key 'tokenizer.chat_template'");
  }
  return out;
}

}  // namespace lockstep::interop
