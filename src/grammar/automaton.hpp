// The grammar as a byte automaton, built lazily. A parse in progress is a stack of positions
// (the element to match next, then where each enclosing rule goes on), as in llama.cpp's
// matcher; a state is the set of stacks every parse of the bytes so far can be in, deduplicated.
// Stacks are hash-consed nodes (position, parent), so equal stacks are equal ids and pushing or
// popping copies nothing; sets of stacks are interned too, and each (state, byte) transition is
// computed once and kept, so that walking a vocabulary's trie (token_trie.hpp) mostly reads a
// table. One automaton serves one generation at a time (no locking); it is a cache: reset()
// forgets what it computed and gives the same answers.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "grammar/rules.hpp"

namespace lockstep::grammar {

class ByteAutomaton {
 public:
  static constexpr uint32_t kDead = 0xFFFFFFFFu;  // no parse survives
  // The most stacks a state may hold: past it a step throws Error (an ambiguous grammar can hold
  // exponentially many parses of one text; a JSON Schema's grammar holds a few dozen).
  static constexpr size_t kMaxStacks = 4096;
  explicit ByteAutomaton(std::shared_ptr<const Rules> rules);

  uint32_t start() const { return start_; }
  // The state after `byte` (kDead when no parse can take it).
  uint32_t step(uint32_t state, uint8_t byte) {
    if (states_[state].next[byte] == kUnknown) compute_row(state);
    return states_[state].next[byte];
  }
  // Some parse has matched the whole grammar.
  bool accepting(uint32_t state) const { return states_[state].accepting; }
  // Some parse can take another byte.
  bool can_continue(uint32_t state) const { return states_[state].first.any(); }
  // The bytes some parse can take next.
  const ByteSet& first(uint32_t state) const { return states_[state].first; }
  size_t state_count() const { return states_.size(); }
  size_t node_count() const { return nodes_.size(); }
  // Forgets every state but `keep`, which becomes the only state (returned: its new id).
  uint32_t reset(uint32_t keep);

 private:
  static constexpr uint32_t kUnknown = 0xFFFFFFFEu;
  static constexpr uint32_t kEmptyStack = 0xFFFFFFFFu;  // the stack of a finished parse
  struct Node {
    uint32_t position;  // index into Rules::elements: a bytes element once expanded
    uint32_t parent;    // the stack below (kEmptyStack at the bottom)
  };
  struct State {
    std::vector<uint32_t> stacks;  // sorted node ids (kEmptyStack for a finished parse)
    std::array<uint32_t, 256> next;
    ByteSet first;
    bool accepting = false;
  };
  struct VectorHash {
    size_t operator()(const std::vector<uint32_t>& v) const;
  };

  uint32_t node(uint32_t position, uint32_t parent);
  // The stack at `position` over `parent`, its position's rule references expanded until every
  // stack's top is a bytes element, appended to `out`.
  void expand(uint32_t position, uint32_t parent, std::vector<uint32_t>& out);
  // Starts a group of expand() calls that append to one vector (a step, the start state).
  void begin_expansion() { expanded_.clear(); }
  uint32_t state_of(std::vector<uint32_t> stacks);
  // Every byte's transition from `state` at once: bytes that the same stacks take lead to the
  // same state, so each group of them is computed once (a string's ASCII characters are one).
  void compute_row(uint32_t state);
  uint32_t compute_step(const std::vector<uint32_t>& stacks, uint8_t byte);

  std::shared_ptr<const Rules> rules_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, uint32_t> node_ids_;
  std::vector<State> states_;
  std::unordered_map<std::vector<uint32_t>, uint32_t, VectorHash> state_ids_;
  // The (position, parent) pairs expand() has run since begin_expansion(): one expansion appends
  // the same stacks every time, so a second is skipped. Without it a rule that may match nothing,
  // repeated inside itself (`r ::= "x" r r r | `), expands exponentially many equal paths (the
  // GBNF fuzzer found one that ran for minutes).
  std::unordered_set<uint64_t> expanded_;
  uint32_t start_ = 0;
};

}  // namespace lockstep::grammar
