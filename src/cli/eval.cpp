// lockstep eval: a model's mean next-byte loss over a file, in windows of its length
// (docs/TRAINING.md, "Evaluation"). Progress goes to standard error (a live line on a terminal,
// plain lines otherwise), so that standard output holds the result alone.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "cli/commands.hpp"
#include "cli/progress.hpp"
#include "lockstep/training_run.hpp"

namespace lockstep::cli {

Run add_eval(CLI::App& app) {
  struct Flags {
    ModelFlags model;
    std::string data;
    std::string progress = "auto";
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("eval", "print a model's mean loss and bits per byte over a file");
  f->model.add_to(*cmd);
  cmd->add_option("--data", f->data, "the bytes to evaluate on")->required();
  cmd->add_option("--progress", f->progress, "auto (a line redrawn on a terminal), plain or live")->default_str("auto");
  return [f] {
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
      std::snprintf(buf, sizeof(buf), "eval %s/%s bytes (%d%%)  %s bytes/s  %s left", with_commas(done).c_str(),
                    with_commas(total).c_str(), static_cast<int>(100 * done / total),
                    with_commas(std::llround(rate)).c_str(),
                    duration_text(rate > 0.0 ? static_cast<double>(total - done) / rate : -1.0).c_str());
      line.show(buf);
    };
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
