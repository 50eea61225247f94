// JSON nesting depth without parsing (see kernels/json_depth.h).
#include "kernels/json_depth.h"

#include "kernels/common.h"

namespace tandem {

size_t json_depth(std::string_view text, size_t max_depth) {
  size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped character cannot end the string
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
      if (deepest > max_depth) return max_depth + 1;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

void check_json_depth(std::string_view text, size_t max_depth, std::string_view what) {
  TANDEM_REQUIRE(json_depth(text, max_depth) <= max_depth, kInvalidArgument, what,
                 ": JSON nested deeper than ", max_depth, " levels");
}

}  // namespace tandem
