// JSON Schema -> grammar: the subset agents and structured-output clients send (OpenAI
// `response_format: json_schema`, zod/pydantic-generated schemas, tool parameters).
//
// Supported: type (one or a list), object (properties in declared order, required always
// present, optional ones omittable; additionalProperties false / true / a schema — absent means
// none when properties are declared (xgrammar's strict mode, OpenAI structured outputs: the
// output stays valid and bounded), any when none are; extra keys are printable-ASCII strings
// that are not a declared name), array (items, minItems, maxItems), string (enum, const,
// minLength, maxLength, pattern, format date / time / date-time / uuid / email / ipv4; other
// formats are annotations), integer
// and number (minimum, maximum, exclusiveMinimum, exclusiveMaximum; fractional bounds are rounded
// inward, which keeps every output valid but leaves a sliver of valid numbers unreachable),
// boolean, null, enum / const of any value, anyOf and oneOf (as alternatives: oneOf's
// exclusivity is not enforced), allOf of one schema, $ref to "#..." pointers ($defs,
// definitions, recursion included), `nullable: true`, true / false schemas.
//
// Output shape: compact JSON with bounded optional whitespace (engine/grammar/json_parts.h);
// strings in the canonical escapes of the pattern compiler where a pattern applies.
//
// Errors: keywords that change validity and are not supported throw tandem::Error(kUnsupported)
// with a message starting "unsupported JSON Schema keyword '<name>'"; malformed schemas and the
// limits (nesting depth, $ref count, rule count, pattern size, counts above kMaxCount) throw
// kInvalidArgument. Annotations (title, description, examples, default, $schema, $id, $comment,
// ...) and unknown keywords are ignored.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string_view>

#include "engine/grammar/grammar.h"

namespace tandem::grammar {

inline constexpr int kMaxSchemaDepth = 64;
inline constexpr size_t kMaxRefs = 1000;

// nlohmann::json keeps object keys sorted: properties come out in alphabetical order. Parse the
// schema into nlohmann::ordered_json (or pass its text) to keep the declared order.
std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::json& schema);
std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::ordered_json& schema);
std::shared_ptr<const Grammar> compile_json_schema_text(std::string_view schema_json);
// Any JSON object (response_format json_object).
std::shared_ptr<const Grammar> json_object_grammar();
// Any JSON value.
std::shared_ptr<const Grammar> json_value_grammar();

}  // namespace tandem::grammar
