// The lazily built byte automaton (automaton.hpp).
#include "grammar/automaton.hpp"

#include <algorithm>
#include <string>

#include "lockstep/error.hpp"

namespace lockstep::grammar {

size_t ByteAutomaton::VectorHash::operator()(const std::vector<uint32_t>& v) const {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ v.size();
  for (const uint32_t x : v) h = (h ^ x) * 0x100000001B3ull + (h >> 29);
  return static_cast<size_t>(h);
}

ByteAutomaton::ByteAutomaton(std::shared_ptr<const Rules> rules) : rules_(std::move(rules)) {
  std::vector<uint32_t> stacks;
  begin_expansion();
  for (const uint32_t alt : rules_->rules[rules_->root].alternatives) expand(alt, kEmptyStack, stacks);
  start_ = state_of(std::move(stacks));
}

uint32_t ByteAutomaton::node(uint32_t position, uint32_t parent) {
  const uint64_t key = static_cast<uint64_t>(position) << 32 | parent;
  const auto [it, inserted] = node_ids_.emplace(key, static_cast<uint32_t>(nodes_.size()));
  if (inserted) nodes_.push_back(Node{position, parent});
  return it->second;
}

void ByteAutomaton::expand(uint32_t position, uint32_t parent, std::vector<uint32_t>& out) {
  if (!expanded_.insert(static_cast<uint64_t>(position) << 32 | parent).second) return;
  const Element& e = rules_->elements[position];
  switch (e.kind) {
    case Element::Kind::bytes:
      out.push_back(node(position, parent));
      return;
    case Element::Kind::end:  // this alternative is done: the enclosing rule goes on
      if (parent == kEmptyStack) {
        out.push_back(kEmptyStack);
      } else {
        const Node p = nodes_[parent];
        expand(p.position, p.parent, out);
      }
      return;
    case Element::Kind::rule: {
      // Where this rule's caller goes on after it; nothing to push when that is the end of an
      // alternative (a tail call: right recursion keeps the stack flat).
      const uint32_t after = position + 1;
      const uint32_t cont = rules_->elements[after].kind == Element::Kind::end && parent != kEmptyStack
                                ? parent
                                : node(after, parent);
      // A tail call at the bottom leaves an `end` node over kEmptyStack: it expands to accept.
      for (const uint32_t alt : rules_->rules[e.index].alternatives) {
        if (rules_->elements[alt].kind == Element::Kind::end) {  // an empty alternative
          const Node c = nodes_[cont];
          expand(c.position, c.parent, out);
        } else {
          expand(alt, cont, out);
        }
      }
      return;
    }
  }
}

uint32_t ByteAutomaton::state_of(std::vector<uint32_t> stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  if (stacks.empty()) return kDead;
  if (stacks.size() > kMaxStacks)
    throw Error(ErrorKind::invalid_argument,
                "grammar: more than " + std::to_string(kMaxStacks) +
                    " parses of the text so far at once: the grammar is too ambiguous here (a rule that may match "
                    "nothing, repeated inside itself?)");
  const auto found = state_ids_.find(stacks);
  if (found != state_ids_.end()) return found->second;
  State s;
  s.next.fill(kUnknown);
  for (const uint32_t id : stacks) {
    if (id == kEmptyStack) {
      s.accepting = true;
    } else {
      s.first |= rules_->sets[rules_->elements[nodes_[id].position].index];
    }
  }
  s.stacks = stacks;
  const uint32_t id = static_cast<uint32_t>(states_.size());
  states_.push_back(std::move(s));
  state_ids_.emplace(std::move(stacks), id);
  return id;
}

void ByteAutomaton::compute_row(uint32_t state) {
  const std::vector<uint32_t> stacks = states_[state].stacks;  // states_ grows below
  std::array<uint32_t, 256> row;
  row.fill(kDead);
  if (stacks.size() <= 64) {
    // Each byte's signature: which stacks take it. Equal signatures, equal next states.
    std::array<uint64_t, 256> signature{};
    for (size_t k = 0; k < stacks.size(); ++k) {
      if (stacks[k] == kEmptyStack) continue;
      const ByteSet& set = rules_->sets[rules_->elements[nodes_[stacks[k]].position].index];
      for (unsigned b = 0; b < 256; ++b)
        if (set.test(b)) signature[b] |= uint64_t{1} << k;
    }
    std::vector<std::pair<uint64_t, uint32_t>> seen;  // (signature, next state): a few groups
    for (unsigned b = 0; b < 256; ++b) {
      if (signature[b] == 0) continue;
      const auto known = std::find_if(seen.begin(), seen.end(), [&](const auto& p) { return p.first == signature[b]; });
      if (known != seen.end()) {
        row[b] = known->second;
      } else {
        row[b] = compute_step(stacks, static_cast<uint8_t>(b));
        seen.emplace_back(signature[b], row[b]);
      }
    }
  } else {
    for (unsigned b = 0; b < 256; ++b)
      if (states_[state].first.test(b)) row[b] = compute_step(stacks, static_cast<uint8_t>(b));
  }
  states_[state].next = row;
}

uint32_t ByteAutomaton::compute_step(const std::vector<uint32_t>& stacks, uint8_t byte) {
  std::vector<uint32_t> out;
  begin_expansion();
  for (const uint32_t id : stacks) {
    if (id == kEmptyStack) continue;
    const Node n = nodes_[id];
    if (!rules_->sets[rules_->elements[n.position].index].test(byte)) continue;
    expand(n.position + 1, n.parent, out);
  }
  return state_of(std::move(out));
}

uint32_t ByteAutomaton::reset(uint32_t keep) {
  // The kept state's stacks, read out as position lists, then interned afresh.
  std::vector<std::vector<uint32_t>> lists;
  for (const uint32_t id : states_[keep].stacks) {
    std::vector<uint32_t> list;  // bottom first
    for (uint32_t n = id; n != kEmptyStack; n = nodes_[n].parent) list.push_back(nodes_[n].position);
    std::reverse(list.begin(), list.end());
    lists.push_back(std::move(list));
  }
  nodes_.clear();
  node_ids_.clear();
  states_.clear();
  state_ids_.clear();
  std::vector<uint32_t> stacks;
  for (const auto& list : lists) {
    uint32_t top = kEmptyStack;
    for (const uint32_t position : list) top = node(position, top);
    stacks.push_back(top);
  }
  std::vector<uint32_t> initial;
  begin_expansion();
  for (const uint32_t alt : rules_->rules[rules_->root].alternatives) expand(alt, kEmptyStack, initial);
  const uint32_t kept = state_of(std::move(stacks));
  start_ = state_of(std::move(initial));
  return kept;
}

}  // namespace lockstep::grammar
