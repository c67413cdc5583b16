// The server's counters for GET /metrics, written out in the Prometheus text exposition format
// (version 0.0.4) by the project itself. Updated from the event loop and the generation runner;
// every member is thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "serve/finish.hpp"

namespace lockstep::serve {

// A cumulative histogram with fixed upper bounds (the last bucket is +Inf).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // `name`_bucket{le=...}, `name`_sum, `name`_count lines.
  std::string text(const std::string& name) const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mutex_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; bounds_.size() + 1
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct Metrics {
  Metrics();
  void count_request(const std::string& endpoint, int status);
  std::atomic<uint64_t> prompt_tokens{0};
  std::atomic<uint64_t> generation_tokens{0};
  std::atomic<int64_t> waiting{0};  // generations queued, not yet in the batch
  std::atomic<int64_t> running{0};  // generations in the batch
  Histogram batch_size;             // generations per batched decoding step
  Histogram time_to_first_token;    // seconds from admission to the first token
  Histogram time_per_token;         // seconds between a generation's tokens
  Histogram generation_length;      // tokens each generation (one per choice) ended with
  void count_finished(Finish finish);  // a generation has ended so
  uint64_t requests_answered() const;  // HTTP requests counted, every endpoint and status
  uint64_t generations_ended() const;  // generations counted, every finish reason

  // The exposition, every sample labelled replica="<replica>" so that scrapes of several
  // replicas stay apart; `rows_reused`/`rows_computed` are the frame protocol's and the HTTP
  // generations' rows, from the prefix cache and computed.
  std::string text(const std::string& replica, const std::string& model_name, const std::string& profile, const std::string& sha256,
                   uint64_t rows_reused, uint64_t rows_computed) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::array<std::atomic<uint64_t>, kFinishReasons> finished_{};
};

}  // namespace lockstep::serve
