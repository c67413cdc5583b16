// Streamed completions (server-sent events over a chunked body): each event's JSON chunk.
#include "serve/http_session.hpp"
#include "serve/http_wire.hpp"

namespace lockstep::serve {

using nlohmann::json;

void HttpSession::send_event(const std::string& data) { send(sse_chunk(data), false); }

std::string HttpSession::chunk_json(size_t index, const std::string& text, const std::optional<TokenLogprobs>& lp,
                                    const char* finish, bool chat, const json* logprobs) const {
  const Choice& c = choices_[index];
  const bool bytes = bytes_model();
  json choice = {{"index", index}, {"finish_reason", finish ? json(finish) : json(nullptr)}};
  const size_t echoed = completion_.echo ? prompt_texts_[c.prompt].size() : 0;  // text_offset counts the echoed prompt
  if (logprobs) choice["logprobs"] = *logprobs;
  else if (lp && bytes) choice["logprobs"] = logprobs_json({*lp}, echoed + c.bytes.size() - 1);
  else if (lp) choice["logprobs"] = logprobs_json({*lp}, echoed + c.offsets.back());
  else choice["logprobs"] = nullptr;
  const bool started = bytes ? !c.bytes.empty() : !c.ids.empty();
  if (chat) {
    choice["delta"] = text.empty() && !finish && !started ? json{{"role", "assistant"}, {"content", ""}}
                                                          : json{{"content", text}};
  } else {
    choice["text"] = text;
  }
  // Token ids only: each event carries its token's id (the text stays empty).
  if (!bytes && !context_.tokenizer && !finish && started) choice["token_ids"] = json::array({c.ids.back()});
  if (finish) {
    choice["seed"] = c.seed;
    choice["sha256"] = choice_sha256(c);
  }
  json j = {{"id", id_},
            {"object", chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created_},
            {"model", context_.model_name},
            {"choices", json::array({choice})},
            {"seed", completion_.sampling.seed}};
  if (completion_.include_usage) j["usage"] = nullptr;  // as OpenAI: null but in the last chunk
  return json_body(j);
}

}  // namespace lockstep::serve
