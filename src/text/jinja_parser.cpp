// Segments -> statements and expressions (text/jinja.hpp), with Jinja2's precedence, lowest
// first: `a if b else c`, or, and, not, comparisons (== != < > <= >= in, not in), + -, ~,
// * / // %, **, unary - +, then a primary with its postfixes (.name, [index], [a:b:c], (call))
// followed by filters (| name) and tests (is [not] name), which bind tighter than any operator:
// `a + b | trim` trims b alone.
//
// The check at load: every tag, filter, test and called method must be one the interpreter
// knows (jinja_builtins.cpp), else Error naming it and its line; so is every tag's syntax.
#include "lockstep/error.hpp"
#include "text/jinja.hpp"

namespace lockstep::text::jinja {
namespace {

class Parser {
 public:
  Parser(const std::vector<Segment>& segments, const std::string& name) : segs_(segments), name_(name) {}

  Body run() {
    std::string stop;
    Body body = block({}, stop);
    if (!stop.empty()) fail(line_, "{% " + stop + " %} without its opening tag");
    return body;
  }

 private:
  [[noreturn]] void fail(int line, const std::string& what) const {
    throw Error(ErrorKind::format, name_ + " line " + std::to_string(line) + ": " + what);
  }

  // Statements up to a tag named in `ends` (returned in `stop`, its tokens in toks_ after the
  // name), or the template's end (stop empty; an error when `ends` is not empty).
  Body block(const std::vector<std::string>& ends, std::string& stop) {
    const Nest nest(*this, line_);
    Body body;
    while (seg_ < segs_.size()) {
      const Segment& s = segs_[seg_++];
      line_ = s.line;
      if (s.kind == Segment::Kind::text) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::text;
        n->line = s.line;
        n->text = s.text;
        body.push_back(std::move(n));
        continue;
      }
      toks_ = &s.tokens;
      at_ = 0;
      if (s.kind == Segment::Kind::expression) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::output;
        n->line = s.line;
        n->expr = expression();
        expect_end();
        body.push_back(std::move(n));
        continue;
      }
      const Token& t = next();
      if (t.kind != Token::Kind::name) fail(t.line, "a tag must start with its name");
      for (const std::string& e : ends)
        if (t.text == e) {
          stop = e;
          return body;
        }
      body.push_back(statement(t));
    }
    if (!ends.empty()) fail(line_, "the template ends inside a block: {% " + ends.back() + " %} is missing");
    stop.clear();
    return body;
  }

  std::unique_ptr<Node> statement(const Token& tag) {
    auto n = std::make_unique<Node>();
    n->line = tag.line;
    const std::string& name = tag.text;
    std::string stop;
    if (name == "if") {
      n->kind = Node::Kind::if_;
      ExprPtr cond = expression();
      expect_end();
      for (;;) {
        Body body = block({"elif", "else", "endif"}, stop);
        n->branches.emplace_back(std::move(cond), std::move(body));
        if (stop == "endif") break;
        if (stop == "else") {
          expect_end();
          Body rest = block({"endif"}, stop);
          n->branches.emplace_back(nullptr, std::move(rest));
          break;
        }
        cond = expression();  // elif
        expect_end();
      }
      expect_end();
    } else if (name == "for") {
      n->kind = Node::Kind::for_;
      do {
        const Token& v = next();
        if (v.kind != Token::Kind::name) fail(v.line, "{% for %} needs a loop variable name");
        n->targets.push_back(v.text);
      } while (accept_op(","));
      if (!accept_name("in")) fail(tag.line, "{% for %} needs `in`");
      n->expr = expression(/*with_conditional=*/false);
      if (accept_name("if")) n->filter = expression(false);
      if (accept_name("recursive")) fail(tag.line, "{% for ... recursive %} is not supported");
      expect_end();
      ++loops_;
      n->body = block({"else", "endfor"}, stop);
      --loops_;
      if (stop == "else") {
        expect_end();
        n->else_body = block({"endfor"}, stop);
      }
      expect_end();
    } else if (name == "set") {
      n->kind = Node::Kind::set;
      const Token& v = next();
      if (v.kind != Token::Kind::name) fail(v.line, "{% set %} needs a name");
      n->text = v.text;
      if (accept_op(".")) {
        const Token& a = next();
        if (a.kind != Token::Kind::name) fail(a.line, "{% set name.attribute %} needs an attribute name");
        n->attr = a.text;
      }
      if (peek().kind == Token::Kind::op && peek().text == ",") fail(tag.line, "{% set a, b = ... %} (unpacking) is not supported");
      if (!accept_op("=")) fail(tag.line, "{% set ... %} as a block ({% endset %}) is not supported");
      n->expr = expression();
      expect_end();
    } else if (name == "macro") {
      n->kind = Node::Kind::macro;
      const Token& v = next();
      if (v.kind != Token::Kind::name) fail(v.line, "{% macro %} needs a name");
      n->text = v.text;
      if (!accept_op("(")) fail(tag.line, "{% macro " + v.text + " %} needs its parameter list");
      if (!accept_op(")")) {
        do {
          const Token& p = next();
          if (p.kind != Token::Kind::name) fail(p.line, "a macro parameter must be a name");
          ExprPtr def;
          if (accept_op("=")) def = expression();
          n->params.emplace_back(p.text, std::move(def));
        } while (accept_op(","));
        if (!accept_op(")")) fail(tag.line, "the macro's parameter list is not closed");
      }
      expect_end();
      const int outer_loops = loops_;
      loops_ = 0;
      n->body = block({"endmacro"}, stop);
      loops_ = outer_loops;
      expect_end();
    } else if (name == "break" || name == "continue") {
      if (loops_ == 0) fail(tag.line, "{% " + name + " %} outside a loop");
      n->kind = name == "break" ? Node::Kind::break_ : Node::Kind::continue_;
      expect_end();
    } else {
      fail(tag.line, "the tag {% " + name + " %} is not supported");
    }
    return n;
  }

  // ---- tokens ----

  const Token& peek(size_t ahead = 0) const {
    const size_t k = std::min(at_ + ahead, toks_->size() - 1);
    return (*toks_)[k];
  }
  const Token& next() {
    const Token& t = peek();
    if (at_ < toks_->size() - 1) ++at_;
    return t;
  }
  bool is_op(const char* op, size_t ahead = 0) const {
    const Token& t = peek(ahead);
    return t.kind == Token::Kind::op && t.text == op;
  }
  bool is_name(const char* name, size_t ahead = 0) const {
    const Token& t = peek(ahead);
    return t.kind == Token::Kind::name && t.text == name;
  }
  bool accept_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool accept_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(peek().line, std::string("expected '") + op + "' but found " + describe(peek()));
  }
  void expect_end() {
    if (peek().kind != Token::Kind::end) fail(peek().line, "unexpected " + describe(peek()) + " in a tag");
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Token::Kind::end: return "the tag's end";
      case Token::Kind::string: return "a string";
      case Token::Kind::integer:
      case Token::Kind::floating: return "a number";
      default: return "'" + t.text + "'";
    }
  }

  ExprPtr make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // ---- expressions ----

  // Nesting (of expressions, and of blocks) is bounded, so that the parser's and the renderer's
  // recursion is: a template nesting deeper is refused.
  struct Nest {
    Parser& p;
    explicit Nest(Parser& parser, int line) : p(parser) {
      if (++p.depth_ > max_depth) p.fail(line, "nesting deeper than " + std::to_string(max_depth) + " levels");
    }
    ~Nest() { --p.depth_; }
  };
  static constexpr int max_depth = 200;

  ExprPtr expression(bool with_conditional = true) {
    const Nest nest(*this, peek().line);
    ExprPtr e = or_expr();
    while (with_conditional && is_name("if")) {
      const int line = next().line;
      auto c = make(Expr::Kind::conditional, line);
      c->a = or_expr();
      c->b = std::move(e);
      if (accept_name("else")) c->c = expression();
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(ExprPtr left, std::string op, ExprPtr right, int line) {
    auto e = make(Expr::Kind::binary, line);
    e->text = std::move(op);
    e->a = std::move(left);
    e->b = std::move(right);
    return e;
  }

  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (is_name("or")) {
      const int line = next().line;
      e = binary(std::move(e), "or", and_expr(), line);
    }
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (is_name("and")) {
      const int line = next().line;
      e = binary(std::move(e), "and", not_expr(), line);
    }
    return e;
  }
  ExprPtr not_expr() {
    const Nest nest(*this, peek().line);
    if (is_name("not")) {
      const int line = next().line;
      auto e = make(Expr::Kind::unary, line);
      e->text = "not";
      e->a = not_expr();
      return e;
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr e = math1();
    for (;;) {
      static const char* const ops[] = {"==", "!=", "<", ">", "<=", ">="};
      const Token& t = peek();
      std::string op;
      if (t.kind == Token::Kind::op)
        for (const char* o : ops)
          if (t.text == o) op = o;
      if (!op.empty()) {
        next();
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      e = binary(std::move(e), op, math1(), t.line);
    }
    return e;
  }
  ExprPtr math1() {
    ExprPtr e = concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      e = binary(std::move(e), t.text, concat(), t.line);
    }
    return e;
  }
  ExprPtr concat() {
    ExprPtr e = math2();
    while (is_op("~")) {
      const int line = next().line;
      e = binary(std::move(e), "~", math2(), line);
    }
    return e;
  }
  ExprPtr math2() {
    ExprPtr e = power();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      e = binary(std::move(e), t.text, power(), t.line);
    }
    return e;
  }
  ExprPtr power() {
    ExprPtr e = unary(true);
    while (is_op("**")) {
      const int line = next().line;
      e = binary(std::move(e), "**", unary(true), line);
    }
    return e;
  }
  ExprPtr unary(bool with_filter) {
    const Nest nest(*this, peek().line);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& t = next();
      e = make(Expr::Kind::unary, t.line);
      e->text = t.text;
      e->a = unary(false);
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    if (with_filter) e = filters(std::move(e));
    return e;
  }

  ExprPtr primary() {
    const Token& t = next();
    switch (t.kind) {
      case Token::Kind::string: {
        auto e = make(Expr::Kind::literal, t.line);
        std::string s = t.text;
        while (peek().kind == Token::Kind::string) s += next().text;  // adjacent strings join
        e->value = Value::string(std::move(s));
        return e;
      }
      case Token::Kind::integer: {
        auto e = make(Expr::Kind::literal, t.line);
        e->value = Value::integer(t.i);
        return e;
      }
      case Token::Kind::floating: {
        auto e = make(Expr::Kind::literal, t.line);
        e->value = Value::floating(t.f);
        return e;
      }
      case Token::Kind::name: {
        auto e = make(Expr::Kind::literal, t.line);
        if (t.text == "true" || t.text == "True") e->value = Value::boolean(true);
        else if (t.text == "false" || t.text == "False") e->value = Value::boolean(false);
        else if (t.text == "none" || t.text == "None") e->value = Value::none();
        else {
          e->kind = Expr::Kind::name;
          e->text = t.text;
        }
        return e;
      }
      case Token::Kind::op:
        if (t.text == "(") {
          if (accept_op(")")) {
            auto e = make(Expr::Kind::list, t.line);  // the empty tuple
            e->text = "tuple";
            return e;
          }
          ExprPtr first = expression();
          if (!is_op(",")) {
            expect_op(")");
            return first;
          }
          auto e = make(Expr::Kind::list, t.line);  // a tuple, held as a list
          e->text = "tuple";
          e->items.push_back(std::move(first));
          while (accept_op(",")) {
            if (is_op(")")) break;
            e->items.push_back(expression());
          }
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          auto e = make(Expr::Kind::list, t.line);
          while (!is_op("]")) {
            e->items.push_back(expression());
            if (!accept_op(",")) break;
          }
          expect_op("]");
          return e;
        }
        if (t.text == "{") {
          auto e = make(Expr::Kind::dict, t.line);
          while (!is_op("}")) {
            e->items.push_back(expression());
            expect_op(":");
            e->items.push_back(expression());
            if (!accept_op(",")) break;
          }
          expect_op("}");
          return e;
        }
        break;
      default:
        break;
    }
    fail(t.line, "unexpected " + describe(t) + " in an expression");
  }

  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      if (is_op(".")) {
        const int line = next().line;
        const Token& n = next();
        if (n.kind != Token::Kind::name && n.kind != Token::Kind::integer)
          fail(n.line, "expected an attribute name after '.'");
        if (n.kind == Token::Kind::integer) {
          auto idx = make(Expr::Kind::index, line);
          idx->a = std::move(e);
          idx->b = make(Expr::Kind::literal, line);
          idx->b->value = Value::integer(n.i);
          e = std::move(idx);
          continue;
        }
        auto a = make(Expr::Kind::attr, line);
        a->a = std::move(e);
        a->text = n.text;
        e = std::move(a);
      } else if (is_op("[")) {
        const int line = next().line;
        ExprPtr parts[3];
        int colons = 0;
        for (;;) {
          if (!is_op(":") && !is_op("]")) parts[colons] = expression();
          if (colons < 2 && accept_op(":")) {
            ++colons;
            continue;
          }
          break;
        }
        expect_op("]");
        if (colons == 0) {
          if (!parts[0]) fail(line, "an empty subscript []");
          auto idx = make(Expr::Kind::index, line);
          idx->a = std::move(e);
          idx->b = std::move(parts[0]);
          e = std::move(idx);
        } else {
          auto s = make(Expr::Kind::slice, line);
          s->items.push_back(std::move(e));
          s->a = std::move(parts[0]);
          s->b = std::move(parts[1]);
          s->c = std::move(parts[2]);
          e = std::move(s);
        }
      } else if (is_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr call(ExprPtr callee) {
    const int line = next().line;  // '('
    if (callee->kind == Expr::Kind::attr && !is_method(callee->text))
      fail(line, "the method ." + callee->text + "() is not supported");
    auto c = make(Expr::Kind::call, line);
    c->a = std::move(callee);
    arguments(*c);
    return c;
  }

  // `(a, b, name=c)` after the '(' into e.items / e.names.
  void arguments(Expr& e) {
    while (!is_op(")")) {
      if (peek().kind == Token::Kind::name && is_op("=", 1)) {
        e.names.push_back(next().text);
        next();
      } else {
        if (is_op("*") || is_op("**")) fail(peek().line, "*args and **kwargs in a call are not supported");
        e.names.emplace_back();
      }
      e.items.push_back(expression());
      if (!accept_op(",")) break;
    }
    expect_op(")");
  }

  ExprPtr filters(ExprPtr e) {
    for (;;) {
      if (is_op("|")) {
        const int line = next().line;
        const Token& n = next();
        if (n.kind != Token::Kind::name) fail(n.line, "expected a filter name after '|'");
        const std::string fname = n.text;
        if (!is_filter(fname)) fail(line, "the filter '" + fname + "' is not supported");
        auto f = make(Expr::Kind::filter, line);
        f->text = fname;
        f->a = std::move(e);
        if (accept_op("(")) arguments(*f);
        e = std::move(f);
      } else if (is_name("is")) {
        const int line = next().line;
        auto t = make(Expr::Kind::test, line);
        t->negated = accept_name("not");
        const Token& n = next();
        if (n.kind != Token::Kind::name) fail(n.line, "expected a test name after 'is'");
        if (!is_test(n.text)) fail(line, "the test '" + n.text + "' is not supported");
        t->text = n.text;
        t->a = std::move(e);
        if (accept_op("(")) {
          arguments(*t);
        } else {
          const Token& p = peek();
          const bool arg_follows = p.kind == Token::Kind::string || p.kind == Token::Kind::integer ||
                                   p.kind == Token::Kind::floating || is_op("[") || is_op("{") ||
                                   (p.kind == Token::Kind::name && p.text != "else" && p.text != "or" &&
                                    p.text != "and" && p.text != "if" && p.text != "is" && p.text != "in" &&
                                    p.text != "not");
          if (arg_follows) {
            t->names.emplace_back();
            t->items.push_back(postfix(primary()));
          }
        }
        e = std::move(t);
      } else if (is_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }

  const std::vector<Segment>& segs_;
  const std::string& name_;
  size_t seg_ = 0;
  int line_ = 1;
  const std::vector<Token>* toks_ = nullptr;
  size_t at_ = 0;
  int loops_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse(const std::vector<Segment>& segments, const std::string& name) { return Parser(segments, name).run(); }

}  // namespace lockstep::text::jinja
