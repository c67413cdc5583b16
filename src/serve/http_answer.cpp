// A completion's whole answer (not streamed), written as JSON text choice by choice: each
// choice's text, token ids and logprobs (already JSON text, logprobs_text.hpp) are dumped into its
// part and given back at once, and the answer is put together from the parts. A JSON tree of the
// answer took several times its size (issue 35); answer_budget.hpp bounds what it may take.
#include <string>
#include <vector>
#if __has_include(<malloc.h>)
#include <malloc.h>  // malloc_trim (glibc)
#endif

#include "serve/answer_budget.hpp"
#include "serve/http_session.hpp"
#include "serve/http_wire.hpp"

namespace lockstep::serve {

using nlohmann::json;

nlohmann::json HttpSession::usage_json() const {
  size_t generated = 0;
  for (const Choice& c : choices_) generated += c.generated;
  size_t prompt_tokens = 0;  // each prompt once, whatever its n (as OpenAI counts them)
  for (const std::vector<int32_t>& p : completion_.prompts) prompt_tokens += p.size();
  return {{"prompt_tokens", prompt_tokens}, {"completion_tokens", generated}, {"total_tokens", prompt_tokens + generated}};
}

void HttpSession::finish_completion() {
  work_ = {};
  const CompletionRequest& r = completion_;
  if (r.stream) {
    std::string done = "data: [DONE]\n\n";
    if (r.include_usage) {  // stream_options.include_usage: the usage in a chunk of no choices
      const json usage = {{"id", id_},
                          {"object", r.chat ? "chat.completion.chunk" : "text_completion"},
                          {"created", created_},
                          {"model", context_.model_name},
                          {"choices", json::array()},
                          {"usage", usage_json()},
                          {"seed", r.sampling.seed}};
      done = "data: " + json_body(usage) + "\n\n" + done;
    }
    send(http_chunk(done) + "0\r\n\r\n", !keep_alive_ || stopping_);
    response_done_ = true;
    release_completion(false);
    if (!writing_) write_next();
    return;
  }
  if (!error_.empty()) {
    respond_error(500, "generation failed: " + error_, {}, "server_error");
    return release_completion(false);
  }
  const json usage = usage_json();
  std::vector<std::string> parts(choices_.size());
  size_t bytes = 2 + choices_.size();
  for (size_t i = 0; i < choices_.size(); ++i) bytes += (parts[i] = choice_json(i)).size();
  const json outer = {{"id", id_},
                      {"object", r.chat ? "chat.completion" : "text_completion"},
                      {"created", created_},
                      {"model", context_.model_name},
                      {"choices", nullptr},
                      {"usage", usage},
                      {"seed", r.sampling.seed}};
  // The parts in place of the outer object's `"choices":null` (its first key), each given back
  // as it is copied.
  const std::string around = json_body(outer), placeholder = "\"choices\":null";
  const size_t at = around.find(placeholder);
  std::string body;
  body.reserve(around.size() + bytes);
  body.append(around, 0, at + placeholder.size() - 4);
  body += '[';
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) body += ',';
    body += parts[i];
    std::string().swap(parts[i]);
  }
  body += ']';
  body.append(around, at + placeholder.size());
  release_completion(body.size() >= trim_after_bytes);
  respond(200, "application/json", body);
}

std::string HttpSession::choice_json(size_t index) {
  Choice& c = choices_[index];
  const CompletionRequest& r = completion_;
  const bool bytes = bytes_model();
  json choice = {{"index", index},
                 {"finish_reason", finish_name(*c.finish)},
                 {"logprobs", nullptr},
                 {"seed", c.seed},
                 {"sha256", c.sha256}};
  if (!bytes) choice["token_ids"] = std::move(c.ids);
  {
    // A byte model's bytes made valid UTF-8; a tokenizer's text as it settled; token ids only: "".
    const std::string echoed = r.echo ? prompt_texts_[c.prompt] : std::string();
    std::string text = bytes ? valid_utf8(echoed + c.bytes) : echoed + c.text;
    if (r.chat) choice["message"] = {{"role", "assistant"}, {"content", std::move(text)}};
    else choice["text"] = std::move(text);
  }
  std::string().swap(c.bytes);
  std::string().swap(c.text);
  std::string out = json_body(choice);
  choice = nullptr;
  if (r.logprobs >= 0) out = with_value(std::move(out), "logprobs", c.logprobs.object());
  c.logprobs.clear();
  return out;
}

void HttpSession::release_completion(bool large) {
  // Nothing of the request is read after its answer is queued; a new one starts afresh.
  std::vector<Choice>().swap(choices_);
  std::vector<std::string>().swap(prompt_texts_);
  std::vector<std::vector<int32_t>>().swap(completion_.prompts);
  trim_after_response_ |= large;
}

void HttpSession::give_memory_back() {
  // glibc keeps freed blocks in its arenas, and serves a large answer's strings from them once
  // freeing an earlier one has raised its mmap threshold: without this the server stayed at its
  // largest answer's size (a 15 MB answer left 15 MB resident).
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace lockstep::serve
