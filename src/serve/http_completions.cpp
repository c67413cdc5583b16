// POST /v1/completions and /v1/chat/completions: a request becomes one generation job per
// choice (prompt p's i-th choice with seed + i), handed to the GenerationEngine; the jobs'
// tokens come back on this connection's strand and are answered whole (http_answer.cpp) or
// streamed (http_stream.cpp). A client that leaves cancels its jobs (http_disconnect.cpp).
#include <ctime>

#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>

#include "serve/answer_budget.hpp"
#include "serve/http_session.hpp"
#include "serve/http_wire.hpp"

namespace lockstep::serve {

using nlohmann::json;

void HttpSession::completion(bool chat) {
  // A large body's parsed JSON is given back with the answer, refused or not.
  trim_after_response_ = request_.body().size() >= trim_after_bytes;
  CompletionRequest parsed =
      parse_completion(request_.body(), context_.model->config(), context_.model_name, context_.tokenizer.get(), chat,
                       context_.chat_template.get());
  // What its answer may take (answer_budget.hpp): refused before anything is computed or kept.
  check_answer_budget(parsed, bytes_model() ? byte_token_text : context_.tokenizer ? piece_token_text : id_token_text);
  completion_ = std::move(parsed);
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
    choices_[i].logprobs = LogprobsText(r.chat);
    GenerateOptions g;
    g.sampling = r.sampling;
    g.sampling.seed = r.sampling.seed + i % static_cast<size_t>(r.n);  // wraps past 2^64 - 1, as unsigned arithmetic does
    g.max_tokens = r.max_tokens;
    g.truncate_prompt = true;
    g.ignore_eos = r.ignore_eos;
    g.grammar = r.grammar;
    g.vocabulary = context_.vocabulary;
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
      const bool end = raw->generator->end_of_sequence();  // an end id: no text
      if (text && !end) {
        try {
          settled = text->push(token);
        } catch (const std::exception&) {  // ids are the model's and the tokenizer holds as many
        }
        raw->stop_now = text->stopped();
      }
      asio::post(self->socket_.get_executor(), [self, i, token, lp, seq, end, settled = std::move(settled)] {
        if (seq == self->request_seq_) self->on_token(i, token, lp, settled, end);
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
      if (chat) send_event(chunk_json(i, "", {}, nullptr, true));
      else if (r.echo && r.logprobs >= 0) continue;  // with the prompt's scores (on_prompt_scores)
      else if (r.echo && bytes_model())
        send_event(chunk_json(i, choices_[i].utf8.push(prompt_texts_[choices_[i].prompt]), {}, nullptr, false));
      else if (r.echo) send_event(chunk_json(i, prompt_texts_[choices_[i].prompt], {}, nullptr, false));
    }
  }
  watch_disconnect();
}

void HttpSession::on_token(size_t index, int32_t token, std::optional<TokenLogprobs> lp, const std::string& settled,
                           bool end) {
  if (abandoned_ || closed_) return;
  Choice& c = choices_[index];
  const bool stream = completion_.stream, bytes = bytes_model();
  const size_t echoed = completion_.echo ? prompt_texts_[c.prompt].size() : 0;  // text_offset counts the echo
  // Where this token's text starts: a byte each, or the text settled before it (a tokenizer's).
  const size_t offset = echoed + (bytes ? c.generated : c.text_size);
  ++c.generated;
  if (end && (bytes || context_.tokenizer)) {
    // An end-of-sequence id: counted, in token_ids and logprobs, but no text (so not in sha256).
  } else if (bytes) {
    const char byte = static_cast<char>(token & 0xff);
    c.digest.update(&byte, 1);
    if (!stream) c.bytes.push_back(byte);
  } else if (context_.tokenizer) {
    c.digest.update(settled.data(), settled.size());
    c.text_size += settled.size();
    if (!stream) c.text += settled;
  } else {  // token ids only: the digest is of the ids as little-endian int32
    char le[4];
    for (int k = 0; k < 4; ++k) le[k] = static_cast<char>((static_cast<uint32_t>(token) >> (8 * k)) & 0xff);
    c.digest.update(le, 4);
  }
  if (!stream && !bytes) c.ids.push_back(token);
  if (!stream && lp) c.logprobs.add(token_names(), token, &*lp, offset);
  if (stream) {
    std::string logprobs;
    if (lp) {
      LogprobsText one(completion_.chat);
      one.add(token_names(), token, &*lp, offset);
      logprobs = one.object();
    }
    if (end) {
      // No text: an event only for its logprob, or its id (token ids only).
      if (lp || (!bytes && !context_.tokenizer))
        send_event(chunk_json(index, "", logprobs, nullptr, completion_.chat,
                              bytes || context_.tokenizer ? std::nullopt : std::optional<int32_t>(token)));
    } else if (bytes) {
      const char byte = static_cast<char>(token & 0xff);
      const std::string text = c.utf8.push(std::string_view(&byte, 1));
      if (!text.empty() || lp) send_event(chunk_json(index, text, logprobs, nullptr, completion_.chat));
    } else if (!settled.empty() || lp || !context_.tokenizer) {
      // Through the tokenizer: the text the token settled; token ids only: no text, each id.
      send_event(chunk_json(index, settled, logprobs, nullptr, completion_.chat,
                            context_.tokenizer ? std::nullopt : std::optional<int32_t>(token)));
    }
  }
  ++c.owed;  // flow control: the token is taken (given back once its events are written)
  give_back_tokens();
}

void HttpSession::on_prompt_scores(size_t index, std::vector<TokenLogprobs> scores) {
  if (abandoned_ || closed_) return;
  Choice& c = choices_[index];
  if (!completion_.stream) return add_prompt_logprobs(c.logprobs, c, scores);  // before any token's
  LogprobsText lps;
  add_prompt_logprobs(lps, c, scores);
  scores = {};
  const std::string& prompt_text = prompt_texts_[c.prompt];
  const std::string text = bytes_model() ? c.utf8.push(prompt_text) : prompt_text;
  send_event(chunk_json(index, text, lps.object(), nullptr, false));
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
  c.digest.update(settled.data(), settled.size());
  c.text_size += settled.size();
  if (!completion_.stream) c.text += settled;
  c.sha256 = c.digest.hex();
  if (completion_.stream)
    send_event(chunk_json(index, bytes_model() ? c.utf8.finish() : settled, {}, finish_name(finish), completion_.chat));
  if (finished_ == choices_.size()) finish_completion();
}

}  // namespace lockstep::serve
