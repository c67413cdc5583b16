#include "core/cpu_info.hpp"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>

namespace lockstep {
namespace {

bool read_first_line(const std::string& path, std::string* line) {
  std::ifstream in(path);
  return in && std::getline(in, *line);
}

// The most CPUs a cgroup quota allows, or 0 when there is no quota.
int cgroup_quota_cpus() {
  std::string line;
  if (read_first_line("/sys/fs/cgroup/cpu.max", &line)) {  // v2: "max 100000" or "200000 100000"
    std::istringstream in(line);
    std::string quota;
    long long period = 0;
    if (in >> quota >> period && quota != "max" && period > 0) {
      const long long q = std::stoll(quota);
      if (q > 0) return static_cast<int>(std::max<long long>(1, (q + period - 1) / period));
    }
    return 0;
  }
  std::string q, p;
  if (read_first_line("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", &q) &&
      read_first_line("/sys/fs/cgroup/cpu/cpu.cfs_period_us", &p)) {
    const long long quota = std::stoll(q), period = std::stoll(p);
    if (quota > 0 && period > 0)
      return static_cast<int>(std::max<long long>(1, (quota + period - 1) / period));
  }
  return 0;
}

}  // namespace

int physical_cores_available() {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cores = 0;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    std::set<std::pair<std::string, std::string>> physical;
    int logical = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (!CPU_ISSET(cpu, &set)) continue;
      ++logical;
      const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
      std::string package, core;
      if (read_first_line(base + "physical_package_id", &package) &&
          read_first_line(base + "core_id", &core)) {
        physical.insert({package, core});
      } else {
        physical.insert({"cpu", std::to_string(cpu)});
      }
    }
    cores = physical.empty() ? logical : static_cast<int>(physical.size());
  }
  if (cores <= 0) cores = 1;
  const int quota = cgroup_quota_cpus();
  if (quota > 0) cores = std::min(cores, quota);
  return std::max(1, cores);
}

}  // namespace lockstep
