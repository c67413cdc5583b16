// Training runs: a run file (`(defrun NAME :key value ...)`, docs/TRAINING.md) read into a
// RunSpec, and run_training(), which trains it into a checkpoint location and resumes it to the
// same bits. The library never prints and never sees argv: progress goes to a RunObserver, and
// metrics.jsonl is written beside the checkpoints.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lockstep/config.hpp"
#include "lockstep/model.hpp"
#include "lockstep/trainer.hpp"

namespace lockstep {

enum class LrSchedule {
  constant,  // the peak rate after warm-up
  cosine,    // half a cosine from the peak down to the floor over the run file's steps
};

// A frozen parameter read from a safetensors file (`:load`): trained around, never updated.
struct FrozenLoad {
  std::string parameter;  // registry name, e.g. "embed"
  std::string file;       // as the run file gives it; a relative path is from the current directory
  std::string tensor;     // its name inside the file (the parameter's name unless given)
};

// A parsed, checked run file. Defaults are docs/TRAINING.md's.
struct RunSpec {
  std::string slug;  // NAME of (defrun NAME ...)
  std::string path;  // the file it was read from, as given
  std::string text;  // the file's bytes, copied into every checkpoint as run.sx

  ModelConfig model;              // model.batch is the training batch
  std::vector<std::string> data;  // byte files, concatenated in this order
  // Parts per million of the data held out for evaluation: the last
  // floor(bytes * held_out_ppm / 1e6) bytes of the concatenation.
  int64_t held_out_ppm = 100000;

  int64_t steps = 200;
  uint64_t seed = 0;     // initialisation and training windows
  float lr = 2e-3f;      // peak learning rate
  float lr_min = 2e-4f;  // a run file's default is :lr / 10 (in f64, rounded to f32)
  int64_t warmup = 20;   // steps of linear warm-up from lr / warmup to lr
  LrSchedule schedule = LrSchedule::cosine;
  AdamWOptions adamw;  // its lr is unused: learning_rate_at() gives each step's
  float ema = 0.0f;    // EMA decay of the weights; 0: none
  Precision precision = Precision::f32;

  int64_t checkpoint_every = 100;  // 0: only the last step's
  int64_t keep = 0;                // newest checkpoints kept; 0: all
  int64_t eval_every = 50;         // 0: never evaluate
  int64_t eval_batches = 4;        // held-out windows evaluated: eval_batches * batch
  std::vector<FrozenLoad> load;
};

// Reads and checks a run file. Every refusal is an Error(format) whose message starts with
// "PATH:LINE:COLUMN: " (columns count bytes from 1); an unknown key's lists the valid keys.
RunSpec read_run_file(const std::string& path);
RunSpec parse_run_file(std::string_view text, const std::string& path);
// The valid keys, sorted, each with its leading ':'.
const std::vector<std::string>& run_file_keys();

// The learning rate of step `step` (1-based): linear warm-up, then constant or cosine down to
// lr_min at the run file's last step (and lr_min after it). f64 arithmetic with lockstep's own
// cos, rounded once to f32 (docs/TRAINING.md).
float learning_rate_at(const RunSpec& run, int64_t step);

// What a RunObserver hears.
struct RunStart {
  std::string checkpoint_dir;
  std::string slug;
  int64_t first_step = 0;  // steps already completed (the resumed checkpoint's, or 0)
  int64_t last_step = 0;   // the step the run ends at
  bool resumed = false;
  std::string resumed_from;  // the step directory resumed from
  int64_t parameters = 0;
  int64_t tokens_per_step = 0;
  int64_t train_bytes = 0, held_out_bytes = 0;
  int64_t data_files = 0;
  int threads = 1;
};

struct StepReport {
  int64_t step = 0, last_step = 0;
  float loss = 0.0f;
  uint32_t loss_bits = 0;
  float lr = 0.0f;
  std::optional<float> held_out_loss;  // at evaluation steps
  double tokens_per_second = 0.0;      // this process's training throughput so far
  double elapsed_seconds = 0.0;
  double seconds_left = 0.0;  // estimate
};

struct CheckpointReport {
  int64_t step = 0;
  std::string path;              // the step directory written
  std::vector<int64_t> removed;  // steps retention removed
};

class RunObserver {
 public:
  virtual ~RunObserver() = default;
  virtual void started(const RunStart&) {}
  virtual void step(const StepReport&) {}
  virtual void checkpoint(const CheckpointReport&) {}
};

struct RunOptions {
  std::optional<int64_t> steps;  // the step to end at, overriding the run file's :steps
  bool resume = false;           // continue from the newest complete checkpoint
  Device device = Device::cpu;
  int threads = 0;  // 0: one per physical core
  std::string simd_target;  // as ModelOptions::simd_target
  std::shared_ptr<ThreadPool> pool;
  RunObserver* observer = nullptr;  // not owned; may be null
  // When set and it becomes true (the command's SIGINT / SIGTERM handler sets it), the run
  // finishes the step under way, writes its checkpoint (unless that step just wrote one) and
  // returns with RunResult::stopped; set before the first step, it returns without training or
  // writing anything. Not owned; may be null. The library installs no signal handler.
  const std::atomic<bool>* stop = nullptr;
  // Sums where each step's time goes, phase by phase, into RunResult::phase_times (for the
  // data-parallel benchmark; reads clocks only).
  bool phase_times = false;
};

struct RunResult {
  int64_t first_step = 0, last_step = 0;
  std::string last_checkpoint;         // the step directory of last_step
  std::optional<float> held_out_loss;  // the last evaluation's
  bool stopped = false;  // RunOptions::stop ended the run at last_step, before the step asked for
  // Data-parallel training under mpirun (docs/TRAINING.md, "Training on a cluster"): this
  // process's rank of `ranks` (0 of 1 alone; only rank 0 writes and reports), the bytes it sent
  // and the seconds it waited for the other ranks over the run.
  int rank = 0, ranks = 1;
  int64_t bytes_sent = 0;
  double seconds_waiting = 0.0;
  // With RunOptions::phase_times: this rank's "phase wall/cpu seconds ..." over the run.
  std::string phase_times;
};

// Trains `run` into `checkpoint_dir` (created when missing): see docs/TRAINING.md. Refuses a
// directory holding checkpoints unless resuming, and a resume whose checkpoint's model
// configuration, EMA or :load parameters differ from the run file's. Throws Error; a failure
// leaves every complete checkpoint as it was.
RunResult run_training(const RunSpec& run, const std::string& checkpoint_dir, const RunOptions& options = {});

// The mean next-byte loss of a model over a byte sequence: windows of length + 1 bytes starting
// every `length` bytes (the last one shorter), so that every byte after the first is predicted
// once; the f32 losses summed in order from +0 and divided by their count (docs/TRAINING.md).
struct ByteEvaluation {
  float loss = 0.0f;
  uint32_t loss_bits = 0;
  double bits_per_byte = 0.0;  // loss / ln 2
  int64_t bytes = 0, predictions = 0, windows = 0;
};
// Progress of an evaluation: called after each forward call with the predictions made so far
// and their total (the last call has done == total). For a command's progress line; it never
// changes a bit of the result.
using EvaluationProgress = std::function<void(int64_t done, int64_t total)>;
ByteEvaluation evaluate_bytes(const Model& model, std::span<const uint8_t> bytes,
                              const CallOptions& call = {}, const EvaluationProgress& progress = {});
// The same over a file's bytes; refuses a missing file or one shorter than 2 bytes.
ByteEvaluation evaluate_file(const Model& model, const std::string& path, const CallOptions& call = {},
                             const EvaluationProgress& progress = {});

// A comparison of two models' next-token distributions over the same windows (`lockstep eval
// MODEL --against BASE`, docs/TRAINING.md, "Comparing two models"): for a quantized model
// against the f32 model it came from, the quantities llama.cpp's `llama-perplexity
// --kl-divergence` reports. A measurement, not a promised path: each position's statistics are
// computed in f64 from the two models' f32 logits with the C library's exp and log, and summed
// in window order.
enum class ComparisonWindows {
  every_token,  // evaluate_bytes's windows: length + 1 ids every length, each id after the first predicted once
  second_half,  // llama-perplexity's chunks: `context` ids each, positions [context/2, context - 1) scored
};
struct ComparisonOptions {
  ComparisonWindows windows = ComparisonWindows::every_token;
  int32_t context = 0;  // second_half's chunk length, in [3, length]; 0: the models' length
  CallOptions call;
};
// Means with their standard errors (the sample standard deviation over sqrt(n)); P = base's
// distribution, Q = the other model's, t = the target id.
struct ModelComparison {
  int64_t tokens = 0, predictions = 0, windows = 0;
  int32_t window_tokens = 0;       // ids in a full window
  int32_t first_scored = 0;        // the first scored position of a window (second_half: context / 2)
  double base_nll = 0.0, base_nll_error = 0.0;    // mean -ln P(t), nats (ln of the perplexity)
  double other_nll = 0.0, other_nll_error = 0.0;  // mean -ln Q(t)
  double nll_difference_error = 0.0;              // of the mean of the paired -ln Q(t) + ln P(t)
  double kl_mean = 0.0, kl_error = 0.0;           // KL(P || Q) = sum P ln(P / Q), nats
  double kl_max = 0.0, kl_p999 = 0.0, kl_p99 = 0.0, kl_median = 0.0, kl_min = 0.0;
  double top1_agreement = 0.0, top1_error = 0.0;  // fraction of positions whose greedy ids agree
  double rms_dp = 0.0;                            // root mean square of Q(t) - P(t)
};
// Compares `other` with `base` over `ids` in windows of base's length. Refuses models whose
// vocab_size differs, an `other` whose window is shorter, an id outside the vocabulary, too few
// ids for one window, and non-finite logits (naming the model, window and position). Holds four
// f64 a scored position (for the quantiles and standard errors) and one group of windows' logits.
ModelComparison compare_models(const Model& base, const Model& other, std::span<const int32_t> ids,
                               const ComparisonOptions& options = {}, const EvaluationProgress& progress = {});
// The ids of a file's text for a comparison of two models: both must read text the same way,
// with no tokenizer (the bytes are the ids, as evaluate_file reads them) or the same tokenizer
// file (same type and SHA-256; the text is encoded without special tokens). Refuses, naming the
// difference, models with different vocab_size or tokenizers, and a missing or empty file.
std::vector<int32_t> comparison_ids(const Model& base, const Model& other, const std::string& path);

}  // namespace lockstep
