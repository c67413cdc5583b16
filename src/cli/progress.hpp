// Progress of long commands (train, eval): on a terminal one line redrawn in place with "\r" (at
// most ten times a second), elsewhere plain lines (at milestones and at least every ten
// seconds), so that logs and pipes get a readable record and a terminal gets a live line.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace lockstep::cli {

// How progress is shown (`--progress`): `live` redraws one line in place, `plain` prints lines
// of their own, `auto` redraws only on a terminal that is not a rank of mpirun (Open MPI gives
// every rank a pseudo-terminal, so isatty is true even when mpirun's output goes to a file).
enum class ProgressMode { automatic, plain, live };
// "auto", "plain" or "live"; throws Error naming the flag otherwise.
ProgressMode parse_progress_mode(const std::string& text);
// Whether progress on `fd` is redrawn in place.
bool progress_is_live(ProgressMode mode, int fd);

// "45s", "3m07s", "2h05m"; "?" for a negative, NaN or absurd estimate.
std::string duration_text(double seconds);

class LiveLine {
 public:
  // `stream`: where the lines go (train: stdout, eval: stderr); `terminal`: whether it is a
  // terminal (isatty), which chooses redrawing over plain lines.
  LiveLine(std::FILE* stream, bool terminal) : stream_(stream), terminal_(terminal) {}

  bool terminal() const { return terminal_; }
  // Whether a line is due now: always at a milestone, else after 0.1 s on a terminal and 10 s
  // elsewhere since the last one shown.
  bool due(bool milestone) const;
  // Shows `line`: redrawn in place (cut to the terminal's width) or printed on a line of its own.
  void show(std::string line);
  // Ends a live line with a newline before other output; nothing when none is showing.
  void end_line();
  // Makes the next due() true, e.g. to redraw after another message.
  void reset() { shown_ = {}; }

 private:
  std::FILE* stream_;
  bool terminal_;
  bool live_ = false;
  std::chrono::steady_clock::time_point shown_{};
};

}  // namespace lockstep::cli
