// jinja::Value (text/jinja.hpp): its truth, equality and order as Python has them, Python's str()
// and transformers' tojson (json.dumps with ensure_ascii=False, keys in insertion order).
#include <charconv>
#include <cmath>
#include <cstdio>

#include "text/jinja.hpp"

namespace lockstep::text::jinja {

Value Value::undefined(std::string name) {
  Value v;
  v.s = std::move(name);
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::none;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.kind = Kind::boolean;
  v.b = x;
  return v;
}
Value Value::integer(int64_t x) {
  Value v;
  v.kind = Kind::integer;
  v.i = x;
  return v;
}
Value Value::floating(double x) {
  Value v;
  v.kind = Kind::floating;
  v.f = x;
  return v;
}
Value Value::string(std::string x) {
  Value v;
  v.kind = Kind::string;
  v.s = std::move(x);
  return v;
}
Value Value::make_list(List x) {
  Value v;
  v.kind = Kind::list;
  v.list = std::make_shared<List>(std::move(x));
  return v;
}
Value Value::make_dict(Dict x) {
  Value v;
  v.kind = Kind::dict;
  v.dict = std::make_shared<Dict>(std::move(x));
  return v;
}

const Value* Value::find(std::string_view key) const {
  if (kind != Kind::dict) return nullptr;
  for (const auto& [k, v] : *dict)
    if (k == key) return &v;
  return nullptr;
}

const Value* Args::get(size_t position, std::string_view name) const {
  for (const auto& [k, v] : named)
    if (k == name) return &v;
  return position < positional.size() ? &positional[position] : nullptr;
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined:
    case Value::Kind::none: return false;
    case Value::Kind::boolean: return v.b;
    case Value::Kind::integer: return v.i != 0;
    case Value::Kind::floating: return v.f != 0.0;
    case Value::Kind::string: return !v.s.empty();
    case Value::Kind::list: return !v.list->empty();
    case Value::Kind::dict: return v.is_namespace || !v.dict->empty();
    case Value::Kind::callable: return true;
  }
  return false;
}

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind != Value::Kind::floating && b.kind != Value::Kind::floating)
      return (a.kind == Value::Kind::boolean ? int64_t{a.b} : a.i) == (b.kind == Value::Kind::boolean ? int64_t{b.b} : b.i);
    return a.number() == b.number();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::undefined:
    case Value::Kind::none: return true;
    case Value::Kind::string: return a.s == b.s;
    case Value::Kind::list:
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case Value::Kind::dict:
      if (a.is_namespace || b.is_namespace) return a.dict == b.dict;
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [k, v] : *a.dict) {
        const Value* other = b.find(k);
        if (!other || !equal(v, *other)) return false;
      }
      return true;
    case Value::Kind::callable: return a.fn == b.fn;
    default: return false;
  }
}

int compare(const Value& a, const Value& b, int line) {
  if (a.is_number() && b.is_number()) {
    const double x = a.number(), y = b.number();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.kind == Value::Kind::string && b.kind == Value::Kind::string) {
    const int c = a.s.compare(b.s);  // UTF-8 bytes order as code points do
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  throw RenderError{"line " + std::to_string(line) + ": cannot order " + kind_name(a) + " and " + kind_name(b)};
}

const char* kind_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined: return "an undefined value";
    case Value::Kind::none: return "none";
    case Value::Kind::boolean: return "a boolean";
    case Value::Kind::integer: return "an integer";
    case Value::Kind::floating: return "a float";
    case Value::Kind::string: return "a string";
    case Value::Kind::list: return "a list";
    case Value::Kind::dict: return v.is_namespace ? "a namespace" : "a dict";
    case Value::Kind::callable: return "a function";
  }
  return "a value";
}

namespace {

// Python's repr() of a float: the shortest digits that read back, fixed notation for exponents
// from -4 to 15 (with at least ".0"), else d.ddde+XX.
std::string float_repr(double x, bool json) {
  if (std::isnan(x)) return json ? "NaN" : "nan";
  if (std::isinf(x)) return x > 0 ? (json ? "Infinity" : "inf") : (json ? "-Infinity" : "-inf");
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  std::string sign;
  if (!mant.empty() && mant[0] == '-') {
    sign = "-";
    mant.erase(0, 1);
  }
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  if (exp >= -4 && exp < 16) {
    std::string out;
    if (exp < 0) {
      out = "0.";
      out.append(static_cast<size_t>(-exp - 1), '0');
      out += digits;
    } else {
      const size_t int_len = static_cast<size_t>(exp) + 1;
      if (digits.size() <= int_len) {
        out = digits + std::string(int_len - digits.size(), '0') + ".0";
      } else {
        out = digits.substr(0, int_len) + "." + digits.substr(int_len);
      }
    }
    return sign + out;
  }
  std::string out = digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return sign + out + ebuf;
}

// Python's repr() of a string: single quotes unless it holds ' and no ".
std::string string_repr(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(q)) out += std::string("\\") + q;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += q;
  return out;
}

std::string repr(const Value& v) {
  return v.kind == Value::Kind::string ? string_repr(v.s) : to_str(v);
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

void json_into(const Value& v, int indent, int depth, std::string& out) {
  std::string nl, nl_end;  // the line breaks and indents json.dumps writes with `indent`
  if (indent >= 0) {
    nl.assign(1, '\n').append(static_cast<size_t>(indent * (depth + 1)), ' ');
    nl_end.assign(1, '\n').append(static_cast<size_t>(indent * depth), ' ');
  }
  const char* item_sep = indent >= 0 ? "," : ", ";
  switch (v.kind) {
    case Value::Kind::undefined:
    case Value::Kind::none: out += "null"; return;
    case Value::Kind::boolean: out += v.b ? "true" : "false"; return;
    case Value::Kind::integer: out += std::to_string(v.i); return;
    case Value::Kind::floating: out += float_repr(v.f, true); return;
    case Value::Kind::string: out += json_string(v.s); return;
    case Value::Kind::list:
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += item_sep;
        out += nl;
        json_into((*v.list)[k], indent, depth + 1, out);
      }
      out += nl_end + "]";
      return;
    case Value::Kind::dict:
      if (v.dict->empty()) {
        out += "{}";
        return;
      }
      out += "{";
      for (size_t k = 0; k < v.dict->size(); ++k) {
        if (k) out += item_sep;
        out += nl;
        out += json_string((*v.dict)[k].first) + ": ";
        json_into((*v.dict)[k].second, indent, depth + 1, out);
      }
      out += nl_end + "}";
      return;
    case Value::Kind::callable: out += "null"; return;
  }
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined: return "";
    case Value::Kind::none: return "None";
    case Value::Kind::boolean: return v.b ? "True" : "False";
    case Value::Kind::integer: return std::to_string(v.i);
    case Value::Kind::floating: return float_repr(v.f, false);
    case Value::Kind::string: return v.s;
    case Value::Kind::list: {
      std::string out = v.is_tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) out += (k ? ", " : "") + repr((*v.list)[k]);
      if (v.is_tuple && v.list->size() == 1) out += ",";
      return out + (v.is_tuple ? ")" : "]");
    }
    case Value::Kind::dict: {
      if (v.is_namespace) return "<Namespace>";
      std::string out = "{";
      for (size_t k = 0; k < v.dict->size(); ++k)
        out += (k ? ", " : "") + string_repr((*v.dict)[k].first) + ": " + repr((*v.dict)[k].second);
      return out + "}";
    }
    case Value::Kind::callable: return "<function " + v.fn->name + ">";
  }
  return "";
}

std::string to_json(const Value& v, int indent) {
  std::string out;
  json_into(v, indent, 0, out);
  return out;
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return j.get<uint64_t>() > uint64_t(INT64_MAX) ? Value::floating(j.get<double>()) : Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float: return Value::floating(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      for (const auto& x : j) items.push_back(from_json(x));
      return Value::make_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict items;
      for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(it.key(), from_json(it.value()));
      return Value::make_dict(std::move(items));
    }
    default: return Value::none();
  }
}

std::vector<uint32_t> code_points(std::string_view s) {
  std::vector<uint32_t> out;
  for (size_t k = 0; k < s.size();) {
    const auto c = static_cast<unsigned char>(s[k]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || k + n > s.size()) {
      out.push_back(c);  // an invalid byte stands for itself
      ++k;
      continue;
    }
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    bool ok = true;
    for (size_t m = 1; m < n; ++m) {
      const auto d = static_cast<unsigned char>(s[k + m]);
      ok = ok && (d >> 6) == 2;
      cp = (cp << 6) | (d & 0x3F);
    }
    if (!ok) {
      out.push_back(c);
      ++k;
      continue;
    }
    out.push_back(cp);
    k += n;
  }
  return out;
}

std::string utf8(const std::vector<uint32_t>& cps, size_t from, size_t to) {
  std::string out;
  for (size_t k = from; k < to && k < cps.size(); ++k) {
    const uint32_t cp = cps[k];
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

bool is_py_space(uint32_t cp) {
  // str.isspace(): the characters of bidirectional class WS, B or S, or category Zs.
  if ((cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680) return true;
  if ((cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000)
    return true;
  return false;
}

}  // namespace lockstep::text::jinja
