#include "train/schedule.hpp"

#include "core/host_math.hpp"

namespace lockstep {
namespace train {

float learning_rate(const ScheduleParams& s, int64_t step) {
  const double t = static_cast<double>(step);
  const double peak = s.peak;
  if (step <= s.warmup) return static_cast<float>(peak * t / static_cast<double>(s.warmup));
  if (s.kind == LrSchedule::constant) return s.peak;
  double p = 1.0;
  if (s.horizon > s.warmup) {
    p = (t - static_cast<double>(s.warmup)) / static_cast<double>(s.horizon - s.warmup);
    if (p > 1.0) p = 1.0;
  }
  const double floor = s.floor;
  return static_cast<float>(floor + (peak - floor) * 0.5 * (1.0 + host_cos(kHostPi * p)));
}

}  // namespace train

float learning_rate_at(const RunSpec& run, int64_t step) {
  return train::learning_rate({run.schedule, run.lr, run.lr_min, run.warmup, run.steps}, step);
}

}  // namespace lockstep
