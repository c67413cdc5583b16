#include "serve/answer_budget.hpp"

#include <string>
#include <utility>
#include <vector>

namespace lockstep::serve {

namespace {

uint64_t token_bytes(const AnswerShape& s) {
  const uint64_t text = 4 + 2 * s.token_text;
  if (s.logprobs < 0) return text;
  return text + (static_cast<uint64_t>(s.logprobs) + 1) * (64 + 5 * s.token_text);
}

}  // namespace

AnswerShape answer_shape(const CompletionRequest& r, uint64_t token_text) {
  AnswerShape s;
  s.prompts = r.prompts.size();
  for (const std::vector<int32_t>& p : r.prompts) s.prompt_tokens += p.size();
  s.n = static_cast<uint64_t>(r.n);
  s.max_tokens = static_cast<uint64_t>(r.max_tokens);
  s.logprobs = r.logprobs;
  s.echo = r.echo;
  s.stream = r.stream;
  s.token_text = token_text;
  return s;
}

uint64_t answer_bytes(const AnswerShape& s) {
  const uint64_t tokens = (s.echo ? s.prompt_tokens : 0) + (s.stream ? 0 : s.prompts * s.max_tokens);
  return s.n * tokens * token_bytes(s);
}

void check_answer_budget(const CompletionRequest& r, uint64_t token_text) {
  const AnswerShape shape = answer_shape(r, token_text);
  const uint64_t estimate = answer_bytes(shape);
  if (estimate <= max_answer_bytes) return;
  // The fields a client may lower, in the order they are named.
  std::vector<std::pair<std::string, AnswerShape>> lowered;
  auto lower = [&](std::string field, auto change) {
    AnswerShape s = shape;
    change(s);
    lowered.emplace_back(std::move(field), s);
  };
  if (!r.stream && r.max_tokens > 0) lower(r.tokens_field, [](AnswerShape& s) { s.max_tokens = 0; });
  if (r.n > 1) lower("n", [](AnswerShape& s) { s.n = 1; });
  if (r.logprobs >= 0) lower(r.chat && r.logprobs > 0 ? "top_logprobs" : "logprobs", [](AnswerShape& s) { s.logprobs = -1; });
  if (r.echo) lower("echo", [](AnswerShape& s) { s.echo = false; });
  std::string param = r.tokens_field;
  uint64_t lowest = estimate;
  for (const auto& [field, s] : lowered) {
    const uint64_t e = answer_bytes(s);
    if (e <= max_answer_bytes) {
      param = field;
      break;
    }
    if (e < lowest) lowest = e, param = field;
  }
  std::string fit;  // how many tokens a choice could ask with the rest as it is
  if (param == r.tokens_field && !r.stream) {
    AnswerShape none = shape;
    none.max_tokens = 0;
    const uint64_t echo = answer_bytes(none), per_token = shape.n * shape.prompts * token_bytes(shape);
    fit = " (at most " + std::to_string(echo >= max_answer_bytes ? 0 : (max_answer_bytes - echo) / per_token) +
          " fit with these prompts, n and logprobs)";
  }
  throw ApiError(400,
                 "this answer could take about " + std::to_string(estimate) + " bytes (" +
                     std::to_string(shape.prompts * shape.n) + " choices, " + std::to_string(token_bytes(shape)) +
                     " bytes a token" + (r.logprobs >= 0 ? " with logprobs " + std::to_string(r.logprobs) : "") +
                     "), more than the " + std::to_string(max_answer_bytes) + " bytes " +
                     (r.stream ? "a streamed answer's echoed prompts" : "a non-streamed answer") +
                     " may take (docs/HTTP.md, \"Limits and timeouts\"); lower '" + param + "'" + fit +
                     (r.stream ? "" : ", or stream the answer"),
                 param);
}

}  // namespace lockstep::serve
