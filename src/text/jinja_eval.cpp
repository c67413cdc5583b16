// Rendering a parsed template (text/jinja.hpp) as Jinja2 does:
//   scopes: a for loop's body (each iteration) and a macro's body are scopes of their own, so a
//   `set` inside them is not seen after them (a namespace's attributes are: that is what
//   namespace() is for); `if` opens none;
//   undefined values print as nothing, are false, iterate as nothing and have length 0; any other
//   use (arithmetic, an attribute, an index, a call) is an error naming the undefined name;
//   `loop` holds index, index0, revindex, revindex0, first, last, length, previtem, nextitem,
//   counted over the items a `for ... if` keeps.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "text/jinja.hpp"

namespace lockstep::text::jinja {
namespace {

using Frame = std::map<std::string, Value>;
using Frames = std::vector<std::shared_ptr<Frame>>;

constexpr int max_macro_depth = 64;
// Statements run and loop iterations a render may take: far past any chat template's (one step
// per message and tag), so that a template looping over range() cannot run for hours.
constexpr int64_t max_steps = 1'000'000;
constexpr size_t max_output = size_t{64} << 20;  // bytes of the text, and of any string made
constexpr size_t max_items = 1'000'000;          // items of any list made

[[noreturn]] void undefined_use(const Value& v, int line, const std::string& use) {
  fail(line, (v.s.empty() ? std::string("a value") : "'" + v.s + "'") + " is undefined (" + use + ")");
}

// What one render shares with the macros it calls: the step count, and the objects that may sit
// in a reference cycle, which shared_ptr never frees. A macro holds the scopes it was defined in
// and is stored in the innermost of them (scope -> macro -> closure -> scope), and `set ns.x`
// can put a namespace inside itself. Every other value is built from values that existed before
// it, and a scope is written only while it is the innermost one, when values of deeper scopes are
// out of reach but through a namespace; so every cycle passes through a macro's defining scope or
// a namespace that was written to, and emptying those when the render ends frees everything.
// Nothing outlives a render but its text.
class RenderState {
 public:
  RenderState() = default;
  RenderState(const RenderState&) = delete;
  RenderState& operator=(const RenderState&) = delete;
  ~RenderState() {
    frames_.clear_all();
    namespaces_.clear_all();
  }
  void count_step(int line) {
    if (++steps_ > max_steps) fail(line, "the template runs past " + std::to_string(max_steps) + " steps");
  }
  void macro_defined_in(const std::shared_ptr<Frame>& scope) { frames_.add(scope); }
  void written(const std::shared_ptr<Dict>& ns) { namespaces_.add(ns); }

 private:
  // Weak references, each object once in a row; the entries whose objects are gone are dropped
  // whenever the list has doubled since the last sweep, so that a loop defining a macro on every
  // iteration keeps only the scopes still alive.
  template <class T>
  struct Remembered {
    std::vector<std::weak_ptr<T>> items;
    size_t sweep_at = 64;
    void add(const std::shared_ptr<T>& object) {
      if (!items.empty() && items.back().lock() == object) return;
      if (items.size() >= sweep_at) {
        std::erase_if(items, [](const std::weak_ptr<T>& w) { return w.expired(); });
        sweep_at = std::max<size_t>(64, 2 * items.size());
      }
      items.push_back(object);
    }
    void clear_all() {
      for (const auto& w : items)
        if (auto object = w.lock()) object->clear();
    }
  };

  int64_t steps_ = 0;
  Remembered<Frame> frames_;
  Remembered<Dict> namespaces_;
};

enum class Flow { normal, break_, continue_ };

class Renderer {
 public:
  Renderer(Frames frames, int depth, RenderState* state) : frames_(std::move(frames)), depth_(depth), state_(state) {}

  Flow run(const Body& body, std::string& out) {
    for (const auto& n : body) {
      state_->count_step(n->line);
      const Flow f = exec(*n, out);
      if (f != Flow::normal) return f;
      if (out.size() > max_output) fail(n->line, "the rendered text passes 64 MiB");
    }
    return Flow::normal;
  }

 private:
  Flow exec(const Node& n, std::string& out) {
    switch (n.kind) {
      case Node::Kind::text: out += n.text; return Flow::normal;
      case Node::Kind::output: out += to_str(eval(*n.expr)); return Flow::normal;
      case Node::Kind::if_:
        for (const auto& [cond, body] : n.branches)
          if (!cond || truthy(eval(*cond))) return run(body, out);
        return Flow::normal;
      case Node::Kind::for_: return loop(n, out);
      case Node::Kind::set: {
        Value v = eval(*n.expr);
        if (n.attr.empty()) {
          (*frames_.back())[n.text] = std::move(v);
          return Flow::normal;
        }
        Value ns = lookup(n.text);
        if (!(ns.kind == Value::Kind::dict && ns.is_namespace))
          fail(n.line, "{% set " + n.text + "." + n.attr + " %}: '" + n.text + "' is not a namespace");
        state_->written(ns.dict);
        for (auto& kv : *ns.dict)
          if (kv.first == n.attr) {
            kv.second = std::move(v);
            return Flow::normal;
          }
        ns.dict->emplace_back(n.attr, std::move(v));
        return Flow::normal;
      }
      case Node::Kind::macro: {
        Value m;
        m.kind = Value::Kind::callable;
        const Node* def = &n;
        Frames closure = frames_;
        const int depth = depth_;
        RenderState* state = state_;
        state->macro_defined_in(frames_.back());
        m.fn = std::make_shared<const Callable>(Callable{n.text, [def, closure, depth, state](const Args& args) {
                                                           return call_macro(*def, closure, depth, state, args);
                                                         }});
        (*frames_.back())[n.text] = std::move(m);
        return Flow::normal;
      }
      case Node::Kind::break_: return Flow::break_;
      case Node::Kind::continue_: return Flow::continue_;
    }
    return Flow::normal;
  }

  static Value call_macro(const Node& def, const Frames& closure, int depth, RenderState* state, const Args& args) {
    if (depth >= max_macro_depth) fail(def.line, "macro calls nest deeper than " + std::to_string(max_macro_depth));
    if (args.positional.size() > def.params.size())
      fail(def.line, "macro " + def.text + " takes " + std::to_string(def.params.size()) + " arguments");
    Frames frames = closure;
    frames.push_back(std::make_shared<Frame>());
    Renderer inner(frames, depth + 1, state);
    for (const auto& [k, v] : args.named) {
      bool known = false;
      for (const auto& p : def.params) known = known || p.first == k;
      if (!known) fail(def.line, "macro " + def.text + " has no parameter " + k);
    }
    for (size_t k = 0; k < def.params.size(); ++k) {
      const auto& [pname, pdefault] = def.params[k];
      const Value* given = args.get(k, pname);
      (*frames.back())[pname] = given ? *given : pdefault ? inner.eval(*pdefault) : Value::undefined(pname);
    }
    std::string out;
    inner.run(def.body, out);
    return Value::string(std::move(out));
  }

  Flow loop(const Node& n, std::string& out) {
    const Value seq = eval(*n.expr);
    List all = iterate(seq, n.line);  // an undefined value: nothing, as Jinja2 iterates it
    auto bind = [&](Frame& f, const Value& item) {
      if (n.targets.size() == 1) {
        f[n.targets[0]] = item;
        return;
      }
      const List parts = iterate(item, n.line);
      if (parts.size() != n.targets.size())
        fail(n.line, "cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(n.targets.size()));
      for (size_t k = 0; k < parts.size(); ++k) f[n.targets[k]] = parts[k];
    };
    if (n.filter) {  // `for x in xs if cond`: the loop counts the kept items alone
      List kept;
      for (const Value& item : all) {
        state_->count_step(n.line);
        frames_.push_back(std::make_shared<Frame>());
        bind(*frames_.back(), item);
        const bool keep = truthy(eval(*n.filter));
        frames_.pop_back();
        if (keep) kept.push_back(item);
      }
      all = std::move(kept);
    }
    if (all.empty()) return run_scoped(n.else_body, out);
    const auto count = static_cast<int64_t>(all.size());
    // One `loop` object advanced in place (as Jinja2's is) and one scope cleared per iteration.
    Value info = Value::make_dict({{"index", {}}, {"index0", {}}, {"revindex", {}}, {"revindex0", {}}, {"first", {}},
                                   {"last", {}}, {"length", Value::integer(count)}, {"previtem", {}}, {"nextitem", {}}});
    Dict& fields = *info.dict;
    auto frame = std::make_shared<Frame>();
    frames_.push_back(frame);
    Flow f = Flow::normal;
    for (int64_t k = 0; k < count && f != Flow::break_; ++k) {
      state_->count_step(n.line);
      frame->clear();
      bind(*frame, all[static_cast<size_t>(k)]);
      fields[0].second = Value::integer(k + 1);
      fields[1].second = Value::integer(k);
      fields[2].second = Value::integer(count - k);
      fields[3].second = Value::integer(count - k - 1);
      fields[4].second = Value::boolean(k == 0);
      fields[5].second = Value::boolean(k == count - 1);
      fields[7].second = k > 0 ? all[static_cast<size_t>(k - 1)] : Value::undefined("loop.previtem");
      fields[8].second = k + 1 < count ? all[static_cast<size_t>(k + 1)] : Value::undefined("loop.nextitem");
      (*frame)["loop"] = info;
      f = run(n.body, out);
    }
    frames_.pop_back();
    return Flow::normal;
  }

  Flow run_scoped(const Body& body, std::string& out) {
    frames_.push_back(std::make_shared<Frame>());
    const Flow f = run(body, out);
    frames_.pop_back();
    return f;
  }

  Value lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      const auto found = (*it)->find(name);
      if (found != (*it)->end()) return found->second;
    }
    return Value::undefined(name);
  }

  Args arguments(const Expr& e) {
    Args a;
    for (size_t k = 0; k < e.items.size(); ++k) {
      Value v = eval(*e.items[k]);
      if (e.names[k].empty()) {
        if (!a.named.empty()) fail(e.line, "a positional argument after a keyword argument");
        a.positional.push_back(std::move(v));
      } else {
        a.named.emplace_back(e.names[k], std::move(v));
      }
    }
    return a;
  }

  Value eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::literal: return e.value;
      case Expr::Kind::name: return lookup(e.text);
      case Expr::Kind::list: {
        List items;
        for (const auto& x : e.items) items.push_back(eval(*x));
        Value v = Value::make_list(std::move(items));
        v.is_tuple = e.text == "tuple";
        return v;
      }
      case Expr::Kind::dict: {
        Dict items;
        for (size_t k = 0; k + 1 < e.items.size(); k += 2) {
          const Value key = eval(*e.items[k]);
          if (key.kind != Value::Kind::string) fail(e.line, "dict keys must be strings here");
          Value v = eval(*e.items[k + 1]);
          bool replaced = false;
          for (auto& kv : items)
            if (kv.first == key.s) {
              kv.second = v;
              replaced = true;
            }
          if (!replaced) items.emplace_back(key.s, std::move(v));
        }
        return Value::make_dict(std::move(items));
      }
      case Expr::Kind::attr: return attribute(eval(*e.a), e.text, e.line);
      case Expr::Kind::index: return index(eval(*e.a), eval(*e.b), e.line);
      case Expr::Kind::slice: return slice(e);
      case Expr::Kind::call: {
        Value callee;
        if (e.a->kind == Expr::Kind::attr) {
          const Value self = eval(*e.a->a);
          if (self.is_undefined()) undefined_use(self, e.line, "calling its ." + e.a->text + "()");
          if (auto m = method(self, e.a->text, e.line)) {
            Value v;
            v.kind = Value::Kind::callable;
            v.fn = m;
            callee = v;
          } else {
            callee = attribute(self, e.a->text, e.line);
          }
        } else {
          callee = eval(*e.a);
        }
        if (callee.is_undefined()) undefined_use(callee, e.line, "called");
        if (callee.kind != Value::Kind::callable) fail(e.line, std::string("cannot call ") + kind_name(callee));
        const Args args = arguments(e);
        return callee.fn->call(args);
      }
      case Expr::Kind::filter: {
        const Value v = eval(*e.a);
        const Args args = arguments(e);
        return apply_filter(e.text, v, args, e.line, [line = e.line](const Value& x, const std::string& test, const Args& a) {
          if (!is_test(test)) fail(line, "the test '" + test + "' is not supported");
          return Value::boolean(apply_test(test, x, a, line));
        });
      }
      case Expr::Kind::test: {
        const Value v = eval(*e.a);
        const Args args = arguments(e);
        return Value::boolean(apply_test(e.text, v, args, e.line) != e.negated);
      }
      case Expr::Kind::unary: {
        const Value v = eval(*e.a);
        if (e.text == "not") return Value::boolean(!truthy(v));
        if (v.is_undefined()) undefined_use(v, e.line, "unary " + e.text);
        if (v.kind == Value::Kind::floating) return Value::floating(e.text == "-" ? -v.f : v.f);
        if (v.kind == Value::Kind::integer || v.kind == Value::Kind::boolean) {
          const int64_t x = v.kind == Value::Kind::boolean ? int64_t{v.b} : v.i;
          return Value::integer(e.text == "-" ? -x : x);
        }
        fail(e.line, "unary " + e.text + " of " + kind_name(v));
      }
      case Expr::Kind::binary: return binary(e);
      case Expr::Kind::conditional:
        if (truthy(eval(*e.a))) return eval(*e.b);
        return e.c ? eval(*e.c) : Value::undefined();
    }
    return Value::undefined();
  }

  static Value sized(Value v, int line) {
    if (v.s.size() > max_output) fail(line, "a string past 64 MiB");
    return v;
  }

  static Value attribute(const Value& obj, const std::string& name, int line) {
    if (obj.is_undefined()) undefined_use(obj, line, "reading its ." + name);
    if (obj.kind == Value::Kind::dict) {
      if (!obj.is_namespace)
        if (auto m = method(obj, name, line)) {
          Value v;
          v.kind = Value::Kind::callable;
          v.fn = m;
          return v;
        }
      if (const Value* v = obj.find(name)) return *v;
      return Value::undefined(name);
    }
    if (auto m = method(obj, name, line)) {
      Value v;
      v.kind = Value::Kind::callable;
      v.fn = m;
      return v;
    }
    return Value::undefined(name);
  }

  static Value index(const Value& obj, const Value& key, int line) {
    if (obj.is_undefined()) undefined_use(obj, line, "indexing it");
    if (obj.kind == Value::Kind::dict) {
      if (key.kind == Value::Kind::string)
        if (const Value* v = obj.find(key.s)) return *v;
      return Value::undefined(key.kind == Value::Kind::string ? key.s : to_str(key));
    }
    if ((obj.kind == Value::Kind::list || obj.kind == Value::Kind::string) &&
        (key.kind == Value::Kind::integer || key.kind == Value::Kind::boolean)) {
      int64_t k = key.kind == Value::Kind::boolean ? int64_t{key.b} : key.i;
      if (obj.kind == Value::Kind::list) {
        const auto n = static_cast<int64_t>(obj.list->size());
        if (k < 0) k += n;
        if (k < 0 || k >= n) return Value::undefined();
        return (*obj.list)[static_cast<size_t>(k)];
      }
      const std::vector<uint32_t> cps = code_points(obj.s);
      const auto n = static_cast<int64_t>(cps.size());
      if (k < 0) k += n;
      if (k < 0 || k >= n) return Value::undefined();
      return Value::string(utf8(cps, static_cast<size_t>(k), static_cast<size_t>(k) + 1));
    }
    if (obj.kind == Value::Kind::list || obj.kind == Value::Kind::string)
      fail(line, std::string("an index of ") + kind_name(obj) + " must be an integer, not " + kind_name(key));
    return Value::undefined();
  }

  Value slice(const Expr& e) {
    const Value obj = eval(*e.items[0]);
    if (obj.is_undefined()) undefined_use(obj, e.line, "slicing it");
    auto bound = [&](const ExprPtr& x, bool& given) -> int64_t {
      given = false;
      if (!x) return 0;
      const Value v = eval(*x);
      if (v.kind == Value::Kind::none) return 0;
      if (v.kind != Value::Kind::integer) fail(e.line, std::string("slice bounds must be integers, not ") + kind_name(v));
      given = true;
      return v.i;
    };
    bool has_start, has_stop, has_step;
    int64_t start = bound(e.a, has_start), stop = bound(e.b, has_stop), step = bound(e.c, has_step);
    if (!has_step) step = 1;
    if (step == 0) fail(e.line, "slice step cannot be zero");
    std::vector<uint32_t> cps;
    int64_t n;
    if (obj.kind == Value::Kind::list) {
      n = static_cast<int64_t>(obj.list->size());
    } else if (obj.kind == Value::Kind::string) {
      cps = code_points(obj.s);
      n = static_cast<int64_t>(cps.size());
    } else {
      fail(e.line, std::string("cannot slice ") + kind_name(obj));
    }
    // Python's slice.indices()
    auto clamp = [&](int64_t v, bool given, int64_t dflt) {
      if (!given) return dflt;
      if (v < 0) v += n;
      if (step > 0) return v < 0 ? 0 : v > n ? n : v;
      return v < 0 ? -1 : v >= n ? n - 1 : v;
    };
    start = clamp(start, has_start, step > 0 ? 0 : n - 1);
    stop = clamp(stop, has_stop, step > 0 ? n : -1);
    std::vector<size_t> picks;
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) picks.push_back(static_cast<size_t>(k));
    if (obj.kind == Value::Kind::list) {
      List out;
      for (size_t k : picks) out.push_back((*obj.list)[k]);
      return Value::make_list(std::move(out));
    }
    std::string out;
    for (size_t k : picks) out += utf8(cps, k, k + 1);
    return Value::string(std::move(out));
  }

  Value binary(const Expr& e) {
    const std::string& op = e.text;
    if (op == "and") {
      Value a = eval(*e.a);
      return truthy(a) ? eval(*e.b) : a;
    }
    if (op == "or") {
      Value a = eval(*e.a);
      return truthy(a) ? a : eval(*e.b);
    }
    const Value a = eval(*e.a), b = eval(*e.b);
    if (op == "==") return Value::boolean(equal(a, b));
    if (op == "!=") return Value::boolean(!equal(a, b));
    if (op == "in" || op == "not in") {
      bool found = false;
      if (b.kind == Value::Kind::string) {
        if (a.kind != Value::Kind::string) fail(e.line, std::string("'in <string>' needs a string, not ") + kind_name(a));
        found = b.s.find(a.s) != std::string::npos;
      } else if (b.kind == Value::Kind::dict) {
        found = a.kind == Value::Kind::string && b.find(a.s) != nullptr;
      } else if (b.kind == Value::Kind::list) {
        for (const Value& x : *b.list) found = found || equal(x, a);
      } else if (!b.is_undefined()) {
        fail(e.line, std::string("'in' needs a string, list or dict, not ") + kind_name(b));
      }
      return Value::boolean(found == (op == "in"));
    }
    if (op == "<") return Value::boolean(compare(a, b, e.line) < 0);
    if (op == ">") return Value::boolean(compare(a, b, e.line) > 0);
    if (op == "<=") return Value::boolean(compare(a, b, e.line) <= 0);
    if (op == ">=") return Value::boolean(compare(a, b, e.line) >= 0);
    if (op == "~") return sized(Value::string(to_str(a) + to_str(b)), e.line);
    if (a.is_undefined()) undefined_use(a, e.line, "operator " + op);
    if (b.is_undefined()) undefined_use(b, e.line, "operator " + op);
    if (op == "+") {
      if (a.kind == Value::Kind::string && b.kind == Value::Kind::string) return sized(Value::string(a.s + b.s), e.line);
      if (a.kind == Value::Kind::list && b.kind == Value::Kind::list) {
        if (a.list->size() + b.list->size() > max_items) fail(e.line, "a list of more than a million items");
        List out = *a.list;
        out.insert(out.end(), b.list->begin(), b.list->end());
        return Value::make_list(std::move(out));
      }
    }
    if (op == "*") {
      const Value* seq = a.kind == Value::Kind::string || a.kind == Value::Kind::list ? &a : b.kind == Value::Kind::string || b.kind == Value::Kind::list ? &b : nullptr;
      const Value* times = seq == &a ? &b : &a;
      if (seq && (times->kind == Value::Kind::integer || times->kind == Value::Kind::boolean)) {
        const int64_t n = times->kind == Value::Kind::boolean ? int64_t{times->b} : times->i;
        const size_t unit = seq->kind == Value::Kind::string ? seq->s.size() : seq->list->size();
        const size_t cap = seq->kind == Value::Kind::string ? max_output : max_items;
        if (n > 0 && unit > 0 && static_cast<uint64_t>(n) > cap / unit) fail(e.line, "a repetition too large");
        if (seq->kind == Value::Kind::string) {
          std::string out;
          for (int64_t k = 0; k < n; ++k) out += seq->s;
          return Value::string(std::move(out));
        }
        List out;
        for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq->list->begin(), seq->list->end());
        return Value::make_list(std::move(out));
      }
    }
    if (!a.is_number() || !b.is_number())
      fail(e.line, "operator " + op + " of " + kind_name(a) + " and " + kind_name(b));
    const bool ints = a.kind != Value::Kind::floating && b.kind != Value::Kind::floating;
    const int64_t x = a.kind == Value::Kind::boolean ? int64_t{a.b} : a.i, y = b.kind == Value::Kind::boolean ? int64_t{b.b} : b.i;
    const double fx = a.number(), fy = b.number();
    if (op == "+") return ints ? Value::integer(x + y) : Value::floating(fx + fy);
    if (op == "-") return ints ? Value::integer(x - y) : Value::floating(fx - fy);
    if (op == "*") return ints ? Value::integer(x * y) : Value::floating(fx * fy);
    if (op == "/") {
      if (fy == 0.0) fail(e.line, "division by zero");
      return Value::floating(fx / fy);
    }
    if (op == "//" || op == "%") {
      if (ints) {
        if (y == 0) fail(e.line, "division by zero");
        int64_t q = x / y, r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) {  // Python floors; the remainder takes the divisor's sign
          --q;
          r += y;
        }
        return Value::integer(op == "//" ? q : r);
      }
      if (fy == 0.0) fail(e.line, "division by zero");
      const double q = std::floor(fx / fy);
      return Value::floating(op == "//" ? q : fx - q * fy);
    }
    if (op == "**") {
      if (ints && y >= 0 && y <= 62) {
        int64_t r = 1;
        for (int64_t k = 0; k < y; ++k) r *= x;
        return Value::integer(r);
      }
      fail(e.line, "operator ** is supported for integer powers from 0 to 62 only");
    }
    fail(e.line, "operator " + op + " is not supported");
  }

  Frames frames_;
  int depth_;
  RenderState* state_;  // shared by the macros it calls
};

}  // namespace

std::string render(const Body& body, const std::map<std::string, Value>& context) {
  Frames frames;
  frames.push_back(std::make_shared<Frame>(context));
  frames.push_back(std::make_shared<Frame>());  // the template's own `set`s
  RenderState state;
  Renderer r(std::move(frames), 0, &state);
  std::string out;
  r.run(body, out);
  return out;
}

}  // namespace lockstep::text::jinja
