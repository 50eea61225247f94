// Nesting depth of JSON text, measured before it is parsed. nlohmann::json parses any depth
// without recursion, but copying, comparing and printing a parsed value recurse once per level
// (and so do Tandem's own walks: the Jinja engine's conversion, the tokenizer.json pipeline), and
// a deep value costs tens of bytes per level: text from outside is refused above a fixed depth.
#pragma once

#include <cstddef>
#include <string_view>

namespace tandem {

// Model files (config.json, tokenizer.json, safetensors headers and indexes) nest a few levels.
constexpr size_t kMaxFileJsonDepth = 64;
// Request bodies: tools carry JSON schemas, which nest more than anything else a client sends.
constexpr size_t kMaxRequestJsonDepth = 128;

// The deepest nesting of arrays and objects in `text` (strings skipped), or max_depth + 1 as soon
// as that is exceeded. Linear, no allocation. Text that is not JSON still gives a number; the
// parser rejects it afterwards.
size_t json_depth(std::string_view text, size_t max_depth);

// Throws tandem::Error(kInvalidArgument) "<what>: JSON nested deeper than <max_depth> levels".
void check_json_depth(std::string_view text, size_t max_depth, std::string_view what);

}  // namespace tandem
