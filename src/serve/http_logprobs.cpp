// The logprobs objects of a completion's answer and events: OpenAI's legacy four arrays
// (tokens, token_logprobs, top_logprobs, text_offset) for completions, `content` entries for
// chat, the prompt's own scores for echo, and each choice's sha256.
#include <algorithm>

#include "core/sha256.hpp"
#include "serve/http_session.hpp"

namespace lockstep::serve {

using nlohmann::json;

json HttpSession::prompt_logprobs_json(const Choice& c) const {
  const Tokenizer* tokenizer = context_.tokenizer.get();
  const bool bytes = bytes_model();
  const std::vector<int32_t>& prompt = completion_.prompts[c.prompt];
  const std::string& prompt_text = prompt_texts_[c.prompt];
  // Where each prompt token's text starts in the echoed text: a byte each, or as the tokenizer's
  // text of the prompt settles token by token (TextStream), within the echoed prompt_text.
  std::vector<size_t> offsets(prompt.size());
  if (bytes) {
    for (size_t i = 0; i < prompt.size(); ++i) offsets[i] = i;
  } else if (tokenizer) {
    TextStream text(*tokenizer, {});
    size_t at = 0;
    for (size_t i = 0; i < prompt.size(); ++i) {
      offsets[i] = std::min(at, prompt_text.size());
      try {
        at += text.push(prompt[i]).size();
      } catch (const std::exception&) {
      }
    }
  }
  json out = completion_logprobs();
  for (size_t i = 0; i < prompt.size(); ++i) {
    const bool scored = i >= c.unscored && i - c.unscored < c.prompt_logprobs.size();
    push_logprob(out, prompt[i], scored ? &c.prompt_logprobs[i - c.unscored] : nullptr, offsets[i]);
  }
  return out;
}

json HttpSession::completion_logprobs() {
  return {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
          {"text_offset", json::array()}};
}

void HttpSession::push_logprob(json& lps, int32_t token, const TokenLogprobs* t, size_t offset) const {
  const auto text_of = [&](int32_t id) { return token_text(id, context_.tokenizer.get(), bytes_model()); };
  lps["tokens"].push_back(text_of(token));
  lps["text_offset"].push_back(offset);
  if (!t) {
    lps["token_logprobs"].push_back(nullptr);
    lps["top_logprobs"].push_back(nullptr);
    return;
  }
  lps["token_logprobs"].push_back(t->logprob);
  json top = json::object();
  for (const auto& [id, lp] : t->top) top[text_of(id)] = lp;
  lps["top_logprobs"].push_back(std::move(top));
}

std::string HttpSession::choice_sha256(const Choice& c) const {
  if (bytes_model()) return sha256_hex(c.bytes.data(), c.bytes.size());
  if (context_.tokenizer) return sha256_hex(c.text.data(), c.text.size());
  std::string le;  // token ids only: the ids as little-endian int32
  for (int32_t id : c.ids)
    for (int k = 0; k < 4; ++k) le.push_back(static_cast<char>((static_cast<uint32_t>(id) >> (8 * k)) & 0xff));
  return sha256_hex(le.data(), le.size());
}

json HttpSession::logprobs_json(const std::vector<TokenLogprobs>& lps, size_t text_offset,
                                const std::vector<size_t>* token_offsets) const {
  const Tokenizer* tokenizer = context_.tokenizer.get();
  const bool bytes = bytes_model();
  auto text_of = [&](int32_t id) { return token_text(id, tokenizer, bytes); };
  // OpenAI's `bytes`: the token's own bytes (a byte model's byte; a tokenizer piece's UTF-8).
  auto bytes_of = [&](int32_t id) {
    if (bytes) return json{id};
    if (!tokenizer) return json(nullptr);
    const std::string t = tokenizer->token_text(id);
    if (t.rfind("bytes:\\x", 0) == 0 && t.size() == 10) return json{std::stoi(t.substr(8), nullptr, 16)};
    json out = json::array();
    for (unsigned char ch : t) out.push_back(ch);
    return out;
  };
  if (completion_.chat) {
    json content = json::array();
    for (const TokenLogprobs& t : lps) {
      json top = json::array();
      for (const auto& [id, lp] : t.top) top.push_back({{"token", text_of(id)}, {"logprob", lp}, {"bytes", bytes_of(id)}});
      content.push_back({{"token", text_of(t.token)}, {"logprob", t.logprob}, {"bytes", bytes_of(t.token)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json out = completion_logprobs();
  for (size_t i = 0; i < lps.size(); ++i)
    push_logprob(out, lps[i].token, &lps[i], token_offsets ? text_offset + (*token_offsets)[i] : text_offset++);
  return out;
}

}  // namespace lockstep::serve
