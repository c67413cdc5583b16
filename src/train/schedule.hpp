// The learning-rate schedule: linear warm-up, then constant or a half cosine down to a floor.
#pragma once

#include <cstdint>

#include "lockstep/training_run.hpp"

namespace lockstep::train {

struct ScheduleParams {
  LrSchedule kind = LrSchedule::cosine;
  float peak = 0.0f;    // > 0
  float floor = 0.0f;   // in (0, peak]: the cosine's end
  int64_t warmup = 0;   // steps
  int64_t horizon = 0;  // the run file's :steps: where the cosine reaches the floor
};

// The rate of step t >= 1, in f64 rounded once to f32:
//   t <= warmup:        peak * t / warmup
//   constant:           peak
//   cosine:             floor + (peak - floor) * 0.5 * (1 + cos(pi * p)),
//                       p = min(1, (t - warmup) / (horizon - warmup)) (1 when horizon <= warmup)
// with cos lockstep's own (core/host_math.hpp), so the bits are the same on every machine.
float learning_rate(const ScheduleParams& s, int64_t step);

}  // namespace lockstep::train
