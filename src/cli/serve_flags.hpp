// The checks of `lockstep serve`'s flags that read files or the process's limits, or that parse
// more than a number: each throws Error naming the flag and what is wrong (docs/LIMITS.md).
#pragma once

#include <chrono>
#include <string>

#include "lockstep/server.hpp"

namespace lockstep::cli {

// "0600", "600", "0o600" -> 0600.
unsigned parse_socket_mode(const std::string& text);
// Seconds (decimals allowed) in [0, 1e6] -> milliseconds, rounded up so that 0.0001 is not 0.
std::chrono::milliseconds idle_seconds(const char* flag, double seconds);
// The API key in `path` (--api-key-file): its first line, without the whitespace around it, from
// a regular file that neither group nor others may read or write.
std::string read_api_key(const std::string& path);
// "*", or an origin as browsers send it: scheme, host and maybe a port, no path.
void check_cors_origin(const std::string& origin);
// Raises the soft limit on open files to what `o`'s connections need (at most the hard limit),
// warning on stderr when even that is too few.
void raise_file_limit(const ServerOptions& o);

}  // namespace lockstep::cli
