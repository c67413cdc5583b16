// Errors: every failure the library reports is a lockstep::Error carrying a kind, which the
// Python module maps to an exception type and the C API to a status code, and a message that
// names what is wrong and where. Errors belong to the call that raised them; there is no global
// "last error".
#pragma once

#include <stdexcept>
#include <string>

namespace lockstep {

enum class ErrorKind {
  invalid_argument,  // a value out of range or of the wrong shape (Python: ValueError)
  type,              // a value of the wrong type (Python: TypeError)
  format,            // a file that is not what it claims to be (Python: ValueError)
  io,                // the operating system refused (Python: OSError)
  unsupported,       // asked for something this build or profile lacks (Python: RuntimeError)
  state,             // a stateful object cannot do this now (Python: RuntimeError)
  internal,          // a broken invariant inside lockstep (Python: RuntimeError)
};

// Stable codes for the failures a user is told to look up (docs/FORMAT.md lists them).
// Most errors carry no code; their message is the whole story.
namespace code {
inline constexpr const char* model_not_runnable = "LS-INFER-001";  // model cannot run alone
inline constexpr const char* load_changed = "LS-LOAD-001";         // a frozen :load file changed
}  // namespace code

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message, const char* code = nullptr)
      : std::runtime_error(message), kind_(kind), code_(code ? code : "") {}
  ErrorKind kind() const noexcept { return kind_; }
  // "" when the error has no stable code.
  const char* code() const noexcept { return code_; }

 private:
  ErrorKind kind_;
  const char* code_;
};

const char* error_kind_name(ErrorKind kind) noexcept;

}  // namespace lockstep
