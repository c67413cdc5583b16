// The vocabulary trie and the walk that builds a grammar state's token mask (token_trie.hpp).
#include "grammar/token_trie.hpp"

#include <algorithm>
#include <numeric>

namespace lockstep::grammar {

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes) : vocab_(token_bytes.size()) {
  // The ids sorted by their bytes: each node's tokens and subtrees are then consecutive runs.
  std::vector<int32_t> ids;
  for (size_t i = 0; i < token_bytes.size(); ++i)
    if (!token_bytes[i].empty()) ids.push_back(static_cast<int32_t>(i));
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return token_bytes[static_cast<size_t>(a)] < token_bytes[static_cast<size_t>(b)];
  });
  // Breadth-first: each pending node is a run [lo, hi) of ids sharing their first `depth` bytes.
  struct Pending {
    size_t lo, hi, depth;
  };
  std::vector<Pending> queue{{0, ids.size(), 0}};
  nodes_.emplace_back();
  for (size_t q = 0; q < queue.size(); ++q) {
    auto [lo, hi, depth] = queue[q];
    Node& node = nodes_[q];
    node.first_token = static_cast<uint32_t>(tokens_.size());
    while (lo < hi && token_bytes[static_cast<size_t>(ids[lo])].size() == depth) tokens_.push_back(ids[lo++]);
    node.token_count = static_cast<uint32_t>(tokens_.size()) - node.first_token;
    node.first_edge = static_cast<uint32_t>(edges_.size());
    while (lo < hi) {
      const uint8_t b = static_cast<uint8_t>(token_bytes[static_cast<size_t>(ids[lo])][depth]);
      size_t end = lo;
      while (end < hi && static_cast<uint8_t>(token_bytes[static_cast<size_t>(ids[end])][depth]) == b) ++end;
      edges_.push_back(Edge{b, static_cast<uint32_t>(queue.size())});
      queue.push_back(Pending{lo, end, depth + 1});
      nodes_.emplace_back();
      lo = end;
    }
    nodes_[q].edge_count = static_cast<uint32_t>(edges_.size()) - nodes_[q].first_edge;
  }
}

void TokenTrie::allowed(ByteAutomaton& automaton, uint32_t state, std::vector<uint64_t>& mask) const {
  mask.assign((vocab_ + 63) / 64, 0);
  struct Visit {
    uint32_t node, state;
  };
  std::vector<Visit> todo{{0, state}};
  while (!todo.empty()) {
    const Visit v = todo.back();
    todo.pop_back();
    const Node& n = nodes_[v.node];
    for (uint32_t e = n.first_edge; e < n.first_edge + n.edge_count; ++e) {
      const Edge edge = edges_[e];
      if (!automaton.first(v.state).test(edge.byte)) continue;
      const uint32_t next = automaton.step(v.state, edge.byte);
      if (next == ByteAutomaton::kDead) continue;
      const Node& child = nodes_[edge.child];
      for (uint32_t t = child.first_token; t < child.first_token + child.token_count; ++t) {
        const auto id = static_cast<uint32_t>(tokens_[t]);
        mask[id / 64] |= uint64_t{1} << (id % 64);
      }
      if (child.edge_count > 0) todo.push_back(Visit{edge.child, next});
    }
  }
}

}  // namespace lockstep::grammar
