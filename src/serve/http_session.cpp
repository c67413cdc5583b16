#include "serve/http_session.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <random>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/read.hpp>
#include <openssl/crypto.h>

#include "core/sha256.hpp"
#include "serve/playground.hpp"

namespace lockstep::serve {
namespace {

using nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string hex(size_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%zx", n);
  return buf;
}

uint64_t random_u64() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(rd());
}

// Flow control (http_session.hpp): how many tokens a generation may run ahead of this
// connection, and how many bytes may wait to be written before a stream's tokens are no longer
// given back. 32 tokens keep a step's worth of work queued for every generation without letting
// the event loop's queue grow; 256 KiB is a few hundred events with the most logprobs.
constexpr int32_t max_tokens_ahead = 32;
constexpr size_t max_queued_bytes = size_t{256} << 10;

std::string random_id(const char* prefix) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%016llx", prefix, static_cast<unsigned long long>(random_u64()));
  return buf;
}

// A path segment with its %XX escapes decoded (clients encode a model name's reserved bytes);
// a '%' not followed by two hex digits stays as it is.
std::string percent_decoded(std::string_view s) {
  const auto hex_value = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const int hi = s[i] == '%' && i + 2 < s.size() ? hex_value(s[i + 1]) : -1;
    const int lo = hi >= 0 ? hex_value(s[i + 2]) : -1;
    if (lo >= 0) {
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// Whether an Authorization value is "Bearer KEY" for `key`: the scheme in any case (RFC 9110
// section 11.1), the key compared in constant time, so its bytes cannot be guessed from how long
// a refusal takes.
bool bearer_matches(beast::string_view value, const std::string& key) {
  constexpr beast::string_view scheme = "bearer ";
  if (value.size() != scheme.size() + key.size() || !beast::iequals(value.substr(0, scheme.size()), scheme))
    return false;
  return CRYPTO_memcmp(value.data() + scheme.size(), key.data(), key.size()) == 0;
}

}  // namespace

HttpSession::HttpSession(StreamSocket socket, const HttpContext& context, Closed on_closed)
    : socket_(std::move(socket)), timer_(socket_.get_executor()), context_(context), on_closed_(std::move(on_closed)) {}

void HttpSession::start() {
  asio::dispatch(socket_.get_executor(), [self = shared_from_this()] { self->read_request(); });
}

void HttpSession::stop() {
  asio::dispatch(socket_.get_executor(), [self = shared_from_this()] {
    self->stopping_ = true;
    if (!self->in_request_) self->close();
  });
}

void HttpSession::arm(std::chrono::milliseconds after) {
  const uint64_t generation = ++timer_generation_;
  if (after.count() <= 0) return;
  timer_.expires_after(after);
  timer_.async_wait([self = shared_from_this(), generation](const boost::system::error_code& ec) {
    if (!ec && generation == self->timer_generation_) self->close();
  });
}

void HttpSession::read_request() {
  if (stopping_ || closed_) return close();
  parser_.emplace();
  parser_->body_limit(context_.max_body);
  parser_->header_limit(16 * 1024);
  arm(context_.read_timeout);
  http::async_read_header(socket_, buffer_, *parser_,
                          [self = shared_from_this()](const boost::system::error_code& ec, size_t) { self->on_header(ec); });
}

void HttpSession::on_header(const boost::system::error_code& ec) {
  // Errors (a body past --max-body is known from Content-Length already) are answered as a whole
  // request's are, without reading the body.
  if (ec || closed_) return on_request(ec);
  const auto read_body = [self = shared_from_this()] {
    http::async_read(self->socket_, self->buffer_, *self->parser_,
                     [self](const boost::system::error_code& e, size_t) { self->on_request(e); });
  };
  const auto& header = parser_->get();
  const auto expect = header.find(http::field::expect);
  if (header.version() < 11 || expect == header.end() || !beast::iequals(expect->value(), "100-continue"))
    return read_body();
  // The client waits for this before sending the body (curl past 1 MiB, older libcurl past 1 KiB;
  // without it they wait a second, RFC 9110 section 10.1.1). The read timeout still runs.
  static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
  asio::async_write(socket_, asio::buffer(kContinue, sizeof kContinue - 1),
                    [self = shared_from_this(), read_body](const boost::system::error_code& e, size_t) {
                      if (e) return self->on_request(e);
                      read_body();
                    });
}

void HttpSession::on_request(const boost::system::error_code& ec) {
  ++timer_generation_;
  if (closed_) return;
  in_request_ = true;
  endpoint_ = "other";
  keep_alive_ = false;
  request_ = {};
  if (ec == http::error::body_limit) {
    return respond_error(413, "the request body is larger than the server's limit of " +
                                  std::to_string(context_.max_body) + " bytes (--max-body)");
  }
  if (ec == http::error::header_limit) return respond_error(431, "the request's headers are too large");
  if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::operation_aborted ||
      ec == asio::error::connection_reset || ec == asio::error::bad_descriptor) {
    in_request_ = false;
    return close();
  }
  if (ec) return respond_error(400, "the request is not valid HTTP/1.1: " + ec.message());
  request_ = parser_->release();
  keep_alive_ = request_.keep_alive();
  try {
    route();
  } catch (const ApiError& e) {
    respond_error(e.status, e.what(), e.param, e.type, e.code);
  } catch (const std::exception& e) {
    respond_error(500, std::string("the server failed: ") + e.what(), {}, "server_error");
  }
}

void HttpSession::route() {
  std::string path(request_.target());
  if (const size_t q = path.find('?'); q != std::string::npos) path.resize(q);
  const http::verb method = request_.method();
  struct Route {
    const char* path;
    http::verb method;
  };
  static const Route routes[] = {{"/", http::verb::get},
                                 {"/health", http::verb::get},
                                 {"/metrics", http::verb::get},
                                 {"/v1/models", http::verb::get},
                                 {"/v1/completions", http::verb::post},
                                 {"/v1/chat/completions", http::verb::post},
                                 {"/tokenize", http::verb::post},
                                 {"/detokenize", http::verb::post},
                                 {"/tokenizer_info", http::verb::get}};
  const Route* route = nullptr;
  for (const Route& r : routes)
    if (path == r.path) route = &r;
  // GET /v1/models/{id} (the OpenAI clients' models.retrieve): routed as /v1/models, answered below.
  static const Route model_route{"/v1/models", http::verb::get};
  const std::string_view models_prefix = "/v1/models/";
  const bool one_model = !route && path.size() > models_prefix.size() && path.rfind(models_prefix, 0) == 0;
  if (one_model) route = &model_route;
  if (!route) return respond_error(404, "no such endpoint: " + path, {}, "invalid_request_error", "not_found");
  endpoint_ = route->path;
  // A browser's CORS preflight, before any authentication (it carries no credentials).
  if (method == http::verb::options && request_.find(http::field::access_control_request_method) != request_.end() &&
      !cors_headers().empty()) {
    const beast::string_view asked = request_[http::field::access_control_request_headers];
    return respond(204, "", "",
                   cors_preflight_headers(route->method == http::verb::get ? "GET, HEAD, OPTIONS" : "POST, OPTIONS",
                                          std::string_view(asked.data(), asked.size())));
  }
  const bool head = method == http::verb::head && route->method == http::verb::get;
  if (method != route->method && !head)
    return respond_error(405, std::string("method ") + std::string(request_.method_string()) + " is not allowed on " +
                                  path + "; use " + std::string(http::to_string(route->method)),
                         {}, "invalid_request_error", "method_not_allowed");
  if (path == "/health") {
    if (context_.draining.load())
      return respond(503, "application/json", dump(json{{"status", "draining"}, {"replica", context_.replica}}));
    return respond(200, "application/json",
                   dump(json{{"status", "ok"}, {"model", context_.model_name}, {"replica", context_.replica}}));
  }
  if (context_.draining.load())
    return respond_error(503, "the server is shutting down", {}, "server_error", "draining");
  // The key guards the API: /v1/ and the tokenizer endpoints (the page, /health and /metrics stay open).
  const bool guarded = path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize" ||
                       path == "/tokenizer_info";
  if (!context_.api_key.empty() && guarded) {
    const auto auth = request_.find(http::field::authorization);
    if (auth == request_.end() || !bearer_matches(auth->value(), context_.api_key))
      return respond_error(401, "a valid API key is required: send 'Authorization: Bearer KEY'", {},
                           "invalid_request_error", "invalid_api_key");
  }
  if (path == "/") return respond(200, "text/html; charset=utf-8", std::string(playground_html()));
  const Tokenizer* tokenizer = context_.tokenizer.get();
  const ModelConfig& config = context_.model->config();
  if (path == "/tokenizer_info") return respond(200, "application/json", dump(tokenizer_info(config, tokenizer)));
  if (path == "/tokenize")
    return respond(200, "application/json", dump(tokenize_answer(request_.body(), config, context_.model_name, tokenizer)));
  if (path == "/detokenize")
    return respond(200, "application/json",
                   dump(detokenize_answer(request_.body(), config, context_.model_name, tokenizer)));
  if (path == "/metrics") {
    const auto [reused, computed] = context_.cache_rows();
    return respond(200, "text/plain; version=0.0.4; charset=utf-8",
                   context_.metrics.text(context_.replica, context_.model_name, context_.model->profile(),
                                         context_.model->parameters_sha256(), reused, computed));
  }
  if (route == &model_route || path == "/v1/models") {
    json m = {{"id", context_.model_name},
              {"object", "model"},
              {"created", 0},
              {"owned_by", "lockstep"},
              {"parameters_sha256", context_.model->parameters_sha256()},
              {"profile", context_.model->profile()},
              {"window", context_.model->config().length},
              {"max_model_len", context_.model->config().length},  // vLLM's name for it, which its clients read
              {"vocab_size", context_.model->config().vocab_size},
              {"tokenizer", context_.tokenizer ? context_.tokenizer->type() : bytes_model() ? "bytes" : "none"}};
    if (one_model) {
      const std::string id = percent_decoded(path.substr(models_prefix.size()));
      if (id != context_.model_name)
        return respond_error(404, "the model '" + id + "' is not served here; this server serves '" +
                                      context_.model_name + "'",
                             "model", "invalid_request_error", "model_not_found");
      return respond(200, "application/json", dump(m));
    }
    return respond(200, "application/json", dump(json{{"object", "list"}, {"data", json::array({m})}}));
  }
  completion(path == "/v1/chat/completions");
}

void HttpSession::completion(bool chat) {
  completion_ = parse_completion(request_.body(), context_.model->config(), context_.model_name, context_.tokenizer.get(), chat);
  const CompletionRequest& r = completion_;
  if (!r.seed_given) completion_.sampling.seed = random_u64();
  prompt_texts_.assign(r.prompts.size(), std::string());
  for (size_t p = 0; p < r.prompts.size(); ++p) {
    if (context_.tokenizer) prompt_texts_[p] = TextStream(*context_.tokenizer, r.prompts[p]).prompt_text();
    else if (bytes_model())
      for (int32_t t : r.prompts[p]) prompt_texts_[p].push_back(static_cast<char>(t & 0xff));
  }
  ++request_seq_;
  error_.clear();
  choices_.clear();
  choices_.resize(r.prompts.size() * static_cast<size_t>(r.n));
  finished_ = 0;
  abandoned_ = false;
  for (size_t i = 0; i < choices_.size(); ++i) {
    // Choice i: prompt i / n, its (i % n)-th choice, with the seed that choice has when its prompt
    // is asked alone, so that a batch's answers are each prompt's own.
    const size_t prompt_index = i / static_cast<size_t>(r.n);
    const std::vector<int32_t>& prompt = r.prompts[prompt_index];
    choices_[i].prompt = prompt_index;
    GenerateOptions g;
    g.sampling = r.sampling;
    g.sampling.seed = r.sampling.seed + i % static_cast<size_t>(r.n);  // wraps past 2^64 - 1, as unsigned arithmetic does
    g.max_tokens = r.max_tokens;
    g.truncate_prompt = true;
    auto job = std::make_shared<GenerationJob>();
    try {
      job->generator = std::make_unique<Generator>(context_.model, prompt, g);
    } catch (const Error& e) {
      throw ApiError(400, e.what(), chat ? "messages" : "prompt");
    }
    job->max_tokens = r.max_tokens;
    job->max_ahead = max_tokens_ahead;
    // With a tokenizer the text is decoded on the runner, as each token comes, so that a stop
    // string ends the generation at that very token (as `generate --stop`); the runner calls a
    // job's callbacks one at a time, so the stream needs no lock. The callbacks hold the tokenizer
    // the stream reads: the engine may call them (abort) after the server's context is gone.
    std::shared_ptr<TextStream> text;
    if (context_.tokenizer) text = std::make_shared<TextStream>(*context_.tokenizer, prompt, r.stop);
    else job->stops = r.stop;
    const int32_t top = r.logprobs;
    const uint64_t seq = request_seq_;
    job->on_token = [self = shared_from_this(), i, top, seq, text, tokenizer = context_.tokenizer,
                     raw = job.get()](int32_t token, std::span<const float> logits) {
      std::optional<TokenLogprobs> lp;
      if (top >= 0) lp = token_logprobs(logits, token, top);
      std::string settled;
      if (text) {
        try {
          settled = text->push(token);
        } catch (const std::exception&) {  // ids are the model's and the tokenizer holds as many
        }
        raw->stop_now = text->stopped();
      }
      asio::post(self->socket_.get_executor(), [self, i, token, lp, seq, settled = std::move(settled)] {
        if (seq == self->request_seq_) self->on_token(i, token, lp, settled);
      });
    };
    job->on_done = [self = shared_from_this(), i, seq, text, tokenizer = context_.tokenizer](Finish f,
                                                                                            const std::string& error) {
      std::string settled;
      if (text) {
        try {
          settled = text->finish();
        } catch (const std::exception&) {
        }
      }
      asio::post(self->socket_.get_executor(), [self, i, f, error, seq, settled = std::move(settled)] {
        if (seq == self->request_seq_) self->on_done(i, f, error, settled);
      });
    };
    if (r.echo && top >= 0) {
      // The prompt's own scores (OpenAI's echo with logprobs; lm-evaluation-harness scores a
      // continuation so): every choice's job computes them, so that its echo event comes before
      // its tokens whatever step it starts in.
      choices_[i].unscored = static_cast<size_t>(job->generator->context().dropped_prompt_tokens()) + 1;
      auto scores = std::make_shared<std::vector<TokenLogprobs>>();
      job->on_prompt = [self = shared_from_this(), i, top, seq, scores, raw = job.get()](
                           int32_t first, std::span<const float> logits, bool last) {
        const std::span<const int32_t> context = raw->generator->context().tokens();
        const size_t vocab = static_cast<size_t>(self->context_.model->config().vocab_size);
        for (size_t row = 0; row * vocab < logits.size(); ++row) {
          const size_t p = static_cast<size_t>(first) + row;
          scores->push_back(token_logprobs(logits.subspan(row * vocab, vocab), context[p + 1], top));
        }
        if (!last) return;
        asio::post(self->socket_.get_executor(), [self, i, seq, scores] {
          if (seq == self->request_seq_) self->on_prompt_scores(i, std::move(*scores));
        });
      };
    }
    choices_[i].job = std::move(job);
    choices_[i].seed = g.sampling.seed;
  }
  for (size_t i = 0; i < choices_.size(); ++i) {
    if (!context_.engine.submit(choices_[i].job)) {
      // Those already queued are cancelled; their ends come back and are only counted.
      for (size_t k = 0; k < i; ++k) context_.engine.cancel(*choices_[k].job);
      abandoned_ = true;
      finished_ = choices_.size() - i;  // the ones never submitted will not report
      for (size_t k = i; k < choices_.size(); ++k) choices_[k].job.reset();  // never submitted: break the cycle
      if (i == 0) choices_.clear();
      else work_ = asio::prefer(socket_.get_executor(), asio::execution::outstanding_work.tracked);
      return respond_error(429, "the server has --max-queue requests waiting; try again later", {}, "server_error",
                           "queue_full");
    }
    context_.metrics.prompt_tokens.fetch_add(r.prompts[choices_[i].prompt].size(), std::memory_order_relaxed);
  }
  work_ = asio::prefer(socket_.get_executor(), asio::execution::outstanding_work.tracked);
  id_ = random_id(chat ? "chatcmpl-" : "cmpl-");
  created_ = static_cast<int64_t>(std::time(nullptr));
  if (r.stream) {
    context_.metrics.count_request(endpoint_, 200);
    send("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
         "X-Lockstep-Replica: " + context_.replica + "\r\n" + cors_headers() + "Transfer-Encoding: chunked\r\nConnection: " +
             std::string(keep_alive_ ? "keep-alive" : "close") + "\r\n\r\n",
         false);
    for (size_t i = 0; i < choices_.size(); ++i) {
      if (chat) send_event(chunk_json(i, "", std::nullopt, nullptr, true));
      else if (r.echo && r.logprobs >= 0) continue;  // with the prompt's scores (on_prompt_scores)
      else if (r.echo && bytes_model())
        send_event(chunk_json(i, choices_[i].utf8.push(prompt_texts_[choices_[i].prompt]), std::nullopt, nullptr, false));
      else if (r.echo) send_event(chunk_json(i, prompt_texts_[choices_[i].prompt], std::nullopt, nullptr, false));
    }
  }
  watch_disconnect();
}

void HttpSession::watch_disconnect() {
  socket_.async_wait(asio::socket_base::wait_read, [self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || self->closed_ || self->finished_ == self->choices_.size()) return;
    char byte;
    const ssize_t n = ::recv(self->socket_.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      self->close();  // the client left: its generations leave the batch
      return;
    }
    if (n < 0) self->watch_disconnect();
    // n > 0: a pipelined request waits; it is read after this response.
  });
}

void HttpSession::cancel_generation() {
  if (finished_ >= choices_.size() || abandoned_) return;
  abandoned_ = true;
  for (Choice& c : choices_)
    if (!c.finish && c.job) context_.engine.cancel(*c.job);
}

void HttpSession::give_back_tokens() {
  if (queued_bytes_ > max_queued_bytes) return;  // write_next gives them back as the writes go
  for (Choice& c : choices_) {
    if (c.owed > 0 && c.job) context_.engine.consumed(*c.job, c.owed);
    c.owed = 0;
  }
}

void HttpSession::send_event(const std::string& data) {
  const std::string event = "data: " + data + "\n\n";
  send(hex(event.size()) + "\r\n" + event + "\r\n", false);
}

void HttpSession::on_token(size_t index, int32_t token, std::optional<TokenLogprobs> lp, const std::string& settled) {
  if (abandoned_ || closed_) return;
  Choice& c = choices_[index];
  if (!bytes_model()) {
    // Through the tokenizer: the text the token settled; token ids only: no text, each id.
    c.ids.push_back(token);
    c.offsets.push_back(c.text.size());
    c.text += settled;
    if (lp) c.logprobs.push_back(*lp);
    if (completion_.stream && (!settled.empty() || lp || !context_.tokenizer))
      send_event(chunk_json(index, settled, lp, nullptr, completion_.chat));
  } else {
    const char byte = static_cast<char>(token & 0xff);
    c.bytes.push_back(byte);
    if (lp) c.logprobs.push_back(*lp);
    if (completion_.stream) {
      const std::string text = c.utf8.push(std::string_view(&byte, 1));
      if (!text.empty() || lp) send_event(chunk_json(index, text, lp, nullptr, completion_.chat));
    }
  }
  ++c.owed;  // flow control: the token is taken (given back once its events are written)
  give_back_tokens();
}

void HttpSession::on_prompt_scores(size_t index, std::vector<TokenLogprobs> scores) {
  if (abandoned_ || closed_) return;
  Choice& c = choices_[index];
  c.prompt_logprobs = std::move(scores);
  c.prompt_scored = true;
  if (!completion_.stream) return;
  const json lps = prompt_logprobs_json(c);
  const std::string& prompt_text = prompt_texts_[c.prompt];
  const std::string text = bytes_model() ? c.utf8.push(prompt_text) : prompt_text;
  send_event(chunk_json(index, text, std::nullopt, nullptr, false, &lps));
}

json HttpSession::prompt_logprobs_json(const Choice& c) const {
  const Tokenizer* tokenizer = context_.tokenizer.get();
  const bool bytes = bytes_model();
  const std::vector<int32_t>& prompt = completion_.prompts[c.prompt];
  const std::string& prompt_text = prompt_texts_[c.prompt];
  // Where each prompt token's text starts in the echoed text: a byte each, or as the tokenizer's
  // text of the prompt settles token by token (TextStream), within the echoed prompt_text.
  std::vector<size_t> offsets(prompt.size());
  if (bytes) {
    for (size_t i = 0; i < prompt.size(); ++i) offsets[i] = i;
  } else if (tokenizer) {
    TextStream text(*tokenizer, {});
    size_t at = 0;
    for (size_t i = 0; i < prompt.size(); ++i) {
      offsets[i] = std::min(at, prompt_text.size());
      try {
        at += text.push(prompt[i]).size();
      } catch (const std::exception&) {
      }
    }
  }
  json out = completion_logprobs();
  for (size_t i = 0; i < prompt.size(); ++i) {
    const bool scored = i >= c.unscored && i - c.unscored < c.prompt_logprobs.size();
    push_logprob(out, prompt[i], scored ? &c.prompt_logprobs[i - c.unscored] : nullptr, offsets[i]);
  }
  return out;
}

json HttpSession::completion_logprobs() {
  return {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
          {"text_offset", json::array()}};
}

void HttpSession::push_logprob(json& lps, int32_t token, const TokenLogprobs* t, size_t offset) const {
  const auto text_of = [&](int32_t id) { return token_text(id, context_.tokenizer.get(), bytes_model()); };
  lps["tokens"].push_back(text_of(token));
  lps["text_offset"].push_back(offset);
  if (!t) {
    lps["token_logprobs"].push_back(nullptr);
    lps["top_logprobs"].push_back(nullptr);
    return;
  }
  lps["token_logprobs"].push_back(t->logprob);
  json top = json::object();
  for (const auto& [id, lp] : t->top) top[text_of(id)] = lp;
  lps["top_logprobs"].push_back(std::move(top));
}

std::string HttpSession::choice_sha256(const Choice& c) const {
  if (bytes_model()) return sha256_hex(c.bytes.data(), c.bytes.size());
  if (context_.tokenizer) return sha256_hex(c.text.data(), c.text.size());
  std::string le;  // token ids only: the ids as little-endian int32
  for (int32_t id : c.ids)
    for (int k = 0; k < 4; ++k) le.push_back(static_cast<char>((static_cast<uint32_t>(id) >> (8 * k)) & 0xff));
  return sha256_hex(le.data(), le.size());
}

void HttpSession::on_done(size_t index, Finish finish, const std::string& error, const std::string& settled) {
  ++finished_;
  // The job's callbacks hold this session; dropping it here breaks that cycle, else every
  // finished generation kept its connection's session (and its own keys and values) forever.
  choices_[index].job.reset();
  if (abandoned_ || closed_) {
    if (finished_ >= choices_.size()) work_ = {};
    return;
  }
  Choice& c = choices_[index];
  c.finish = finish;
  if (finish == Finish::error) error_ = error;
  c.text += settled;
  if (completion_.stream)
    send_event(chunk_json(index, bytes_model() ? c.utf8.finish() : settled, std::nullopt, finish_name(finish),
                          completion_.chat));
  if (finished_ == choices_.size()) finish_completion();
}

json HttpSession::logprobs_json(const std::vector<TokenLogprobs>& lps, size_t text_offset,
                                const std::vector<size_t>* token_offsets) const {
  const Tokenizer* tokenizer = context_.tokenizer.get();
  const bool bytes = bytes_model();
  auto text_of = [&](int32_t id) { return token_text(id, tokenizer, bytes); };
  // OpenAI's `bytes`: the token's own bytes (a byte model's byte; a tokenizer piece's UTF-8).
  auto bytes_of = [&](int32_t id) {
    if (bytes) return json{id};
    if (!tokenizer) return json(nullptr);
    const std::string t = tokenizer->token_text(id);
    if (t.rfind("bytes:\\x", 0) == 0 && t.size() == 10) return json{std::stoi(t.substr(8), nullptr, 16)};
    json out = json::array();
    for (unsigned char ch : t) out.push_back(ch);
    return out;
  };
  if (completion_.chat) {
    json content = json::array();
    for (const TokenLogprobs& t : lps) {
      json top = json::array();
      for (const auto& [id, lp] : t.top) top.push_back({{"token", text_of(id)}, {"logprob", lp}, {"bytes", bytes_of(id)}});
      content.push_back({{"token", text_of(t.token)}, {"logprob", t.logprob}, {"bytes", bytes_of(t.token)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json out = completion_logprobs();
  for (size_t i = 0; i < lps.size(); ++i)
    push_logprob(out, lps[i].token, &lps[i], token_offsets ? text_offset + (*token_offsets)[i] : text_offset++);
  return out;
}

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
  return dump(j);
}

nlohmann::json HttpSession::usage_json() const {
  size_t generated = 0;
  for (const Choice& c : choices_) generated += bytes_model() ? c.bytes.size() : c.ids.size();
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
      done = "data: " + dump(usage) + "\n\n" + done;
    }
    send(hex(done.size()) + "\r\n" + done + "\r\n0\r\n\r\n", !keep_alive_ || stopping_);
    response_done_ = true;
    if (!writing_) write_next();
    return;
  }
  if (!error_.empty()) return respond_error(500, "generation failed: " + error_, {}, "server_error");
  json choices = json::array();
  const bool bytes = bytes_model();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    // A byte model's bytes made valid UTF-8; a tokenizer's text as it settled; token ids only: "".
    const std::string echoed = r.echo ? prompt_texts_[c.prompt] : std::string();
    const std::string text = bytes ? valid_utf8(echoed + c.bytes) : echoed + c.text;
    const size_t offset = echoed.size();
    json lps = r.logprobs >= 0 ? logprobs_json(c.logprobs, offset, bytes ? nullptr : &c.offsets) : json(nullptr);
    if (r.echo && c.prompt_scored) {  // the prompt's tokens first, as OpenAI gives them
      json all = prompt_logprobs_json(c);
      for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
        for (json& v : lps[key]) all[key].push_back(std::move(v));
      lps = std::move(all);
    }
    json choice = {{"index", i},
                   {"finish_reason", finish_name(*c.finish)},
                   {"logprobs", lps},
                   {"seed", c.seed},
                   {"sha256", choice_sha256(c)}};
    if (!bytes) choice["token_ids"] = c.ids;
    if (r.chat) choice["message"] = {{"role", "assistant"}, {"content", text}};
    else choice["text"] = text;
    choices.push_back(choice);
  }
  json j = {{"id", id_},
            {"object", r.chat ? "chat.completion" : "text_completion"},
            {"created", created_},
            {"model", context_.model_name},
            {"choices", choices},
            {"usage", usage_json()},
            {"seed", r.sampling.seed}};
  respond(200, "application/json", dump(j));
}

void HttpSession::respond(int status, const std::string& content_type, const std::string& body,
                          const std::vector<std::pair<std::string, std::string>>& headers) {
  context_.metrics.count_request(endpoint_, status);
  const bool close_after = !keep_alive_ || stopping_ || status == 413 || (status == 400 && !parser_->is_done());
  std::string text = "HTTP/1.1 " + std::to_string(status) + " " +
                     std::string(http::obsolete_reason(static_cast<http::status>(status))) + "\r\n";
  if (status != 204) text += "Content-Type: " + content_type + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  text += "X-Lockstep-Replica: " + context_.replica + "\r\n" + cors_headers();
  for (const auto& [k, v] : headers) text += k + ": " + v + "\r\n";
  text += close_after ? "Connection: close\r\n\r\n" : "Connection: keep-alive\r\n\r\n";
  if (request_.method() != http::verb::head) text += body;
  response_done_ = true;
  send(std::move(text), close_after);
}

std::string HttpSession::cors_headers() const {
  if (context_.cors_origins.empty()) return {};
  const beast::string_view origin = request_[http::field::origin];  // empty when absent: no headers
  return cors_header_lines(context_.cors_origins, std::string_view(origin.data(), origin.size()));
}

void HttpSession::respond_error(int status, const std::string& message, const std::string& param,
                                const std::string& type, const std::string& code) {
  std::vector<std::pair<std::string, std::string>> headers;
  if (status == 405) {
    for (const char* p : {"/", "/health", "/metrics", "/v1/models"})
      if (endpoint_ == p) headers.emplace_back("Allow", "GET, HEAD");
    if (headers.empty()) headers.emplace_back("Allow", "POST");
  }
  if (status == 401) headers.emplace_back("WWW-Authenticate", "Bearer");
  if (status == 429 || status == 503) headers.emplace_back("Retry-After", "1");
  respond(status, "application/json", error_json(message, type, param, code), headers);
}

void HttpSession::send(std::string bytes, bool close_after) {
  if (closed_) return;
  if (close_after) close_after_writes_ = true;
  queued_bytes_ += bytes.size();
  if (!bytes.empty()) writes_.push_back(std::move(bytes));
  if (!writing_) write_next();
}

void HttpSession::write_next() {
  if (closed_) return;
  if (writes_.empty()) {
    writing_ = false;
    ++timer_generation_;
    if (!response_done_) return;  // a stream waiting for tokens
    response_done_ = false;
    in_request_ = false;
    if (close_after_writes_) return close();
    return read_request();
  }
  writing_ = true;
  arm(context_.write_timeout);
  asio::async_write(socket_, asio::buffer(writes_.front()),
                    [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                      if (ec) return self->close();
                      self->queued_bytes_ -= self->writes_.front().size();
                      self->writes_.pop_front();
                      self->give_back_tokens();
                      self->write_next();
                    });
}

void HttpSession::close() noexcept {
  if (closed_) return;
  closed_ = true;
  cancel_generation();
  ++timer_generation_;
  boost::system::error_code ec;
  timer_.cancel();
  socket_.shutdown(asio::socket_base::shutdown_both, ec);
  socket_.close(ec);
  try {
    if (on_closed_) on_closed_(this);
  } catch (...) {
  }
}

}  // namespace lockstep::serve
