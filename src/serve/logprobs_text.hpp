// A completion's logprobs object written as JSON text token by token, byte for byte what
// nlohmann's dump of the same object gives (its keys in its order, each value dumped by it). A
// JSON tree of a token's top 20 takes several kilobytes; this holds the few hundred bytes it is
// sent as, so a non-streamed answer's logprobs take about their size on the wire (issue 35).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "lockstep/tokenizer.hpp"
#include "serve/http_api.hpp"

namespace lockstep::serve {

// How tokens show in logprobs: a byte model's byte, a tokenizer's piece, or a token id's "<ID>".
struct TokenNames {
  const Tokenizer* tokenizer = nullptr;
  bool bytes = false;
  std::string text(int32_t id) const { return token_text(id, tokenizer, bytes); }
  // OpenAI's `bytes` of a chat entry: the token's own bytes (a byte model's byte; a tokenizer
  // piece's UTF-8), null for a token id.
  nlohmann::json bytes_of(int32_t id) const;
};

class LogprobsText {
 public:
  explicit LogprobsText(bool chat = false) : chat_(chat) {}
  // A token: its log-probability and top N (`t`; null: no score, as for a prompt's first token;
  // chat entries always have one), and where its text starts in the choice's text (text_offset).
  void add(const TokenNames& names, int32_t token, const TokenLogprobs* t, size_t offset);
  // {"text_offset", "token_logprobs", "tokens", "top_logprobs"}, or chat's {"content"}.
  std::string object() const;
  size_t bytes() const { return text_offset_.size() + token_logprobs_.size() + tokens_.size() + top_logprobs_.size(); }
  void clear();  // and gives the memory back

 private:
  bool chat_;
  bool empty_ = true;
  // Each array's elements, comma-separated; chat's entries are in tokens_.
  std::string text_offset_, token_logprobs_, tokens_, top_logprobs_;
};

// `dumped` (a JSON text) with the first `"KEY":null` made `"KEY":VALUE`: a large value is dumped
// on its own and put in place, never copied into a tree. The key's first occurrence is the key
// itself when the keys before it (in nlohmann's sorted order) hold no such object: within a
// string, a quote is escaped, so `"KEY":null` cannot appear there.
std::string with_value(std::string dumped, const std::string& key, const std::string& value);

}  // namespace lockstep::serve
