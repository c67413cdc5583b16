#include "train/phase_times.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>

namespace lockstep::train {
namespace {

double wall_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double thread_cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

const char* PhaseTimes::name(Phase p) {
  static const char* const names[count] = {"pack",   "forward", "backward_rows", "weight_chains", "receive",
                                           "send",   "share",   "checks",        "optimizer",     "other"};
  return names[p];
}

void PhaseTimes::start() {
  last_wall_ = wall_now();
  last_cpu_ = thread_cpu_now();
}

void PhaseTimes::lap(Phase p) {
  const double w = wall_now(), c = thread_cpu_now();
  wall[p] += w - last_wall_;
  cpu[p] += c - last_cpu_;
  last_wall_ = w;
  last_cpu_ = c;
}

std::string phase_times_text(const PhaseTimes& t) {
  std::string out;
  double wall = 0.0, cpu = 0.0;
  for (int p = 0; p < PhaseTimes::count; ++p) {
    char item[96];
    std::snprintf(item, sizeof(item), "%s%s %.3f/%.3f", p ? " " : "", PhaseTimes::name(static_cast<PhaseTimes::Phase>(p)),
                  t.wall[static_cast<size_t>(p)], t.cpu[static_cast<size_t>(p)]);
    out += item;
    wall += t.wall[static_cast<size_t>(p)];
    cpu += t.cpu[static_cast<size_t>(p)];
  }
  char total[64];
  std::snprintf(total, sizeof(total), " total %.3f/%.3f", wall, cpu);
  return out + total;
}

}  // namespace lockstep::train
