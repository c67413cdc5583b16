// The ranks of a data-parallel training job (docs/TRAINING.md, "Training on a cluster"): the
// trainer's view of MPI, so that the library holds no MPI symbol unless built with it
// (LOCKSTEP_MPI). One process, or a build without MPI, is the single rank of SingleRank.
//
// Only point-to-point messages, broadcasts and allgathers (copies of bytes): every float that
// two ranks add together is added by the trainer in row order, never by a reduction whose order
// is the transport's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "train/phase_times.hpp"

namespace lockstep::train {

class Distributed {
 public:
  virtual ~Distributed() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Blocking: n floats from rank() - 1, and to rank() + 1.
  virtual void receive_from_previous(float* data, int64_t n) = 0;
  virtual void send_to_next(const float* data, int64_t n) = 0;
  // Non-blocking: n floats to rank() + 1, which must stay unchanged until wait_posted().
  virtual void post_to_next(const float* data, int64_t n) = 0;
  virtual void wait_posted() = 0;
  // Non-blocking, for the final gradient, which goes round a ring: the last rank posts each
  // block to rank 0 as soon as it is final, and ranks 0 to size() - 3 pass each on to the next
  // as it arrives (post_final_to, waited for by wait_posted()). Each rank but the last posts its
  // receives before the step (post_final_receive, in the order they will come; returns the
  // receive's number), asks whether one has arrived (final_arrived, waiting for it with `wait`,
  // which counts as waiting) and ends with wait_final().
  virtual void post_final_to(int rank, const float* data, int64_t n) = 0;
  virtual size_t post_final_receive(float* data, int64_t n, int from) = 0;
  virtual bool final_arrived(size_t receive, bool wait) = 0;
  virtual void wait_final() = 0;
  // `bytes` bytes of rank `root`'s buffer into every rank's.
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
  // Every rank's slice of data into every rank's: slice q is bytes [begin[q], begin[q + 1])
  // (size() + 1 offsets), copied as they are (an allgather of bytes; no arithmetic).
  virtual void allgather(void* data, const std::vector<int64_t>& begin) = 0;
  // Rank 0: every rank's value, in rank order; the other ranks: empty.
  virtual std::vector<int64_t> gather_to_root(int64_t value) = 0;
  // Prints "lockstep train: rank R of N: message" on stderr (only on rank 0 when every rank
  // has the same message) and ends the whole job with a non-zero exit on every rank.
  [[noreturn]] virtual void abort(const std::string& message, bool every_rank_knows) = 0;

  // Counters for the benchmark and the report: bytes this rank has sent (its share of the
  // broadcasts included, as the message size it passed) and seconds it spent blocked in
  // receives, waits and broadcasts.
  int64_t bytes_sent = 0;
  double seconds_waiting = 0.0;
  // With `timing` (RunOptions::phase_times), the trainer and the fast step sum where this
  // rank's steps spend their time into `times`.
  bool timing = false;
  PhaseTimes times;
};

// The single process: rank 0 of 1; the messages are never called.
class SingleRank final : public Distributed {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void receive_from_previous(float*, int64_t) override;
  void send_to_next(const float*, int64_t) override;
  void post_to_next(const float* data, int64_t n) override { send_to_next(data, n); }
  void wait_posted() override {}
  void post_final_to(int, const float* data, int64_t n) override { send_to_next(data, n); }
  size_t post_final_receive(float* data, int64_t n, int) override {
    receive_from_previous(data, n);
    return 0;
  }
  bool final_arrived(size_t, bool) override { return true; }
  void wait_final() override {}
  void broadcast(void*, int64_t, int) override {}
  void allgather(void*, const std::vector<int64_t>&) override {}
  std::vector<int64_t> gather_to_root(int64_t value) override { return {value}; }
  [[noreturn]] void abort(const std::string& message, bool every_rank_knows) override;
};

// True when this build can train over MPI.
bool mpi_built() noexcept;

// The job this process belongs to: the MPI world when built with MPI and started by mpirun (or
// another launcher that sets OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK), else a SingleRank.
// MPI is initialised once per process, on the first call; later calls return the same ranks.
std::shared_ptr<Distributed> join_ranks();

// Rows [begin, end) of a batch of `rows` for rank r of n: contiguous blocks in rank order,
// sizes differing by at most one (a rank may have none when rows < n).
std::pair<int64_t, int64_t> rank_rows(int64_t rows, int r, int n);

}  // namespace lockstep::train
