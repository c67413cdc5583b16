#include "train/distributed.hpp"

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "lockstep/error.hpp"

namespace lockstep::train {

#ifdef LOCKSTEP_WITH_MPI
// train/mpi/mpi_ranks.cpp, compiled only with LOCKSTEP_MPI: nullptr when not under a launcher.
std::shared_ptr<Distributed> join_mpi_ranks();
#endif

void SingleRank::receive_from_previous(float*, int64_t) {
  throw Error(ErrorKind::state, "a single training process has no previous rank");
}

void SingleRank::send_to_next(const float*, int64_t) {
  throw Error(ErrorKind::state, "a single training process has no next rank");
}

void SingleRank::abort(const std::string& message, bool) {
  std::fprintf(stderr, "lockstep train: %s\n", message.c_str());
  std::exit(1);
}

bool mpi_built() noexcept {
#ifdef LOCKSTEP_WITH_MPI
  return true;
#else
  return false;
#endif
}

std::shared_ptr<Distributed> join_ranks() {
  static std::mutex mutex;
  static std::shared_ptr<Distributed> joined;
  std::lock_guard<std::mutex> lock(mutex);
  if (joined) return joined;
#ifdef LOCKSTEP_WITH_MPI
  joined = join_mpi_ranks();
#endif
  if (!joined) return std::make_shared<SingleRank>();  // not kept: a later mpirun-less call is the same
  return joined;
}

std::pair<int64_t, int64_t> rank_rows(int64_t rows, int r, int n) {
  const int64_t base = rows / n, extra = rows % n;
  const int64_t begin = r * base + (r < extra ? r : extra);
  return {begin, begin + base + (r < extra ? 1 : 0)};
}

}  // namespace lockstep::train
