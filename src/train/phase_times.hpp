// Where a training step's time goes, phase by phase, for the data-parallel benchmark
// (bench/mpi_scaling.sh, LOCKSTEP_PHASE_TIMES): wall and thread-CPU seconds summed over a run.
// Measured by one thread (worker 0 of the step, which is the trainer's calling thread): on a
// rank of one thread that is all its work; with more threads, worker 0's share. A phase's CPU
// seconds well under its wall seconds mean the thread was waiting or the machine was busy.
// Timing reads clocks only; it never changes a bit of a result.
#pragma once

#include <array>
#include <string>

namespace lockstep::train {

class PhaseTimes {
 public:
  enum Phase {
    pack,           // packing W and W^T for the step
    forward,        // the forward pass, the loss included
    backward_rows,  // the backward's row work: input gradients, norms, attention, emitting dy
    weight_chains,  // chains over rows: weight, norm-weight and embedding gradients
    receive,        // blocked receiving the chains from the rank before
    send,           // posting the chains to the next rank, and waiting for those sends
    share,          // sharing the final gradient (or its slices) and the new weights
    checks,         // the gradient's finite check and its clipping norm
    optimizer,      // AdamW and the EMA, and committing the new state
    other,          // the rest of a step: data, copies, the stop flag
    count
  };
  static const char* name(Phase p);

  // Starts the clocks: the next lap() charges the time from here.
  void start();
  // Charges the wall and thread-CPU time since the last lap (or start) to phase p.
  void lap(Phase p);

  std::array<double, count> wall{}, cpu{};

 private:
  double last_wall_ = 0.0, last_cpu_ = 0.0;
};

// "forward 1.234/1.200 backward_rows ..." (wall/cpu seconds), for a report line.
std::string phase_times_text(const PhaseTimes& t);

}  // namespace lockstep::train
