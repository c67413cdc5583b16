#include "lockstep/session.hpp"

#include <set>

#include "core/fpenv.hpp"
#include "model/session_impl.hpp"

namespace lockstep {

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Session::Session(std::shared_ptr<const Model> model, const CallOptions& call) : impl_(std::make_unique<Impl>()) {
  if (!model) throw Error(ErrorKind::invalid_argument, "a session needs a model");
  impl_->model = std::move(model);
  impl_->call = call;
}

Session::Session(std::shared_ptr<const Model> model, const CallOptions& call, std::shared_ptr<KvPool> pool)
    : Session(std::move(model), call) {
  const ModelConfig& c = impl_->model->config();
  if (pool && !pool->impl().fits(c.n_layers, c.kv_dim(), c.length))
    throw Error(ErrorKind::invalid_argument, "the key/value pool was made for another model's shape");
  impl_->pool = std::move(pool);
}

Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

int32_t Session::length() const { return static_cast<int32_t>(impl_->tokens.size()); }
std::span<const int32_t> Session::tokens() const { return impl_->tokens; }
const Model& Session::model() const { return *impl_->model; }

size_t Session::memory_bytes() const {
  return impl_->tokens.capacity() * sizeof(int32_t) + (impl_->cache ? impl_->cache->bytes() : 0);
}

void Session::append(std::span<const int32_t> tokens, float* logits, float* hidden) {
  const SessionStep step{this, tokens, logits, hidden};
  append_batch({&step, 1}, impl_->call);
}

std::vector<float> Session::append(std::span<const int32_t> tokens) {
  std::vector<float> logits(static_cast<size_t>(impl_->model->config().vocab_size));
  append(tokens, logits.data());
  return logits;
}

Session Session::fork(int32_t length) const {
  const int32_t n = length < 0 ? this->length() : length;
  if (n > this->length())
    throw Error(ErrorKind::invalid_argument, "cannot fork " + std::to_string(n) + " positions from a session of " +
                                                 std::to_string(this->length()));
  auto impl = std::make_unique<Impl>();
  impl->model = impl_->model;
  impl->call = impl_->call;
  impl->tokens.assign(impl_->tokens.begin(), impl_->tokens.begin() + n);
  impl->pool = impl_->pool;
  if (impl_->cache) {
    impl->cached = std::min(n, impl_->cached);
    impl->cache = impl->pool ? std::make_unique<KvCache>(impl->pool)
                             : std::make_unique<KvCache>(impl_->cache->n_layers, impl_->cache->kv_dim, impl_->cache->capacity);
    impl->cache->copy_from(*impl_->cache, impl->cached);
  }
  return Session(std::move(impl));
}

void Session::truncate(int32_t length) {
  if (length < 0 || length > this->length())
    throw Error(ErrorKind::invalid_argument, "cannot truncate a session of " + std::to_string(this->length()) +
                                                 " positions to " + std::to_string(length));
  impl_->tokens.resize(static_cast<size_t>(length));
  impl_->cached = std::min(impl_->cached, length);
}

void append_batch(std::span<const SessionStep> steps, const CallOptions& call) {
  if (steps.empty()) return;
  const Model& model = steps[0].session->model();
  const ModelConfig& c = model.config();
  std::set<const Session*> seen;
  for (size_t i = 0; i < steps.size(); ++i) {
    const SessionStep& s = steps[i];
    if (!s.session) throw Error(ErrorKind::invalid_argument, "session step " + std::to_string(i) + " has no session");
    if (&s.session->model() != &model)
      throw Error(ErrorKind::invalid_argument, "sessions appended together must share one model");
    if (!seen.insert(s.session).second)
      throw Error(ErrorKind::invalid_argument, "a session appears twice in one batch");
    if (s.tokens.empty()) throw Error(ErrorKind::invalid_argument, "append needs at least one token");
    const int64_t total = static_cast<int64_t>(s.session->length()) + static_cast<int64_t>(s.tokens.size());
    if (total > c.length)
      throw Error(ErrorKind::invalid_argument, "the session would hold " + std::to_string(total) +
                                                   " positions; the window is " + std::to_string(c.length));
    for (size_t t = 0; t < s.tokens.size(); ++t)
      if (s.tokens[t] < 0 || s.tokens[t] >= c.vocab_size)
        throw Error(ErrorKind::invalid_argument,
                    "tokens must be ids in [0, " + std::to_string(c.vocab_size) + "); got " +
                        std::to_string(s.tokens[t]) + " at position " + std::to_string(s.session->length() + static_cast<int64_t>(t)));
  }
  const Model::Impl& m = model.impl();
  const Device device = call.device.value_or(m.device);
  if (device == Device::cuda)
    throw Error(ErrorKind::unsupported, "sessions do not run on device 'cuda' yet; it runs calls (lockstep call, "
                                        "bench, Model::forward and logits): use 'cpu' for sessions and generation");
  const int threads = m.threads_for(call);
  // The new tokens join each session before the pass; they leave again if it fails.
  std::vector<size_t> old_length(steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    Session::Impl& s = steps[i].session->impl();
    old_length[i] = s.tokens.size();
    s.tokens.insert(s.tokens.end(), steps[i].tokens.begin(), steps[i].tokens.end());
  }
  try {
    FloatEnvScope env;
    if (device == Device::reference) {
      std::vector<RowRequest> rows;
      for (const SessionStep& step : steps) {
        const auto& tokens = step.session->impl().tokens;
        const int32_t n = static_cast<int32_t>(tokens.size());
        rows.push_back({tokens, n - 1, n, step.logits, step.hidden});
      }
      forward_reference(m, rows);
    } else {
      std::vector<RowWork> rows;
      for (const SessionStep& step : steps) {
        Session::Impl& s = step.session->impl();
        if (!s.cache) s.cache = s.pool ? std::make_unique<KvCache>(s.pool) : std::make_unique<KvCache>(c, c.length);
        const int32_t n = static_cast<int32_t>(s.tokens.size());
        rows.push_back({s.tokens, s.cached, n - 1, n, step.logits, step.hidden, s.cache.get()});
      }
      forward_fast(m, rows, threads, call.threads.has_value());
      for (const SessionStep& step : steps) {
        Session::Impl& s = step.session->impl();
        s.cached = static_cast<int32_t>(s.tokens.size());
      }
    }
  } catch (...) {
    for (size_t i = 0; i < steps.size(); ++i) steps[i].session->impl().tokens.resize(old_length[i]);
    throw;
  }
}

}  // namespace lockstep
