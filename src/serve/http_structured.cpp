// The request fields that ask for structured output (docs/HTTP.md, "Structured output"):
// OpenAI's `response_format` ({"type": "text"}, {"type": "json_object"}, {"type": "json_schema",
// "json_schema": {"name", "description", "schema", "strict"}}) and llama-server's `grammar` (GBNF
// text) and `json_schema` (a schema object). At most one of them; each refusal is a 400 naming
// the field and, from the grammar engine, the keyword or the line and column.
#include "serve/http_api.hpp"

#include "format/json_text.hpp"
#include "lockstep/error.hpp"

namespace lockstep::serve {
namespace {

// Read with its objects' keys in the order written: a schema's properties are generated in
// that order, as `lockstep generate --json-schema` generates them.
using ordered_json = nlohmann::ordered_json;


// The engine's refusal as a 400 naming `field`.
template <typename Build>
std::shared_ptr<const Grammar> built(const std::string& field, Build build) {
  try {
    return build();
  } catch (const Error& e) {
    throw bad(field, "'" + field + "': " + e.what());
  }
}

std::shared_ptr<const Grammar> from_schema(const ordered_json& schema, const std::string& field) {
  if (!schema.is_object() && !schema.is_boolean()) throw bad(field, "'" + field + "' must be a JSON Schema (an object)");
  return built(field, [&] { return Grammar::from_json_schema(schema.dump()); });
}

std::shared_ptr<const Grammar> from_response_format(const ordered_json& f) {
  if (!f.is_object() || !f.contains("type") || !f["type"].is_string())
    throw bad("response_format", "'response_format' must be an object with a string 'type'");
  const std::string type = f["type"].get<std::string>();
  for (const auto& [key, value] : f.items())
    if (key != "type" && !(key == "json_schema" && type == "json_schema"))
      throw bad("response_format." + key, "'response_format." + key + "' is not supported with type '" + type + "'");
  if (type == "text") return nullptr;
  if (type == "json_object") return Grammar::json_object();
  if (type != "json_schema")
    throw bad("response_format.type", "'response_format.type' must be text, json_object or json_schema, got '" + type + "'");
  if (!f.contains("json_schema") || !f["json_schema"].is_object())
    throw bad("response_format.json_schema", "'response_format.json_schema' must be an object with a 'schema'");
  const ordered_json& s = f["json_schema"];
  for (const auto& [key, value] : s.items()) {
    const std::string field = "response_format.json_schema." + key;
    if (key == "name" || key == "description") {
      if (!value.is_string()) throw bad(field, "'" + field + "' must be a string");
    } else if (key == "strict") {
      // Enforced either way: lockstep's sampling never leaves the schema.
      if (!value.is_boolean() && !value.is_null()) throw bad(field, "'" + field + "' must be true or false");
    } else if (key != "schema") {
      throw bad(field, "'" + field + "' is not supported (name, description, schema and strict are)");
    }
  }
  if (!s.contains("schema")) throw bad("response_format.json_schema.schema", "'response_format.json_schema.schema' is required");
  return from_schema(s["schema"], "response_format.json_schema.schema");
}

}  // namespace

std::shared_ptr<const Grammar> requested_grammar(const std::string& body, const nlohmann::json& request) {
  const auto any = [&](const char* k) { return request.contains(k) && !request[k].is_null(); };
  if (!any("response_format") && !any("grammar") && !any("json_schema")) return nullptr;
  const ordered_json j = format::parse_ordered_json(body);  // parse_body read it already: it is a JSON object
  const auto given = [&](const char* k) { return j.contains(k) && !j[k].is_null(); };
  int count = 0;
  for (const char* k : {"response_format", "grammar", "json_schema"}) count += given(k) ? 1 : 0;
  if (count > 1)
    throw bad(given("grammar") ? "grammar" : "json_schema",
              "give one of 'response_format', 'grammar' and 'json_schema', not several");
  if (given("response_format")) return from_response_format(j["response_format"]);
  if (given("json_schema")) return from_schema(j["json_schema"], "json_schema");
  if (given("grammar")) {
    if (!j["grammar"].is_string()) throw bad("grammar", "'grammar' must be a string of GBNF rules");
    const std::string text = j["grammar"].get<std::string>();
    if (text.empty()) return nullptr;  // llama-server's default: no grammar
    return built("grammar", [&] { return Grammar::from_gbnf(text); });
  }
  return nullptr;
}

}  // namespace lockstep::serve
