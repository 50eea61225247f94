// Reading {"name": "...", "arguments": { ahead of the rest of a call (see call_header.h).
#include "server/tool_calls/call_header.h"

#include <initializer_list>
#include <nlohmann/json.hpp>

namespace tandem::tool_calls {

namespace {

using Status = CallHeader::Status;

// A cursor over the header text; each step answers kYes (consumed), kNeedMore (the text ends
// first) or kNo (the text differs).
struct Cursor {
  std::string_view s;
  size_t i = 0;

  void space() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) ++i;
  }
  Status literal(std::initializer_list<std::string_view> options) {
    space();
    bool prefix = false;
    for (std::string_view lit : options) {
      const std::string_view rest = s.substr(i);
      if (rest.substr(0, lit.size()) == lit) {
        i += lit.size();
        return Status::kYes;
      }
      if (rest.size() < lit.size() && lit.substr(0, rest.size()) == rest) prefix = true;
    }
    return prefix ? Status::kNeedMore : Status::kNo;
  }
  // A JSON string, decoded into *out.
  Status string(std::string* out) {
    space();
    if (i == s.size()) return Status::kNeedMore;
    if (s[i] != '"') return Status::kNo;
    size_t j = i + 1;
    for (; j < s.size() && s[j] != '"'; ++j)
      if (s[j] == '\\') ++j;
    if (j >= s.size()) return Status::kNeedMore;
    const auto v = nlohmann::json::parse(s.substr(i, j + 1 - i), nullptr, false);
    if (!v.is_string() || v.get_ref<const std::string&>().empty()) return Status::kNo;
    *out = v.get<std::string>();
    i = j + 1;
    return Status::kYes;
  }
};

}  // namespace

CallHeader read_call_header(std::string_view text) {
  CallHeader h;
  Cursor c{text.substr(0, kMaxCallHeader)};
  Status st = c.literal({"{"});
  if (st == Status::kYes) st = c.literal({"\"name\""});
  if (st == Status::kYes) st = c.literal({":"});
  if (st == Status::kYes) st = c.string(&h.name);
  if (st == Status::kYes) st = c.literal({","});
  if (st == Status::kYes) st = c.literal({"\"arguments\"", "\"parameters\""});
  if (st == Status::kYes) st = c.literal({":"});
  if (st == Status::kYes) {
    c.space();
    st = c.i == c.s.size() ? Status::kNeedMore : c.s[c.i] == '{' ? Status::kYes : Status::kNo;
  }
  if (st == Status::kNeedMore && text.size() >= kMaxCallHeader) st = Status::kNo;
  h.status = st;
  if (st == Status::kYes) h.args_start = c.i;
  return h;
}

}  // namespace tandem::tool_calls
