// The filters, tests, methods and globals the interpreter knows (text/jinja.hpp), each as Jinja2
// (and Python, for methods) defines it, over the values chat templates see: strings, numbers,
// lists and dicts of messages. The name lists are what the load-time check accepts; anything
// else is refused when the template is read. upper/lower/title/capitalize change ASCII letters
// only (docs/FORMAT.md, "The chat template").
#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "text/jinja.hpp"

namespace lockstep::text::jinja {
namespace {

const std::set<std::string, std::less<>> filter_names = {
    "abs",  "capitalize", "count", "d",     "default", "first",   "float",      "int",       "items",
    "join", "last",       "length", "list", "lower",   "map",     "rejectattr", "replace",   "reverse",
    "safe", "selectattr", "string", "title", "tojson", "trim",    "upper"};
const std::set<std::string, std::less<>> test_names = {
    "boolean", "callable", "defined", "divisibleby", "eq",    "equalto", "even",   "false", "float",
    "ge",      "gt",       "in",      "integer",     "iterable", "le",   "lower",  "lt",    "mapping",
    "ne",      "none",     "number",  "odd",         "sequence", "string", "true", "undefined", "upper"};
const std::set<std::string, std::less<>> method_names = {
    "capitalize", "endswith", "get",   "items", "join",  "keys",   "lower",     "lstrip",
    "replace",    "rstrip",   "split", "startswith", "strip", "title", "upper", "values"};

const std::string& need_string(const Value& v, const char* what, int line) {
  if (v.kind != Value::Kind::string) fail(line, std::string(what) + " needs a string, not " + kind_name(v));
  return v.s;
}

int64_t need_int(const Value& v, const char* what, int line) {
  if (v.kind == Value::Kind::integer) return v.i;
  if (v.kind == Value::Kind::boolean) return v.b;
  fail(line, std::string(what) + " needs an integer, not " + kind_name(v));
}

std::string ascii_map(std::string s, int (*f)(int)) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(f(static_cast<unsigned char>(c)));
  return s;
}

std::string capitalize(const std::string& s) {
  std::string out = ascii_map(s, [](int c) { return std::tolower(c); });
  if (!out.empty() && static_cast<unsigned char>(out[0]) < 0x80) out[0] = static_cast<char>(std::toupper(out[0]));
  return out;
}

std::string title(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x80) {
      prev_cased = false;
      continue;
    }
    if (std::isalpha(u)) {
      c = static_cast<char>(prev_cased ? std::tolower(u) : std::toupper(u));
      prev_cased = true;
    } else {
      prev_cased = false;
    }
  }
  return out;
}

// str.strip / lstrip / rstrip: Python's whitespace, or the code points of `chars`.
std::string strip(const std::string& s, const Value* chars, bool left, bool right, int line) {
  const std::vector<uint32_t> cps = code_points(s);
  std::vector<uint32_t> set;
  const bool by_chars = chars && chars->kind != Value::Kind::none && !chars->is_undefined();
  if (by_chars) set = code_points(need_string(*chars, "strip(chars)", line));
  auto drop = [&](uint32_t cp) {
    return by_chars ? std::find(set.begin(), set.end(), cp) != set.end() : is_py_space(cp);
  };
  size_t from = 0, to = cps.size();
  if (left)
    while (from < to && drop(cps[from])) ++from;
  if (right)
    while (to > from && drop(cps[to - 1])) --to;
  return utf8(cps, from, to);
}

Value split(const std::string& s, const Value* sep, const Value* maxsplit, int line) {
  int64_t limit = maxsplit && !maxsplit->is_undefined() ? need_int(*maxsplit, "split(maxsplit)", line) : -1;
  List out;
  if (!sep || sep->kind == Value::Kind::none || sep->is_undefined()) {  // runs of whitespace
    const std::vector<uint32_t> cps = code_points(s);
    size_t k = 0;
    while (k < cps.size()) {
      while (k < cps.size() && is_py_space(cps[k])) ++k;
      if (k == cps.size()) break;
      if (limit == 0) {
        size_t end = cps.size();
        while (end > k && is_py_space(cps[end - 1])) --end;
        out.push_back(Value::string(utf8(cps, k, end)));
        break;
      }
      size_t e = k;
      while (e < cps.size() && !is_py_space(cps[e])) ++e;
      out.push_back(Value::string(utf8(cps, k, e)));
      k = e;
      if (limit > 0) --limit;
    }
    return Value::make_list(std::move(out));
  }
  const std::string& d = need_string(*sep, "split(sep)", line);
  if (d.empty()) fail(line, "split() with an empty separator");
  size_t at = 0;
  for (;;) {
    const size_t hit = limit == 0 ? std::string::npos : s.find(d, at);
    if (hit == std::string::npos) {
      out.push_back(Value::string(s.substr(at)));
      break;
    }
    out.push_back(Value::string(s.substr(at, hit - at)));
    at = hit + d.size();
    if (limit > 0) --limit;
  }
  return Value::make_list(std::move(out));
}

std::string replace(const std::string& s, const Value& old_v, const Value& new_v, const Value* count, int line) {
  const std::string& from = need_string(old_v, "replace(old)", line);
  const std::string& to = need_string(new_v, "replace(new)", line);
  int64_t left = count && !count->is_undefined() && count->kind != Value::Kind::none ? need_int(*count, "replace(count)", line) : -1;
  if (from.empty()) {  // Python inserts `to` between code points (and at both ends)
    const std::vector<uint32_t> cps = code_points(s);
    std::string out;
    for (size_t k = 0; k <= cps.size(); ++k) {
      if (left != 0) {
        out += to;
        if (left > 0) --left;
      }
      out += utf8(cps, k, k + 1);
    }
    return out;
  }
  std::string out;
  size_t at = 0;
  while (left != 0) {
    const size_t hit = s.find(from, at);
    if (hit == std::string::npos) break;
    out.append(s, at, hit - at);
    out += to;
    at = hit + from.size();
    if (left > 0) --left;
  }
  out.append(s, at, std::string::npos);
  return out;
}

bool affix(const std::string& s, const Value& what, bool start, int line) {
  auto one = [&](const Value& v) {
    const std::string& a = need_string(v, start ? "startswith()" : "endswith()", line);
    return a.size() <= s.size() && (start ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0);
  };
  if (what.kind == Value::Kind::list) return std::any_of(what.list->begin(), what.list->end(), one);
  return one(what);
}

int64_t length(const Value& v, int line) {
  switch (v.kind) {
    case Value::Kind::undefined: return 0;
    case Value::Kind::string: return static_cast<int64_t>(code_points(v.s).size());
    case Value::Kind::list: return static_cast<int64_t>(v.list->size());
    case Value::Kind::dict: return static_cast<int64_t>(v.dict->size());
    default: fail(line, std::string("length of ") + kind_name(v));
  }
}

// Iterating a value as a for loop does: a list's items, a dict's keys, a string's characters.
List items_of(const Value& v, int line) {
  switch (v.kind) {
    case Value::Kind::undefined: return {};
    case Value::Kind::list: return *v.list;
    case Value::Kind::dict: {
      List keys;
      for (const auto& kv : *v.dict) keys.push_back(Value::string(kv.first));
      return keys;
    }
    case Value::Kind::string: {
      const std::vector<uint32_t> cps = code_points(v.s);
      List chars;
      for (size_t k = 0; k < cps.size(); ++k) chars.push_back(Value::string(utf8(cps, k, k + 1)));
      return chars;
    }
    default: fail(line, std::string("cannot iterate over ") + kind_name(v));
  }
}

Value dict_items(const Value& v) {
  List out;
  for (const auto& [k, x] : *v.dict) {
    out.push_back(Value::make_list({Value::string(k), x}));
    out.back().is_tuple = true;
  }
  return Value::make_list(std::move(out));
}

// An attribute of an item, as selectattr/map read it (a dict's key; undefined when missing).
Value attribute(const Value& item, const std::string& name) {
  if (const Value* v = item.find(name)) return *v;
  return Value::undefined(name);
}

Value bound(std::string name, std::function<Value(const Args&)> f) {
  Value v;
  v.kind = Value::Kind::callable;
  v.fn = std::make_shared<const Callable>(Callable{std::move(name), std::move(f)});
  return v;
}

}  // namespace

List iterate(const Value& v, int line) { return items_of(v, line); }

bool is_filter(std::string_view name) { return filter_names.count(name) > 0; }
bool is_test(std::string_view name) { return test_names.count(name) > 0; }
bool is_method(std::string_view name) { return method_names.count(name) > 0; }

Value apply_filter(const std::string& name, const Value& value, const Args& args, int line,
                   const std::function<Value(const Value&, const std::string&, const Args&)>& run_test) {
  const Value* a0 = args.get(0, "");
  if (name == "trim") return Value::string(strip(to_str(value), args.get(0, "chars"), true, true, line));
  if (name == "tojson") {
    for (const auto& [k, v] : args.named)
      if (k != "indent") fail(line, "tojson(" + k + "=...) is not supported");
    const Value* indent = args.get(0, "indent");
    const int n = indent && indent->kind != Value::Kind::none ? static_cast<int>(need_int(*indent, "tojson(indent)", line)) : -1;
    if (value.is_undefined()) fail(line, "tojson of an undefined value");
    return Value::string(to_json(value, n));
  }
  if (name == "length" || name == "count") return Value::integer(length(value, line));
  if (name == "upper") return Value::string(ascii_map(to_str(value), [](int c) { return std::toupper(c); }));
  if (name == "lower") return Value::string(ascii_map(to_str(value), [](int c) { return std::tolower(c); }));
  if (name == "capitalize") return Value::string(capitalize(to_str(value)));
  if (name == "title") return Value::string(title(to_str(value)));
  if (name == "default" || name == "d") {
    const Value* fallback = args.get(0, "default_value");
    const Value* boolean = args.get(1, "boolean");
    const bool use = value.is_undefined() || (boolean && truthy(*boolean) && !truthy(value));
    return use ? (fallback ? *fallback : Value::string("")) : value;
  }
  if (name == "string") return Value::string(to_str(value));
  if (name == "safe") return value;
  if (name == "list") return Value::make_list(items_of(value, line));
  if (name == "items") {
    if (value.is_undefined()) return Value::make_list();
    if (value.kind != Value::Kind::dict) fail(line, std::string("items of ") + kind_name(value));
    return dict_items(value);
  }
  if (name == "first" || name == "last") {
    const List all = items_of(value, line);
    if (all.empty()) return Value::undefined();
    return name == "first" ? all.front() : all.back();
  }
  if (name == "reverse") {
    if (value.kind == Value::Kind::string) {
      std::vector<uint32_t> cps = code_points(value.s);
      std::reverse(cps.begin(), cps.end());
      return Value::string(utf8(cps, 0, cps.size()));
    }
    List all = items_of(value, line);
    std::reverse(all.begin(), all.end());
    return Value::make_list(std::move(all));
  }
  if (name == "join") {
    const Value* sep = args.get(0, "d");
    const Value* attr = args.get(1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& item : items_of(value, line)) {
      if (!first) out += sep ? to_str(*sep) : "";
      first = false;
      out += to_str(attr ? attribute(item, to_str(*attr)) : item);
    }
    return Value::string(out);
  }
  if (name == "replace") {
    if (!a0 || !args.get(1, "new")) fail(line, "replace needs the old and new strings");
    return Value::string(replace(to_str(value), *args.get(0, "old"), *args.get(1, "new"), args.get(2, "count"), line));
  }
  if (name == "int") {
    if (value.kind == Value::Kind::integer) return value;
    if (value.kind == Value::Kind::boolean) return Value::integer(value.b);
    if (value.kind == Value::Kind::floating && std::isfinite(value.f)) return Value::integer(static_cast<int64_t>(value.f));
    if (value.kind == Value::Kind::string) {
      try {
        size_t used = 0;
        const int64_t n = std::stoll(value.s, &used);
        if (used == value.s.size()) return Value::integer(n);
      } catch (const std::exception&) {
      }
    }
    const Value* fallback = args.get(0, "default");
    return fallback ? *fallback : Value::integer(0);
  }
  if (name == "float") {
    if (value.is_number()) return Value::floating(value.number());
    if (value.kind == Value::Kind::string) {
      try {
        size_t used = 0;
        const double x = std::stod(value.s, &used);
        if (used == value.s.size()) return Value::floating(x);
      } catch (const std::exception&) {
      }
    }
    const Value* fallback = args.get(0, "default");
    return fallback ? *fallback : Value::floating(0.0);
  }
  if (name == "abs") {
    if (value.kind == Value::Kind::integer) return Value::integer(value.i < 0 ? -value.i : value.i);
    if (value.kind == Value::Kind::floating) return Value::floating(std::fabs(value.f));
    fail(line, std::string("abs of ") + kind_name(value));
  }
  if (name == "selectattr" || name == "rejectattr") {
    if (!a0) fail(line, name + " needs an attribute name");
    const std::string attr = to_str(*a0);
    List out;
    for (const Value& item : items_of(value, line)) {
      const Value field = attribute(item, attr);
      bool keep;
      if (args.positional.size() >= 2) {
        Args rest;
        rest.positional.assign(args.positional.begin() + 2, args.positional.end());
        keep = truthy(run_test(field, to_str(args.positional[1]), rest));
      } else {
        keep = truthy(field);
      }
      if (keep == (name == "selectattr")) out.push_back(item);
    }
    return Value::make_list(std::move(out));
  }
  if (name == "map") {
    const Value* attr = args.get(99, "attribute");
    List out;
    for (const Value& item : items_of(value, line)) {
      if (attr) {
        Value field = attribute(item, to_str(*attr));
        const Value* fallback = args.get(99, "default");
        out.push_back(field.is_undefined() && fallback ? *fallback : field);
      } else {
        if (!a0) fail(line, "map needs a filter name or attribute=");
        Args rest;
        rest.positional.assign(args.positional.begin() + 1, args.positional.end());
        const std::string f = to_str(*a0);
        if (!is_filter(f) || f == "map") fail(line, "map('" + f + "') is not supported");
        out.push_back(apply_filter(f, item, rest, line, run_test));
      }
    }
    return Value::make_list(std::move(out));
  }
  fail(line, "the filter '" + name + "' is not supported");
}

bool apply_test(const std::string& name, const Value& v, const Args& args, int line) {
  const Value* a0 = args.get(0, "");
  auto need_arg = [&]() -> const Value& {
    if (!a0) fail(line, "the test '" + name + "' needs an argument");
    return *a0;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.kind == Value::Kind::none;
  if (name == "string") return v.kind == Value::Kind::string;
  if (name == "number") return v.kind == Value::Kind::integer || v.kind == Value::Kind::floating || v.kind == Value::Kind::boolean;
  if (name == "integer") return v.kind == Value::Kind::integer;
  if (name == "float") return v.kind == Value::Kind::floating;
  if (name == "boolean") return v.kind == Value::Kind::boolean;
  if (name == "true") return v.kind == Value::Kind::boolean && v.b;
  if (name == "false") return v.kind == Value::Kind::boolean && !v.b;
  if (name == "mapping") return v.kind == Value::Kind::dict && !v.is_namespace;
  if (name == "iterable") return v.kind == Value::Kind::list || v.kind == Value::Kind::string || (v.kind == Value::Kind::dict && !v.is_namespace);
  if (name == "sequence") return v.kind == Value::Kind::list || v.kind == Value::Kind::string || (v.kind == Value::Kind::dict && !v.is_namespace);
  if (name == "callable") return v.kind == Value::Kind::callable;
  if (name == "odd" || name == "even") {
    const int64_t n = need_int(v, name.c_str(), line);
    return ((n % 2) != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    const int64_t d = need_int(need_arg(), "divisibleby", line);
    if (d == 0) fail(line, "divisibleby(0)");
    return need_int(v, "divisibleby", line) % d == 0;
  }
  if (name == "eq" || name == "equalto") return equal(v, need_arg());
  if (name == "ne") return !equal(v, need_arg());
  if (name == "lt") return compare(v, need_arg(), line) < 0;
  if (name == "le") return compare(v, need_arg(), line) <= 0;
  if (name == "gt") return compare(v, need_arg(), line) > 0;
  if (name == "ge") return compare(v, need_arg(), line) >= 0;
  if (name == "in") {
    const Value& c = need_arg();
    if (c.kind == Value::Kind::string) return c.s.find(need_string(v, "in", line)) != std::string::npos;
    for (const Value& x : items_of(c, line))
      if (equal(x, v)) return true;
    return false;
  }
  if (name == "lower" || name == "upper") {
    if (v.kind != Value::Kind::string) return false;
    bool cased = false;
    for (char c : v.s) {
      const auto u = static_cast<unsigned char>(c);
      if (std::isalpha(u)) {
        cased = true;
        if (name == "lower" ? std::isupper(u) : std::islower(u)) return false;
      }
    }
    return cased;
  }
  fail(line, "the test '" + name + "' is not supported");
}

std::shared_ptr<const Callable> method(const Value& self, const std::string& name, int line) {
  Value m;
  if (self.kind == Value::Kind::string) {
    const std::string s = self.s;
    if (name == "startswith" || name == "endswith")
      m = bound(name, [s, name, line](const Args& a) {
        if (!a.get(0, "")) fail(line, name + "() needs an argument");
        return Value::boolean(affix(s, *a.get(0, ""), name == "startswith", line));
      });
    else if (name == "strip" || name == "lstrip" || name == "rstrip")
      m = bound(name, [s, name, line](const Args& a) {
        return Value::string(strip(s, a.get(0, "chars"), name != "rstrip", name != "lstrip", line));
      });
    else if (name == "split")
      m = bound(name, [s, line](const Args& a) { return split(s, a.get(0, "sep"), a.get(1, "maxsplit"), line); });
    else if (name == "replace")
      m = bound(name, [s, line](const Args& a) {
        if (!a.get(0, "old") || !a.get(1, "new")) fail(line, "replace() needs the old and new strings");
        return Value::string(replace(s, *a.get(0, "old"), *a.get(1, "new"), a.get(2, "count"), line));
      });
    else if (name == "upper")
      m = bound(name, [s](const Args&) { return Value::string(ascii_map(s, [](int c) { return std::toupper(c); })); });
    else if (name == "lower")
      m = bound(name, [s](const Args&) { return Value::string(ascii_map(s, [](int c) { return std::tolower(c); })); });
    else if (name == "title")
      m = bound(name, [s](const Args&) { return Value::string(title(s)); });
    else if (name == "capitalize")
      m = bound(name, [s](const Args&) { return Value::string(capitalize(s)); });
    else if (name == "join")
      m = bound(name, [s, line](const Args& a) {
        if (!a.get(0, "")) fail(line, "join() needs a list");
        std::string out;
        bool first = true;
        for (const Value& item : items_of(*a.get(0, ""), line)) {
          if (!first) out += s;
          first = false;
          out += need_string(item, "join()", line);
        }
        return Value::string(out);
      });
  } else if (self.kind == Value::Kind::dict && !self.is_namespace) {
    const Value d = self;
    if (name == "items") m = bound(name, [d](const Args&) { return dict_items(d); });
    else if (name == "keys") m = bound(name, [d, line](const Args&) { return Value::make_list(items_of(d, line)); });
    else if (name == "values")
      m = bound(name, [d](const Args&) {
        List out;
        for (const auto& kv : *d.dict) out.push_back(kv.second);
        return Value::make_list(std::move(out));
      });
    else if (name == "get")
      m = bound(name, [d, line](const Args& a) {
        if (!a.get(0, "key")) fail(line, "get() needs a key");
        if (const Value* v = d.find(to_str(*a.get(0, "key")))) return *v;
        const Value* fallback = a.get(1, "default");
        return fallback ? *fallback : Value::none();
      });
  }
  return m.fn;
}

void add_globals(std::map<std::string, Value>& globals) {
  globals["raise_exception"] = bound("raise_exception", [](const Args& a) -> Value {
    throw RenderError{"the template raised an exception: " + (a.get(0, "") ? to_str(*a.get(0, "")) : std::string())};
  });
  globals["range"] = bound("range", [](const Args& a) {
    int64_t start = 0, stop = 0, step = 1;
    auto num = [](const Value* v) { return v && v->kind == Value::Kind::integer ? v->i : v && v->kind == Value::Kind::boolean ? int64_t{v->b} : int64_t{0}; };
    if (a.positional.size() == 1) {
      stop = num(&a.positional[0]);
    } else if (a.positional.size() >= 2) {
      start = num(&a.positional[0]);
      stop = num(&a.positional[1]);
      if (a.positional.size() >= 3) step = num(&a.positional[2]);
    }
    if (step == 0) throw RenderError{"range() with a step of 0"};
    List out;
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
      if (out.size() >= 1'000'000) throw RenderError{"range() of more than a million items"};
      out.push_back(Value::integer(k));
    }
    return Value::make_list(std::move(out));
  });
  globals["namespace"] = bound("namespace", [](const Args& a) {
    Value ns = Value::make_dict();
    ns.is_namespace = true;
    if (!a.positional.empty() && a.positional[0].kind == Value::Kind::dict) *ns.dict = *a.positional[0].dict;
    for (const auto& [k, v] : a.named) ns.dict->emplace_back(k, v);
    return ns;
  });
  globals["dict"] = bound("dict", [](const Args& a) {
    Value d = Value::make_dict();
    for (const auto& [k, v] : a.named) d.dict->emplace_back(k, v);
    return d;
  });
}

}  // namespace lockstep::text::jinja
