// A vocabulary's tokens as a byte trie, built once per vocabulary, so that the tokens a grammar
// state allows are found in one walk that shares the work of common prefixes and leaves a
// subtree at its first refused byte.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "grammar/automaton.hpp"

namespace lockstep::grammar {

class TokenTrie {
 public:
  // token_bytes[id]: the bytes token `id` adds to the text; an empty one is never allowed.
  explicit TokenTrie(const std::vector<std::string>& token_bytes);

  size_t vocab_size() const { return vocab_; }
  size_t node_count() const { return nodes_.size(); }
  // Sets bit id of `mask` (vocab_size() bits, cleared first) for every token whose bytes the
  // automaton can take from `state`, in full.
  void allowed(ByteAutomaton& automaton, uint32_t state, std::vector<uint64_t>& mask) const;

 private:
  struct Node {
    uint32_t first_edge = 0, edge_count = 0;    // edges_[first_edge ...]
    uint32_t first_token = 0, token_count = 0;  // tokens_[first_token ...]: the tokens ending here
  };
  struct Edge {
    uint8_t byte;
    uint32_t child;
  };
  size_t vocab_ = 0;
  std::vector<Node> nodes_;  // nodes_[0]: the root (the empty prefix)
  std::vector<Edge> edges_;
  std::vector<int32_t> tokens_;
};

}  // namespace lockstep::grammar
