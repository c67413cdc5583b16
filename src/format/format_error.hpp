// What the readers and writers of files share: a refusal that names the file and the problem, the
// error of a failed system call on a file, and f32 values written as the shortest decimal that
// reads back as the same bits.
#pragma once

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string>

#include "lockstep/error.hpp"
#include "lockstep/os_error.hpp"

namespace lockstep::format {

[[noreturn]] inline void refuse(const std::string& what, const std::string& problem) {
  throw Error(ErrorKind::format, what + ": " + problem);
}

// A failed system call on a file: "PATH: WHAT: the system's message", with errno `err`.
inline OsError io_error(const std::string& what, const std::string& path, int err) {
  return OsError(err, path + ": " + what + ": " + std::strerror(err));
}

// A name read from a file, for a message: quoted, control characters replaced by '?', cut after
// 80 characters.
inline std::string quote_name(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    out += static_cast<unsigned char>(c) < 0x20 ? '?' : c;
    if (out.size() > 80) {
      out += "...";
      break;
    }
  }
  return out + "'";
}

// The shortest decimal that reads back as the same f32, as a double for a JSON number.
inline double shortest_decimal(float f) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf) - 1, f);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

}  // namespace lockstep::format
