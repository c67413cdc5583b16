#include "train/metrics.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#include <nlohmann/json.hpp>

#include "format/atomic_write.hpp"
#include "format/json_text.hpp"
#include "format/mapped_file.hpp"
#include "lockstep/error.hpp"

namespace lockstep::train {
namespace {

using ordered = nlohmann::ordered_json;

double shortest(float f) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf) - 1, f);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

// x to `places` decimal places, as the double nearest that decimal (which JSON prints short).
double rounded(double x, int places) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", places, x);
  return std::strtod(buf, nullptr);
}

std::string hex_bits(float f) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", std::bit_cast<uint32_t>(f));
  return buf;
}

// The lines of `text` whose step is at most `keep_through`, each a JSON object.
std::string kept_lines(const std::string& text, int64_t keep_through) {
  std::string out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (format::json_too_deep_at(line) != std::string_view::npos) continue;
    nlohmann::json j;
    try {
      j = format::parse_json(line);
    } catch (const nlohmann::json::parse_error&) {
      continue;
    }
    if (!j.is_object()) continue;
    const auto step = j.find("step");
    if (step == j.end() || !step->is_number_integer() || step->get<int64_t>() > keep_through) continue;
    out += line + "\n";
  }
  return out;
}

}  // namespace

MetricsLog::MetricsLog(const std::string& location, int64_t keep_through)
    : path_(location + "/" + kMetricsFile) {
  std::string kept;
  if (keep_through > 0 && format::path_exists(path_))
    kept = kept_lines(format::read_text_file(path_, size_t{1} << 30), keep_through);
  format::write_file_atomic(path_, kept);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd_ < 0) throw Error(ErrorKind::io, path_ + ": cannot open: " + std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsLog::append(const MetricsLine& m) {
  ordered j;
  j["step"] = m.step;
  j["loss"] = shortest(m.loss);
  j["loss_bits"] = hex_bits(m.loss);
  j["bits_per_byte"] = rounded(static_cast<double>(m.loss) / std::log(2.0), 6);
  if (m.held_out_loss) {
    j["held_out_loss"] = shortest(*m.held_out_loss);
    j["held_out_loss_bits"] = hex_bits(*m.held_out_loss);
    j["held_out_bits_per_byte"] = rounded(static_cast<double>(*m.held_out_loss) / std::log(2.0), 6);
  }
  j["lr"] = shortest(m.lr);
  j["tokens_per_second"] = rounded(m.tokens_per_second, 1);
  j["elapsed_seconds"] = rounded(m.elapsed_seconds, 3);
  const std::string line = j.dump() + "\n";
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw Error(ErrorKind::io, path_ + ": cannot write: " + std::strerror(n < 0 ? errno : ENOSPC));
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace lockstep::train
