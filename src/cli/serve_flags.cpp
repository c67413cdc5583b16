// `lockstep serve`'s flag checks (serve_flags.hpp).
#include "cli/serve_flags.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "lockstep/error.hpp"

namespace lockstep::cli {

// "0600", "600", "0o600" -> 0600.
unsigned parse_socket_mode(const std::string& text) {
  std::string digits = text;
  if (digits.rfind("0o", 0) == 0 || digits.rfind("0O", 0) == 0) digits = digits.substr(2);
  bool ok = !digits.empty() && digits.size() <= 4;
  unsigned mode = 0;
  for (char ch : digits) {
    ok = ok && ch >= '0' && ch <= '7';
    mode = mode * 8 + static_cast<unsigned>(ch - '0');
  }
  if (!ok || mode > 0777)
    throw Error(ErrorKind::invalid_argument,
                "--socket-mode must be octal permission bits in 0..0777, such as 0600 or 0660; got '" +
                    text + "'");
  return mode;
}

// Seconds (decimals allowed) in [0, 1e6] -> milliseconds, rounded up so that 0.0001 is not 0.
std::chrono::milliseconds idle_seconds(const char* flag, double seconds) {
  if (!(seconds >= 0 && seconds <= 1e6))
    throw Error(ErrorKind::invalid_argument,
                std::string(flag) + " must be seconds in [0, 1000000] (0: never), got " + std::to_string(seconds));
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000)));
}

// The API key: the file's first line, without the whitespace around it (an editor's trailing
// space, a CRLF line end: a key that kept them could never be sent). The file must be a regular
// file that neither group nor others may read or write (as ssh requires of a private key): a key
// others can read is no secret.
std::string read_api_key(const std::string& path) {
  constexpr size_t kMaxKey = 4096;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) throw Error(ErrorKind::io, "--api-key-file '" + path + "': " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error(ErrorKind::io, "--api-key-file '" + path + "': " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw Error(ErrorKind::invalid_argument, "--api-key-file '" + path + "' is not a regular file");
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw Error(ErrorKind::invalid_argument, "--api-key-file '" + path + "' has mode " + mode +
                                                 ": group or others may read or change the key; chmod 600 '" + path +
                                                 "' (only its owner may)");
  }
  std::string text(kMaxKey + 2, '\0');
  size_t got = 0;
  for (ssize_t n; got < text.size() && (n = ::read(fd, text.data() + got, text.size() - got)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(ErrorKind::io, "--api-key-file '" + path + "': " + std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  std::string key = text.substr(0, text.find('\n'));
  const char* space = " \t\r\f\v";
  key.erase(0, std::min(key.size(), key.find_first_not_of(space)));
  key.erase(key.find_last_not_of(space) + 1);
  if (key.size() > kMaxKey)
    throw Error(ErrorKind::invalid_argument, "--api-key-file '" + path + "': the key is longer than " +
                                                 std::to_string(kMaxKey) + " bytes");
  if (key.empty()) throw Error(ErrorKind::invalid_argument, "--api-key-file '" + path + "' holds no key on its first line");
  return key;
}

// Each connection is a descriptor: raise the soft limit on open files to the hard one (the soft
// one is often 1,024, fewer than the connections this server allows), and say so when even that
// is too few, since accept() then fails and new clients wait in the backlog.
void raise_file_limit(const ServerOptions& o) {
  const bool frames = !o.socket_path.empty() || !o.listen.empty();
  const rlim_t need = static_cast<rlim_t>(o.max_connections) * ((frames ? 1 : 0) + (o.http.empty() ? 0 : 1)) + 64 + 64;
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) != 0 || files.rlim_cur >= need) return;
  rlimit raised = files;
  raised.rlim_cur = files.rlim_max == RLIM_INFINITY ? need : std::min(files.rlim_max, need);
  if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) files = raised;
  if (files.rlim_cur < need)
    std::fprintf(stderr,
                 "lockstep serve: warning: the open-file limit is %llu (ulimit -n), fewer than the %llu that "
                 "--max-connections %d needs; connections past it wait until others close\n",
                 static_cast<unsigned long long>(files.rlim_cur), static_cast<unsigned long long>(need), o.max_connections);
}

// "*", or an origin as browsers send it: scheme, host and maybe a port, no path.
void check_cors_origin(const std::string& origin) {
  if (origin == "*") return;
  const size_t scheme = origin.find("://");
  const std::string rest = scheme == std::string::npos ? std::string() : origin.substr(scheme + 3);
  const bool scheme_ok = origin.rfind("http://", 0) == 0 || origin.rfind("https://", 0) == 0;
  if (!scheme_ok || rest.empty() || rest.find_first_of("/?# \t\r\n") != std::string::npos)
    throw Error(ErrorKind::invalid_argument, "--cors-origin must be * or an origin such as http://localhost:3000 "
                                             "(scheme, host and port, no path), got '" + origin + "'");
}

}  // namespace lockstep::cli
