// The training loop of run_training() (lockstep/training_run.hpp) and the pieces it owns: the
// checkpoint location's directory and its lock.
#pragma once

#include <string>

namespace lockstep::train {

// Creates `path` and any missing parents (mode 0755). Error(io) naming the path and the reason
// when one cannot be created or is not a directory.
void make_directories(const std::string& path);

// An exclusive flock(2) on a directory while it lives, so that two runs never write one
// checkpoint location; the kernel drops it when the process dies, even by SIGKILL.
class DirectoryLock {
 public:
  explicit DirectoryLock(const std::string& dir);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace lockstep::train
