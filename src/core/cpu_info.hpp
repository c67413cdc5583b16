// How many cores this process may use.
#pragma once

namespace lockstep {

// Physical cores among the CPUs in this process's affinity mask (SMT siblings counted once),
// limited by a cgroup CPU quota (v2 cpu.max or v1 cfs quota), at least 1.
int physical_cores_available();

}  // namespace lockstep
