// An io Error that carries the operating system's errno, so that front ends can say which kind
// of refusal it was: the Python module raises the OSError subclass the errno names
// (FileNotFoundError for ENOENT, PermissionError for EACCES, FileExistsError for EEXIST, ...).
// It is a lockstep::Error of kind io; code that catches Error sees nothing new.
#pragma once

#include <string>

#include "lockstep/error.hpp"

namespace lockstep {

class OsError : public Error {
 public:
  OsError(int error_number, const std::string& message)
      : Error(ErrorKind::io, message), error_number_(error_number) {}
  int error_number() const noexcept { return error_number_; }

 private:
  int error_number_;
};

}  // namespace lockstep
