// What a chat request constrains its output to, compiled to a grammar (engine/grammar/):
// response_format json_object / json_schema, and tool_choice `required` or a named function —
// these two as vLLM does them, independent of the model's tool-call syntax: a named function's
// output is its arguments object (the schema of its `parameters`); `required` is a JSON array of
// {"name": ..., "parameters": {...}} objects, one per call (at most 8; one when
// parallel_tool_calls is false). Schemas outside the compiler's subset are a 400 naming the
// keyword. Compiled grammars are cached by schema text (their token-mask caches with them: a schema
// seen before costs microseconds per step).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>

#include "engine/grammar/grammar.h"
#include "server/openai_codec.h"

namespace tandem::openai {

// A response_format object (the type is checked here too); null grammar for "text".
std::variant<std::shared_ptr<const grammar::Grammar>, ApiError> response_format_grammar(
    const nlohmann::ordered_json& response_format);

struct ForcedTools {
  ApiRequest::ToolChoice choice = ApiRequest::ToolChoice::kAuto;
  std::string function;                             // kNamed
  std::shared_ptr<const grammar::Grammar> grammar;  // kNamed, kRequired
};

// tool_choice against the declared tools ("auto", "none", "required", {"type": "function",
// "function": {"name": ...}}).
std::variant<ForcedTools, ApiError> tool_choice_of(const nlohmann::ordered_json& tool_choice,
                                                   const nlohmann::ordered_json& tools,
                                                   bool parallel_tool_calls);

// The calls in a `required` output (a JSON array of {"name", "parameters"}), or nullopt when it
// does not parse as one (cut off by max_tokens).
std::optional<std::vector<std::pair<std::string, std::string>>> required_calls(
    const std::string& output);

}  // namespace tandem::openai
