// Two models' next-token distributions compared over the same windows (compare_models in
// lockstep/training_run.hpp): the figures llama-perplexity's --kl-divergence prints, for a
// quantized model against its f32 original. A measurement only: f64 with the C library's exp and
// log over the models' f32 logits (the logits themselves are each model's promised bits).
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "format/mapped_file.hpp"
#include "lockstep/tokenizer.hpp"
#include "lockstep/training_run.hpp"

namespace lockstep {
namespace {

// A model as the messages name it: its directory, or "the base model" / "the model".
std::string model_name(const Model& model, const char* role) {
  const std::string& dir = model.source().directory;
  return dir.empty() ? std::string(role) : std::string(role) + " '" + dir + "'";
}

void check_same_vocab_size(const Model& base, const Model& other) {
  if (base.config().vocab_size != other.config().vocab_size)
    throw Error(ErrorKind::invalid_argument, "the models' vocabularies differ: " + model_name(base, "the base model") +
                                                 " has vocab_size " + std::to_string(base.config().vocab_size) +
                                                 ", " + model_name(other, "the model") + " has " +
                                                 std::to_string(other.config().vocab_size));
}

// One window: ids [begin, begin + count) of the sequence, positions [first, count - 1) scored
// (position p predicts id begin + p + 1).
struct Window {
  int64_t begin = 0;
  int32_t count = 0;
  int32_t first = 0;
  int32_t scored() const { return count - 1 - first; }
};

std::vector<Window> make_windows(int64_t n, int32_t length, const ComparisonOptions& options) {
  std::vector<Window> windows;
  if (options.windows == ComparisonWindows::every_token) {
    // As evaluate_bytes: length + 1 ids every `length`, the last one shorter.
    for (int64_t begin = 0; begin + 1 < n; begin += length)
      windows.push_back({begin, static_cast<int32_t>(std::min<int64_t>(length + 1, n - begin)), 0});
    return windows;
  }
  const int32_t context = options.context == 0 ? length : options.context;
  if (context < 3 || context > length)
    throw Error(ErrorKind::invalid_argument, "the comparison's context must be in [3, " + std::to_string(length) +
                                                 "] (the base model's window), got " + std::to_string(context));
  if (n < context)
    throw Error(ErrorKind::invalid_argument, "the data holds " + std::to_string(n) +
                                                 " tokens, fewer than one chunk of " + std::to_string(context));
  // As llama-perplexity: whole chunks only; each scores its second half but the last position.
  for (int64_t begin = 0; begin + context <= n; begin += context) windows.push_back({begin, context, context / 2});
  return windows;
}

// Row `row` of f32 logits [vocab] as f64 log-probabilities (log-softmax; max subtracted first).
void log_softmax(const float* row, int32_t vocab, std::vector<double>& out) {
  double max = row[0];
  for (int32_t i = 1; i < vocab; ++i) max = std::max(max, static_cast<double>(row[i]));
  double sum = 0.0;
  for (int32_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(row[i]) - max);
  const double log_sum = max + std::log(sum);
  for (int32_t i = 0; i < vocab; ++i) out[static_cast<size_t>(i)] = static_cast<double>(row[i]) - log_sum;
}

void check_finite(const float* row, int32_t vocab, const Model& model, const char* role, int64_t window,
                  int32_t position) {
  for (int32_t i = 0; i < vocab; ++i)
    if (!std::isfinite(row[i]))
      throw Error(ErrorKind::invalid_argument, model_name(model, role) + " gives a non-finite logit (id " +
                                                   std::to_string(i) + ") at window " + std::to_string(window) +
                                                   ", position " + std::to_string(position));
}

// The mean of `values` and its standard error (sample standard deviation / sqrt(n); 0 for n < 2).
std::pair<double, double> mean_and_error(const std::vector<double>& values) {
  const double n = static_cast<double>(values.size());
  double sum = 0.0;
  for (const double v : values) sum += v;
  const double mean = sum / n;
  if (values.size() < 2) return {mean, 0.0};
  double squares = 0.0;
  for (const double v : values) squares += (v - mean) * (v - mean);
  return {mean, std::sqrt(squares / (n - 1.0) / n)};
}

// The `fraction` quantile of sorted values, interpolated linearly between ranks.
double quantile(const std::vector<double>& sorted, double fraction) {
  const double at = fraction * static_cast<double>(sorted.size() - 1);
  const size_t low = static_cast<size_t>(at);
  const size_t high = std::min(low + 1, sorted.size() - 1);
  const double part = at - static_cast<double>(low);
  return (1.0 - part) * sorted[low] + part * sorted[high];
}

}  // namespace

ModelComparison compare_models(const Model& base, const Model& other, std::span<const int32_t> ids,
                               const ComparisonOptions& options, const EvaluationProgress& progress) {
  const ModelConfig& bc = base.config();
  const int32_t vocab = bc.vocab_size;
  check_same_vocab_size(base, other);
  if (other.config().length < bc.length)
    throw Error(ErrorKind::invalid_argument, model_name(other, "the model") + " has a window of " +
                                                 std::to_string(other.config().length) + " tokens, shorter than " +
                                                 model_name(base, "the base model") + "'s " +
                                                 std::to_string(bc.length));
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n < 2) throw Error(ErrorKind::invalid_argument, "a comparison needs at least 2 tokens, got " + std::to_string(n));
  for (int64_t i = 0; i < n; ++i)
    if (ids[static_cast<size_t>(i)] < 0 || ids[static_cast<size_t>(i)] >= vocab)
      throw Error(ErrorKind::invalid_argument, "id " + std::to_string(ids[static_cast<size_t>(i)]) + " at " +
                                                   std::to_string(i) + " is outside the vocabulary [0, " +
                                                   std::to_string(vocab) + ")");
  const std::vector<Window> windows = make_windows(n, bc.length, options);
  int64_t total = 0;
  for (const Window& w : windows) total += w.scored();

  // Per scored position, in window order.
  std::vector<double> kl, base_nll, other_nll, nll_difference;
  kl.reserve(static_cast<size_t>(total));
  int64_t agree = 0;
  double dp_squares = 0.0;
  std::vector<double> log_p(static_cast<size_t>(vocab)), log_q(static_cast<size_t>(vocab));

  // Windows go through both models in groups of about 512K logits each.
  const int64_t per_window = std::max<int64_t>(1, static_cast<int64_t>(windows[0].scored()) * vocab);
  const size_t group = static_cast<size_t>(std::max<int64_t>(1, (int64_t{1} << 19) / per_window));
  for (size_t g = 0; g < windows.size(); g += group) {
    const size_t end = std::min(windows.size(), g + group);
    std::vector<std::vector<float>> base_logits(end - g), other_logits(end - g);
    std::vector<RowRequest> base_rows, other_rows;
    for (size_t w = g; w < end; ++w) {
      const Window& win = windows[w];
      const std::span<const int32_t> row = ids.subspan(static_cast<size_t>(win.begin), static_cast<size_t>(win.count));
      base_logits[w - g].resize(static_cast<size_t>(win.scored()) * static_cast<size_t>(vocab));
      other_logits[w - g].resize(base_logits[w - g].size());
      // No logits past position count - 2: its target is outside the window.
      base_rows.push_back({row.first(row.size() - 1), win.first, win.count - 1, base_logits[w - g].data(), nullptr});
      other_rows.push_back({row.first(row.size() - 1), win.first, win.count - 1, other_logits[w - g].data(), nullptr});
    }
    base.forward(base_rows, options.call);
    other.forward(other_rows, options.call);
    for (size_t w = g; w < end; ++w) {
      const Window& win = windows[w];
      for (int32_t s = 0; s < win.scored(); ++s) {
        const int32_t position = win.first + s;
        const float* p_row = base_logits[w - g].data() + static_cast<size_t>(s) * static_cast<size_t>(vocab);
        const float* q_row = other_logits[w - g].data() + static_cast<size_t>(s) * static_cast<size_t>(vocab);
        check_finite(p_row, vocab, base, "the base model", static_cast<int64_t>(w), position);
        check_finite(q_row, vocab, other, "the model", static_cast<int64_t>(w), position);
        log_softmax(p_row, vocab, log_p);
        log_softmax(q_row, vocab, log_q);
        double divergence = 0.0;
        for (size_t i = 0; i < log_p.size(); ++i) divergence += std::exp(log_p[i]) * (log_p[i] - log_q[i]);
        kl.push_back(divergence);
        const size_t target = static_cast<size_t>(ids[static_cast<size_t>(win.begin + position + 1)]);
        base_nll.push_back(-log_p[target]);
        other_nll.push_back(-log_q[target]);
        nll_difference.push_back(log_p[target] - log_q[target]);
        const double dp = std::exp(log_q[target]) - std::exp(log_p[target]);
        dp_squares += dp * dp;
        const std::span<const float> p_span(p_row, static_cast<size_t>(vocab)), q_span(q_row, static_cast<size_t>(vocab));
        if (greedy_choice(p_span) == greedy_choice(q_span)) ++agree;
      }
    }
    if (progress) progress(static_cast<int64_t>(kl.size()), total);
  }

  ModelComparison c;
  c.tokens = n;
  c.predictions = total;
  c.windows = static_cast<int64_t>(windows.size());
  c.window_tokens = windows[0].count;
  c.first_scored = windows[0].first;
  std::tie(c.base_nll, c.base_nll_error) = mean_and_error(base_nll);
  std::tie(c.other_nll, c.other_nll_error) = mean_and_error(other_nll);
  c.nll_difference_error = mean_and_error(nll_difference).second;
  std::tie(c.kl_mean, c.kl_error) = mean_and_error(kl);
  std::vector<double> sorted = kl;
  std::sort(sorted.begin(), sorted.end());
  c.kl_min = sorted.front();
  c.kl_max = sorted.back();
  c.kl_median = quantile(sorted, 0.5);
  c.kl_p99 = quantile(sorted, 0.99);
  c.kl_p999 = quantile(sorted, 0.999);
  const double count = static_cast<double>(total);
  c.top1_agreement = static_cast<double>(agree) / count;
  c.top1_error = total > 1 ? std::sqrt(c.top1_agreement * (1.0 - c.top1_agreement) / (count - 1.0)) : 0.0;
  c.rms_dp = std::sqrt(dp_squares / count);
  return c;
}

std::vector<int32_t> comparison_ids(const Model& base, const Model& other, const std::string& path) {
  check_same_vocab_size(base, other);
  auto tokenizer_of = [](const Model& m) -> std::unique_ptr<Tokenizer> {
    return m.source().directory.empty() ? nullptr : Tokenizer::for_model(m.source().directory);
  };
  auto describe = [](const Tokenizer* t) {
    return t ? std::string("a ") + t->type() + " tokenizer (" + t->file() + ", sha256 " + t->sha256() + ")"
             : std::string("no tokenizer (its ids are bytes)");
  };
  const std::unique_ptr<Tokenizer> tb = tokenizer_of(base), to = tokenizer_of(other);
  const bool same = (!tb && !to) || (tb && to && std::string(tb->type()) == to->type() && tb->sha256() == to->sha256());
  if (!same)
    throw Error(ErrorKind::invalid_argument, "the models read text differently: " +
                                                 model_name(base, "the base model") + " has " + describe(tb.get()) +
                                                 ", " + model_name(other, "the model") + " has " + describe(to.get()));
  const format::MappedFile file(path);
  const std::span<const uint8_t> bytes = file.bytes();
  if (bytes.size() < 2)
    throw Error(ErrorKind::invalid_argument, "'" + path + "' holds " + std::to_string(bytes.size()) +
                                                 " bytes; a comparison needs at least 2");
  if (tb) return tb->encode(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), false);
  return std::vector<int32_t>(bytes.begin(), bytes.end());
}

}  // namespace lockstep
