#include "serve/logprobs_text.hpp"

#include <stdexcept>

#include "serve/http_wire.hpp"

namespace lockstep::serve {

using nlohmann::json;

json TokenNames::bytes_of(int32_t id) const {
  if (bytes) return json{id};
  if (!tokenizer) return json(nullptr);
  const std::string t = tokenizer->token_text(id);
  if (t.rfind("bytes:\\x", 0) == 0 && t.size() == 10) return json{std::stoi(t.substr(8), nullptr, 16)};
  json out = json::array();
  for (unsigned char ch : t) out.push_back(ch);
  return out;
}

void LogprobsText::add(const TokenNames& names, int32_t token, const TokenLogprobs* t, size_t offset) {
  const auto sep = [&](std::string& s) {
    if (!empty_) s += ',';
  };
  if (chat_) {
    if (!t) return;
    json top = json::array();
    for (const auto& [id, lp] : t->top) top.push_back({{"token", names.text(id)}, {"logprob", lp}, {"bytes", names.bytes_of(id)}});
    sep(tokens_);
    tokens_ += json_body({{"token", names.text(token)}, {"logprob", t->logprob}, {"bytes", names.bytes_of(token)},
                          {"top_logprobs", std::move(top)}});
    empty_ = false;
    return;
  }
  sep(text_offset_);
  sep(token_logprobs_);
  sep(tokens_);
  sep(top_logprobs_);
  empty_ = false;
  text_offset_ += std::to_string(offset);
  tokens_ += json_body(names.text(token));
  if (!t) {
    token_logprobs_ += "null";
    top_logprobs_ += "null";
    return;
  }
  token_logprobs_ += json_body(t->logprob);
  json top = json::object();
  for (const auto& [id, lp] : t->top) top[names.text(id)] = lp;
  top_logprobs_ += json_body(top);
}

std::string LogprobsText::object() const {
  if (chat_) return "{\"content\":[" + tokens_ + "]}";
  std::string out;
  out.reserve(bytes() + 80);
  out += "{\"text_offset\":[";
  out += text_offset_;
  out += "],\"token_logprobs\":[";
  out += token_logprobs_;
  out += "],\"tokens\":[";
  out += tokens_;
  out += "],\"top_logprobs\":[";
  out += top_logprobs_;
  out += "]}";
  return out;
}

void LogprobsText::clear() {
  for (std::string* s : {&text_offset_, &token_logprobs_, &tokens_, &top_logprobs_}) std::string().swap(*s);
  empty_ = true;
}

std::string with_value(std::string dumped, const std::string& key, const std::string& value) {
  const std::string placeholder = "\"" + key + "\":null";
  const size_t at = dumped.find(placeholder);
  if (at == std::string::npos) throw std::logic_error("with_value: no \"" + key + "\":null in the JSON");
  std::string out;
  out.reserve(dumped.size() + value.size());
  out.append(dumped, 0, at + key.size() + 3);
  out += value;
  out.append(dumped, at + placeholder.size());
  return out;
}

}  // namespace lockstep::serve
