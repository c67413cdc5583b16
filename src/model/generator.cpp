// The generation loop and its window policy (include/lockstep/generator.hpp).
#include "lockstep/generator.hpp"

#include <algorithm>
#include <string>

#include "lockstep/error.hpp"
#include "model/model_impl.hpp"
#include "model/packed_weights.hpp"
#include "model/sampling_impl.hpp"

namespace lockstep {

int32_t kept_on_restart(int32_t window) {
  if (window < 1) throw Error(ErrorKind::invalid_argument, "the window must hold at least one token, got " + std::to_string(window));
  return window - window / 2;
}

GenerationContext::GenerationContext(int32_t window, std::span<const int32_t> prompt, bool truncate) : window_(window) {
  kept_on_restart(window);  // checks the window
  if (prompt.empty()) throw Error(ErrorKind::invalid_argument, "the prompt is empty; generation needs at least one token");
  if (prompt.size() > static_cast<size_t>(window)) {
    if (!truncate)
      throw Error(ErrorKind::invalid_argument, "the prompt holds " + std::to_string(prompt.size()) +
                                                   " tokens; the window is " + std::to_string(window) +
                                                   " (allow truncation to keep its last " + std::to_string(window) + ")");
    dropped_ = static_cast<int64_t>(prompt.size()) - window;
    prompt = prompt.subspan(static_cast<size_t>(dropped_));
  }
  tokens_.assign(prompt.begin(), prompt.end());
}

bool GenerationContext::push(int32_t token) {
  if (tokens_.size() < static_cast<size_t>(window_)) {
    tokens_.push_back(token);
    return false;
  }
  // Full: the last K - 1 tokens, then the new one, K in all.
  const size_t keep = static_cast<size_t>(kept_on_restart(window_));
  tokens_.erase(tokens_.begin(), tokens_.end() - static_cast<std::ptrdiff_t>(keep - 1));
  tokens_.push_back(token);
  return true;
}

void GenerateOptions::validate() const {
  sampling.validate();
  if (max_tokens < 0)
    throw Error(ErrorKind::invalid_argument, "the token count must be >= 0, got " + std::to_string(max_tokens));
}

namespace {

GenerationContext checked_context(const Model& model, std::span<const int32_t> prompt, const GenerateOptions& options) {
  options.validate();
  const int32_t vocab = model.config().vocab_size;
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= vocab)
      throw Error(ErrorKind::invalid_argument, "prompt token " + std::to_string(i) + " is " + std::to_string(prompt[i]) +
                                                   "; the vocabulary holds ids 0 to " + std::to_string(vocab - 1));
  return GenerationContext(model.config().length, prompt, options.truncate_prompt);
}

}  // namespace

Generator::Generator(std::shared_ptr<const Model> model, std::span<const int32_t> prompt, const GenerateOptions& options,
                     const CallOptions& call)
    : model_(std::move(model)), options_(options), context_(checked_context(*model_, prompt, options)) {
  session_ = std::make_unique<Session>(model_, call);
}

Generator::~Generator() = default;
Generator::Generator(Generator&&) noexcept = default;
Generator& Generator::operator=(Generator&&) noexcept = default;

std::optional<std::span<const int32_t>> Generator::begin_step() {
  if (done_) return std::nullopt;
  if (step_ >= options_.max_tokens) {
    done_ = true;
    reason_ = StopReason::max_tokens;
    return std::nullopt;
  }
  logits_.resize(static_cast<size_t>(model_->config().vocab_size));
  ++prefills_;  // undone below when only the new token is appended
  if (!pending_) {
    // The first step: the prompt's prefill, after the positions the session already holds (a
    // prefix cache's, PrefixCache::restore), which must be the context's first ones.
    const std::span<const int32_t> context = context_.tokens();
    const std::span<const int32_t> held = session_->tokens();
    if (held.size() >= context.size() || !std::equal(held.begin(), held.end(), context.begin()))
      throw Error(ErrorKind::state, "the generator's session holds " + std::to_string(held.size()) +
                                        " positions that are not a prefix of its " + std::to_string(context.size()) +
                                        "-token context");
    return context.subspan(held.size());
  }
  if (context_.push(*pending_)) {
    session_->truncate(0);
    return context_.tokens();
  }
  --prefills_;
  single_[0] = *pending_;
  return std::span<const int32_t>(single_);
}

int32_t Generator::end_step() {
  // The exp of the target the model runs (sampling_impl.hpp).
  const int32_t token =
      sample_token(logits_, options_.sampling, step_, nullptr, kernels_for(model_->impl().packed.get()));
  ++step_;
  pending_ = token;
  if (!options_.ignore_eos) {
    const std::span<const int32_t> ends = model_->eos_token_ids();
    if (std::find(ends.begin(), ends.end(), token) != ends.end()) {
      done_ = true;
      reason_ = StopReason::eos;
      return token;
    }
  }
  if (!options_.stop.empty()) {
    tail_.push_back(static_cast<char>(token & 0xff));
    if (tail_.size() > options_.stop.size()) tail_.erase(0, tail_.size() - options_.stop.size());
    if (tail_ == options_.stop) {
      done_ = true;
      reason_ = StopReason::stop_text;
    }
  }
  return token;
}

std::optional<int32_t> Generator::next() {
  const std::optional<std::span<const int32_t>> tokens = begin_step();
  if (!tokens) return std::nullopt;
  session_->append(*tokens, logits_.data());
  return end_step();
}

StopReason generate(std::shared_ptr<const Model> model, std::span<const int32_t> prompt, const GenerateOptions& options,
                    const std::function<void(int32_t)>& on_token, const CallOptions& call) {
  Generator g(std::move(model), prompt, options, call);
  while (const std::optional<int32_t> token = g.next()) on_token(*token);
  return g.stop_reason();
}

}  // namespace lockstep
