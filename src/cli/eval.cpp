// lockstep eval: a model's mean next-byte loss over a file, in windows of its length
// (docs/TRAINING.md, "Evaluation"); with --against BASE, the model's next-token distributions
// compared with BASE's over the same windows (KL divergence, top-1 agreement, both perplexities:
// docs/TRAINING.md, "Comparing two models"). Progress goes to standard error (a live line on a
// terminal, plain lines otherwise), so that standard output holds the result alone.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/progress.hpp"
#include "lockstep/training_run.hpp"

namespace lockstep::cli {
namespace {

// "x ± y", fixed with `digits` places (perplexities, percentages, as llama-perplexity prints them).
std::string plus_minus(double value, double error, int digits) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%.*f ± %.*f", digits, value, digits, error);
  return buf;
}

// "x ± y" to 6 significant digits: KL divergences and log ratios, often far below 1e-6.
std::string plus_minus_g(double value, double error) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%.6g ± %.3g", value, error);
  return buf;
}

void print_comparison(const Model& base, const Model& model, const std::string& data, const ModelComparison& c) {
  std::printf("base       %s\n", base.source().directory.c_str());
  std::printf("model      %s\n", model.source().directory.c_str());
  std::printf("data       %s: %s tokens, %s predictions in %s windows of ", data.c_str(),
              with_commas(c.tokens).c_str(), with_commas(c.predictions).c_str(), with_commas(c.windows).c_str());
  if (c.first_scored == 0)
    std::printf("up to %d tokens (every token after the first predicted once)\n", c.window_tokens);
  else
    std::printf("%d tokens, positions %d to %d scored (llama-perplexity's chunks)\n", c.window_tokens,
                c.first_scored, c.window_tokens - 2);
  std::printf("arithmetic f64 from each model's f32 logits (a measurement, not a promised path)\n");
  // PPL's standard error by the delta method: exp(mean) * the mean's error.
  const double ppl_base = std::exp(c.base_nll), ppl_model = std::exp(c.other_nll);
  std::printf("PPL(base)                  %s  (loss %.6f nats, %.6f bits/token)\n",
              plus_minus(ppl_base, ppl_base * c.base_nll_error, 6).c_str(), c.base_nll, c.base_nll / std::log(2.0));
  std::printf("PPL(model)                 %s  (loss %.6f nats, %.6f bits/token)\n",
              plus_minus(ppl_model, ppl_model * c.other_nll_error, 6).c_str(), c.other_nll, c.other_nll / std::log(2.0));
  std::printf("ln(PPL(model)/PPL(base))   %s\n", plus_minus_g(c.other_nll - c.base_nll, c.nll_difference_error).c_str());
  std::printf("KL(base||model) mean       %s nats\n", plus_minus_g(c.kl_mean, c.kl_error).c_str());
  std::printf("KL maximum                 %.6g\n", c.kl_max);
  std::printf("KL 99.9%%                   %.6g\n", c.kl_p999);
  std::printf("KL 99.0%%                   %.6g\n", c.kl_p99);
  std::printf("KL median                  %.6g\n", c.kl_median);
  std::printf("KL minimum                 %.6g\n", c.kl_min);
  std::printf("top-1 agreement            %s %%\n", plus_minus(100.0 * c.top1_agreement, 100.0 * c.top1_error, 3).c_str());
  std::printf("RMS delta p                %.3f %%\n", 100.0 * c.rms_dp);
}

}  // namespace

Run add_eval(CLI::App& app) {
  struct Flags {
    ModelFlags model;
    std::string data;
    std::string progress = "auto";
    std::string against;
    std::string windows = "every-token";
    int32_t context = 0;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("eval", "print a model's mean loss and bits per byte over a file, or (--against) its KL divergence from another");
  f->model.add_to(*cmd);
  cmd->add_option("--data", f->data, "the bytes to evaluate on")->required();
  cmd->add_option("--progress", f->progress, "auto (a line redrawn on a terminal), plain or live")->default_str("auto");
  cmd->add_option("--against", f->against,
                  "compare MODEL's next-token distributions with this base model's (KL divergence, top-1 agreement)");
  cmd->add_option("--windows", f->windows,
                  "with --against: every-token (eval's windows) or second-half (llama-perplexity's chunks)")
      ->check(CLI::IsMember({"every-token", "second-half"}))
      ->default_str("every-token");
  cmd->add_option("--context", f->context, "with --windows second-half: the chunk length (default: the window)")
      ->check(CLI::Range(3, 65536));
  return [f] {
    if (f->against.empty() && (f->windows != "every-token" || f->context != 0))
      throw Error(ErrorKind::invalid_argument, "--windows and --context apply to a comparison: give --against BASE");
    if (f->context != 0 && f->windows != "second-half")
      throw Error(ErrorKind::invalid_argument, "--context applies to --windows second-half");
    const bool live = progress_is_live(parse_progress_mode(f->progress), 2);
    const auto model = Model::load(f->model.path, f->model.load_options());
    LiveLine line(stderr, live);
    const auto began = std::chrono::steady_clock::now();
    // Shown at the first and last forward calls and, between them, as LiveLine paces it.
    bool first = true;
    auto progress = [&](int64_t done, int64_t total) {
      const bool milestone = first || done == total;
      first = false;
      if (!line.due(milestone)) return;
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      const double rate = seconds > 0.0 ? static_cast<double>(done) / seconds : 0.0;
      char buf[256];
      const char* unit = f->against.empty() ? "bytes" : "predictions";
      std::snprintf(buf, sizeof(buf), "eval %s/%s %s (%d%%)  %s %s/s  %s left", with_commas(done).c_str(),
                    with_commas(total).c_str(), unit, static_cast<int>(100 * done / total),
                    with_commas(std::llround(rate)).c_str(), unit,
                    duration_text(rate > 0.0 ? static_cast<double>(total - done) / rate : -1.0).c_str());
      line.show(buf);
    };
    if (!f->against.empty()) {
      const auto base = Model::load(f->against, f->model.load_options());
      ComparisonOptions options;
      options.windows = f->windows == "second-half" ? ComparisonWindows::second_half : ComparisonWindows::every_token;
      options.context = f->context;
      const std::vector<int32_t> ids = comparison_ids(*base, *model, f->data);
      ModelComparison c;
      try {
        c = compare_models(*base, *model, ids, options, progress);
      } catch (...) {
        line.end_line();
        throw;
      }
      line.end_line();
      print_comparison(*base, *model, f->data, c);
      return 0;
    }
    ByteEvaluation e;
    try {
      e = evaluate_file(*model, f->data, {}, progress);
    } catch (...) {
      line.end_line();
      throw;
    }
    line.end_line();
    const ModelSource& s = model->source();
    std::printf("model      %s", s.directory.c_str());
    if (s.step)
      std::printf(" (step %lld%s%s)", static_cast<long long>(*s.step), s.slug ? " of run " : "",
                  s.slug ? s.slug->c_str() : "");
    std::printf("\n");
    std::printf("data       %s: %s bytes, %s predictions in %s windows of up to %d bytes\n", f->data.c_str(),
                with_commas(e.bytes).c_str(), with_commas(e.predictions).c_str(),
                with_commas(e.windows).c_str(), model->config().length + 1);
    std::printf("loss       %.9g (f32 bits 0x%08x)\n", static_cast<double>(e.loss), e.loss_bits);
    std::printf("bits/byte  %.6f\n", e.bits_per_byte);
    return 0;
  };
}

}  // namespace lockstep::cli
