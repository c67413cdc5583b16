// One HTTP/1.1 connection (Boost.Beast's parser over the server's Asio loop): requests one after
// another (keep-alive), each answered in full before the next is read. The class's members are
// defined by concern, a file each (docs/ARCHITECTURE.md, "The HTTP server"): the connection
// (http_session.cpp), routing (http_routes.cpp), health and metrics (http_health.cpp), models and
// the tokenizer endpoints (http_models.cpp), completions and chat (http_completions.cpp), their
// streamed events (http_stream.cpp) and logprobs (http_logprobs.cpp). A completion hands its
// generation to the GenerationEngine and holds nothing but its callbacks until tokens come back,
// posted to this connection's strand; a streamed one writes each piece as server-sent events.
// A client that goes away cancels its generations (they leave the batch at the next step).
// Flow control: a generation runs at most a few tokens ahead of what this connection has taken,
// and a streamed one's tokens are given back only while the writes queued for its client stay
// under a bound, so a client that reads slowly pauses its own generations (until it reads, or
// the write timeout drops it) instead of piling events up in memory and in the event loop.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "lockstep/model.hpp"
#include "serve/connection.hpp"
#include "serve/generation_engine.hpp"
#include "serve/http_api.hpp"
#include "serve/metrics.hpp"
#include "serve/utf8_stream.hpp"

namespace lockstep::serve {

namespace beast = boost::beast;
namespace http = boost::beast::http;

// What every HTTP connection shares; owned by the server.
struct HttpContext {
  std::shared_ptr<const Model> model;
  std::string model_name;
  GenerationEngine& engine;
  Metrics& metrics;
  std::function<std::pair<uint64_t, uint64_t>()> cache_rows;  // (reused, computed) of the prefix cache
  size_t max_body = size_t{1} << 20;
  std::chrono::milliseconds read_timeout{30'000};   // a request's head and body (idle time before it included)
  std::chrono::milliseconds write_timeout{30'000};  // one write, before the client is dropped
  std::string api_key;                              // "": no authentication
  const std::string& replica;                       // the X-Lockstep-Replica header, /health, /metrics
  std::atomic<bool>& draining;                      // /health 503, new requests 503
  std::shared_ptr<const Tokenizer> tokenizer;       // the model's; null: bytes (vocabulary 256) or token ids only
  std::vector<std::string> cors_origins;            // --cors-origin (HttpOptions::cors_origins)
};

// Flow control: how many tokens a generation may run ahead of its connection, and how many bytes
// may wait to be written before a stream's tokens are no longer given back. 32 tokens keep a
// step's worth of work queued for every generation without letting the event loop's queue grow;
// 256 KiB is a few hundred events with the most logprobs.
inline constexpr int32_t kMaxTokensAhead = 32;
inline constexpr size_t kMaxQueuedBytes = size_t{256} << 10;
// Bytes of pipelined requests read while a completion runs (the disconnect watch), beyond which
// the watch polls for the connection's end instead of reading.
inline constexpr size_t kMaxReadAhead = size_t{64} << 10;

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  using Closed = std::function<void(HttpSession*)>;
  HttpSession(StreamSocket socket, const HttpContext& context, Closed on_closed);
  void start();
  // Closes once the response under way (if any) is written. Any thread.
  void stop();

 private:
  struct Choice {
    std::shared_ptr<GenerationJob> job;
    size_t prompt = 0;  // which of the request's prompts (choice index prompt * n + i)
    std::string bytes;  // generated (a byte model)
    Utf8Stream utf8;    // streaming (a byte model)
    std::vector<int32_t> ids;    // generated
    std::string text;            // generated, through the tokenizer (TextStream)
    std::vector<size_t> offsets;  // where each token's text starts in `text` (logprobs)
    std::vector<TokenLogprobs> logprobs;
    // Echo with logprobs: the prompt tokens' scores once the engine gave them (prompt_scored);
    // the first `unscored` prompt tokens have none (the first, and any the window left out).
    bool prompt_scored = false;
    size_t unscored = 0;
    std::vector<TokenLogprobs> prompt_logprobs;
    std::optional<Finish> finish;
    uint64_t seed = 0;
    int32_t owed = 0;  // tokens taken but not yet given back to the engine (flow control)
  };

  void read_request();
  // The header first, so that a client waiting on `Expect: 100-continue` is told to send its body.
  void on_header(const boost::system::error_code& ec);
  void on_request(const boost::system::error_code& ec);
  void route();
  void answer_health();
  void answer_metrics();
  void answer_models();
  void answer_model(const std::string& id);  // GET /v1/models/{id}, the id percent-decoded
  void answer_tokenizer(const std::string& path);
  nlohmann::json model_object() const;  // the served model as an OpenAI model object
  void completion(bool chat);
  // `settled`: with a tokenizer, the text the token settled (TextStream::push), or at the end the
  // rest (finish).
  void on_token(size_t index, int32_t token, std::optional<TokenLogprobs> lp, const std::string& settled);
  void on_done(size_t index, Finish finish, const std::string& error, const std::string& settled);
  // The prompt's scores for choice `index` (echo with logprobs): streamed, its echo event goes now.
  void on_prompt_scores(size_t index, std::vector<TokenLogprobs> scores);
  // logprobs_json's four arrays for the prompt's tokens (echo): null where a token has no score.
  nlohmann::json prompt_logprobs_json(const Choice& c) const;
  // A completion's logprobs: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}, empty.
  static nlohmann::json completion_logprobs();
  // Appends a token to those arrays: its text, its log-probability and top N (null without a
  // score `t`), its offset in the text.
  void push_logprob(nlohmann::json& lps, int32_t token, const TokenLogprobs* t, size_t offset) const;
  bool bytes_model() const { return !context_.tokenizer && context_.model->config().vocab_size == 256; }
  std::string choice_sha256(const Choice& c) const;
  // The CORS header lines for this request's Origin when --cors-origin allows it, else "".
  std::string cors_headers() const;
  // {"prompt_tokens", "completion_tokens", "total_tokens"} over every choice so far.
  nlohmann::json usage_json() const;
  void finish_completion();
  // While a completion runs: the client leaving (the end of the connection, or a reset) closes
  // the connection, which cancels its generations, whatever it sent before leaving.
  void watch_disconnect();
  enum class ReadAhead { drained, full, left };
  // Reads what the client sent past the request into buffer_ (at most kMaxReadAhead bytes):
  // `left` when the connection ended, `full` at the bound.
  ReadAhead read_ahead();
  void poll_disconnect();
  bool completion_running(uint64_t seq) const { return !closed_ && seq == request_seq_ && finished_ < choices_.size(); }
  void cancel_generation();
  // Gives the engine back the tokens taken, unless the writes queued are past their bound.
  void give_back_tokens();

  void respond(int status, const std::string& content_type, const std::string& body,
               const std::vector<std::pair<std::string, std::string>>& headers = {});
  void respond_error(int status, const std::string& message, const std::string& param = {},
                     const std::string& type = "invalid_request_error", const std::string& code = {});
  void send(std::string bytes, bool close_after);
  void write_next();
  void after_response();
  void close() noexcept;
  void arm(std::chrono::milliseconds after);

  // `logprobs`: the chunk's logprobs object when given (the echo's), else lp's or null.
  std::string chunk_json(size_t index, const std::string& text, const std::optional<TokenLogprobs>& lp,
                         const char* finish, bool chat, const nlohmann::json* logprobs = nullptr) const;
  void send_event(const std::string& data);
  // `offsets`: each token's place in the text after `text_offset` (null: one byte each).
  nlohmann::json logprobs_json(const std::vector<TokenLogprobs>& lps, size_t text_offset,
                               const std::vector<size_t>* offsets = nullptr) const;

  StreamSocket socket_;
  asio::steady_timer timer_;
  uint64_t timer_generation_ = 0;
  const HttpContext& context_;
  Closed on_closed_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> request_;
  std::string endpoint_;  // for the metrics
  bool keep_alive_ = false;
  bool in_request_ = false;  // between a request's first byte and its response's end
  bool stopping_ = false;
  bool closed_ = false;
  // Writes, one at a time.
  std::deque<std::string> writes_;
  size_t queued_bytes_ = 0;  // in writes_
  bool writing_ = false;
  bool close_after_writes_ = false;
  bool response_done_ = false;  // the response's last bytes are queued
  // The completion under way.
  CompletionRequest completion_;
  std::vector<Choice> choices_;
  size_t finished_ = 0;
  bool abandoned_ = false;
  uint64_t request_seq_ = 0;  // callbacks of an earlier request are ignored  // the client left or the request failed: ends are only counted
  std::string error_;
  std::string id_;
  int64_t created_ = 0;
  // Each prompt's bytes (a byte model) or text (a tokenizer's), for echo.
  std::vector<std::string> prompt_texts_;
  asio::any_io_executor work_;  // keeps the loop running while the engine holds our callbacks
};

}  // namespace lockstep::serve
