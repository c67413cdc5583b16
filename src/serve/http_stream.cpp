// Streamed completions (server-sent events over a chunked body): each event's JSON chunk. A
// stream keeps nothing it has sent: a choice's last event carries the digest of its bytes, kept
// as they went.
#include "serve/http_session.hpp"
#include "serve/http_wire.hpp"

namespace lockstep::serve {

using nlohmann::json;

void HttpSession::send_event(const std::string& data) { send(sse_chunk(data), false); }

std::string HttpSession::chunk_json(size_t index, const std::string& text, const std::string& logprobs,
                                    const char* finish, bool chat, std::optional<int32_t> token) const {
  const Choice& c = choices_[index];
  json choice = {{"index", index}, {"finish_reason", finish ? json(finish) : json(nullptr)}, {"logprobs", nullptr}};
  if (chat) {
    choice["delta"] = text.empty() && !finish && c.generated == 0 ? json{{"role", "assistant"}, {"content", ""}}
                                                                   : json{{"content", text}};
  } else {
    choice["text"] = text;
  }
  // Token ids only: each event carries its token's id (the text stays empty).
  if (token) choice["token_ids"] = json::array({*token});
  if (finish) {
    choice["seed"] = c.seed;
    choice["sha256"] = c.sha256;
  }
  json j = {{"id", id_},
            {"object", chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created_},
            {"model", context_.model_name},
            {"choices", json::array({std::move(choice)})},
            {"seed", completion_.sampling.seed}};
  if (completion_.include_usage) j["usage"] = nullptr;  // as OpenAI: null but in the last chunk
  return logprobs.empty() ? json_body(j) : with_value(json_body(j), "logprobs", logprobs);
}

}  // namespace lockstep::serve
