// What the readers of outside data share: a refusal that names the file and the problem, and f32
// values written as the shortest decimal that reads back as the same bits.
#pragma once

#include <charconv>
#include <cstdlib>
#include <string>

#include "lockstep/error.hpp"

namespace lockstep::format {

[[noreturn]] inline void refuse(const std::string& what, const std::string& problem) {
  throw Error(ErrorKind::format, what + ": " + problem);
}

// The shortest decimal that reads back as the same f32, as a double for a JSON number.
inline double shortest_decimal(float f) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf) - 1, f);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

}  // namespace lockstep::format
