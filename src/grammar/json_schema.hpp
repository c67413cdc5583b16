// JSON Schema to GBNF (gbnf.hpp): the grammar of the JSON texts a schema accepts, written
// compactly (no space but one optional space after ',' and ':'), properties in the schema's
// order. docs/HTTP.md, "Structured output", lists the keywords; any other keyword that
// constrains values is refused, naming it and where it is.
#pragma once

#include <string>
#include <string_view>

namespace lockstep::grammar {

// Throws Error naming the keyword and its JSON pointer ("schema: /properties/age: 'minimum' is
// not supported"), or the position of a JSON syntax error.
std::string json_schema_to_gbnf(std::string_view schema_text);

// The grammar of any JSON object ({"type": "json_object"}).
std::string json_object_gbnf();

}  // namespace lockstep::grammar
