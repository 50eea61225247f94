// Which tool-call syntax and which reasoning markers a model writes, read from its chat template's
// source text (a template shows the model how earlier calls looked, so it names the syntax the
// model was trained on), or chosen by name with the server's --tool-call-parser and
// --reasoning-parser flags. The parser of the model's output is
// server/tool_calls/tool_call_parser.h.
#pragma once

#include <optional>
#include <string_view>

namespace tandem::tool_calls {

enum class ToolFormat {
  kNone,        // no tool-call parsing: the output is content (and reasoning)
  kHermes,      // Qwen 2.5 / Qwen 3 / Hermes: <tool_call>\n{"name": ..., "arguments":
                // {...}}\n</tool_call>
  kLlama3Json,  // Llama 3.1 / 3.2: {"name": ..., "parameters": {...}}, optionally after
                // <|python_tag|>, several separated by ';' or whitespace
  kMistral,     // Mistral: [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] or, in newer
                // tokenizers, [TOOL_CALLS]name[ARGS]{...}
};

enum class ReasoningFormat {
  kNone,   // <think> is plain text
  kThink,  // <think>...</think> at the start of the output is reasoning_content (Qwen 3,
           // DeepSeek-R1, QwQ)
};

// Detection from the template source. Hermes: the template writes <tool_call>; Mistral: it writes
// [TOOL_CALLS]; Llama 3 JSON: a Llama 3 header template (<|start_header_id|>) that writes
// <|python_tag|> or asks for {"name": ..., "parameters": ...}. Anything else (ChatML without tool
// syntax, DeepSeek V3's <｜tool▁calls▁begin｜>, Gemma, Phi-3, ...) is kNone.
ToolFormat detect_tool_format(std::string_view template_source);
// kThink when the template handles </think> (it strips or re-emits earlier reasoning).
ReasoningFormat detect_reasoning_format(std::string_view template_source);

// True when the rendered prompt ends inside an open <think> (the generation prompt of DeepSeek-R1
// and of Qwen 3 "thinking" templates writes the opening tag itself), so the output starts as
// reasoning; false after Qwen 3's enable_thinking=false prompt, which closes it
// ("<think>\n\n</think>\n\n").
bool prompt_opens_reasoning(std::string_view rendered_prompt);

// Flag values: "hermes", "llama3_json", "mistral", "none" / "think", "none"; nullopt for any other
// name ("auto" included: resolve_* handles it).
std::optional<ToolFormat> tool_format_from_name(std::string_view name);
std::optional<ReasoningFormat> reasoning_format_from_name(std::string_view name);
const char* tool_format_name(ToolFormat format);
const char* reasoning_format_name(ReasoningFormat format);

// A flag's value resolved against the template: "auto" detects, a format name is taken as is;
// throws tandem::Error (kInvalidArgument) naming the accepted values for anything else.
ToolFormat resolve_tool_format(std::string_view flag, std::string_view template_source);
ReasoningFormat resolve_reasoning_format(std::string_view flag, std::string_view template_source);

}  // namespace tandem::tool_calls
