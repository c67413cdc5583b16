#include "serve/generation_engine.hpp"

#include <algorithm>
#include <cmath>
#include <exception>

#include "core/thread_pool.hpp"
#include "lockstep/session.hpp"

namespace lockstep::serve {

GenerationEngine::GenerationEngine(int max_active, int max_queue, const CallOptions& call, Metrics& metrics,
                                   PrefixCache* cache)
    : max_active_(static_cast<size_t>(std::max(max_active, 1))),
      max_queue_(static_cast<size_t>(std::max(max_queue, 0))),
      max_per_request_(std::max<size_t>(max_active_ / 2, 1)),
      call_(call),
      metrics_(metrics),
      cache_(cache),
      runner_([this] { run_loop(); }) {}

GenerationEngine::~GenerationEngine() {
  {
    std::lock_guard lock(mutex_);
    quitting_ = true;
    aborting_ = true;
  }
  wake_.notify_one();
  runner_.join();
}

bool GenerationEngine::submit(std::shared_ptr<GenerationJob> job) {
  {
    std::lock_guard lock(mutex_);
    if (waiting_.size() >= max_queue_ && active_count_ + waiting_.size() >= max_active_) return false;
    job->admitted = std::chrono::steady_clock::now();
    waiting_.push_back(std::move(job));
    metrics_.waiting.store(static_cast<int64_t>(waiting_.size()));
  }
  wake_.notify_one();
  return true;
}

void GenerationEngine::abort_all() {
  {
    std::lock_guard lock(mutex_);
    aborting_ = true;
  }
  wake_.notify_one();
}

void GenerationEngine::cancel(GenerationJob& job) {
  job.cancelled.store(true);
  { std::lock_guard lock(mutex_); }  // the runner is waiting, or sees the flag before it waits
  wake_.notify_one();
}

void GenerationEngine::consumed(GenerationJob& job, int32_t tokens) {
  const int32_t before = job.ahead.fetch_sub(tokens);
  if (job.max_ahead <= 0 || before < job.max_ahead || before - tokens >= job.max_ahead) return;
  { std::lock_guard lock(mutex_); }  // it was waiting for this: as in cancel()
  wake_.notify_one();
}

namespace {

// Whether a step would do anything for the job: leave (cancelled) or decode (not too far ahead).
bool can_step(const GenerationJob& job) {
  return job.cancelled.load() || job.max_ahead <= 0 || job.ahead.load() < job.max_ahead;
}

}  // namespace

bool GenerationEngine::admissible(const GenerationJob& job) const {
  if (job.request == 0) return true;
  const auto it = placed_.find(job.request);
  return it == placed_.end() || it->second < max_per_request_;
}

bool GenerationEngine::can_admit(size_t active) const {
  return active < max_active_ &&
         std::any_of(waiting_.begin(), waiting_.end(), [&](const auto& j) { return admissible(*j); });
}

void GenerationEngine::admit(std::vector<std::shared_ptr<GenerationJob>>& active) {
  // The first waiting jobs whose requests are under their share, in the order they came.
  for (auto it = waiting_.begin(); it != waiting_.end() && active.size() < max_active_;) {
    if (!admissible(**it)) {
      ++it;
      continue;
    }
    if ((*it)->request != 0) ++placed_[(*it)->request];
    active.push_back(std::move(*it));
    it = waiting_.erase(it);
  }
}

int GenerationEngine::retry_after_seconds() const {
  const double seconds = static_cast<double>(fewest_left_.load()) * step_seconds_.load();
  return static_cast<int>(std::clamp(std::ceil(seconds), 1.0, 3600.0));
}

void GenerationEngine::note_step(const std::vector<std::shared_ptr<GenerationJob>>& active,
                                 std::chrono::steady_clock::duration took) {
  int64_t fewest = 0;
  for (size_t i = 0; i < active.size(); ++i) {
    const int64_t left = int64_t{active[i]->max_tokens} - active[i]->generator->generated();
    fewest = i == 0 ? left : std::min(fewest, left);
  }
  fewest_left_.store(std::max<int64_t>(fewest, 0));
  const double seconds = std::chrono::duration<double>(took).count(), mean = step_seconds_.load();
  step_seconds_.store(mean == 0 ? seconds : 0.9 * mean + 0.1 * seconds);
}

size_t GenerationEngine::pending() const {
  std::lock_guard lock(mutex_);
  return waiting_.size() + active_count_;
}

void GenerationEngine::run_loop() noexcept {
  std::vector<std::shared_ptr<GenerationJob>> active;
  std::unique_lock lock(mutex_);
  for (;;) {
    // Jobs that all wait for their consumers, with no room for a waiting one, leave nothing to
    // do: the runner sleeps until consumed() or cancel() (or a submit, an abort) wakes it.
    wake_.wait(lock, [&] {
      return quitting_ || aborting_ || can_admit(active.size()) ||
             std::any_of(active.begin(), active.end(), [](const auto& j) { return can_step(*j); });
    });
    if (aborting_) {
      for (auto& j : waiting_) {
        if (j->request != 0) ++placed_[j->request];
        active.push_back(std::move(j));
      }
      waiting_.clear();
      for (auto& j : active) j->cancelled.store(true);
      aborting_ = quitting_;  // keeps aborting what arrives once quitting
    }
    if (quitting_ && waiting_.empty() && active.empty()) return;
    admit(active);
    active_count_ = active.size();
    metrics_.waiting.store(static_cast<int64_t>(waiting_.size()));
    metrics_.running.store(static_cast<int64_t>(active.size()));
    lock.unlock();
    const auto began = std::chrono::steady_clock::now();
    step(active);
    lock.lock();
    note_step(active, std::chrono::steady_clock::now() - began);
    active_count_ = active.size();
    metrics_.running.store(static_cast<int64_t>(active.size()));
  }
}

void GenerationEngine::start(GenerationJob& job) {
  job.started = true;
  if (job.on_prompt) prompt_logits(job);
  Generator& g = *job.generator;
  Session& session = g.session();
  if (!cache_ || &session.model() != &cache_->model() || session.length() != 0) return;
  // The reference device keeps no keys: it recomputes from position 0 whatever the session holds.
  if (call_.device.value_or(session.model().default_device()) != Device::cpu) return;
  const std::span<const int32_t> context = g.context().tokens();
  // At most all but the last position: the last one's logits are computed by the first step.
  const int32_t reused = cache_->restore(session, context, static_cast<int32_t>(context.size()) - 1);
  rows_reused_.fetch_add(static_cast<uint64_t>(reused), std::memory_order_relaxed);
}

// Chunks of at most kPromptLogitFloats floats of logits (64 MiB), one position at least: a byte
// model's window is one chunk; a 32000-piece vocabulary's, 524 positions a chunk (each chunk's
// pass recomputes the positions before it, which only prompts that long pay).
constexpr int64_t kPromptLogitFloats = int64_t{16} << 20;

void GenerationEngine::prompt_logits(GenerationJob& job) {
  Generator& g = *job.generator;
  const Model& model = g.session().model();
  const std::span<const int32_t> context = g.context().tokens();
  const int64_t vocab = model.config().vocab_size, scored = static_cast<int64_t>(context.size()) - 1;
  if (scored <= 0) return job.on_prompt(0, {}, true);
  const int64_t chunk = std::clamp<int64_t>(job.prompt_chunk > 0 ? job.prompt_chunk : kPromptLogitFloats / vocab, 1, scored);
  std::vector<float> logits(static_cast<size_t>(chunk * vocab));
  for (int64_t first = 0; first < scored; first += chunk) {
    const int64_t rows = std::min(chunk, scored - first);
    RowRequest row;
    row.ids = context.first(static_cast<size_t>(first + rows));
    row.out_begin = static_cast<int32_t>(first);
    row.out_end = static_cast<int32_t>(first + rows);
    row.logits = logits.data();
    model.forward(std::span<const RowRequest>(&row, 1), call_);
    rows_computed_.fetch_add(static_cast<uint64_t>(first + rows), std::memory_order_relaxed);
    job.on_prompt(static_cast<int32_t>(first), std::span<const float>(logits.data(), static_cast<size_t>(rows * vocab)),
                  first + rows == scored);
  }
}

void GenerationEngine::finish(GenerationJob& job, Finish finish, const std::string& error) noexcept {
  if (cache_ && job.started && finish != Finish::error) {
    try {
      cache_->keep(job.generator->session());
    } catch (...) {
      // Not filed (out of memory): a later request computes those rows itself.
    }
  }
  leaving(job, finish);
  job.on_done(finish, error);
}

void GenerationEngine::leaving(const GenerationJob& job, Finish finish) {
  metrics_.count_finished(finish);
  if (job.generator) metrics_.generation_length.observe(static_cast<double>(job.generator->generated()));
  std::lock_guard lock(mutex_);
  if (active_count_ > 0) --active_count_;
  if (const auto it = placed_.find(job.request); job.request != 0 && it != placed_.end() && --it->second == 0)
    placed_.erase(it);
}

namespace {

// A chunk of a step run on one lane: at least this many sessions where the step has enough for
// every lane (fewer, smaller chunks decode less efficiently). s256 with 32 streaming clients on
// 2 lanes: 5312 tokens/s in chunks of 16 against 4228 in chunks of 8 (bench/http_bench.py, same
// quiet machine): each call of a chunk reads every weight once; the model spent 317 µs of CPU
// per token in calls of 16 against 403 in calls of 8.
constexpr size_t kSessionsPerChunk = 16;

// Lanes only for models of at most this many weights (multiply-adds per token through the
// matmuls; 64 MiB of f32): their weights stay in the last-level cache, so a chunk of 8 sessions
// decodes a token for about the CPU time of one of 32 (s256 on one thread: ~230 against
// ~260 µs). A larger model reads its weights from memory once per call, so a call per chunk
// would read them once per chunk: l768 on one thread takes 6.1 ms per token in calls of 8
// sessions against 3.3 ms in calls of 32. Such a model's steps stay one call on the pool, whose
// threads split the weights between them.
constexpr double kLaneWeights = 16 << 20;

double weights_per_token(const ModelConfig& c) {
  const double d = c.d_model, q = c.q_dim(), kv = c.kv_dim(), ff = c.d_ff;
  return c.n_layers * (d * (q + 2 * kv) + q * d + 3 * d * ff) + d * c.vocab_size;
}

// What a session's step costs, in multiply-adds: its new tokens through the weights, and
// attention over the keys before them.
double step_cost(const SessionStep& s) {
  const ModelConfig& c = s.session->model().config();
  const double t = static_cast<double>(s.tokens.size());
  const double keys = static_cast<double>(s.session->length()) + t / 2;
  return t * (weights_per_token(c) + 2.0 * c.n_layers * c.q_dim() * keys);
}

}  // namespace

void GenerationEngine::run_steps(std::span<const SessionStep> steps,
                                 std::span<const std::shared_ptr<GenerationJob>> jobs, std::span<int32_t> tokens,
                                 std::span<std::string> errors) noexcept {
  auto fail = [&](size_t i, const char* what) { errors[i] = *what ? what : "the decoding step failed"; };
  // Appends `chunk` as one call, then samples its tokens (order[k]: chunk[k]'s index in steps).
  auto run_chunk = [&](std::span<const SessionStep> chunk, std::span<const size_t> order, const CallOptions& call) {
    try {
      append_batch(chunk, call);
    } catch (const std::exception& e) {
      for (size_t i : order) fail(i, e.what());
      return;
    } catch (...) {
      for (size_t i : order) fail(i, "");
      return;
    }
    for (size_t i : order) {
      try {
        tokens[i] = jobs[i]->generator->end_step();
      } catch (const std::exception& e) {
        fail(i, e.what());
      } catch (...) {
        fail(i, "");
      }
    }
  };
  std::vector<size_t> identity(steps.size());
  for (size_t i = 0; i < identity.size(); ++i) identity[i] = i;
  if (lanes_ == 0 && steps.size() > 1) {
    const Model& model = steps[0].session->model();
    lanes_ = call_.threads.value_or(model.default_threads());
    if (lanes_ <= 0) lanes_ = thread_pool_size(*model.pool());
    if (weights_per_token(model.config()) > kLaneWeights) lanes_ = 1;
    try {
      if (lanes_ > 1) lane_pool_ = std::make_unique<ThreadPool>(lanes_);
    } catch (...) {
      lanes_ = 1;
    }
  }
  if (steps.size() < 2 || !lane_pool_) return run_chunk(steps, identity, call_);

  // Chunks: the steps dealt out heaviest first, each to the chunk with the least work so far,
  // then laid out chunk by chunk, heaviest chunk first (order[k]: the step at place k), so that
  // the lanes take the longest ones first.
  const size_t n_chunks = std::min(steps.size(), std::max(static_cast<size_t>(lanes_), steps.size() / kSessionsPerChunk));
  std::vector<double> cost(steps.size());
  for (size_t i = 0; i < steps.size(); ++i) cost[i] = step_cost(steps[i]);
  std::vector<size_t> by_cost = identity;
  std::stable_sort(by_cost.begin(), by_cost.end(), [&](size_t a, size_t b) { return cost[a] > cost[b]; });
  std::vector<std::vector<size_t>> members(n_chunks);
  std::vector<double> load(n_chunks, 0.0);
  for (size_t i : by_cost) {
    const size_t c = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    members[c].push_back(i);
    load[c] += cost[i];
  }
  std::vector<size_t> chunks(n_chunks);
  for (size_t c = 0; c < n_chunks; ++c) chunks[c] = c;
  std::stable_sort(chunks.begin(), chunks.end(), [&](size_t a, size_t b) { return load[a] > load[b]; });
  std::vector<size_t> order, begin;
  std::vector<SessionStep> laid;
  for (size_t c : chunks) {
    begin.push_back(order.size());
    for (size_t i : members[c]) {
      order.push_back(i);
      laid.push_back(steps[i]);
    }
  }
  begin.push_back(order.size());
  lane_steps_.fetch_add(1, std::memory_order_relaxed);
  CallOptions one = call_;
  one.threads = 1;  // the chunk's lane alone: the lanes are the step's threads
  std::vector<char> ran(n_chunks, 0);
  auto chunk = [&](size_t c) {
    ran[c] = 1;
    const std::span<const SessionStep> all(laid);
    const std::span<const size_t> places(order);
    run_chunk(all.subspan(begin[c], begin[c + 1] - begin[c]), places.subspan(begin[c], begin[c + 1] - begin[c]), one);
  };
  try {
    lane_pool_->run_phases(
        lanes_, 1, [&](int64_t) { return static_cast<int64_t>(n_chunks); },
        [&](int64_t, int64_t c, int) { chunk(static_cast<size_t>(c)); });
  } catch (...) {
    // Only starting a lane's thread can throw here (the chunks catch their own): the runner
    // runs what is left.
    for (size_t c = 0; c < n_chunks; ++c)
      if (!ran[c]) chunk(c);
  }
}

void GenerationEngine::step(std::vector<std::shared_ptr<GenerationJob>>& active) noexcept {
  // Leaving: cancelled ones, and those whose generator is finished.
  std::vector<SessionStep> steps;
  std::vector<std::shared_ptr<GenerationJob>> stepping;
  for (auto& job : active) {
    if (!can_step(*job)) continue;  // too far ahead of its consumer: it waits, in the batch
    if (job->cancelled.load()) {
      finish(*job, Finish::abort, {});
      job.reset();
      continue;
    }
    try {
      if (!job->started) start(*job);
      const auto tokens = job->generator->begin_step();
      if (!tokens) {
        finish(*job, Finish::length, {});
        job.reset();
        continue;
      }
      rows_computed_.fetch_add(tokens->size(), std::memory_order_relaxed);
      steps.push_back({&job->generator->session(), *tokens, job->generator->logits_buffer(), nullptr});
      stepping.push_back(job);
    } catch (const std::exception& e) {
      leaving(*job, Finish::error);
      job->on_done(Finish::error, e.what());
      job.reset();
    }
  }
  std::erase(active, nullptr);
  if (steps.empty()) return;
  metrics_.batch_size.observe(static_cast<double>(steps.size()));
  std::vector<int32_t> tokens(steps.size());
  std::vector<std::string> errors(steps.size());
  run_steps(steps, stepping, tokens, errors);
  const auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < stepping.size(); ++i) {
    const std::shared_ptr<GenerationJob>& job = stepping[i];
    if (!errors[i].empty()) {
      leaving(*job, Finish::error);
      job->on_done(Finish::error, errors[i]);
      std::erase(active, job);
      continue;
    }
    Generator& g = *job->generator;
    const int32_t token = tokens[i];
    metrics_.generation_tokens.fetch_add(1, std::memory_order_relaxed);
    const std::chrono::duration<double> since = now - (job->first ? job->admitted : job->last_token);
    (job->first ? metrics_.time_to_first_token : metrics_.time_per_token).observe(since.count());
    job->first = false;
    job->last_token = now;
    job->ahead.fetch_add(1);
    job->on_token(token, g.logits());
    // A grammar's whole match ends the answer as a stop does (GenerateOptions::grammar).
    bool stopped = job->stop_now || (g.done() && g.stop_reason() == StopReason::grammar);
    if (!job->stops.empty()) {
      job->tail.push_back(static_cast<char>(token & 0xff));
      size_t longest = 0;
      for (const std::string& s : job->stops) longest = std::max(longest, s.size());
      if (job->tail.size() > longest) job->tail.erase(0, job->tail.size() - longest);
      for (const std::string& s : job->stops)
        stopped |= job->tail.size() >= s.size() && job->tail.compare(job->tail.size() - s.size(), s.size(), s) == 0;
    }
    if (g.end_of_sequence()) {
      finish(*job, Finish::eos, {});
      std::erase(active, job);
    } else if (stopped || g.generated() >= job->max_tokens) {
      finish(*job, stopped ? Finish::stop : Finish::length, {});
      std::erase(active, job);
    }
  }
}

}  // namespace lockstep::serve
