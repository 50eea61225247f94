// Declared functions and the shape of a call object (see tool_declarations.h).
#include "server/tool_calls/tool_declarations.h"

#include <algorithm>

#include "kernels/json_depth.h"

namespace tandem::tool_calls {

namespace {

template <typename Json>
std::vector<std::string> names_of(const Json& tools) {
  std::vector<std::string> names;
  if (!tools.is_array()) return names;
  for (const auto& tool : tools) {
    if (!tool.is_object() || tool.value("type", "") != "function") continue;
    const auto fn = tool.find("function");
    if (fn == tool.end() || !fn->is_object()) continue;
    const auto name = fn->find("name");
    if (name != fn->end() && name->is_string()) names.push_back(name->template get<std::string>());
  }
  return names;
}

}  // namespace

std::vector<std::string> declared_function_names(const nlohmann::json& tools) {
  return names_of(tools);
}

std::vector<std::string> declared_function_names(const nlohmann::ordered_json& tools) {
  return names_of(tools);
}

bool is_declared(std::string_view name, const std::vector<std::string>& declared) {
  return std::find(declared.begin(), declared.end(), name) != declared.end();
}

bool read_call(const nlohmann::ordered_json& call, std::string* name, std::string* arguments) {
  if (!call.is_object()) return false;
  const auto n = call.find("name");
  if (n == call.end() || !n->is_string() || n->get_ref<const std::string&>().empty()) return false;
  auto args = call.find("arguments");
  if (args == call.end()) args = call.find("parameters");
  if (args == call.end()) return false;
  nlohmann::ordered_json unwrapped;
  const nlohmann::ordered_json* value = &*args;
  if (args->is_string()) {
    const std::string& text = args->get_ref<const std::string&>();
    if (json_depth(text, kMaxRequestJsonDepth) > kMaxRequestJsonDepth) return false;
    unwrapped = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
    value = &unwrapped;
  }
  if (!value->is_object()) return false;
  try {
    // Strings parsed from JSON text are valid UTF-8; replace is a guard, not a path.
    *arguments = value->dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  } catch (...) {
    return false;
  }
  *name = n->get<std::string>();
  return true;
}

}  // namespace tandem::tool_calls
