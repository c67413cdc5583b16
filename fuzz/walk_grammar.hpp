// What the grammar fuzz targets (fuzz_gbnf.cpp, fuzz_json_schema.cpp) do with a grammar that
// was taken: a matcher walks 32 steps over the byte vocabulary, each taking an allowed byte
// chosen by the input, where the mask must agree with allowed(), accept() must take what the
// mask allows, and a state with no byte allowed must be one where nothing can follow. A step may
// refuse a grammar too ambiguous to follow (an invalid_argument Error), never fail otherwise.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>

#include "lockstep/error.hpp"
#include "lockstep/grammar.hpp"

namespace lockstep::fuzz {

[[noreturn]] inline void broken(const char* what, const char* promise) {
  std::fprintf(stderr, "%s fuzz broke a promise: %s\n", what, promise);
  __builtin_trap();
}

inline void walk_steps(const char* what, GrammarMatcher& m, const uint8_t* data, size_t size) {
  for (size_t step = 0; step < 32; ++step) {
    const auto mask = m.allowed_tokens();
    int32_t pick = -1, count = 0;
    for (int32_t id = 0; id < 256; ++id) {
      const bool bit = (mask[static_cast<size_t>(id) / 64] >> (id % 64)) & 1;
      if (bit != m.allowed(id)) broken(what, "the mask and allowed() disagree");
      if (bit && (count++ == 0 || (size > 0 && data[step % size] % 7 == 0))) pick = id;
    }
    if (pick < 0) {
      if (m.can_continue()) broken(what, "no byte allowed where the grammar can go on");
      if (!m.accepting()) broken(what, "stuck before a whole match");
      return;
    }
    if (!m.accept(pick)) broken(what, "accept() refused an allowed token");
  }
}

inline void walk_grammar(const char* what, const std::shared_ptr<const Grammar>& grammar, const uint8_t* data,
                         size_t size) {
  static const auto vocabulary = TokenVocabulary::bytes();
  GrammarMatcher m(grammar, vocabulary);
  try {
    walk_steps(what, m, data, size);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::invalid_argument) broken(what, "a step failed with an error of another kind");
  }
}

}  // namespace lockstep::fuzz
