// Accumulating streamed deltas, the one-shot parse, and the OpenAI JSON shapes of parsed calls
// (declared in tool_call_parser.h).
#include "server/tool_calls/tool_call_parser.h"

namespace tandem::tool_calls {

ParsedOutput parse_all(std::string_view text, const ParserOptions& options, uint64_t seed) {
  ToolCallParser parser(options, seed);
  ParsedOutput out;
  accumulate(out, parser.push(text));
  accumulate(out, parser.finish());
  return out;
}

void accumulate(ParsedOutput& into, const ParserDelta& delta) {
  into.content += delta.content;
  into.reasoning_content += delta.reasoning_content;
  for (const ToolCallDelta& d : delta.tool_calls) {
    if (d.index >= into.tool_calls.size()) into.tool_calls.resize(d.index + 1);
    ToolCall& call = into.tool_calls[d.index];
    if (!d.id.empty()) call.id = d.id;
    if (!d.name.empty()) call.name = d.name;
    call.arguments += d.arguments;
  }
}

nlohmann::ordered_json tool_call_delta_json(const ToolCallDelta& call) {
  nlohmann::ordered_json j;
  j["index"] = call.index;
  if (!call.id.empty()) {
    j["id"] = call.id;
    j["type"] = "function";
  }
  nlohmann::ordered_json fn = nlohmann::ordered_json::object();
  if (!call.name.empty()) fn["name"] = call.name;
  fn["arguments"] = call.arguments;
  j["function"] = std::move(fn);
  return j;
}

nlohmann::ordered_json tool_call_json(const ToolCall& call) {
  nlohmann::ordered_json j;
  j["id"] = call.id;
  j["type"] = "function";
  j["function"] = {{"name", call.name}, {"arguments", call.arguments}};
  return j;
}

}  // namespace tandem::tool_calls
