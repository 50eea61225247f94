// Tool-call and reasoning format detection and flag names (see tool_format.h).
#include "server/tool_calls/tool_format.h"

#include "kernels/common.h"

namespace tandem::tool_calls {

namespace {

bool has(std::string_view text, std::string_view needle) {
  return text.find(needle) != std::string_view::npos;
}

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

}  // namespace

ToolFormat detect_tool_format(std::string_view source) {
  // Checked in this order: a Hermes template may mention other syntaxes in prose, never the
  // reverse in practice.
  if (has(source, "<tool_call>")) return ToolFormat::kHermes;
  if (has(source, "[TOOL_CALLS]")) return ToolFormat::kMistral;
  if (has(source, "<|start_header_id|>") &&
      (has(source, "<|python_tag|>") || has(source, "\"parameters\"")))
    return ToolFormat::kLlama3Json;
  return ToolFormat::kNone;
}

ReasoningFormat detect_reasoning_format(std::string_view source) {
  return has(source, "</think>") ? ReasoningFormat::kThink : ReasoningFormat::kNone;
}

bool prompt_opens_reasoning(std::string_view prompt) {
  size_t end = prompt.size();
  while (end > 0 && is_space(prompt[end - 1])) --end;
  constexpr std::string_view kOpen = "<think>";
  return end >= kOpen.size() && prompt.substr(end - kOpen.size(), kOpen.size()) == kOpen;
}

std::optional<ToolFormat> tool_format_from_name(std::string_view name) {
  if (name == "hermes") return ToolFormat::kHermes;
  if (name == "llama3_json") return ToolFormat::kLlama3Json;
  if (name == "mistral") return ToolFormat::kMistral;
  if (name == "none") return ToolFormat::kNone;
  return std::nullopt;
}

std::optional<ReasoningFormat> reasoning_format_from_name(std::string_view name) {
  if (name == "think") return ReasoningFormat::kThink;
  if (name == "none") return ReasoningFormat::kNone;
  return std::nullopt;
}

const char* tool_format_name(ToolFormat format) {
  switch (format) {
    case ToolFormat::kHermes:
      return "hermes";
    case ToolFormat::kLlama3Json:
      return "llama3_json";
    case ToolFormat::kMistral:
      return "mistral";
    case ToolFormat::kNone:
      break;
  }
  return "none";
}

const char* reasoning_format_name(ReasoningFormat format) {
  return format == ReasoningFormat::kThink ? "think" : "none";
}

ToolFormat resolve_tool_format(std::string_view flag, std::string_view template_source) {
  if (flag == "auto") return detect_tool_format(template_source);
  const auto format = tool_format_from_name(flag);
  TANDEM_REQUIRE(format.has_value(), kInvalidArgument, "unknown tool-call parser '", flag,
                 "' (accepted: auto, hermes, llama3_json, mistral, none)");
  return *format;
}

ReasoningFormat resolve_reasoning_format(std::string_view flag, std::string_view template_source) {
  if (flag == "auto") return detect_reasoning_format(template_source);
  const auto format = reasoning_format_from_name(flag);
  TANDEM_REQUIRE(format.has_value(), kInvalidArgument, "unknown reasoning parser '", flag,
                 "' (accepted: auto, think, none)");
  return *format;
}

}  // namespace tandem::tool_calls
