// metrics.jsonl: one JSON object a line for every training step of a run, in the checkpoint
// location (docs/TRAINING.md, "Outputs"). It holds timings, so unlike a checkpoint it is not
// byte-identical between runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace lockstep::train {

inline constexpr const char* kMetricsFile = "metrics.jsonl";

struct MetricsLine {
  int64_t step = 0;
  float loss = 0.0f;
  float lr = 0.0f;
  std::optional<float> held_out_loss;
  double tokens_per_second = 0.0;
  double elapsed_seconds = 0.0;
};

class MetricsLog {
 public:
  // Opens LOCATION/metrics.jsonl for appending. It is first rewritten (atomically) to hold only
  // the lines of steps <= keep_through: all of them when resuming from that step, none (an empty
  // file) for a fresh run (keep_through 0). Lines that do not parse (a write cut short) go too.
  MetricsLog(const std::string& location, int64_t keep_through);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // One line, written with a single write(2).
  void append(const MetricsLine& line);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace lockstep::train
