#include "serve/http_api.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <set>

#include "core/host_math.hpp"
#include "format/json_text.hpp"
#include "serve/utf8_stream.hpp"

namespace lockstep::serve {
namespace {

using nlohmann::json;

int64_t integer(const json& v, const std::string& field, int64_t lo, int64_t hi) {
  if (!v.is_number_integer())
    throw bad(field, "'" + field + "' must be an integer, got " + v.dump());
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
    throw bad(field, "'" + field + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v.dump());
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    throw bad(field, "'" + field + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v.dump());
  return x;
}

float real(const json& v, const std::string& field) {
  if (!v.is_number()) throw bad(field, "'" + field + "' must be a number, got " + v.dump());
  // The JSON number as a double, then rounded to f32 (docs/HTTP.md says when that can differ
  // from `generate`'s direct rounding of the decimal text: never for up to 7 significant digits).
  const double d = v.get<double>();
  if (!std::isfinite(d) || std::fabs(d) > 3.4e38) throw bad(field, "'" + field + "' is out of range: " + v.dump());
  return static_cast<float>(d);
}

bool boolean(const json& v, const std::string& field) {
  if (!v.is_boolean()) throw bad(field, "'" + field + "' must be true or false, got " + v.dump());
  return v.get<bool>();
}

// The ids of `text`: through the tokenizer (with its special tokens, e.g. BOS, unless `bos` is
// false: Tokenizer::encode's add_special_tokens), else its
// bytes for a byte model.
std::vector<int32_t> ids_of(const std::string& text, const ModelConfig& config, const Tokenizer* tokenizer,
                            const std::string& field, bool bos = true) {
  std::vector<int32_t> out;
  if (tokenizer) {
    try {
      out = tokenizer->encode(text, bos);
    } catch (const std::exception& e) {
      throw bad(field, "'" + field + "': " + e.what());
    }
    return out;
  }
  if (config.vocab_size != 256)
    throw bad(field, "this model has no tokenizer and its vocabulary has " + std::to_string(config.vocab_size) +
                         " ids, not bytes, so it takes no text: give '" + field + "' as an array of token ids");
  for (unsigned char c : text) out.push_back(c);
  return out;
}

// OpenAI's fields that would change the answer and that lockstep does not implement: accepted at
// their neutral values (SDKs send those), refused otherwise rather than ignored, so that an
// answer is never silently other than what was asked.
void refuse_unsupported(const json& j, bool chat) {
  const auto given = [&](const char* k) -> const json* {
    const auto it = j.find(k);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  };
  const auto neutral_number = [&](const char* k, double neutral) {
    if (const json* v = given(k); v && !(v->is_number() && v->get<double>() == neutral))
      throw bad(k, std::string("'") + k + "' is not supported (only " + (neutral == 0 ? "0" : "1") +
                       "): lockstep samples from the model's distribution as temperature, top_k and top_p shape it");
  };
  neutral_number("presence_penalty", 0);
  neutral_number("frequency_penalty", 0);
  neutral_number("repetition_penalty", 1);
  if (const json* v = given("logit_bias"); v && !(v->is_object() && v->empty()))
    throw bad("logit_bias", "'logit_bias' is not supported (only {})");
  if (chat) {
    for (const char* k : {"tools", "functions"})
      if (const json* v = given(k); v && !(v->is_array() && v->empty()))
        throw bad(k, std::string("'") + k + "' is not supported: this is a base model without tool calls");
    for (const char* k : {"tool_choice", "function_call"})
      if (const json* v = given(k); v && !(*v == "none" || *v == "auto"))
        throw bad(k, std::string("'") + k + "' is not supported (only \"none\" or \"auto\"): this is a base model without tool calls");
    if (const json* v = given("parallel_tool_calls"); v && !v->is_boolean())
      throw bad("parallel_tool_calls", "'parallel_tool_calls' must be true or false");
    if (const json* v = given("store"); v && !(v->is_boolean() && !v->get<bool>()))
      throw bad("store", "'store' is not supported (only false): lockstep keeps no completions");
  } else if (const json* v = given("suffix"); v && !(v->is_string() && v->get<std::string>().empty())) {
    throw bad("suffix", "'suffix' is not supported (only \"\")");
  }
}

// The fields a completion request may hold (docs/HTTP.md): any other is refused, naming it,
// rather than ignored (OpenAI does the same). A field given as null counts as not given.
// `user`, `metadata` and `service_tier` change nothing lockstep computes and are read past.
void refuse_unknown(const json& j, bool chat) {
  static const std::set<std::string> common = {
      "model", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "n", "stream", "stream_options",
      "ignore_eos", "logprobs", "echo", "best_of", "presence_penalty", "frequency_penalty", "repetition_penalty",
      "logit_bias", "response_format", "grammar", "json_schema", "user", "metadata", "service_tier"};
  static const std::set<std::string> completions_only = {"prompt", "suffix"};
  static const std::set<std::string> chat_only = {"messages", "max_completion_tokens", "top_logprobs", "tools",
                                                   "functions", "tool_choice", "function_call", "parallel_tool_calls",
                                                   "store"};
  for (const auto& [key, value] : j.items()) {
    if (value.is_null() || common.count(key) || (chat ? chat_only : completions_only).count(key)) continue;
    throw bad(key, "'" + key + "' is not a field lockstep implements" +
                       (chat ? std::string(" for chat completions") : std::string(" for completions")) +
                       " (docs/HTTP.md lists them)");
  }
}

}  // namespace

std::string error_json(const std::string& message, const std::string& type, const std::string& param,
                       const std::string& code) {
  json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return json{{"error", e}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string cors_header_lines(const std::vector<std::string>& allowed, std::string_view origin) {
  const bool any = std::find(allowed.begin(), allowed.end(), "*") != allowed.end();
  if (origin.empty() || (!any && std::find(allowed.begin(), allowed.end(), origin) == allowed.end())) return {};
  return "Access-Control-Allow-Origin: " + (any ? std::string("*") : std::string(origin)) +
         "\r\nVary: Origin\r\nAccess-Control-Expose-Headers: X-Lockstep-Replica\r\n";
}

std::vector<std::pair<std::string, std::string>> cors_preflight_headers(std::string_view methods, std::string_view asked) {
  std::vector<std::pair<std::string, std::string>> headers = {{"Access-Control-Allow-Methods", std::string(methods)},
                                                              {"Access-Control-Max-Age", "600"}};
  if (!asked.empty()) headers.emplace_back("Access-Control-Allow-Headers", std::string(asked));
  return headers;
}

std::string chat_prompt(const json& messages) {
  if (!messages.is_array() || messages.empty())
    throw bad("messages", "'messages' must be a non-empty array of {\"role\", \"content\"} objects");
  std::string text;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string field = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string())
      throw bad(field, "'" + field + "' must be an object with string 'role' and 'content'");
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant")
      throw bad(field + ".role", "'" + field + ".role' must be system, user or assistant, got '" + role + "'");
    text += role + ": " + m["content"].get<std::string>() + "\n";
  }
  return text + "assistant:";
}

std::vector<int32_t> chat_prompt_ids(const json& messages, bool add_generation_prompt, const ModelConfig& config,
                                     const Tokenizer* tokenizer, const ChatTemplate* chat_template) {
  const std::string builtin = chat_prompt(messages);  // the messages' checks too
  if (!chat_template) return ids_of(builtin, config, tokenizer, "messages");
  std::string text;
  try {
    text = chat_template->render_json(messages.dump(), add_generation_prompt);
  } catch (const Error& e) {
    throw bad("messages", std::string("'messages': ") + e.what());
  }
  return ids_of(text, config, tokenizer, "messages", false);
}

namespace {

// nlohmann's message less its own tag ("[json.exception.parse_error.101] "): the client reads
// where and what, not the parser's internals.
std::string json_error_text(const json::exception& e) {
  std::string what = e.what();
  if (const size_t tag = what.find("] "); what.rfind("[json.exception.", 0) == 0 && tag != std::string::npos)
    what.erase(0, tag + 2);
  return what;
}

}  // namespace

json parse_body(const std::string& body, const std::string& model_name) {
  if (const size_t at = format::json_too_deep_at(body); at != std::string::npos)
    throw ApiError(400, "the body nests arrays and objects deeper than " + std::to_string(format::kMaxJsonDepth) +
                            " levels (at byte " + std::to_string(at) + ")");
  json j;
  try {
    j = format::parse_json(body);
  } catch (const json::parse_error& e) {
    std::string what = json_error_text(e);
    if (what.rfind("parse error at ", 0) == 0) what.erase(0, 15);
    throw ApiError(400, "the body is not valid JSON (byte " + std::to_string(e.byte) + ", " + what + ")");
  } catch (const json::exception& e) {  // a value it cannot hold: 1e999 is out_of_range.406
    throw ApiError(400, "the body is not valid JSON: " + json_error_text(e));
  }
  if (!j.is_object()) throw ApiError(400, "the body must be a JSON object");
  // A request naming another model is refused, never answered by this one: during a rolling
  // update a client pins the model by name and must not get another's bits (docs/SCALING.md).
  if (const auto m = j.find("model"); m != j.end() && m->is_string() && m->get<std::string>() != model_name)
    throw ApiError(404, "the model '" + m->get<std::string>() + "' is not served here; this server serves '" +
                            model_name + "' (GET /v1/models)",
                   "model", "invalid_request_error", "model_not_found");
  return j;
}

CompletionRequest parse_completion(const std::string& body, const ModelConfig& config, const std::string& model_name,
                                   const Tokenizer* tokenizer, bool chat, const ChatTemplate* chat_template) {
  const json j = parse_body(body, model_name);
  CompletionRequest r;
  r.chat = chat;
  const int32_t vocab = config.vocab_size;
  if (chat) {
    if (!j.contains("messages")) throw bad("messages", "'messages' is required");
    r.prompts.push_back(chat_prompt_ids(j["messages"], true, config, tokenizer, chat_template));
  } else {
    if (!j.contains("prompt")) throw bad("prompt", "'prompt' is required");
    const json& given = j["prompt"];
    // OpenAI's batch form, a list of prompts (strings or arrays of ids; LangChain sends its
    // batches so, and a single prompt as a list of one): each prompt gets its own n choices.
    const bool batch = given.is_array() && !given.empty() && (given[0].is_string() || given[0].is_array());
    if (batch && given.size() > static_cast<size_t>(max_prompts))
      throw bad("prompt", "'prompt' lists " + std::to_string(given.size()) + " prompts; at most " +
                              std::to_string(max_prompts) + " a request");
    const size_t count = batch ? given.size() : 1;
    for (size_t k = 0; k < count; ++k) {
      const json& p = batch ? given[k] : given;
      const std::string field = batch ? "prompt[" + std::to_string(k) + "]" : "prompt";
      std::vector<int32_t> ids;
      if (p.is_string()) {
        ids = ids_of(p.get<std::string>(), config, tokenizer, field);
      } else if (p.is_array()) {
        if (p.size() > static_cast<size_t>(max_request_tokens)) throw bad(field, "'" + field + "' has too many tokens");
        for (size_t i = 0; i < p.size(); ++i)
          ids.push_back(static_cast<int32_t>(integer(p[i], field + "[" + std::to_string(i) + "]", 0, vocab - 1)));
      } else {
        throw bad(field, "'" + field + "' must be a string or an array of token ids" +
                             (batch ? "" : " (or a list of such prompts)"));
      }
      if (ids.empty()) throw bad(field, "'" + field + "' is empty; generation needs at least one token");
      r.prompts.push_back(std::move(ids));
    }
  }
  auto has = [&](const char* k) { return j.contains(k) && !j[k].is_null(); };
  const char* tokens_field = chat && has("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  r.tokens_field = tokens_field;
  if (has(tokens_field)) {
    r.max_tokens = static_cast<int32_t>(integer(j[tokens_field], tokens_field, 0, max_request_tokens));
  } else if (chat) {
    // OpenAI's chat has no small default (vLLM takes what the context has left): the window's
    // positions after the prompt, or completions' 16 where fewer are left.
    const int64_t left = static_cast<int64_t>(config.length) - static_cast<int64_t>(r.prompts[0].size());
    r.max_tokens = static_cast<int32_t>(std::clamp<int64_t>(left, 16, max_request_tokens));
  }
  if (has("temperature")) {
    r.sampling.temperature = real(j["temperature"], "temperature");
    if (!(r.sampling.temperature >= 0)) throw bad("temperature", "'temperature' must be >= 0");
  }
  if (has("top_p")) {
    r.sampling.top_p = real(j["top_p"], "top_p");
    if (!(r.sampling.top_p > 0 && r.sampling.top_p <= 1)) throw bad("top_p", "'top_p' must be in (0, 1]");
  }
  if (has("top_k")) r.sampling.top_k = static_cast<int32_t>(integer(j["top_k"], "top_k", 0, vocab));
  if (has("seed")) {
    const json& s = j["seed"];
    if (!s.is_number_integer() || (!s.is_number_unsigned() && s.get<int64_t>() < 0))
      throw bad("seed", "'seed' must be an integer in [0, 2^64 - 1], got " + s.dump());
    r.sampling.seed = s.get<uint64_t>();
    r.seed_given = true;
  }
  if (has("stop")) {
    const json& s = j["stop"];
    if (s.is_string()) r.stop.push_back(s.get<std::string>());
    else if (s.is_array() && s.size() <= static_cast<size_t>(max_stops) && std::all_of(s.begin(), s.end(), [](const json& x) { return x.is_string(); }))
      for (const json& x : s) r.stop.push_back(x.get<std::string>());
    else
      throw bad("stop", "'stop' must be a string or an array of at most " + std::to_string(max_stops) + " strings");
    for (const std::string& x : r.stop)
      if (x.empty()) throw bad("stop", "'stop' strings must not be empty");
  }
  if (has("n")) r.n = static_cast<int32_t>(integer(j["n"], "n", 1, max_choices));
  if (r.prompts.size() * static_cast<size_t>(r.n) > static_cast<size_t>(max_prompts))
    throw bad("n", std::to_string(r.prompts.size()) + " prompts of n = " + std::to_string(r.n) + " choices make " +
                       std::to_string(r.prompts.size() * static_cast<size_t>(r.n)) + " generations; at most " +
                       std::to_string(max_prompts) + " a request");
  if (has("echo")) r.echo = boolean(j["echo"], "echo");
  if (has("stream")) r.stream = boolean(j["stream"], "stream");
  if (has("ignore_eos")) r.ignore_eos = boolean(j["ignore_eos"], "ignore_eos");
  if (chat) {
    if (has("logprobs") && boolean(j["logprobs"], "logprobs"))
      r.logprobs = has("top_logprobs") ? static_cast<int32_t>(integer(j["top_logprobs"], "top_logprobs", 0, max_logprobs)) : 0;
    if (r.echo) throw bad("echo", "'echo' is for completions, not chat completions");
  } else if (has("logprobs")) {
    r.logprobs = static_cast<int32_t>(integer(j["logprobs"], "logprobs", 0, max_logprobs));
  }
  if (!tokenizer && vocab != 256) {  // token ids only: no text to compare or echo
    if (!r.stop.empty())
      throw bad("stop", "'stop' compares text; this model has no tokenizer (a vocabulary of " + std::to_string(vocab) + " ids)");
    if (r.echo)
      throw bad("echo", "'echo' gives the prompt's text; this model has no tokenizer (a vocabulary of " +
                            std::to_string(vocab) + " ids)");
  }
  if (has("best_of") && !(j["best_of"].is_number_integer() && j["best_of"].get<int64_t>() == r.n))
    throw bad("best_of", "'best_of' is not supported (only equal to n)");
  if (has("stream_options")) {
    const json& o = j["stream_options"];
    if (!r.stream) throw bad("stream_options", "'stream_options' is only for streamed requests (\"stream\": true)");
    if (!o.is_object()) throw bad("stream_options", "'stream_options' must be an object");
    if (o.contains("include_usage") && !o["include_usage"].is_null())
      r.include_usage = boolean(o["include_usage"], "stream_options.include_usage");
  }
  refuse_unsupported(j, chat);
  refuse_unknown(j, chat);
  r.grammar = requested_grammar(body, j);
  if (r.grammar && !tokenizer && vocab != 256)
    throw bad(j.contains("grammar") ? "grammar" : j.contains("json_schema") ? "json_schema" : "response_format",
              "a grammar matches text; this model has no tokenizer (a vocabulary of " + std::to_string(vocab) + " ids)");
  try {
    r.sampling.validate();
  } catch (const std::exception& e) {
    throw ApiError(400, e.what());
  }
  return r;
}

std::string token_text(int32_t token) {
  if (token >= 0x20 && token < 0x7f) return std::string(1, static_cast<char>(token));
  if (token == '\n') return "\n";
  if (token == '\t') return "\t";
  char buf[32];
  std::snprintf(buf, sizeof buf, "bytes:\\x%02x", static_cast<unsigned>(token & 0xff));
  return token < 256 ? std::string(buf) : std::string("<").append(std::to_string(token)).append(">");
}

std::string token_text(int32_t token, const Tokenizer* tokenizer, bool bytes) {
  if (tokenizer) return tokenizer->token_text(token);
  if (bytes) return token_text(token);
  return std::string("<").append(std::to_string(token)).append(">");
}

json tokenize_answer(const std::string& body, const ModelConfig& config, const std::string& model_name,
                     const Tokenizer* tokenizer, const ChatTemplate* chat_template) {
  const json j = parse_body(body, model_name);
  if (j.contains("messages")) {
    if (j.contains("prompt")) throw bad("prompt", "give either 'prompt' or 'messages', not both");
    if (j.contains("add_special_tokens") && !j["add_special_tokens"].is_null() &&
        boolean(j["add_special_tokens"], "add_special_tokens"))
      throw bad("add_special_tokens", "'add_special_tokens' must be false with 'messages': the template writes its own");
    const bool gen = !j.contains("add_generation_prompt") || j["add_generation_prompt"].is_null() ||
                     boolean(j["add_generation_prompt"], "add_generation_prompt");
    if (!tokenizer && config.vocab_size != 256)
      throw bad("messages", "this model has no tokenizer (a vocabulary of " + std::to_string(config.vocab_size) +
                                " ids), so it takes no text");
    const std::vector<int32_t> ids = chat_prompt_ids(j["messages"], gen, config, tokenizer, chat_template);
    return {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", config.length}};
  }
  if (!j.contains("prompt") || !j["prompt"].is_string()) throw bad("prompt", "'prompt' must be a string");
  const bool special = !j.contains("add_special_tokens") || j["add_special_tokens"].is_null() ||
                       boolean(j["add_special_tokens"], "add_special_tokens");
  if (!tokenizer && config.vocab_size != 256)
    throw bad("prompt", "this model has no tokenizer (a vocabulary of " + std::to_string(config.vocab_size) +
                            " ids), so it takes no text");
  const std::vector<int32_t> ids = ids_of(j["prompt"].get<std::string>(), config, tokenizer, "prompt", special);
  return {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", config.length}};
}

json detokenize_answer(const std::string& body, const ModelConfig& config, const std::string& model_name,
                       const Tokenizer* tokenizer) {
  const json j = parse_body(body, model_name);
  if (!j.contains("tokens") || !j["tokens"].is_array()) throw bad("tokens", "'tokens' must be an array of token ids");
  const json& t = j["tokens"];
  if (t.size() > static_cast<size_t>(max_request_tokens)) throw bad("tokens", "'tokens' has too many ids");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < t.size(); ++i)
    ids.push_back(static_cast<int32_t>(integer(t[i], "tokens[" + std::to_string(i) + "]", 0, config.vocab_size - 1)));
  if (tokenizer) {
    try {
      return {{"prompt", tokenizer->decode(ids)}};
    } catch (const std::exception& e) {
      throw bad("tokens", std::string("'tokens': ") + e.what());
    }
  }
  if (config.vocab_size != 256)
    throw bad("tokens", "this model has no tokenizer (a vocabulary of " + std::to_string(config.vocab_size) +
                            " ids), so its ids have no text");
  std::string bytes;
  for (int32_t id : ids) bytes.push_back(static_cast<char>(id));
  return {{"prompt", valid_utf8(bytes)}};
}

json tokenizer_info(const ModelConfig& config, const Tokenizer* tokenizer) {
  const auto piece = [&](int32_t id) { return id >= 0 ? json(tokenizer->piece(id).text) : json(nullptr); };
  const bool bytes = !tokenizer && config.vocab_size == 256;
  json info = {{"tokenizer_class", tokenizer ? tokenizer->type() : bytes ? "bytes" : "none"},
               {"vocab_size", config.vocab_size},
               {"model_max_length", config.length},
               {"bos_token", tokenizer ? piece(tokenizer->bos()) : json(nullptr)},
               {"eos_token", tokenizer ? piece(tokenizer->eos()) : json(nullptr)},
               {"unk_token", tokenizer ? piece(tokenizer->unk()) : json(nullptr)},
               {"pad_token", nullptr}};
  return info;
}

TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int32_t top) {
  double m = -std::numeric_limits<double>::infinity();
  for (float l : logits) m = std::max(m, static_cast<double>(l));
  double sum = 0;
  for (float l : logits) sum += host_exp(static_cast<double>(l) - m);
  const double lse = m + host_log(sum);
  TokenLogprobs out;
  out.token = token;
  out.logprob = static_cast<double>(logits[static_cast<size_t>(token)]) - lse;
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  const size_t k = std::min(static_cast<size_t>(std::max(top, 0)), ids.size());
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(), [&](int32_t a, int32_t b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
           (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
  });
  // A token a grammar refused (logit -inf: probability 0) is no candidate: the list stops there.
  for (size_t i = 0; i < k && logits[static_cast<size_t>(ids[i])] > -std::numeric_limits<float>::infinity(); ++i)
    out.top.emplace_back(ids[i], static_cast<double>(logits[static_cast<size_t>(ids[i])]) - lse);
  return out;
}

}  // namespace lockstep::serve
