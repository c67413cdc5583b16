// libFuzzer target: any bytes as GBNF (src/grammar/gbnf_parser.cpp). Grammar::from_gbnf must
// either refuse them with an invalid_argument Error naming the place, or give a grammar that a
// matcher can walk (walk_grammar.hpp).
#include <cstdint>
#include <string_view>

#include "walk_grammar.hpp"
#include "lockstep/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::shared_ptr<const lockstep::Grammar> grammar;
  try {
    grammar = lockstep::Grammar::from_gbnf(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const lockstep::Error& e) {
    if (e.kind() != lockstep::ErrorKind::invalid_argument) lockstep::fuzz::broken("GBNF", "a refusal of another kind");
    return 0;
  }
  lockstep::fuzz::walk_grammar("GBNF", grammar, data, size);
  return 0;
}
