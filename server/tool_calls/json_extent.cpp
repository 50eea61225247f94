// Incremental bracket matching over JSON text (see json_extent.h).
#include "server/tool_calls/json_extent.h"

namespace tandem::tool_calls {

void JsonExtent::reset() {
  closers_.clear();
  started_ = false;
  in_string_ = false;
  escaped_ = false;
  state_ = State::kRunning;
}

JsonExtent::State JsonExtent::feed(std::string_view text, size_t* pos) {
  if (state_ != State::kRunning) return state_;
  for (size_t i = *pos; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string_) {
      if (escaped_)
        escaped_ = false;
      else if (c == '\\')
        escaped_ = true;
      else if (c == '"')
        in_string_ = false;
      continue;
    }
    if (!started_ && c != '{' && c != '[') {
      *pos = i;
      return state_ = State::kFailed;
    }
    started_ = true;
    if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      if (closers_.size() >= max_depth_) {
        *pos = i;
        return state_ = State::kFailed;
      }
      closers_.push_back(c == '{' ? '}' : ']');
    } else if (c == '}' || c == ']') {
      if (c != closers_.back()) {
        *pos = i;
        return state_ = State::kFailed;
      }
      closers_.pop_back();
      if (closers_.empty()) {
        *pos = i + 1;
        return state_ = State::kDone;
      }
    }
  }
  *pos = text.size();
  return State::kRunning;
}

}  // namespace tandem::tool_calls
