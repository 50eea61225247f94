// response_format and forced tool_choice to grammars (server/openai_constraints.h).
#include "server/openai_constraints.h"

#include <deque>
#include <map>
#include <mutex>

#include "engine/grammar/json_schema.h"

namespace tandem::openai {

using ojson = nlohmann::ordered_json;

namespace {

constexpr int kMaxParallelCalls = 8;

// Compiled schemas by their text, the most recent 64.
std::shared_ptr<const grammar::Grammar> compile_cached(const ojson& schema) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const grammar::Grammar>> cache;
  static std::deque<std::string> order;
  const std::string key = schema.dump();
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  auto g = grammar::compile_json_schema(schema);  // throws; outside the lock (may take ms)
  std::lock_guard<std::mutex> lock(mu);
  if (cache.emplace(key, g).second) {
    order.push_back(key);
    if (order.size() > 64) {
      cache.erase(order.front());
      order.pop_front();
    }
  }
  return g;
}

std::variant<std::shared_ptr<const grammar::Grammar>, ApiError> compile(const ojson& schema,
                                                                        const char* param) {
  try {
    return compile_cached(schema);
  } catch (const Error& e) {
    return invalid_request(cat("the JSON schema cannot be used: ", e.what()), param);
  }
}

// A tool's `function` object, checked.
const ojson* function_of(const ojson& tool) {
  if (!tool.is_object() || tool.value("type", "") != "function") return nullptr;
  auto f = tool.find("function");
  if (f == tool.end() || !f->is_object()) return nullptr;
  auto name = f->find("name");
  if (name == f->end() || !name->is_string()) return nullptr;
  return &*f;
}

ojson parameters_of(const ojson& function) {
  auto p = function.find("parameters");
  if (p == function.end() || p->is_null()) return ojson{{"type", "object"}};
  return *p;
}

}  // namespace

std::variant<std::shared_ptr<const grammar::Grammar>, ApiError> response_format_grammar(
    const ojson& rf) {
  const char* param = "response_format";
  auto type = rf.is_object() ? rf.find("type") : rf.end();
  if (!rf.is_object() || type == rf.end() || !type->is_string())
    return invalid_request("'response_format' must be an object with a 'type'", param);
  if (*type == "text") return std::shared_ptr<const grammar::Grammar>();
  if (*type == "json_object") return grammar::json_object_grammar();
  if (*type != "json_schema")
    return invalid_request(
        cat("'response_format' type must be 'text', 'json_object' or 'json_schema', got ",
            type->dump()),
        param);
  auto js = rf.find("json_schema");
  if (js == rf.end() || !js->is_object())
    return invalid_request("'response_format.json_schema' must be an object", param);
  auto name = js->find("name");
  if (name == js->end() || !name->is_string())
    return invalid_request("'response_format.json_schema.name' must be a string", param);
  auto schema = js->find("schema");
  if (schema == js->end() || schema->is_null()) return grammar::json_object_grammar();
  if (!schema->is_object() && !schema->is_boolean())
    return invalid_request("'response_format.json_schema.schema' must be an object", param);
  return compile(*schema, param);
}

std::variant<ForcedTools, ApiError> tool_choice_of(const ojson& tc, const ojson& tools,
                                                   bool parallel) {
  const char* param = "tool_choice";
  ForcedTools out;
  if (tc.is_string() && tc == "auto") return out;
  if (tc.is_string() && tc == "none") {
    out.choice = ApiRequest::ToolChoice::kNone;
    return out;
  }
  const bool is_named = tc.is_object();
  if (!(tc.is_string() && tc == "required") && !is_named)
    return invalid_request("'tool_choice' must be 'auto', 'none', 'required' or a function object",
                           param);
  if (!tools.is_array() || tools.empty())
    return invalid_request("'tool_choice' other than 'auto' or 'none' needs 'tools'", param);
  for (size_t i = 0; i < tools.size(); ++i)
    if (!function_of(tools[i]))
      return invalid_request(
          cat("tools[", i, "] must be {\"type\": \"function\", \"function\": {\"name\": ...}}"),
          cat("tools[", i, "]"));
  if (is_named) {
    auto f = tc.find("function");
    if (tc.value("type", "") != "function" || f == tc.end() || !f->is_object() ||
        !f->contains("name") || !(*f)["name"].is_string())
      return invalid_request(
          "'tool_choice' must be {\"type\": \"function\", \"function\": {\"name\": ...}}", param);
    out.function = (*f)["name"].get<std::string>();
    for (const ojson& t : tools) {
      const ojson& fn = *function_of(t);
      if (fn["name"] != out.function) continue;
      auto g = compile(parameters_of(fn), param);
      if (auto* e = std::get_if<ApiError>(&g)) return *e;
      out.choice = ApiRequest::ToolChoice::kNamed;
      out.grammar = std::get<std::shared_ptr<const grammar::Grammar>>(g);
      return out;
    }
    return invalid_request(cat("'tool_choice' names '", out.function, "', which is not in 'tools'"),
                           param);
  }
  // required: an array of calls. A tool's $defs move to the root, where its "#/$defs/..." refs
  // point once its parameters are nested in the array's schema.
  ojson defs = ojson::object();
  ojson alts = ojson::array();
  for (const ojson& t : tools) {
    const ojson& fn = *function_of(t);
    ojson params = parameters_of(fn);
    for (const char* key : {"$defs", "definitions"}) {
      if (!params.is_object() || !params.contains(key)) continue;
      if (!params[key].is_object())
        return invalid_request(cat("the parameters of '", fn["name"].get<std::string>(), "': '",
                                   key, "' must be an object"),
                               "tools");
      for (const auto& [k, v] : params[key].items()) {
        if (defs.contains(k) && defs[k] != v)
          return invalid_request(cat("two tools define '", k, "' differently in their $defs"),
                                 "tools");
        defs[k] = v;
      }
      params.erase(key);
    }
    ojson call = {{"type", "object"},
                  {"properties", {{"name", {{"const", fn["name"]}}}, {"parameters", params}}},
                  {"required", {"name", "parameters"}},
                  {"additionalProperties", false}};
    alts.push_back(std::move(call));
  }
  // At most kMaxParallelCalls calls: a model that keeps opening calls would otherwise run the
  // array to max_tokens, and a cut array is no call at all.
  ojson schema = {{"type", "array"},
                  {"minItems", 1},
                  {"maxItems", parallel ? kMaxParallelCalls : 1},
                  {"items", {{"anyOf", alts}}}};
  if (!defs.empty()) {
    schema["$defs"] = defs;
    schema["definitions"] = defs;
  }
  auto g = compile(schema, param);
  if (auto* e = std::get_if<ApiError>(&g)) return *e;
  out.choice = ApiRequest::ToolChoice::kRequired;
  out.grammar = std::get<std::shared_ptr<const grammar::Grammar>>(g);
  return out;
}

std::optional<std::vector<std::pair<std::string, std::string>>> required_calls(
    const std::string& output) {
  const ojson j = ojson::parse(output, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array() || j.empty()) return std::nullopt;
  std::vector<std::pair<std::string, std::string>> calls;
  for (const ojson& c : j) {
    if (!c.is_object() || !c.contains("name") || !c["name"].is_string() ||
        !c.contains("parameters"))
      return std::nullopt;
    calls.emplace_back(c["name"].get<std::string>(), dump(c["parameters"]));
  }
  return calls;
}

}  // namespace tandem::openai
