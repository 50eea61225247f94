// The start of a call object as models write it, {"name": "<name>", "arguments": {  (or
// "parameters"), read before the rest of the call arrives so that its arguments can be streamed.
// Only this order of keys is read; any other object is left to the whole-call path.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tandem::tool_calls {

struct CallHeader {
  enum class Status { kNeedMore, kNo, kYes };
  Status status = Status::kNeedMore;
  std::string name;       // kYes: the decoded, non-empty name
  size_t args_start = 0;  // kYes: offset of the arguments' '{' in the text
};

// text starts at the call's '{'. kNeedMore while text is a proper prefix of such a header;
// a header not complete within its first kMaxCallHeader bytes is kNo (the whole-call path).
constexpr size_t kMaxCallHeader = 4096;
CallHeader read_call_header(std::string_view text);

}  // namespace tandem::tool_calls
