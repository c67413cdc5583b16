// libFuzzer target: any bytes as the body of POST /v1/completions or /v1/chat/completions, or of
// POST /tokenize or /detokenize, against the request parsers every HTTP session uses
// (src/serve/http_api.hpp). The first byte chooses the endpoint (bit 2: the tokenizer's, else the
// completions'; bit 0: chat, or detokenize) and the model (bit 1: a byte model of 256 ids, else
// one of 300 ids that takes token ids only). Whatever the bytes, the parser must either return a
// request within every bound docs/HTTP.md states (an answer of ids in the vocabulary, or of
// valid UTF-8 text), or refuse with an ApiError of status 400 or 404 whose error JSON parses
// back: never another exception (the session would answer 500), never a crash.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "serve/http_api.hpp"

namespace {

using namespace lockstep;
using serve::ApiError;

[[noreturn]] void broken(const char* promise) {
  std::fprintf(stderr, "the completion request parser broke a promise: %s\n", promise);
  __builtin_trap();
}

void check(const serve::CompletionRequest& r, const ModelConfig& config, bool chat) {
  if (r.chat != chat) broken("the request is the endpoint's kind");
  if (r.prompts.empty() || (chat && r.prompts.size() != 1)) broken("one prompt, or a completion's batch");
  if (r.prompts.size() * static_cast<size_t>(r.n) > static_cast<size_t>(serve::max_prompts)) broken("prompts x n <= 64");
  for (const auto& prompt : r.prompts) {
    if (prompt.empty()) broken("a prompt has at least one token");
    for (int32_t id : prompt)
      if (id < 0 || id >= config.vocab_size) broken("every prompt id is in the vocabulary");
  }
  if (r.max_tokens < 0 || r.max_tokens > serve::max_request_tokens) broken("max_tokens is in [0, 2^20]");
  if (r.n < 1 || r.n > serve::max_choices) broken("n is in [1, 16]");
  if (r.logprobs < -1 || r.logprobs > serve::max_logprobs) broken("logprobs is -1 or in [0, 20]");
  if (r.stop.size() > static_cast<size_t>(serve::max_stops)) broken("at most 16 stop strings");
  for (const std::string& s : r.stop)
    if (s.empty()) broken("stop strings are not empty");
  const SamplingOptions& s = r.sampling;
  if (!(std::isfinite(s.temperature) && s.temperature >= 0)) broken("temperature is finite and >= 0");
  if (!(s.top_p > 0 && s.top_p <= 1)) broken("top_p is in (0, 1]");
  if (s.top_k < 0 || s.top_k > config.vocab_size) broken("top_k is in [0, vocab]");
  if (chat && r.echo) broken("a chat request does not echo");
  if (r.include_usage && !r.stream) broken("include_usage only for a stream");
  if (config.vocab_size != 256 && (r.echo || !r.stop.empty())) broken("a model without text has no stop or echo");
}

void check_tokenizer_answer(const nlohmann::json& answer, const ModelConfig& config, bool detokenize) {
  if (detokenize) {
    if (!answer.contains("prompt") || !answer["prompt"].is_string()) broken("detokenize answers a prompt");
    try {
      (void)answer.dump();  // throws on text that is not valid UTF-8
    } catch (const nlohmann::json::exception&) {
      broken("detokenize's text is valid UTF-8");
    }
    return;
  }
  if (!answer["tokens"].is_array() || answer["count"] != answer["tokens"].size()) broken("tokenize counts its tokens");
  for (const auto& id : answer["tokens"])
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= config.vocab_size)
      broken("every token is in the vocabulary");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool chat = data[0] & 1, tokenizer_endpoint = data[0] & 4;
  ModelConfig config;
  config.vocab_size = data[0] & 2 ? 256 : 300;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    if (tokenizer_endpoint && chat)
      check_tokenizer_answer(serve::detokenize_answer(body, config, "tiny", nullptr), config, true);
    else if (tokenizer_endpoint)
      check_tokenizer_answer(serve::tokenize_answer(body, config, "tiny", nullptr), config, false);
    else
      check(serve::parse_completion(body, config, "tiny", nullptr, chat), config, chat);
  } catch (const ApiError& e) {
    if (e.status != 400 && e.status != 404) broken("a refusal is 400 or 404");
    if (std::string(e.what()).empty()) broken("a refusal says what is wrong");
    if (e.status == 404 && (e.code != "model_not_found" || e.param != "model")) broken("404 names the model");
    const std::string text = serve::error_json(e.what(), e.type, e.param, e.code);
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.contains("error") || !j["error"].is_object()) broken("the error is JSON");
  } catch (...) {
    broken("only ApiError leaves the parser");
  }
  return 0;
}
