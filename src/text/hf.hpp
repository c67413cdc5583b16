// The stages of a Hugging Face tokenizer.json (byte-level BPE), one file each, in the shape of
// the file and of Hugging Face's own code (huggingface/tokenizers: normalizers/, pre_tokenizers/,
// models/bpe/, processors/, decoders/), so that each reads like the key it loads:
//   hf_json.cpp          the key paths refusals name, and the byte-level alphabet
//   hf_normalizer.cpp    `normalizer`: null or NFC (utf8proc)
//   hf_pre_tokenizer.cpp `pre_tokenizer`: Split (Oniguruma), Digits, ByteLevel, a Sequence
//   hf_bpe.cpp           `model`: BPE, merges by rank
//   hf_post.cpp          `post_processor` (TemplateProcessing, ByteLevel) and `decoder` (ByteLevel)
//   hf_tokenizer.cpp     the whole file, `added_tokens`, and encode/decode through the stages
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/utf8.hpp"

namespace lockstep::text::hf {

using json = nlohmann::json;

// A refusal: the key path in the file (e.g. `pre_tokenizer.pretokenizers[2].type`) and why;
// hf_tokenizer.cpp turns it into an Error naming the file.
struct Refusal {
  std::string path, why;
};

// A value of the file with its key path.
struct Node {
  const json* v;
  std::string path;
  bool has(const char* key) const { return v->is_object() && v->contains(key) && !(*v)[key].is_null(); }
  Node at(const char* key) const;  // refuses when missing
  Node opt(const char* key) const;  // null when missing
  Node at(size_t i) const { return {&(*v)[i], path + "[" + std::to_string(i) + "]"}; }
  bool null() const { return v->is_null(); }
  [[noreturn]] void refuse(const std::string& why) const { throw Refusal{path, why}; }
  std::string str() const;
  bool boolean() const;
  bool boolean_or(const char* key, bool fallback) const;
  int32_t id() const;  // a token id: 0 to max_vocab_size - 1 (lockstep/config.hpp)
  const json& array() const;
  const json& object() const;
  std::string type() const;  // its "type" string
  [[noreturn]] void unsupported_type() const;
};

// GPT-2's byte-level alphabet: byte b shows as a printable character (its own where it is one).
const std::array<std::string, 256>& byte_chars();
// The inverse, for the decoder: a character's byte, or -1.
int byte_of(char32_t c);
// The first code point of s at `at` and its length in bytes (s is valid UTF-8).
char32_t next_char(std::string_view s, size_t at, size_t* length);
// Whether s is valid UTF-8, and Rust's String::from_utf8_lossy (text/utf8.hpp).
using text::lossy_utf8;
using text::valid_utf8;

struct Normalizer {
  bool nfc = false;
  std::string apply(std::string_view text) const;
};
Normalizer read_normalizer(const Node& n);

class Regex;  // Oniguruma (hf_pre_tokenizer.cpp)

enum class Behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

struct PreTokenizer {
  struct Step {
    enum class Kind { split, byte_level } kind = Kind::split;
    std::shared_ptr<const Regex> regex;  // split; byte_level with use_regex: GPT-2's
    Behavior behavior = Behavior::isolated;
    bool invert = false;
    bool add_prefix_space = false;  // byte_level
  };
  std::vector<Step> steps;
  // Replaces `pieces` by their pre-tokens (the model sees each alone).
  void apply(std::vector<std::string>& pieces) const;
};
PreTokenizer read_pre_tokenizer(const Node& n);

class Bpe {
 public:
  explicit Bpe(const Node& model);
  // Appends the ids of one pre-token.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;
  const std::vector<std::string>& tokens() const { return tokens_; }  // by id; "" where none
  int32_t id_of(const std::string& token) const;  // -1: none
  int32_t unk() const { return unk_; }

 private:
  void merge(std::string_view word, std::vector<int32_t>& out) const;
  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> tokens_;
  struct Merge {
    int32_t rank, id;
  };
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> rank, merged id
  bool ignore_merges_ = false, fuse_unk_ = false;
  int32_t unk_ = -1;
  // Words already tokenized (text repeats words): a bounded cache, as Hugging Face's.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

// `post_processor`: what encode(text, add_special_tokens = true) puts around a text's ids.
struct PostProcessor {
  struct Piece {
    bool sequence = false;        // the text's ids
    std::vector<int32_t> ids;     // a special token's ids
  };
  std::vector<Piece> single;  // empty: ids as they are
  void apply(std::vector<int32_t>& ids) const;
};
// A TemplateProcessing's special tokens take their ids from its own `special_tokens` entry.
PostProcessor read_post_processor(const Node& n);

// `decoder`: ByteLevel (tokens' characters back to bytes).
void read_decoder(const Node& n);
std::string byte_level_decode(const std::vector<const std::string*>& tokens);
// One token's bytes by that rule (not yet read as UTF-8).
std::string byte_level_bytes(const std::string& token);

}  // namespace lockstep::text::hf
