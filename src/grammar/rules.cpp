// Building rules and checking that the matcher can run them (rules.hpp).
#include "grammar/rules.hpp"

#include <functional>

#include "lockstep/error.hpp"

namespace lockstep::grammar {

uint32_t RulesBuilder::rule(const std::string& name) {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return static_cast<uint32_t>(i);
  names_.push_back(name);
  defined_.push_back(false);
  bodies_.emplace_back();
  return static_cast<uint32_t>(names_.size() - 1);
}

uint32_t RulesBuilder::fresh(const std::string& base) {
  names_.push_back(base + "-" + std::to_string(++counter_));
  defined_.push_back(false);
  bodies_.emplace_back();
  return static_cast<uint32_t>(names_.size() - 1);
}

void RulesBuilder::define(uint32_t rule, std::vector<Sequence> alternatives) {
  defined_[rule] = true;
  bodies_[rule] = std::move(alternatives);
}

Element RulesBuilder::bytes(const ByteSet& set) {
  for (size_t i = 0; i < sets_.size(); ++i)
    if (sets_[i] == set) return Element{Element::Kind::bytes, static_cast<uint32_t>(i)};
  sets_.push_back(set);
  return Element{Element::Kind::bytes, static_cast<uint32_t>(sets_.size() - 1)};
}

Sequence RulesBuilder::repeat(const Sequence& item, int64_t min, int64_t max, const std::string& base) {
  Sequence out;
  for (int64_t i = 0; i < min; ++i) out.insert(out.end(), item.begin(), item.end());
  if (max < 0) {  // rest ::= item rest | (empty)
    const uint32_t rest = fresh(base);
    Sequence again = item;
    again.push_back(ref(rest));
    define(rest, {again, Sequence{}});
    out.push_back(ref(rest));
  } else if (max > min) {  // up to (max - min) more: opt_k ::= item opt_(k-1) | (empty)
    uint32_t inner = fresh(base);
    define(inner, {item, Sequence{}});
    for (int64_t k = 1; k < max - min; ++k) {
      const uint32_t outer = fresh(base);
      Sequence more = item;
      more.push_back(ref(inner));
      define(outer, {more, Sequence{}});
      inner = outer;
    }
    out.push_back(ref(inner));
  }
  return out;
}

Rules RulesBuilder::finish(const std::string& root) {
  Rules r;
  r.sets = sets_;
  bool found = false;
  for (size_t i = 0; i < names_.size(); ++i) {
    if (names_[i] == root) {
      r.root = static_cast<uint32_t>(i);
      found = true;
    }
  }
  if (!found) throw Error(ErrorKind::invalid_argument, "the grammar has no rule '" + root + "' to start from");
  for (size_t i = 0; i < names_.size(); ++i)
    if (!defined_[i]) throw Error(ErrorKind::invalid_argument, "the grammar uses rule '" + names_[i] + "' but never defines it");
  // Alternatives that can match no text (an empty class, a rule that never ends) are dropped, so
  // that every parse the matcher keeps can still finish: a token is allowed only where the
  // grammar can go on to a whole match.
  std::vector<bool> productive(names_.size(), false);
  const auto alt_productive = [&](const Sequence& alt) {
    for (const Element& e : alt)
      if (e.kind == Element::Kind::bytes ? !sets_[e.index].any() : !productive[e.index]) return false;
    return true;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < names_.size(); ++i)
      for (const Sequence& alt : bodies_[i])
        if (!productive[i] && alt_productive(alt)) productive[i] = changed = true;
  }
  for (auto& body : bodies_) std::erase_if(body, [&](const Sequence& alt) { return !alt_productive(alt); });
  for (size_t i = 0; i < names_.size(); ++i) {
    Rule rule{names_[i], {}};
    for (const Sequence& alt : bodies_[i]) {
      rule.alternatives.push_back(static_cast<uint32_t>(r.elements.size()));
      r.elements.insert(r.elements.end(), alt.begin(), alt.end());
      r.elements.push_back(Element{});
    }
    r.rules.push_back(std::move(rule));
  }
  check_rules(r);
  return r;
}

void check_rules(const Rules& r) {
  const size_t n = r.rules.size();
  // Nullable (matches the empty text) and productive (matches some text), as fixpoints.
  std::vector<bool> nullable(n, false), productive(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < n; ++i) {
      for (const uint32_t start : r.rules[i].alternatives) {
        bool all_nullable = true, all_productive = true;
        for (uint32_t p = start; r.elements[p].kind != Element::Kind::end; ++p) {
          const Element& e = r.elements[p];
          if (e.kind == Element::Kind::bytes) {
            all_nullable = false;
            all_productive &= r.sets[e.index].any();
          } else {
            all_nullable &= nullable[e.index];
            all_productive &= productive[e.index];
          }
        }
        if (all_nullable && !nullable[i]) nullable[i] = changed = true;
        if (all_productive && !productive[i]) productive[i] = changed = true;
      }
    }
  }
  if (!productive[r.root])
    throw Error(ErrorKind::invalid_argument, "the grammar's rule '" + r.rules[r.root].name + "' can match no text at all");
  // Left recursion: a rule reachable from itself through rules at the start of alternatives
  // (past nullable ones), with no byte in between.
  std::vector<uint8_t> mark(n, 0);  // 0 unseen, 1 on the path, 2 done
  std::function<void(uint32_t)> visit = [&](uint32_t i) {
    mark[i] = 1;
    for (const uint32_t start : r.rules[i].alternatives) {
      for (uint32_t p = start; r.elements[p].kind == Element::Kind::rule; ++p) {
        const uint32_t j = r.elements[p].index;
        if (mark[j] == 1)
          throw Error(ErrorKind::invalid_argument, "the grammar's rule '" + r.rules[j].name +
                                                       "' is left-recursive (it can reach itself without matching a "
                                                       "byte, through '" + r.rules[i].name + "')");
        if (mark[j] == 0) visit(j);
        if (!nullable[j]) break;
      }
    }
    mark[i] = 2;
  };
  for (uint32_t i = 0; i < n; ++i)
    if (mark[i] == 0) visit(i);
}

}  // namespace lockstep::grammar
