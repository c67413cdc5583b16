// lockstep bench: speed figures for a model of your own: forward tokens/s of full windows (or
// --prefill positions) on the fast path at each thread count asked (and the reference with
// --reference), and a 200-token session loop after a 16-token prompt (the loop's steps alone are
// timed, as llama-bench's tg figures are). Ratios against one thread are printed beside them,
// since absolute figures move with the machine's load.
#include <chrono>
#include <cstdio>
#include <sstream>

#include "cli/commands.hpp"
#include "lockstep/session.hpp"

namespace lockstep::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Runs `once` until `min_seconds` have passed (at least twice after one warm-up); returns the
// fastest run's seconds.
template <typename F>
double best_time(double min_seconds, F&& once) {
  once();
  double best = 1e300, spent = 0;
  for (int runs = 0; runs < 2 || spent < min_seconds; ++runs) {
    const auto start = std::chrono::steady_clock::now();
    once();
    const double s = seconds_since(start);
    best = std::min(best, s);
    spent += s;
  }
  return best;
}

}  // namespace

Run add_bench(CLI::App& app) {
  struct Flags {
    std::string path;
    std::string threads = "1,2";
    bool reference = false;
    double seconds = 2.0;
    int32_t decode_tokens = 200;
    std::string device = "cpu";
    int32_t batch = 1;
    int32_t prefill = 0;  // 0: the window
    std::string simd;     // empty: the best target here
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("bench", "measure a model's forward and decoding speed on this machine");
  cmd->add_option("MODEL", f->path, "a model directory, checkpoint step or checkpoint location")->required();
  cmd->add_option("--threads", f->threads, "comma-separated thread counts")->capture_default_str();
  cmd->add_flag("--reference", f->reference, "also time the single-threaded reference");
  cmd->add_option("--seconds", f->seconds, "least time spent per figure")->capture_default_str();
  cmd->add_option("--decode-tokens", f->decode_tokens, "tokens of the session loop")->capture_default_str();
  cmd->add_option("--device", f->device, "cpu, or cuda: the forward pass on the GPU alone (no session loop)")
      ->capture_default_str();
  cmd->add_option("--batch", f->batch, "rows of each timed forward pass")->capture_default_str();
  cmd->add_option("--prefill", f->prefill, "positions of each row of a timed forward pass (default: the window)");
  cmd->add_option("--simd", f->simd, "the SIMD target to time (default: the best here)")
      ->type_name("TARGET")
      ->envname("LOCKSTEP_SIMD");
  return [f] {
    // A figure a line as each is measured (every one takes --seconds), also into a pipe or file.
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    std::vector<int> threads;
    std::stringstream list(f->threads);
    for (std::string item; std::getline(list, item, ',');) {
      try {
        threads.push_back(std::stoi(item));
      } catch (const std::exception&) {
        throw Error(ErrorKind::invalid_argument, "--threads: '" + item + "' is not a thread count");
      }
      if (threads.back() < 1 || threads.back() > max_threads)
        throw Error(ErrorKind::invalid_argument, "--threads: " + item + " is outside [1, " + std::to_string(max_threads) + "]");
    }
    if (threads.empty()) throw Error(ErrorKind::invalid_argument, "--threads lists no thread count");
    if (f->decode_tokens < 1) throw Error(ErrorKind::invalid_argument, "--decode-tokens must be at least 1");
    if (f->batch < 1 || f->batch > 1024) throw Error(ErrorKind::invalid_argument, "--batch must be in [1, 1024]");
    const Device device = parse_device(f->device);
    if (device == Device::reference)
      throw Error(ErrorKind::invalid_argument, "--device: cpu or cuda (--reference times the reference)");
    LoadOptions options;
    options.device = device;  // on cuda, the weights go to the GPU here, once
    options.simd_target = checked_simd_target(f->simd, device);
    int most = 1;
    for (int t : threads) most = std::max(most, t);
    options.threads = most;
    const auto model = Model::load(f->path, options);
    const ModelConfig& c = model->config();
    if (f->prefill < 0 || f->prefill > c.length)
      throw Error(ErrorKind::invalid_argument, "--prefill must be in [1, " + std::to_string(c.length) + "] (the window), got " +
                                                   std::to_string(f->prefill));
    const int32_t positions = f->prefill > 0 ? f->prefill : c.length;
    const int64_t rows = f->batch;
    std::vector<int32_t> ids(static_cast<size_t>(rows * std::max(positions, std::min<int32_t>(16, c.length))));
    for (size_t t = 0; t < ids.size(); ++t) ids[t] = static_cast<int32_t>((t * 7 + 3) % static_cast<size_t>(c.vocab_size));
    std::printf("bench %s: window %d, %s parameters, forward passes of %d x %d positions, SIMD target %s\n",
                model->source().directory.c_str(), c.length, with_commas(model->registry().total()).c_str(),
                static_cast<int>(rows), positions,
                device == Device::cpu ? (f->simd.empty() ? simd_targets().front() : f->simd).c_str() : "(none)");
    std::fflush(stdout);
    auto forward = [&](CallOptions call) {
      return best_time(f->seconds, [&] { model->logits({ids.data(), rows, positions}, {}, call); });
    };
    const double tokens = static_cast<double>(rows) * positions;
    if (device == Device::cuda) {  // sessions do not run on the GPU yet: the forward pass alone
      const double s = forward({Device::cuda, std::nullopt});
      std::printf("  forward, cuda %ld x %d    %10.1f tokens/s  (%.3f ms a pass)\n", static_cast<long>(rows), positions,
                  tokens / s, s * 1e3);
      return 0;
    }
    if (f->reference) {
      const double s = forward({Device::reference, std::nullopt});
      std::printf("  forward, reference      %10.1f tokens/s\n", tokens / s);
      std::fflush(stdout);  // each figure as it is measured, also into a pipe
    }
    double base = 0;
    for (int t : threads) {
      const double rate = tokens / forward({Device::cpu, t});
      if (base == 0) base = rate;
      std::printf("  forward, cpu %3d thread%s %10.1f tokens/s  %.2fx\n", t, t == 1 ? " " : "s", rate, rate / base);
      std::fflush(stdout);
    }
    const int32_t prompt_length = std::min<int32_t>(16, c.length - 1);
    const int32_t steps = std::min(f->decode_tokens, c.length - prompt_length);
    base = 0;
    for (int t : threads) {
      // The fastest of at least two loops (and --seconds of them) after one warm-up, each timed
      // from its first step: the prompt's forward pass is not in the figure.
      double s = 1e300, spent = 0;
      for (int runs = 0; runs < 3 || spent < f->seconds; ++runs) {
        Session session(model, {Device::cpu, t});
        std::vector<float> logits = session.append({ids.data(), static_cast<size_t>(prompt_length)});
        const auto start = std::chrono::steady_clock::now();
        for (int32_t i = 0; i < steps; ++i) {
          const int32_t next[] = {greedy_choice(logits)};
          logits = session.append(next);
        }
        const double run = seconds_since(start);
        if (runs > 0) s = std::min(s, run);
        spent += run;
      }
      const double rate = steps / s;
      if (base == 0) base = rate;
      std::printf("  decode, cpu %3d thread%s  %10.1f tokens/s  %.2fx  (%d-token session loop)\n", t, t == 1 ? " " : "s",
                  rate, rate / base, steps);
      std::fflush(stdout);
    }
    return 0;
  };
}

}  // namespace lockstep::cli
