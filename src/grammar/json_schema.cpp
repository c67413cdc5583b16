// JSON Schema to GBNF (json_schema.hpp). Each schema becomes a rule; $defs become rules named
// after them, so a recursive schema is a recursive grammar.
#include "grammar/json_schema.hpp"

#include <map>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/json_text.hpp"
#include "grammar/json_pattern.hpp"
#include "lockstep/error.hpp"

namespace lockstep::grammar {
namespace {

// Objects keep their keys in the order written: properties come out in the schema's order.
using json = nlohmann::ordered_json;

// The primitives every schema grammar may use. Digits are bounded (15 before the point, 15
// after, 2 in an exponent) so that a sampled number ends.
constexpr const char* kPrimitives = R"(ws ::= " "?
json-char ::= [^"\\\x00-\x1f] | "\\" (["\\/bfnrt] | "u" json-hex4)
json-hex4 ::= [0-9a-cA-Ce-fE-F] json-hex json-hex json-hex | [dD] [0-7] json-hex json-hex
json-hex ::= [0-9a-fA-F]
json-string ::= "\"" json-char* "\""
json-int ::= "-"? ("0" | [1-9] [0-9]{0,15})
json-number ::= json-int ("." [0-9]{1,15})? ([eE] [-+]? [0-9]{1,2})?
json-boolean ::= "true" | "false"
json-null ::= "null"
json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null
json-object ::= "{" (json-string ":" ws json-value ("," ws json-string ":" ws json-value)*)? "}"
json-array ::= "[" (json-value ("," ws json-value)*)? "]"
json-date ::= json-year "-" (("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | "02-" ("0" [1-9] | "1" [0-9] | "2" [0-8]))
json-year ::= "000" [1-9] | "00" [1-9] [0-9] | "0" [1-9] [0-9]{2} | [1-9] [0-9]{3}
json-time ::= ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])
json-never ::= [^\x00-\U0010FFFF]
json-uuid ::= json-hex{8} "-" json-hex{4} "-" json-hex{4} "-" json-hex{4} "-" json-hex{12}
)";

// Keywords that describe without constraining: read past.
const std::set<std::string> kAnnotations = {"$schema", "$id", "$comment", "title", "description", "default",
                                            "examples", "deprecated", "readOnly", "writeOnly", "$defs",
                                            "definitions"};
const std::set<std::string> kSupported = {"type",     "properties", "required",  "additionalProperties",
                                          "items",    "enum",       "const",     "anyOf",
                                          "oneOf",    "$ref",       "minItems",  "maxItems",
                                          "minLength", "maxLength", "pattern",   "format"};
constexpr int64_t kMaxCount = 1000;  // minItems, maxItems, minLength, maxLength

// A GBNF literal of `bytes`.
std::string literal(const std::string& bytes) {
  std::string out = "\"";
  for (const unsigned char c : bytes) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      static const char* hex = "0123456789ABCDEF";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

class Converter {
 public:
  explicit Converter(const json& root) : root_(root) {}

  std::string run() {
    const std::string body = visit(root_, "");
    std::string out = "root ::= " + body + "\n";
    for (const auto& [name, text] : rules_) out += name + " ::= " + text + "\n";
    return out + kPrimitives;
  }

 private:
  [[noreturn]] static void refuse(const std::string& where, const std::string& what) {
    throw Error(ErrorKind::invalid_argument, "schema: " + (where.empty() ? std::string("/") : where) + ": " + what);
  }

  std::string new_rule(const std::string& text) {
    const std::string name = std::string("s").append(std::to_string(rules_.size() + 1));
    rules_.emplace(name, text);
    return name;
  }

  static int64_t count(const json& s, const char* key, const std::string& where, int64_t fallback) {
    if (!s.contains(key)) return fallback;
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      refuse(where, std::string("'") + key + "' must be a non-negative integer");
    if (v.get<int64_t>() > kMaxCount)
      refuse(where, std::string("'") + key + "' above " + std::to_string(kMaxCount) + " is not supported");
    return v.get<int64_t>();
  }

  // `item` repeated between lo and hi times (hi < 0: no bound) in GBNF, joined by `sep`.
  static std::string repeated(const std::string& item, int64_t lo, int64_t hi, const std::string& sep) {
    const std::string more = sep.empty() ? item : "(" + sep + " " + item + ")";
    const std::string bound = std::string(",").append(hi < 0 ? std::string() : std::to_string(hi - 1));
    if (hi == 0) return "";
    if (lo == 0) return "(" + item + " " + more + "{0" + bound + "})?";
    return item + " " + more + "{" + std::to_string(lo - 1) + bound + "}";
  }

  std::string visit(const json& s, const std::string& where) {
    // false matches nothing: its alternatives are dropped (rules.cpp), and a schema left with
    // none is refused as a grammar that can match no text.
    if (s.is_boolean()) return s.get<bool>() ? "json-value" : "json-never";
    if (!s.is_object()) refuse(where, "a schema must be an object or a boolean");
    for (const auto& [key, value] : s.items())
      if (!kSupported.count(key) && !kAnnotations.count(key)) refuse(where, "'" + key + "' is not supported");
    if (s.contains("$ref")) return ref(s, where);
    if (s.contains("const")) return literal(s["const"].dump(-1, ' ', false, json::error_handler_t::strict));
    if (s.contains("enum")) {
      const json& e = s["enum"];
      if (!e.is_array() || e.empty()) refuse(where + "/enum", "'enum' must be a non-empty array");
      std::string alts;
      for (const json& v : e) alts += (alts.empty() ? "" : " | ") + literal(v.dump());
      return "(" + alts + ")";
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const json& list = s[key];
      if (!list.is_array() || list.empty()) refuse(where + "/" + key, std::string("'") + key + "' must be a non-empty array");
      std::string alts;
      for (size_t i = 0; i < list.size(); ++i)
        alts += (alts.empty() ? "" : " | ") + visit(list[i], where + "/" + key + "/" + std::to_string(i));
      return "(" + alts + ")";
    }
    if (!s.contains("type")) {
      if (s.contains("properties")) return object(s, where);
      if (s.contains("items")) return array(s, where);
      return "json-value";
    }
    const json& type = s["type"];
    if (type.is_array()) {
      if (type.empty()) refuse(where + "/type", "'type' must not be an empty array");
      std::string alts;
      for (const json& t : type) alts += (alts.empty() ? "" : " | ") + typed(s, t, where);
      return "(" + alts + ")";
    }
    return typed(s, type, where);
  }

  std::string typed(const json& s, const json& type, const std::string& where) {
    if (!type.is_string()) refuse(where + "/type", "'type' must be a string or an array of strings");
    const std::string t = type.get<std::string>();
    if (t == "object") return object(s, where);
    if (t == "array") return array(s, where);
    if (t == "string") return string(s, where);
    if (t == "number") return "json-number";
    if (t == "integer") return "json-int";
    if (t == "boolean") return "json-boolean";
    if (t == "null") return "json-null";
    refuse(where + "/type", "unknown type '" + t + "'");
  }

  std::string ref(const json& s, const std::string& where) {
    const json& r = s["$ref"];
    if (!r.is_string()) refuse(where + "/$ref", "'$ref' must be a string");
    const std::string target = r.get<std::string>();
    std::string section, name;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      if (target.rfind(prefix, 0) == 0) {
        section = std::string(prefix).substr(2, std::string(prefix).size() - 3);
        name = target.substr(std::string(prefix).size());
      }
    }
    if (name.empty() || name.find('/') != std::string::npos)
      refuse(where + "/$ref", "'$ref' must name an entry of '#/$defs/' (or '#/definitions/'), got '" + target + "'");
    if (!root_.contains(section) || !root_[section].is_object() || !root_[section].contains(name))
      refuse(where + "/$ref", "'$ref' names '" + target + "', which the schema does not define");
    const std::string key = section + "/" + name;
    const auto known = refs_.find(key);
    if (known != refs_.end()) return known->second;
    const std::string rule = std::string("ref").append(std::to_string(refs_.size() + 1));
    refs_.emplace(key, rule);  // before visiting, so that a recursive reference finds it
    const std::string body = visit(root_[section][name], "/" + key);
    rules_.emplace(rule, body);
    return rule;
  }

  std::string string(const json& s, const std::string& where) {
    if (s.contains("format")) {
      if (!s["format"].is_string()) refuse(where + "/format", "'format' must be a string");
      const std::string f = s["format"].get<std::string>();
      if (f == "date") return "\"\\\"\" json-date \"\\\"\"";
      if (f == "time") return "\"\\\"\" json-time \"\\\"\"";
      if (f == "date-time") return "\"\\\"\" json-date \"T\" json-time \"\\\"\"";
      if (f == "uuid") return "\"\\\"\" json-uuid \"\\\"\"";
      refuse(where + "/format", "the string format '" + f + "' is not supported (date, time, date-time, uuid are)");
    }
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) refuse(where + "/pattern", "'pattern' must be a string");
      if (s.contains("minLength") || s.contains("maxLength"))
        refuse(where, "'pattern' beside 'minLength' or 'maxLength' is not supported");
      return "\"\\\"\" " + pattern_to_gbnf(s["pattern"].get<std::string>(), where + "/pattern") + " \"\\\"\"";
    }
    const int64_t lo = count(s, "minLength", where, 0), hi = count(s, "maxLength", where, -1);
    if (hi >= 0 && hi < lo) refuse(where, "'maxLength' is below 'minLength'");
    if (lo == 0 && hi < 0) return "json-string";
    std::string chars = hi == 0 ? "" : "json-char{" + std::to_string(lo) + "," + (hi < 0 ? "" : std::to_string(hi)) + "}";
    return "\"\\\"\" " + chars + " \"\\\"\"";
  }

  std::string array(const json& s, const std::string& where) {
    const int64_t lo = count(s, "minItems", where, 0), hi = count(s, "maxItems", where, -1);
    if (hi >= 0 && hi < lo) refuse(where, "'maxItems' is below 'minItems'");
    std::string item = "json-value";
    if (s.contains("items")) {
      if (s["items"].is_array()) refuse(where + "/items", "'items' as an array (tuples) is not supported");
      item = new_rule(visit(s["items"], where + "/items"));
    }
    return "\"[\" " + repeated(item, lo, hi, "\",\" ws") + " \"]\"";
  }

  std::string object(const json& s, const std::string& where) {
    std::vector<std::pair<std::string, std::string>> props;  // key literal, value rule
    std::vector<bool> required;
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) refuse(where + "/properties", "'properties' must be an object");
      std::set<std::string> needed;
      if (s.contains("required")) {
        if (!s["required"].is_array()) refuse(where + "/required", "'required' must be an array of names");
        for (const json& r : s["required"]) {
          if (!r.is_string()) refuse(where + "/required", "'required' must be an array of names");
          if (!s["properties"].contains(r.get<std::string>()))
            refuse(where + "/required", "'required' names '" + r.get<std::string>() + "', which 'properties' does not define");
          needed.insert(r.get<std::string>());
        }
      }
      for (const auto& [key, value] : s["properties"].items()) {
        const std::string rule = new_rule(visit(value, where + "/properties/" + key));
        props.emplace_back(literal(json(key).dump()), rule);
        required.push_back(needed.count(key) > 0);
      }
    } else if (s.contains("required") && s["required"].is_array() && !s["required"].empty()) {
      refuse(where + "/required", "'required' without 'properties' is not supported");
    }
    bool extra = false;
    std::string extra_value = "json-value";
    if (s.contains("additionalProperties")) {
      const json& a = s["additionalProperties"];
      if (!(a.is_boolean() && !a.get<bool>())) {
        if (!props.empty())
          refuse(where + "/additionalProperties",
                 "'additionalProperties' other than false beside 'properties' is not supported");
        extra = true;
        if (!a.is_boolean()) extra_value = new_rule(visit(a, where + "/additionalProperties"));
      }
    } else if (props.empty()) {
      extra = true;  // {"type": "object"} alone: any object
    }
    if (props.empty()) {
      if (!extra) return "\"{}\"";
      const std::string pair = "json-string \":\" ws " + extra_value;
      return "\"{\" " + repeated(pair, 0, -1, "\",\" ws") + " \"}\"";
    }
    // rest(i, first): the properties from i on, with or without a comma before the next one.
    // Each optional property may be left out; the order is the schema's.
    std::map<std::pair<size_t, bool>, std::string> rest_rule;
    std::string next_with_comma, next_first;  // rest(i+1, false), rest(i+1, true)
    for (size_t i = props.size(); i-- > 0;) {
      std::string with_comma, first;
      const std::string kv = props[i].first + " \":\" ws " + props[i].second;
      for (const bool lead : {false, true}) {
        const std::string take = (lead ? std::string() : std::string("\",\" ws ")) + kv +
                                 (next_with_comma.empty() ? "" : " " + next_with_comma);
        const std::string skip = lead ? next_first : next_with_comma;
        std::string body = take;
        if (!required[i]) body = "(" + take + ")" + (skip.empty() ? "?" : " | " + skip);
        (lead ? first : with_comma) = new_rule(body);
      }
      next_with_comma = with_comma;
      next_first = first;
    }
    return "\"{\" " + next_first + " \"}\"";
  }

  const json& root_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> refs_;
};

}  // namespace

std::string json_schema_to_gbnf(std::string_view schema_text) {
  if (const size_t at = format::json_too_deep_at(schema_text); at != std::string::npos)
    throw Error(ErrorKind::invalid_argument, "schema: nests deeper than " + std::to_string(format::kMaxJsonDepth) +
                                                 " levels (at byte " + std::to_string(at) + ")");
  json schema;
  try {
    schema = format::parse_ordered_json(schema_text);
  } catch (const json::exception& e) {
    throw Error(ErrorKind::invalid_argument, std::string("schema: not valid JSON: ") + e.what());
  }
  return Converter(schema).run();
}

std::string json_object_gbnf() { return std::string("root ::= json-object\n") + kPrimitives; }

}  // namespace lockstep::grammar
