// Numbers in messages: the shortest text that reads back as the same value ("-1", "0.8",
// "1.0000001"), where std::to_string printed six decimals ("-1.000000") and hid the difference
// between a value and its neighbours.
#pragma once

#include <charconv>
#include <string>

namespace lockstep {

template <class T>
std::string number_text(T value) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  return ec == std::errc() ? std::string(buf, end) : std::string("?");
}

}  // namespace lockstep
