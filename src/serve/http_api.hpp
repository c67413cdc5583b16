// The OpenAI-compatible request and response shapes (docs/HTTP.md): parsing and checking a
// completion request, the JSON of answers, chunks and errors. No sockets here.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lockstep/generator.hpp"
#include "lockstep/grammar.hpp"
#include "lockstep/config.hpp"
#include "lockstep/chat_template.hpp"
#include "lockstep/tokenizer.hpp"

namespace lockstep::serve {

// A request the client got wrong: HTTP `status`, OpenAI's error `type`, the field (`param`).
struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string param = {}, std::string type = "invalid_request_error",
           std::string code = {})
      : std::runtime_error(message), status(status), param(std::move(param)), type(std::move(type)),
        code(std::move(code)) {}
  int status;
  std::string param, type, code;
};

// A 400 naming the request field that is wrong.
inline ApiError bad(const std::string& field, const std::string& message) { return ApiError(400, message, field); }

// {"error": {"message", "type", "param", "code"}} with null for an empty param or code.
std::string error_json(const std::string& message, const std::string& type, const std::string& param,
                       const std::string& code);

struct CompletionRequest {
  bool chat = false;
  // Token ids of each prompt (a string prompt's bytes, or BOS and its pieces through the
  // tokenizer): one, or OpenAI's batch of several (completions only), each with its n choices.
  std::vector<std::vector<int32_t>> prompts;
  int32_t max_tokens = 16;
  std::string tokens_field = "max_tokens";  // the field it came from (chat: or max_completion_tokens)
  SamplingOptions sampling{1.0f, 0, 1.0f, 0};  // OpenAI's defaults: temperature 1, top_p 1
  bool seed_given = false;
  std::vector<std::string> stop;
  int32_t n = 1;
  bool echo = false;
  int32_t logprobs = -1;  // -1: none; else the top N per token (0..20)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with the usage
  bool ignore_eos = false;     // vLLM's: go on past the model's end-of-sequence ids to max_tokens
  // Structured output (response_format, grammar or json_schema): null for none.
  std::shared_ptr<const Grammar> grammar;
};

// The grammar a request's `response_format`, `grammar` or `json_schema` asks for (null: none,
// or {"type": "text"}); throws ApiError 400 naming the field, and the keyword or the line and
// column the grammar engine names (http_structured.cpp). `request`: `body` as parse_body read it.
std::shared_ptr<const Grammar> requested_grammar(const std::string& body, const nlohmann::json& request);

inline constexpr int32_t max_choices = 16;  // n
inline constexpr int32_t max_prompts = 64;  // prompts x n
inline constexpr int32_t max_logprobs = 20;
// Stop strings a request: OpenAI allows 4; lm-evaluation-harness sends a task's `until` list
// whole (vLLM takes any number), so more are taken.
inline constexpr int32_t max_stops = 16;
inline constexpr int32_t max_request_tokens = 1 << 20;

// Throws ApiError (400 naming the field) for anything wrong, 404 model_not_found for a `model`
// field other than `model_name` (the served name). `chat`: a chat completion, whose
// `messages` become the prompt through chat_prompt_ids (the model's `chat_template`, else
// chat_prompt). `tokenizer`: the model's (null: none), which
// encodes text (BOS, then the pieces, as `lockstep generate`); a model with neither a tokenizer nor
// the 256 bytes takes token ids only and refuses text, `stop` and `echo`.
CompletionRequest parse_completion(const std::string& body, const ModelConfig& config, const std::string& model_name,
                                   const Tokenizer* tokenizer, bool chat, const ChatTemplate* chat_template = nullptr);

// A request's body as a JSON object: refused (ApiError 400) past kMaxJsonDepth levels, when not
// JSON or not an object; 404 model_not_found when its `model` names another than `model_name`.
nlohmann::json parse_body(const std::string& body, const std::string& model_name);

// The tokenizer endpoints vLLM serves, which lm-evaluation-harness's remote tokenizer calls
// (docs/HTTP.md, "Tokenizer endpoints"). POST /tokenize {"prompt", "add_special_tokens"
// (default true: a tokenizer's BOS first, as completions encode text)} -> {"tokens", "count",
// "max_model_len"}; a byte model's tokens are the text's UTF-8 bytes. vLLM's chat form
// {"messages", "add_generation_prompt" (default true)} gives the ids a chat completion of those
// messages would compute from (chat_prompt_ids).
nlohmann::json tokenize_answer(const std::string& body, const ModelConfig& config, const std::string& model_name,
                               const Tokenizer* tokenizer, const ChatTemplate* chat_template = nullptr);
// POST /detokenize {"tokens"} -> {"prompt"}: a byte model's bytes made valid UTF-8 (as a
// completion's text), else the tokenizer's decoding. A model of token ids only has no text: 400.
nlohmann::json detokenize_answer(const std::string& body, const ModelConfig& config, const std::string& model_name,
                                 const Tokenizer* tokenizer);
// GET /tokenizer_info: {"tokenizer_class" (sentencepiece, bytes or none), "vocab_size",
// "model_max_length" (the window), "bos_token", "eos_token", "unk_token", "pad_token"} (the
// special pieces' text; null where there is none, as for every byte model).
nlohmann::json tokenizer_info(const ModelConfig& config, const Tokenizer* tokenizer);

// The CORS header lines for a request from `origin` when `allowed` (--cors-origin) names it or
// holds "*", else "" (docs/HTTP.md, "Browsers on other origins"). `origin` comes from a parsed
// header, so it holds no CR or LF.
std::string cors_header_lines(const std::vector<std::string>& allowed, std::string_view origin);
// A named origin's preflight answer beside those lines: `methods`, the headers it asked for
// (`asked`, Access-Control-Request-Headers; empty: none) allowed, cached 10 minutes.
std::vector<std::pair<std::string, std::string>> cors_preflight_headers(std::string_view methods, std::string_view asked);

// The chat template for a base byte model: each message as "<role>: <content>\n", then
// "assistant:" — the text the model continues.
std::string chat_prompt(const nlohmann::json& messages);
// The token sequence of a conversation's next turn (docs/HTTP.md, "Chat"): the whole of
// `messages` rendered once, by `chat_template` with add_generation_prompt when the model has one
// (else chat_prompt), and encoded once with add_special_tokens false (a template writes its own
// BOS). ApiError 400 naming `messages` when the template refuses them.
std::vector<int32_t> chat_prompt_ids(const nlohmann::json& messages, bool add_generation_prompt, const ModelConfig& config,
                                     const Tokenizer* tokenizer, const ChatTemplate* chat_template);

// A byte token as logprobs show it: the character when printable ASCII, else "bytes:\xNN".
std::string token_text(int32_t token);
// A token of any model as logprobs show it: a byte model's as above, else through `tokenizer`
// (Tokenizer::token_text), else (token ids only) "<ID>".
std::string token_text(int32_t token, const Tokenizer* tokenizer, bool bytes);

// The log-probabilities (temperature 1) of `token` and of the `top` most likely tokens (ties
// to the lower id), computed in double in index order with lockstep's own exp and log, so they
// are the same bits everywhere.
struct TokenLogprobs {
  int32_t token = 0;
  double logprob = 0;
  std::vector<std::pair<int32_t, double>> top;
};
TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int32_t top);

}  // namespace lockstep::serve
