// A parsed call checked against what the request declared: the function names of the OpenAI
// `tools` array, and the shape of one call object as the model wrote it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::tool_calls {

// The names of the request's tools: [{"type": "function", "function": {"name": ...}}, ...].
// Entries of another type or without a string name are skipped (the codec validates the array).
std::vector<std::string> declared_function_names(const nlohmann::json& tools);
std::vector<std::string> declared_function_names(const nlohmann::ordered_json& tools);

bool is_declared(std::string_view name, const std::vector<std::string>& declared);

// One call object as a model writes it: {"name": "<non-empty string>", "arguments": {...}}, where
// "parameters" (Llama 3) may stand for "arguments", and arguments given as a JSON string holding
// an object (some fine-tunes write that) are unwrapped. Other keys are ignored. False for any
// other shape; on success *arguments is the compact JSON text of the arguments object.
bool read_call(const nlohmann::ordered_json& call, std::string* name, std::string* arguments);

}  // namespace tandem::tool_calls
