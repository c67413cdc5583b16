#include "serve/http_wire.hpp"

#include <cstdio>
#include <random>

namespace lockstep::serve {

std::string http_chunk(std::string_view bytes) {
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", bytes.size());
  std::string out(size);
  out.append(bytes);
  out += "\r\n";
  return out;
}

std::string sse_chunk(std::string_view data) {
  std::string event = "data: ";
  event.append(data);
  event += "\n\n";
  return http_chunk(event);
}

uint64_t random_u64() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(rd());
}

std::string random_id(const char* prefix) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%016llx", prefix, static_cast<unsigned long long>(random_u64()));
  return buf;
}

std::string percent_decoded(std::string_view s) {
  const auto hex_value = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const int hi = s[i] == '%' && i + 2 < s.size() ? hex_value(s[i + 1]) : -1;
    const int lo = hi >= 0 ? hex_value(s[i + 2]) : -1;
    if (lo >= 0) {
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace lockstep::serve
