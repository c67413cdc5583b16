#include "cli/progress.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "lockstep/error.hpp"

namespace lockstep::cli {

ProgressMode parse_progress_mode(const std::string& text) {
  if (text == "auto") return ProgressMode::automatic;
  if (text == "plain") return ProgressMode::plain;
  if (text == "live") return ProgressMode::live;
  throw Error(ErrorKind::invalid_argument, "--progress must be auto, plain or live, got '" + text + "'");
}

bool progress_is_live(ProgressMode mode, int fd) {
  if (mode != ProgressMode::automatic) return mode == ProgressMode::live;
  // A rank started by mpirun (Open MPI, MPICH/Hydra, PMIx): its terminal is mpirun's relay.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(name) != nullptr) return false;
  return ::isatty(fd) == 1;
}

std::string duration_text(double seconds) {
  if (!(seconds >= 0.0) || seconds > 1e8) return "?";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60));
  } else if (s >= 60) {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%llds", static_cast<long long>(s));
  }
  return buf;
}

bool LiveLine::due(bool milestone) const {
  if (milestone) return true;
  const double since = std::chrono::duration<double>(std::chrono::steady_clock::now() - shown_).count();
  return since >= (terminal_ ? 0.1 : 10.0);
}

void LiveLine::show(std::string line) {
  shown_ = std::chrono::steady_clock::now();
  if (terminal_) {
    // Cut to the terminal's width: a wrapped line could not be redrawn in place.
    winsize size{};
    if (::ioctl(::fileno(stream_), TIOCGWINSZ, &size) == 0 && size.ws_col > 1 && line.size() >= size.ws_col)
      line.resize(size.ws_col - 1u);
    std::fprintf(stream_, "\r\033[K%s", line.c_str());
    live_ = true;
  } else {
    std::fprintf(stream_, "%s\n", line.c_str());
  }
  std::fflush(stream_);
}

void LiveLine::end_line() {
  if (live_) {
    std::fputc('\n', stream_);
    std::fflush(stream_);
  }
  live_ = false;
}

}  // namespace lockstep::cli
