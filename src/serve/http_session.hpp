// One HTTP/1.1 connection (Boost.Beast's parser over the server's Asio loop): requests one after
// another (keep-alive), each answered in full before the next is read. The class's members are
// defined by concern, a file each (docs/ARCHITECTURE.md, "The HTTP server"): the connection
// (http_session.cpp), routing (http_routes.cpp), health and metrics (http_health.cpp), models and
// the tokenizer endpoints (http_models.cpp), completions and chat (http_completions.cpp), their
// whole answers (http_answer.cpp), streamed events (http_stream.cpp), logprobs (http_logprobs.cpp)
// and the disconnect watch (http_disconnect.cpp). A completion hands its
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

#include "core/sha256.hpp"
#include "lockstep/model.hpp"
#include "serve/access_log.hpp"
#include "serve/connection.hpp"
#include "serve/generation_engine.hpp"
#include "serve/http_api.hpp"
#include "serve/http_guard.hpp"
#include "serve/logprobs_text.hpp"
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
  HostRules hosts;                                  // the Host names taken (--allowed-host, the bound addresses)
  AccessLog* access_log = nullptr;                  // --access-log; null: none
  std::shared_ptr<const ChatTemplate> chat_template;  // the model's; null: none (chat_prompt's text)
  // The model's tokens as bytes for structured output (a byte model's 256, or the tokenizer's);
  // null: token ids only, which takes no grammar.
  std::shared_ptr<const TokenVocabulary> vocabulary = nullptr;
};

// Flow control: how many tokens a generation may run ahead of its connection, and how many bytes
// may wait to be written before a stream's tokens are no longer given back. 32 tokens keep a
// step's worth of work queued for every generation without letting the event loop's queue grow;
// 256 KiB is a few hundred events with the most logprobs.
inline constexpr int32_t kMaxTokensAhead = 32;
inline constexpr size_t kMaxQueuedBytes = size_t{256} << 10;
// The most request bytes a connection holds unparsed: a request head (16 KiB at most), or a
// chunked body's trailer fields, which the parser needs whole. Bodies are parsed as they come.
inline constexpr size_t kMaxBufferedBytes = size_t{32} << 10;

// The 503 `too_many_connections` message (a connection past --max-connections while every open
// one is busy).
inline constexpr char kTooManyConnections[] =
    "the server has as many HTTP connections open as it allows (--max-connections), each with a request under "
    "way; try again later";

// The methods an endpoint (a path of the route table) answers, as a 405's Allow header says them.
std::string allowed_methods(const std::string& endpoint);
// Bytes of pipelined requests read while a completion runs (the disconnect watch), beyond which
// the watch polls for the connection's end instead of reading: what the connection's buffer holds
// (reading past it would overflow the buffer).
inline constexpr size_t kMaxReadAhead = kMaxBufferedBytes;

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  using Closed = std::function<void(HttpSession*)>;
  // `limited`: a connection beyond --max-connections while every open one is busy; it gets one
  // answer and closes: /health as usual (a balancer's check still sees the replica serve), any
  // other request 503 `too_many_connections` with Retry-After.
  HttpSession(StreamSocket socket, const HttpContext& context, Closed on_closed, bool limited = false);
  void start();
  // Closes once the response under way (if any) is written. Any thread.
  void stop();

  // For the connection limit (connection_slots.hpp). Any thread. Idle: waiting for a request
  // with no byte of it received; last_active: when it last became so (steady clock ticks).
  // evict() closes it if it is still idle then (a keep-alive client reconnects, as after any
  // server's idle close).
  bool idle() const { return idle_.load(std::memory_order_relaxed); }
  int64_t last_active() const { return last_active_.load(std::memory_order_relaxed); }
  void evict();

 private:
  // A choice of the completion under way. A stream keeps only counts and a running digest of
  // what it sent; a whole answer keeps its text, ids and logprobs (as JSON text) until its end,
  // which answer_budget.hpp bounds.
  struct Choice {
    std::shared_ptr<GenerationJob> job;
    size_t prompt = 0;      // which of the request's prompts (choice index prompt * n + i)
    size_t generated = 0;   // tokens
    size_t text_size = 0;   // bytes of text settled so far (through the tokenizer)
    Sha256 digest;          // of the generated bytes, text or ids, as they come (sha256)
    std::string sha256;     // its hex, once finished
    Utf8Stream utf8;        // streaming (a byte model)
    std::string bytes;      // generated (a byte model; whole answers)
    std::string text;       // generated, through the tokenizer (TextStream; whole answers)
    std::vector<int32_t> ids;  // generated (whole answers)
    LogprobsText logprobs;     // whole answers: the prompt's (echo) then each generated token's
    // Echo with logprobs: the first `unscored` prompt tokens have no score (the first, and any the
    // window left out).
    size_t unscored = 0;
    std::optional<Finish> finish;
    uint64_t seed = 0;
    int32_t owed = 0;  // tokens taken but not yet given back to the engine (flow control)
  };

  void read_request();
  void read_head();
  // The header first, so that a client waiting on `Expect: 100-continue` is told to send its body.
  void on_header(const boost::system::error_code& ec);
  void on_request(const boost::system::error_code& ec);
  // A request's answer begins: the read timeout stops, and nothing of the last request is kept.
  void begin_answer();
  void route();
  // Refuses (400 or 403, answered) a request with two Authorization or Host headers, a Host that
  // is not this server's, or a browser's from another site (http_guard.hpp); true when it may go on.
  bool request_from_here();
  void answer_health();
  void answer_metrics();
  void answer_models();
  void answer_model(const std::string& id);  // GET /v1/models/{id}, the id percent-decoded
  void answer_tokenizer(const std::string& path);
  nlohmann::json model_object() const;  // the served model as an OpenAI model object
  void completion(bool chat);
  // `settled`: with a tokenizer, the text the token settled (TextStream::push), or at the end the
  // rest (finish). `end`: an end-of-sequence id that ended the generation, which adds no text (its
  // id and logprob are given).
  void on_token(size_t index, int32_t token, std::optional<TokenLogprobs> lp, const std::string& settled,
                bool end = false);
  void on_done(size_t index, Finish finish, const std::string& error, const std::string& settled);
  // The prompt's scores for choice `index` (echo with logprobs): streamed, its echo event goes now.
  void on_prompt_scores(size_t index, std::vector<TokenLogprobs> scores);
  // Adds the prompt's tokens to `out` (echo): null where a token has no score.
  void add_prompt_logprobs(LogprobsText& out, const Choice& c, const std::vector<TokenLogprobs>& scores) const;
  TokenNames token_names() const { return {context_.tokenizer.get(), bytes_model()}; }
  bool bytes_model() const { return !context_.tokenizer && context_.model->config().vocab_size == 256; }
  // One choice of the whole answer as JSON text; its memory is given back.
  std::string choice_json(size_t index);
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
  // The access log's line for the request answered (or cut off), once.
  void log_request() noexcept;
  void close() noexcept;
  void arm(std::chrono::milliseconds after);

  // A streamed chunk of choice `index`: `logprobs` its logprobs object as JSON text (null when
  // empty); `token`: the id a token-ids-only model's event carries.
  std::string chunk_json(size_t index, const std::string& text, const std::string& logprobs, const char* finish,
                         bool chat, std::optional<int32_t> token = std::nullopt) const;
  void send_event(const std::string& data);
  // Gives back what the completion held once its answer is queued: its choices and prompts;
  // `large`: the allocator's free pages too, once the answer is written (give_memory_back).
  void release_completion(bool large);
  // Hands the allocator's free pages back to the system (glibc's malloc_trim; else nothing).
  static void give_memory_back();

  StreamSocket socket_;
  asio::steady_timer timer_;
  uint64_t timer_generation_ = 0;
  const HttpContext& context_;
  Closed on_closed_;
  beast::flat_buffer buffer_{kMaxBufferedBytes};
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> request_;
  std::string endpoint_;  // for the metrics
  bool keep_alive_ = false;
  bool in_request_ = false;  // between a request's first byte and its response's end
  const bool limited_;
  std::atomic<bool> idle_{false};
  std::atomic<int64_t> last_active_{0};
  // The access log's fields of the request under way (--access-log; untouched without it).
  std::string client_;  // the peer's address and port
  std::string log_method_, log_path_;
  std::chrono::system_clock::time_point log_time_;
  std::chrono::steady_clock::time_point log_start_;
  int log_status_ = 0;  // of the response begun; 0: none yet (nothing to log)
  uint64_t log_bytes_ = 0;
  bool stopping_ = false;
  bool closed_ = false;
  // Writes, one at a time.
  std::deque<std::string> writes_;
  size_t queued_bytes_ = 0;  // in writes_
  bool writing_ = false;
  bool close_after_writes_ = false;
  bool response_done_ = false;  // the response's last bytes are queued
  bool trim_after_response_ = false;  // a large request or answer: give_memory_back once written
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
