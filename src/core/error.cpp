#include "lockstep/error.hpp"

namespace lockstep {

const char* error_kind_name(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::invalid_argument: return "invalid argument";
    case ErrorKind::type: return "type error";
    case ErrorKind::format: return "format error";
    case ErrorKind::io: return "i/o error";
    case ErrorKind::unsupported: return "unsupported";
    case ErrorKind::state: return "state error";
    case ErrorKind::internal: return "internal error";
  }
  return "error";
}

}  // namespace lockstep
