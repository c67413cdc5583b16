// The compiled form of a grammar, shared by every front end's notation (GBNF, JSON Schema): rules
// of alternatives, each a sequence of elements, each element a set of bytes or a reference to a
// rule. Characters are compiled to their UTF-8 bytes (utf8_ranges.hpp), so the matcher
// (automaton.hpp) works on bytes alone and a token may end anywhere inside a character.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::grammar {

using ByteSet = std::bitset<256>;

struct Element {
  enum class Kind : uint8_t { bytes, rule, end };
  Kind kind = Kind::end;
  uint32_t index = 0;  // bytes: Rules::sets[index]; rule: Rules::rules[index]; end: unused
};

struct Rule {
  std::string name;
  // Each alternative: the index of its first element in Rules::elements; it runs to an `end`.
  std::vector<uint32_t> alternatives;
};

struct Rules {
  std::vector<Element> elements;
  std::vector<ByteSet> sets;
  std::vector<Rule> rules;
  uint32_t root = 0;
};

// A sequence of elements under construction (no `end`).
using Sequence = std::vector<Element>;

// Builds Rules: rules are named when first referenced and defined once; generated rules (groups,
// repetitions, character classes) get fresh names "<base>-<n>".
class RulesBuilder {
 public:
  uint32_t rule(const std::string& name);  // the id of `name`, creating it undefined
  uint32_t fresh(const std::string& base);  // a new rule named after `base`
  bool defined(uint32_t rule) const { return defined_[rule]; }
  const std::string& name(uint32_t rule) const { return names_[rule]; }
  void define(uint32_t rule, std::vector<Sequence> alternatives);
  Element bytes(const ByteSet& set);
  static Element ref(uint32_t rule) { return Element{Element::Kind::rule, rule}; }
  // `item` repeated between `min` and `max` times (max < 0: no bound), as elements to append
  // (generated rules: right recursion, so the matcher's stacks stay flat).
  Sequence repeat(const Sequence& item, int64_t min, int64_t max, const std::string& base);
  // The rules laid out, with `root` as the start. Throws Error naming an undefined rule.
  Rules finish(const std::string& root);
  size_t rule_count() const { return names_.size(); }

 private:
  std::vector<std::string> names_;
  std::vector<bool> defined_;
  std::vector<std::vector<Sequence>> bodies_;
  std::vector<ByteSet> sets_;
  size_t counter_ = 0;
};

// Checks that the matcher can run the rules: no rule reaches itself without a byte in between
// (left recursion; the matcher would expand it forever), and the root matches some text. Throws
// Error naming the rule.
void check_rules(const Rules& rules);

}  // namespace lockstep::grammar
