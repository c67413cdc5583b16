// The MPI world as train::Distributed (built only with LOCKSTEP_MPI). MPI is process-wide state
// by its nature: it is initialised once, on the first join_ranks() of a process that a launcher
// started, and finalised at exit after a run that ended normally. A failure aborts the whole job
// (MPI_Abort) instead of finalising, because the other ranks may be waiting for this one.
// The C interface only: Open MPI's C++ bindings would need their own library.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "lockstep/error.hpp"
#include "train/distributed.hpp"

namespace lockstep::train {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kChainTag = 20;
constexpr int kGatherTag = 21;
constexpr int kFinalTag = 22;
constexpr int64_t kPiece = int64_t{1} << 28;  // elements per message: counts are C ints

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw Error(ErrorKind::io, std::string(what) + " failed: " + std::string(text, static_cast<size_t>(length)));
}

class MpiRanks final : public Distributed {
 public:
  MpiRanks() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void receive_from_previous(float* data, int64_t n) override {
    const Clock::time_point t0 = Clock::now();
    for (int64_t i = 0; i < n; i += kPiece)
      check(MPI_Recv(data + i, static_cast<int>(std::min(kPiece, n - i)), MPI_FLOAT, rank_ - 1, kChainTag,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE),
            "MPI_Recv of the gradient chain");
    seconds_waiting += std::chrono::duration<double>(Clock::now() - t0).count();
  }

  void send_to_next(const float* data, int64_t n) override {
    for (int64_t i = 0; i < n; i += kPiece)
      check(MPI_Send(data + i, static_cast<int>(std::min(kPiece, n - i)), MPI_FLOAT, rank_ + 1, kChainTag,
                     MPI_COMM_WORLD),
            "MPI_Send of the gradient chain");
    bytes_sent += n * static_cast<int64_t>(sizeof(float));
  }

  void post_to_next(const float* data, int64_t n) override {
    for (int64_t i = 0; i < n; i += kPiece) {
      MPI_Request request;
      check(MPI_Isend(data + i, static_cast<int>(std::min(kPiece, n - i)), MPI_FLOAT, rank_ + 1, kChainTag,
                      MPI_COMM_WORLD, &request),
            "MPI_Isend of the gradient chain");
      posted_.push_back(request);
    }
    bytes_sent += n * static_cast<int64_t>(sizeof(float));
  }

  void wait_posted() override {
    const Clock::time_point t0 = Clock::now();
    if (!posted_.empty())
      check(MPI_Waitall(static_cast<int>(posted_.size()), posted_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    posted_.clear();
    seconds_waiting += std::chrono::duration<double>(Clock::now() - t0).count();
  }

  void post_final_to(int rank, const float* data, int64_t n) override {
    for (int64_t i = 0; i < n; i += kPiece) {
      MPI_Request request;
      check(MPI_Isend(data + i, static_cast<int>(std::min(kPiece, n - i)), MPI_FLOAT, rank, kFinalTag, MPI_COMM_WORLD,
                      &request),
            "MPI_Isend of the final gradient");
      posted_.push_back(request);
    }
    bytes_sent += n * static_cast<int64_t>(sizeof(float));
  }

  size_t post_final_receive(float* data, int64_t n, int from) override {
    std::vector<MPI_Request>& requests = finals_.emplace_back();
    for (int64_t i = 0; i < n; i += kPiece) {
      MPI_Request request;
      check(MPI_Irecv(data + i, static_cast<int>(std::min(kPiece, n - i)), MPI_FLOAT, from, kFinalTag,
                      MPI_COMM_WORLD, &request),
            "MPI_Irecv of the final gradient");
      requests.push_back(request);
    }
    return finals_.size() - 1;
  }

  bool final_arrived(size_t receive, bool wait) override {
    std::vector<MPI_Request>& requests = finals_.at(receive);
    if (requests.empty()) return true;
    if (wait) {
      const Clock::time_point t0 = Clock::now();
      check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
      seconds_waiting += std::chrono::duration<double>(Clock::now() - t0).count();
    } else {
      int done = 0;
      check(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
      if (!done) return false;
    }
    requests.clear();
    return true;
  }

  void wait_final() override {
    for (size_t i = 0; i < finals_.size(); ++i) final_arrived(i, true);
    finals_.clear();
  }

  void broadcast(void* data, int64_t bytes, int root) override {
    const Clock::time_point t0 = Clock::now();
    char* p = static_cast<char*>(data);
    for (int64_t i = 0; i < bytes; i += kPiece)
      check(MPI_Bcast(p + i, static_cast<int>(std::min(kPiece, bytes - i)), MPI_BYTE, root, MPI_COMM_WORLD),
            "MPI_Bcast");
    if (rank_ == root) bytes_sent += bytes;
    seconds_waiting += std::chrono::duration<double>(Clock::now() - t0).count();
  }

  void allgather(void* data, const std::vector<int64_t>& begin) override {
    const Clock::time_point t0 = Clock::now();
    char* const bytes = static_cast<char*>(data);
    if (begin.back() > INT_MAX) {  // past MPI's int counts: one broadcast (in pieces) per slice
      for (int q = 0; q < size_; ++q) {
        const int64_t b = begin[static_cast<size_t>(q)], e = begin[static_cast<size_t>(q) + 1];
        if (e > b) broadcast(bytes + b, e - b, q);
      }
      return;
    }
    std::vector<int> counts(static_cast<size_t>(size_)), displs(static_cast<size_t>(size_));
    for (int q = 0; q < size_; ++q) {
      counts[static_cast<size_t>(q)] = static_cast<int>(begin[static_cast<size_t>(q) + 1] - begin[static_cast<size_t>(q)]);
      displs[static_cast<size_t>(q)] = static_cast<int>(begin[static_cast<size_t>(q)]);
    }
    check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, bytes, counts.data(), displs.data(), MPI_BYTE,
                         MPI_COMM_WORLD),
          "MPI_Allgatherv");
    bytes_sent += counts[static_cast<size_t>(rank_)];
    seconds_waiting += std::chrono::duration<double>(Clock::now() - t0).count();
  }

  std::vector<int64_t> gather_to_root(int64_t value) override {
    if (rank_ != 0) {
      check(MPI_Send(&value, 1, MPI_INT64_T, 0, kGatherTag, MPI_COMM_WORLD), "MPI_Send to rank 0");
      return {};
    }
    std::vector<int64_t> all(static_cast<size_t>(size_));
    all[0] = value;
    for (int r = 1; r < size_; ++r)
      check(MPI_Recv(&all[static_cast<size_t>(r)], 1, MPI_INT64_T, r, kGatherTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
            "MPI_Recv on rank 0");
    return all;
  }

  void abort(const std::string& message, bool every_rank_knows) override {
    if (!every_rank_knows || rank_ == 0) {
      std::fprintf(stderr, "lockstep train: rank %d of %d: %s\n", rank_, size_, message.c_str());
      std::fflush(stderr);
    }
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);
  }

 private:
  int rank_ = 0, size_ = 1;
  std::vector<MPI_Request> posted_;
  std::vector<std::vector<MPI_Request>> finals_;  // per post_final_receive
};

bool under_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

std::shared_ptr<Distributed> join_mpi_ranks() {
  if (!under_launcher()) return nullptr;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // Serialized: the trainer's messages come from one thread at a time, not always the same.
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    if (provided < MPI_THREAD_SERIALIZED)
      throw Error(ErrorKind::unsupported, "this MPI library does not support MPI_THREAD_SERIALIZED");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    std::atexit(finalize_at_exit);
  }
  return std::make_shared<MpiRanks>();
}

}  // namespace lockstep::train
