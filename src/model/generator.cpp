// The generation loop and its window policy (include/lockstep/generator.hpp).
#include "lockstep/generator.hpp"

#include <algorithm>
#include <limits>
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
  if (options_.grammar) {
    const int32_t vocab = model_->config().vocab_size;
    if (!options_.vocabulary || options_.vocabulary->size() != vocab)
      throw Error(ErrorKind::invalid_argument,
                  "a grammar needs the model's vocabulary as bytes (" + std::to_string(vocab) + " ids), got " +
                      (options_.vocabulary ? std::to_string(options_.vocabulary->size()) + " ids" : std::string("none")));
    matcher_ = std::make_unique<GrammarMatcher>(options_.grammar, options_.vocabulary);
    end_ids_.assign(static_cast<size_t>(vocab), 0);
    if (!options_.ignore_eos) {
      for (const int32_t id : model_->eos_token_ids()) {
        if (id < 0 || id >= vocab) continue;
        end_ids_[static_cast<size_t>(id)] = 1;
        grammar_ends_with_eos_ = true;
      }
    }
  }
}

void Generator::mask_logits() {
  // Each token the grammar refuses gets exactly -inf; an end-of-sequence id is allowed where the
  // text so far is a whole match. At least one allowed logit must be above -inf, or the draw
  // would weigh the refused ones (sample_token takes the highest logit as its reference).
  const std::span<const uint64_t> allowed = matcher_->allowed_tokens();
  const bool end_ok = matcher_->accepting();
  const float minus_inf = -std::numeric_limits<float>::infinity();
  size_t live = 0;
  for (size_t i = 0; i < logits_.size(); ++i) {
    const bool ok = end_ids_[i] ? end_ok : ((allowed[i / 64] >> (i % 64)) & 1) != 0;
    if (!ok) {
      logits_[i] = minus_inf;
    } else if (logits_[i] > minus_inf) {
      ++live;
    }
  }
  if (live == 0) {
    done_ = true;
    throw Error(ErrorKind::state, "the grammar allows no token here (after " + std::to_string(step_) +
                                      " generated tokens): no token of the vocabulary spells what it needs next");
  }
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
  if (matcher_) mask_logits();
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
  if (matcher_) {
    if (!matcher_->accept(token))
      throw Error(ErrorKind::internal, "the grammar refused token " + std::to_string(token) + ", which its mask allowed");
    if (!grammar_ends_with_eos_ && matcher_->accepting()) {
      done_ = true;
      reason_ = StopReason::grammar;
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
