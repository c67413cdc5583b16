// POST /v1/completions and /v1/chat/completions: a request becomes one generation job per
// choice (prompt p's i-th choice with seed + i), handed to the GenerationEngine; the jobs'
// tokens come back on this connection's strand and are answered whole (finish_completion) or
// streamed (http_stream.cpp). A client that leaves cancels its jobs (watch_disconnect).
#include <poll.h>

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <ctime>

#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>

#include "serve/http_session.hpp"
#include "serve/http_wire.hpp"

namespace lockstep::serve {

using nlohmann::json;

namespace {

// Whether the peer closed or reset the connection. POLLRDHUP reports the end of the peer's data
// even behind bytes not read yet (the first byte of a pipelined request, which MSG_PEEK would
// see instead of the end behind it); a reset is POLLERR or POLLHUP.
bool peer_left(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  while (::poll(&p, 1, 0) < 0)
    if (errno != EINTR) return true;
  return (p.revents & (POLLRDHUP | POLLERR | POLLHUP | POLLNVAL)) != 0;
}

}  // namespace

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
  const uint64_t request = context_.engine.new_request();  // its jobs share a request's places in the batch
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
    job->request = request;
    job->max_tokens = r.max_tokens;
    job->max_ahead = kMaxTokensAhead;
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
      // Retry-After: when a place in the batch is likely to free (respond_error's would say 1).
      return respond(429, "application/json",
                     error_json("the server has --max-queue requests waiting; try again later", "server_error", {},
                                "queue_full"),
                     {{"Retry-After", std::to_string(context_.engine.retry_after_seconds())}});
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
  const uint64_t seq = request_seq_;
  socket_.async_wait(asio::socket_base::wait_read, [self = shared_from_this(), seq](const boost::system::error_code& ec) {
    if (ec || !self->completion_running(seq)) return;
    // The bytes of a pipelined request are read now, into the buffer its parser reads first:
    // left unread, they would wake this wait again at once (Asio re-arms the descriptor for a
    // wait) and hide the end of the connection behind them.
    switch (self->read_ahead()) {
      case ReadAhead::left: return self->close();  // its generations leave the batch
      case ReadAhead::full: return self->poll_disconnect();
      case ReadAhead::drained: return self->watch_disconnect();
    }
  });
}

HttpSession::ReadAhead HttpSession::read_ahead() {
  const int fd = socket_.native_handle();
  while (buffer_.size() < kMaxReadAhead) {
    const auto space = buffer_.prepare(std::min<size_t>(kMaxReadAhead - buffer_.size(), 16 << 10));
    const ssize_t n = ::recv(fd, space.data(), space.size(), MSG_DONTWAIT);
    if (n > 0) {
      buffer_.commit(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ReadAhead::drained;
    return ReadAhead::left;  // the end of the stream, or a reset
  }
  return peer_left(fd) ? ReadAhead::left : ReadAhead::full;
}

void HttpSession::poll_disconnect() {
  // kMaxReadAhead bytes wait already: the rest stays in the socket, and the end of the connection
  // is looked for every 100 ms instead (POLLRDHUP sees it behind unread bytes).
  auto timer = std::make_shared<asio::steady_timer>(socket_.get_executor(), std::chrono::milliseconds(100));
  timer->async_wait([self = shared_from_this(), timer, seq = request_seq_](const boost::system::error_code& ec) {
    if (ec || !self->completion_running(seq)) return;
    if (peer_left(self->socket_.native_handle())) return self->close();
    self->poll_disconnect();
  });
}

void HttpSession::cancel_generation() {
  if (finished_ >= choices_.size() || abandoned_) return;
  abandoned_ = true;
  for (Choice& c : choices_)
    if (!c.finish && c.job) context_.engine.cancel(*c.job);
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
      done = "data: " + json_body(usage) + "\n\n" + done;
    }
    send(http_chunk(done) + "0\r\n\r\n", !keep_alive_ || stopping_);
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
  respond(200, "application/json", json_body(j));
}

}  // namespace lockstep::serve
