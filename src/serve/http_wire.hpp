// Small pieces every HTTP endpoint file writes with: JSON bodies, chunked framing, ids.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace lockstep::serve {

// A JSON body as one line; invalid UTF-8 in strings replaced (U+FFFD), never thrown on.
inline std::string json_body(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// `bytes` as one chunk of a chunked body (RFC 9112 section 7.1): its size in hex, CRLF, the
// bytes, CRLF.
std::string http_chunk(std::string_view bytes);
// A server-sent event ("data: ...\n\n") as one chunk.
std::string sse_chunk(std::string_view data);

// 64 random bits from the system's entropy source (an unseeded request's seed, response ids).
uint64_t random_u64();
// `prefix` and 16 random hex digits: "cmpl-0123456789abcdef".
std::string random_id(const char* prefix);

// A path segment with its %XX escapes decoded (clients encode a model name's reserved bytes); a
// '%' not followed by two hex digits stays as it is.
std::string percent_decoded(std::string_view s);

}  // namespace lockstep::serve
