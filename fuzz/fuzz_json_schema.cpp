// libFuzzer target: any bytes as a JSON Schema (src/grammar/json_schema.cpp). The conversion must
// either refuse them with an invalid_argument Error naming the keyword or the JSON error, or give
// GBNF that parses (Grammar::from_json_schema) into a grammar a matcher can walk (walk_grammar.hpp).
#include <cstdint>
#include <string_view>

#include "walk_grammar.hpp"
#include "lockstep/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::shared_ptr<const lockstep::Grammar> grammar;
  try {
    grammar = lockstep::Grammar::from_json_schema(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const lockstep::Error& e) {
    if (e.kind() != lockstep::ErrorKind::invalid_argument) lockstep::fuzz::broken("JSON Schema", "a refusal of another kind");
    return 0;
  }
  lockstep::fuzz::walk_grammar("JSON Schema", grammar, data, size);
  return 0;
}
