// The small Jinja interpreter behind ChatTemplate (include/lockstep/chat_template.hpp): the subset
// of Jinja2 that chat templates use, with the environment transformers renders them in
// (trim_blocks, lstrip_blocks, loop controls, no trailing newline kept, undefined values that
// print as nothing and refuse arithmetic).
//
//   jinja_lexer.cpp     source -> segments (text, {{ }}, {% %}) with whitespace control applied
//   jinja_parser.cpp    segments -> statements and expressions (jinja::Node); the load-time check
//   jinja_value.cpp     Value: truth, equality, order, Python's str() and json.dumps()
//   jinja_eval.cpp      rendering: scopes, loops, macros, namespaces, operators
//   jinja_builtins.cpp  the filters, tests, methods and globals, and their names for the check
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace lockstep::text::jinja {

// ---- values ----

struct Value;
using List = std::vector<Value>;
// A dict keeps insertion order (Python's), as tojson and items() show it.
using Dict = std::vector<std::pair<std::string, Value>>;
struct Callable;

struct Value {
  enum class Kind { undefined, none, boolean, integer, floating, string, list, dict, callable };
  Kind kind = Kind::undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  std::string s;                       // string; for undefined: the name that was looked up
  std::shared_ptr<List> list;          // list (a tuple too)
  std::shared_ptr<Dict> dict;          // dict, or a namespace (shared: `set ns.x` is seen by all)
  bool is_namespace = false;
  bool is_tuple = false;               // a list Python would show as a tuple: (a, b), items() pairs
  std::shared_ptr<const Callable> fn;  // callable

  static Value undefined(std::string name = {});
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value floating(double v);
  static Value string(std::string v);
  static Value make_list(List v = {});
  static Value make_dict(Dict v = {});

  bool is_undefined() const { return kind == Kind::undefined; }
  bool is_number() const { return kind == Kind::integer || kind == Kind::floating || kind == Kind::boolean; }
  double number() const { return kind == Kind::floating ? f : kind == Kind::boolean ? (b ? 1.0 : 0.0) : double(i); }
  // A dict's value for `key`, or null.
  const Value* find(std::string_view key) const;
};

// Keyword arguments keep their names; positional ones come first.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
  const Value* get(size_t position, std::string_view name) const;
};

struct Callable {
  std::string name;
  std::function<Value(const Args&)> call;
};

// The error a template raises while rendering (raise_exception, a type error, an undefined
// value used in arithmetic): its message names the line.
struct RenderError {
  std::string message;
};

// Throws the RenderError "line LINE: WHAT".
[[noreturn]] inline void fail(int line, const std::string& what) {
  throw RenderError{"line " + std::to_string(line) + ": " + what};
}

bool truthy(const Value& v);
bool equal(const Value& a, const Value& b);
// -1, 0, 1 for numbers or strings; throws RenderError for other pairs.
int compare(const Value& a, const Value& b, int line);
// Python's str(): None, True, 1.5, ['a', 1], {'a': 1}; undefined prints as nothing.
std::string to_str(const Value& v);
// transformers' tojson: json.dumps(v, ensure_ascii=False, indent=indent, sort_keys=False).
std::string to_json(const Value& v, int indent);  // indent < 0: none
Value from_json(const nlohmann::ordered_json& j);
const char* kind_name(const Value& v);
// Code points of a UTF-8 string (invalid bytes as themselves), and back.
std::vector<uint32_t> code_points(std::string_view s);
std::string utf8(const std::vector<uint32_t>& cps, size_t from, size_t to);
bool is_py_space(uint32_t cp);  // Python's str.isspace()

// ---- syntax ----

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    literal,    // value
    name,       // text
    list,       // items
    dict,       // items: key, value, key, value...
    attr,       // a.text
    index,      // a[b]
    slice,      // a[b:c:d]; null parts absent
    call,       // a(args; names holds the keyword names, "" for positional)
    filter,     // a | text(args)
    test,       // a is [not] text(args)
    unary,      // text: "not", "-", "+"; a
    binary,     // a text b
    conditional // b if a else c
  };
  Kind kind;
  int line = 0;
  std::string text;
  Value value;
  ExprPtr a, b, c;
  std::vector<ExprPtr> items;
  std::vector<std::string> names;  // call / filter / test: keyword names, "" for positional
  bool negated = false;            // test: `is not`
};

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

struct Node {
  enum class Kind { text, output, if_, for_, set, macro, break_, continue_ };
  Kind kind;
  int line = 0;
  std::string text;                  // text; set: the name; macro: the name
  std::string attr;                  // set: `ns.attr` target's attribute
  ExprPtr expr;                      // output, set's value, for's iterable
  std::vector<std::pair<ExprPtr, Body>> branches;  // if / elif: condition, body; else: null condition
  std::vector<std::string> targets;  // for: loop variables (more than one: unpacking)
  ExprPtr filter;                    // for ... if filter
  Body body, else_body;              // for, macro
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro: name, default (or null)
};

// ---- the lexer ----

struct Token {
  enum class Kind { name, string, integer, floating, op, end };
  Kind kind;
  std::string text;
  int64_t i = 0;
  double f = 0.0;
  int line = 0;
};

struct Segment {
  enum class Kind { text, expression, statement };
  Kind kind;
  std::string text;             // text
  std::vector<Token> tokens;    // expression / statement, ending with an `end` token
  int line = 0;
};

// Throws Error (format) naming `name` and the line.
std::vector<Segment> lex(std::string_view source, const std::string& name);

// ---- the parser and its check ----

// The whole template, every construct known (else Error naming it and its line).
Body parse(const std::vector<Segment>& segments, const std::string& name);

// ---- builtins (jinja_builtins.cpp) ----

bool is_filter(std::string_view name);
bool is_test(std::string_view name);
bool is_method(std::string_view name);
// `value | name(args)`; throws RenderError.
Value apply_filter(const std::string& name, const Value& value, const Args& args, int line,
                   const std::function<Value(const Value&, const std::string&, const Args&)>& run_test);
bool apply_test(const std::string& name, const Value& value, const Args& args, int line);
// `value.name` when value is a string, list or dict and name is its method: the bound method.
// Null when there is none.
std::shared_ptr<const Callable> method(const Value& self, const std::string& name, int line);
// What a for loop goes over: a list's items, a dict's keys, a string's characters, nothing for
// an undefined value; throws RenderError for anything else.
List iterate(const Value& v, int line);
// The globals: raise_exception, range, namespace, dict, and the constants.
void add_globals(std::map<std::string, Value>& globals);

// ---- rendering (jinja_eval.cpp) ----

// Renders `body` with the variables of `context`; throws RenderError.
std::string render(const Body& body, const std::map<std::string, Value>& context);

}  // namespace lockstep::text::jinja
