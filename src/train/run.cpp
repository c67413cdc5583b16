// run_training(): set up (data, frozen parameters, the checkpoint location, a fresh or resumed
// trainer), then step, evaluate, log and checkpoint. Nothing that reaches a weight or a
// checkpoint file depends on time, thread count or how the run was interrupted: windows are a
// function of (seed, step, row), the rate of (run file, step), and the rest is the trainer's.
#include "train/run.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>

#include "format/atomic_write.hpp"
#include "format/format_error.hpp"
#include "format/model_json.hpp"
#include "format/weights.hpp"
#include "lockstep/error.hpp"
#include "lockstep/format.hpp"
#include "lockstep/training_run.hpp"
#include "train/checkpoint.hpp"
#include "core/sha256.hpp"
#include "train/data.hpp"
#include "train/distributed.hpp"
#include "train/evaluate.hpp"
#include "train/frozen_loads.hpp"
#include "train/metrics.hpp"

namespace lockstep {
namespace train {

void make_directories(const std::string& path) {
  if (path.empty()) throw Error(ErrorKind::invalid_argument, "the checkpoint directory is an empty path");
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    const std::string prefix = path.substr(0, pos);
    if (prefix.empty() || prefix == "." || prefix == "..") continue;
    if (::mkdir(prefix.c_str(), 0755) == 0 || (errno == EEXIST && format::is_directory(prefix))) continue;
    const int err = errno == EEXIST ? ENOTDIR : errno;
    throw Error(ErrorKind::io, "cannot create the checkpoint directory '" + path + "': " + prefix + ": " +
                                   std::strerror(err));
  }
}

DirectoryLock::DirectoryLock(const std::string& dir) {
  fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0)
    throw Error(ErrorKind::io, "cannot open the checkpoint directory '" + dir + "': " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      throw Error(ErrorKind::state, "another training run is writing to '" + dir +
                                        "'; wait for it or choose another --checkpoint-dir");
    throw Error(ErrorKind::io, "cannot lock the checkpoint directory '" + dir + "': " + std::strerror(err));
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string config_differences(const ModelConfig& was, const ModelConfig& now) {
  std::string out;
  auto add = [&](const char* key, const std::string& a, const std::string& b) {
    if (a != b) out += std::string(out.empty() ? "" : ", ") + key + " " + a + " there, " + b + " here";
  };
  auto num = [](double x) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.9g", x);
    return std::string(buf);
  };
  add(":vocab-size", std::to_string(was.vocab_size), std::to_string(now.vocab_size));
  add(":length", std::to_string(was.length), std::to_string(now.length));
  add(":d-model", std::to_string(was.d_model), std::to_string(now.d_model));
  add(":n-layers", std::to_string(was.n_layers), std::to_string(now.n_layers));
  add(":n-heads", std::to_string(was.n_heads), std::to_string(now.n_heads));
  add(":n-kv-heads", std::to_string(was.n_kv_heads), std::to_string(now.n_kv_heads));
  add(":d-ff", std::to_string(was.d_ff), std::to_string(now.d_ff));
  add(":norm-eps", num(was.norm_eps), num(now.norm_eps));
  add(":rope-theta", num(was.rope_theta), num(now.rope_theta));
  add(":batch", std::to_string(was.batch), std::to_string(now.batch));
  return out;
}

// Resuming continues the same computation: refuse a checkpoint it would not continue.
void check_resumable(const RunSpec& run, const Checkpoint& ck,
                     const std::vector<format::LoadedTensor>& loaded, const TrainingData& data) {
  const std::string head = "cannot resume from " + ck.dir + " with " + run.path + ": ";
  if (ck.model.config != run.model)
    throw Error(ErrorKind::invalid_argument, head + "the model configuration differs (" +
                                                 config_differences(ck.model.config, run.model) + ")");
  if (ck.model.precision != run.precision)
    throw Error(ErrorKind::invalid_argument, head + "it trained under :precision " +
                                                 precision_name(ck.model.precision) + ", the run file says " +
                                                 precision_name(run.precision));
  if (ck.state.ema.empty() != (run.ema == 0.0f))
    throw Error(ErrorKind::invalid_argument,
                head + (ck.state.ema.empty() ? "the checkpoint keeps no EMA but the run file sets :ema"
                                             : "the checkpoint keeps an EMA but the run file's :ema is 0"));
  // The averages continue with the decay they were kept with (training.json's ema_decay),
  // compared as written: the shortest decimal of the f32.
  if (run.ema != 0.0f && format::shortest_decimal(run.ema) != ck.ema_decay) {
    char was[32], now[32];
    std::snprintf(was, sizeof(was), "%.9g", ck.ema_decay);
    std::snprintf(now, sizeof(now), "%.9g", format::shortest_decimal(run.ema));
    throw Error(ErrorKind::invalid_argument, head + "the checkpoint's averages were kept with :ema " + was +
                                                 " (its training.json's ema_decay), the run file says :ema " + now);
  }
  check_same_loads(ck.model.loaded, loaded, head);
  const auto& now = data.files();
  bool same_data = ck.data.size() == now.size();
  for (size_t i = 0; same_data && i < now.size(); ++i)
    same_data = ck.data[i].path == now[i].path && ck.data[i].bytes == now[i].bytes &&
                ck.data[i].sha256 == now[i].sha256;
  if (!same_data) {
    std::string was, is;
    for (const auto& f : ck.data)
      was += (was.empty() ? "" : ", ") + f.path + " (" + std::to_string(f.bytes) + " bytes, " +
             f.sha256.substr(0, 12) + ")";
    for (const auto& f : now)
      is += (is.empty() ? "" : ", ") + f.path + " (" + std::to_string(f.bytes) + " bytes, " +
            f.sha256.substr(0, 12) + ")";
    throw Error(ErrorKind::invalid_argument, head + "the data differs from what the checkpoint trained on: " +
                                                 was + " there, " + is + " here");
  }
}

// The error `e` with `message`, keeping its kind and stable code.
Error rephrased(const Error& e, const std::string& message) {
  return Error(e.kind(), message, e.code()[0] != '\0' ? e.code() : nullptr);
}

std::string newest_text(const std::vector<int64_t>& steps) {
  return steps.empty()
             ? std::string("there is no complete checkpoint")
             : "the newest complete checkpoint, step " + std::to_string(steps.back()) + ", is intact";
}

// Data-parallel: every rank must run the same computation. Rank 0's SHA-256s of what each rank
// read are broadcast; every rank compares its own, sends which differ to rank 0, and rank 0
// broadcasts the verdict; a disagreement ends the job on every rank, naming the ranks and what.
void check_ranks_agree(Distributed& net, const RunSpec& run, const TrainingData& data, const RunOptions& options) {
  std::string data_text;
  for (const auto& f : data.files())
    data_text += f.path + "\n" + std::to_string(f.bytes) + "\n" + f.sha256 + "\n";
  const ModelConfig& c = run.model;
  const std::string model_text =
      std::to_string(c.vocab_size) + "," + std::to_string(c.length) + "," + std::to_string(c.d_model) + "," +
      std::to_string(c.n_layers) + "," + std::to_string(c.n_heads) + "," + std::to_string(c.n_kv_heads) + "," +
      std::to_string(c.d_ff) + "," + std::to_string(c.batch) + "," + std::to_string(std::bit_cast<uint32_t>(c.norm_eps)) +
      "," + std::to_string(std::bit_cast<uint32_t>(c.rope_theta));
  const std::string profile = std::string(profile_name()) + " " + precision_name(run.precision);
  const std::string command = "steps " + std::to_string(options.steps.value_or(run.steps)) +
                              (options.resume ? " resume" : " fresh") + " device " +
                              std::to_string(static_cast<int>(options.device));
  const char* what[] = {"run file", "data (SHA-256 of the files)", "build profile", "model configuration",
                        "command line (--steps, --resume, --device)"};
  const std::string texts[] = {run.text, data_text, profile, model_text, command};
  constexpr int kItems = 5;
  char mine[kItems * 64], root[kItems * 64];
  for (int i = 0; i < kItems; ++i) {
    const std::string h = sha256_hex(texts[i].data(), texts[i].size());
    std::copy_n(h.data(), 64, mine + i * 64);
  }
  std::copy_n(mine, sizeof(mine), root);
  net.broadcast(root, sizeof(root), 0);
  int64_t differs = 0;
  for (int i = 0; i < kItems; ++i)
    if (!std::equal(mine + i * 64, mine + (i + 1) * 64, root + i * 64)) differs |= int64_t{1} << i;
  const std::vector<int64_t> all = net.gather_to_root(differs);
  std::string verdict;
  for (size_t r = 0; r < all.size(); ++r)
    for (int i = 0; i < kItems; ++i)
      if (all[r] & (int64_t{1} << i))
        verdict += std::string(verdict.empty() ? "" : "; ") + "rank " + std::to_string(r) + "'s " + what[i] +
                   " differs from rank 0's";
  int64_t length = static_cast<int64_t>(verdict.size());
  net.broadcast(&length, sizeof(length), 0);
  verdict.resize(static_cast<size_t>(length));
  if (length > 0) net.broadcast(verdict.data(), length, 0);
  if (length > 0)
    net.abort("the ranks disagree, so none starts: " + verdict + " (every rank must read the same run file and data, "
              "with the same build and options)", true);
}

}  // namespace
}  // namespace train

namespace {

RunResult train_ranks(const RunSpec& run, const std::string& dir, const RunOptions& options,
                      const std::shared_ptr<train::Distributed>& ranks) {
  using namespace train;
  Distributed& net = *ranks;
  // Rank 0 alone takes the lock and writes checkpoints and metrics; every rank trains.
  const bool root = net.rank() == 0, several = net.size() > 1;
  const int64_t last = options.steps.value_or(run.steps);
  if (last < 1 || last > 1000000000)
    throw Error(ErrorKind::invalid_argument, "steps must be in [1, 1000000000], got " + std::to_string(last));
  if (dir.find("://") != std::string::npos)
    throw Error(ErrorKind::unsupported,
                "'" + dir + "': remote checkpoint locations are not supported; give a local directory");
  const ModelConfig& config = run.model;
  config.validate();
  const ParameterRegistry registry(config);

  // Everything read before anything is written: bad data or a bad :load file changes nothing.
  const TrainingData data(run.data, run.held_out_ppm, config);
  FrozenLoads frozen = read_frozen_loads(run, registry);
  const std::vector<format::LoadedTensor>& loaded = frozen.recorded;
  std::vector<std::vector<float>>& loaded_values = frozen.values;
  if (several) check_ranks_agree(net, run, data, options);

  std::optional<DirectoryLock> lock;
  int64_t resume_step = 0;  // rank 0's choice, broadcast: the other ranks read that checkpoint
  if (root) {
    if (options.resume && !format::is_directory(dir))
      throw Error(ErrorKind::invalid_argument,
                  "'" + dir + "' is not a directory of checkpoints to resume from; start the run without --resume");
    make_directories(dir);
    lock.emplace(dir);
    remove_stale_temporaries(dir);
    const std::vector<int64_t> existing = list_checkpoint_steps(dir);
    if (!options.resume && !existing.empty())
      throw Error(ErrorKind::invalid_argument,
                  "'" + dir + "' already holds checkpoints (newest: step " + std::to_string(existing.back()) +
                      "); continue them with --resume, or choose another --checkpoint-dir");
    if (options.resume && existing.empty())
      throw Error(ErrorKind::invalid_argument,
                  "'" + dir + "' holds no complete checkpoint to resume from; start the run without --resume");
    if (options.resume) resume_step = existing.back();
  }
  if (several) net.broadcast(&resume_step, sizeof(resume_step), 0);

  std::shared_ptr<ThreadPool> pool = options.pool ? options.pool : make_thread_pool(options.threads);
  TrainerOptions to;
  to.device = options.device;
  to.threads = options.threads;
  to.simd_target = options.simd_target;
  to.pool = pool;
  to.precision = run.precision;
  to.adamw = run.adamw;
  to.ema_decay = run.ema;
  for (const auto& l : loaded) to.frozen.push_back(l.name);
  if (several || options.phase_times) to.ranks = ranks;
  ranks->timing = options.phase_times;

  RunStart start;
  start.checkpoint_dir = dir;
  start.slug = run.slug;
  start.last_step = last;
  start.parameters = registry.total();
  start.tokens_per_step = int64_t{config.batch} * config.length;
  start.train_bytes = data.train_bytes();
  start.held_out_bytes = data.held_out_bytes();
  start.data_files = static_cast<int64_t>(data.files().size());
  start.threads = options.device == Device::reference
                      ? 1
                      : (options.threads > 0 ? options.threads : thread_pool_size(*pool));

  std::optional<Trainer> trainer;
  RunResult result;
  if (options.resume) {
    Checkpoint ck = read_checkpoint(dir + "/" + step_directory_name(resume_step));
    if (ck.step != resume_step)
      throw Error(ErrorKind::format, ck.dir + ": training.json and model.json record step " +
                                         std::to_string(ck.step) + ", not the directory's");
    check_resumable(run, ck, loaded, data);
    if (last < ck.step)
      throw Error(ErrorKind::invalid_argument, "the newest checkpoint in '" + dir + "' is step " +
                                                   std::to_string(ck.step) +
                                                   ", past the last step asked for, " + std::to_string(last));
    start.resumed = true;
    start.resumed_from = ck.dir;
    result.last_checkpoint = ck.dir;
    trainer.emplace(Trainer::from_state(config, std::move(ck.state), to));
  } else {
    std::vector<float> params = init_parameters(config, run.seed);
    for (size_t i = 0; i < loaded.size(); ++i)
      std::copy(loaded_values[i].begin(), loaded_values[i].end(),
                params.begin() + registry.at(loaded[i].name).offset);
    trainer.emplace(config, params, to);
  }
  const int64_t first = trainer->completed_steps();
  start.first_step = first;
  result.first_step = first;
  result.last_step = first;

  std::optional<MetricsLog> metrics;
  if (root) metrics.emplace(dir, first);
  RunObserver* observer = root ? options.observer : nullptr;  // progress is printed once
  if (observer) observer->started(start);
  result.rank = net.rank();
  result.ranks = net.size();

  const bool evaluates = root && run.eval_every > 0 && data.held_out_bytes() > 0;
  const int64_t eval_rows = run.eval_batches * config.batch;
  const std::vector<int32_t> eval_ids = evaluates ? data.held_out_windows(eval_rows) : std::vector<int32_t>();
  const int64_t cols = int64_t{config.length} + 1;
  const Clock::time_point began = Clock::now();
  double train_seconds = 0.0;

  // Rank 0's stop request, broadcast so that every rank ends after the same step.
  auto stop_asked = [&] {
    bool asked = options.stop != nullptr && options.stop->load();
    if (several) {
      char flag = root && asked ? 1 : 0;
      net.broadcast(&flag, 1, 0);
      asked = flag != 0;
    }
    return asked;
  };
  // Asked to stop before any step: nothing trained, nothing written.
  if (stop_asked() && first < last) {
    result.stopped = true;
    return result;
  }

  ranks->times.start();
  for (int64_t step = first + 1; step <= last; ++step) {
    const std::vector<int32_t> ids = data.training_batch(run.seed, step);
    const float lr = learning_rate_at(run, step);
    const Clock::time_point before = Clock::now();
    uint32_t bits = 0;
    try {
      bits = trainer->train_step({ids.data(), config.batch, cols}, lr);
    } catch (const Error& e) {
      throw rephrased(e, std::string(e.what()) + "; " + newest_text(list_checkpoint_steps(dir)));
    }
    train_seconds += seconds_since(before);

    StepReport report;
    report.step = step;
    report.last_step = last;
    report.loss_bits = bits;
    report.loss = std::bit_cast<float>(bits);
    report.lr = lr;
    // Data-parallel: every rank brings the optimizer state's slices together before rank 0
    // evaluates the EMA or writes a checkpoint (the same steps on every rank).
    const bool eval_step = run.eval_every > 0 && data.held_out_bytes() > 0 && (step % run.eval_every == 0 || step == last);
    if (several && eval_step) trainer->gather_state();
    if (evaluates && eval_step) {
      ModelOptions mo;
      mo.device = options.device;
      mo.threads = options.threads;
      mo.pool = pool;
      mo.precision = run.precision;
      const auto model =
          Model::from_parameters(config, trainer->ema().empty() ? trainer->parameters() : trainer->ema(), mo);
      report.held_out_loss = mean_window_loss(*model, eval_ids, eval_rows, cols, {});
      result.held_out_loss = report.held_out_loss;
    }
    const double elapsed = seconds_since(began);
    const int64_t done = step - first;
    report.elapsed_seconds = elapsed;
    report.tokens_per_second =
        train_seconds > 0.0 ? static_cast<double>(done * start.tokens_per_step) / train_seconds : 0.0;
    report.seconds_left = elapsed / static_cast<double>(done) * static_cast<double>(last - step);
    if (metrics) metrics->append({step, report.loss, lr, report.held_out_loss, report.tokens_per_second, elapsed});
    if (observer) observer->step(report);

    // Asked to stop: this step is done; write its checkpoint (the schedule may already) and end.
    const bool stopping = stop_asked() && step < last;
    const bool checkpoint_step = (run.checkpoint_every > 0 && step % run.checkpoint_every == 0) || step == last || stopping;
    if (several && checkpoint_step) trainer->gather_state();
    // The step's gradient is complete on every rank (train_step returned after the final
    // gradient and the new parameters arrived), so rank 0 never writes a checkpoint of a
    // partial gradient.
    if (root && checkpoint_step) {
      CheckpointReport written;
      written.step = step;
      try {
        written.path = write_checkpoint(dir, {run, *trainer, loaded, data.files()});
      } catch (const Error& e) {
        throw rephrased(e, "cannot write checkpoint step " + std::to_string(step) + " in '" + dir + "': " +
                               e.what() + "; " + newest_text(list_checkpoint_steps(dir)));
      }
      written.removed = remove_old_checkpoints(dir, run.keep);
      result.last_checkpoint = written.path;
      if (observer) observer->checkpoint(written);
    }
    result.last_step = step;
    if (stopping) {
      result.stopped = true;
      break;
    }
  }
  result.bytes_sent = net.bytes_sent;
  result.seconds_waiting = net.seconds_waiting;
  if (options.phase_times) {
    net.times.lap(train::PhaseTimes::other);
    result.phase_times = train::phase_times_text(net.times);
  }
  return result;
}

}  // namespace

RunResult run_training(const RunSpec& run, const std::string& dir, const RunOptions& options) {
  const std::shared_ptr<train::Distributed> ranks = train::join_ranks();
  if (ranks->size() == 1) return train_ranks(run, dir, options, ranks);
  // Several ranks: a rank that fails ends the job on every rank (the others may be waiting for
  // its part of the gradient); a rank that dies is ended by the launcher likewise.
  try {
    return train_ranks(run, dir, options, ranks);
  } catch (const std::exception& e) {
    ranks->abort(e.what(), false);
  }
  throw Error(ErrorKind::state, "unreachable: the job was aborted");
}

}  // namespace lockstep
