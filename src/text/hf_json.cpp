// tokenizer.json's key paths for refusals, GPT-2's byte-level alphabet, and the UTF-8 rules the
// other stages share (text/hf.hpp).
#include <unordered_map>

#include "text/hf.hpp"

#include "lockstep/config.hpp"

namespace lockstep::text::hf {

Node Node::at(const char* key) const {
  if (!v->is_object()) refuse("must be an object, not " + std::string(v->type_name()));
  if (!v->contains(key)) Node{v, path.empty() ? key : path + "." + key}.refuse("is missing");
  return {&(*v)[key], path.empty() ? key : path + "." + key};
}

Node Node::opt(const char* key) const {
  static const json null_value;
  if (!v->is_object()) refuse("must be an object, not " + std::string(v->type_name()));
  return {v->contains(key) ? &(*v)[key] : &null_value, path.empty() ? key : path + "." + key};
}

std::string Node::str() const {
  if (!v->is_string()) refuse("must be a string, not " + std::string(v->type_name()));
  return v->get<std::string>();
}

bool Node::boolean() const {
  if (!v->is_boolean()) refuse("must be true or false, not " + std::string(v->type_name()));
  return v->get<bool>();
}

bool Node::boolean_or(const char* key, bool fallback) const {
  const Node b = opt(key);
  return b.null() ? fallback : b.boolean();
}

int32_t Node::id() const {
  // Bounded by the vocabulary a model may have (docs/LIMITS.md): the tokenizer keeps a table
  // indexed by id, so an id of 2^31 - 1 would have asked for 64 GB.
  if (!v->is_number_unsigned() || v->get<uint64_t>() >= static_cast<uint64_t>(max_vocab_size))
    refuse("must be a token id (0 to " + std::to_string(max_vocab_size - 1) + ", the largest vocabulary lockstep takes)");
  return static_cast<int32_t>(v->get<uint64_t>());
}

const json& Node::array() const {
  if (!v->is_array()) refuse("must be an array, not " + std::string(v->type_name()));
  return *v;
}

const json& Node::object() const {
  if (!v->is_object()) refuse("must be an object, not " + std::string(v->type_name()));
  return *v;
}

std::string Node::type() const { return at("type").str(); }

void Node::unsupported_type() const {
  const Node t = at("type");
  t.refuse("\"" + t.str() + "\" is not supported");
}

// GPT-2's bytes_to_unicode(): the printable Latin-1 bytes stand for themselves, the others for
// U+0100 onwards in byte order, so that every byte is one visible character of a token.
const std::array<std::string, 256>& byte_chars() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const int c = printable ? b : next++;
      t[b] = c < 0x80 ? std::string(1, static_cast<char>(c))
                      : std::string{static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
    }
    return t;
  }();
  return table;
}

int byte_of(char32_t c) {
  static const std::unordered_map<char32_t, int> inverse = [] {
    std::unordered_map<char32_t, int> m;
    for (int b = 0; b < 256; ++b) {
      size_t len = 0;
      m[next_char(byte_chars()[b], 0, &len)] = b;
    }
    return m;
  }();
  const auto it = inverse.find(c);
  return it == inverse.end() ? -1 : it->second;
}

char32_t next_char(std::string_view s, size_t at, size_t* length) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[at + i]); };
  const unsigned char c = b(0);
  if (c < 0x80) return *length = 1, c;
  if (c < 0xE0) return *length = 2, ((c & 0x1Fu) << 6) | (b(1) & 0x3Fu);
  if (c < 0xF0) return *length = 3, ((c & 0x0Fu) << 12) | ((b(1) & 0x3Fu) << 6) | (b(2) & 0x3Fu);
  return *length = 4, ((c & 0x07u) << 18) | ((b(1) & 0x3Fu) << 12) | ((b(2) & 0x3Fu) << 6) | (b(3) & 0x3Fu);
}


}  // namespace lockstep::text::hf
