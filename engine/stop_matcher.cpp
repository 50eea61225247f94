// Stop-string matching over streamed text.
#include "engine/stop_matcher.h"

#include <algorithm>
#include <utility>

#include "engine/tokenizer/utf8.h"

namespace tandem {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopMatcher::push(std::string_view text) {
  if (matched_) return {};
  held_.append(text);
  if (stops_.empty()) return std::exchange(held_, {});
  // The earliest complete match ends the text.
  size_t cut = std::string::npos;
  for (const std::string& s : stops_) {
    for (size_t at = held_.find(s); at != std::string::npos; at = held_.find(s, at + 1)) {
      if (utf8::is_continuation(held_[at])) continue;  // never cut inside a character
      cut = std::min(cut, at);
      break;
    }
  }
  if (cut != std::string::npos) {
    matched_ = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string: a match can only
  // start there. Everything before it is released.
  size_t keep_from = held_.size();
  for (const std::string& s : stops_) {
    const size_t longest = std::min(held_.size(), s.size() - 1);
    for (size_t len = longest; len > 0; --len) {
      const size_t at = held_.size() - len;
      if (at >= keep_from) break;
      if (!utf8::is_continuation(held_[at]) && held_.compare(at, len, s, 0, len) == 0) {
        keep_from = at;
        break;
      }
    }
  }
  std::string out = held_.substr(0, keep_from);
  held_.erase(0, keep_from);
  return out;
}

std::string StopMatcher::finish() {
  if (matched_) return {};
  return std::exchange(held_, {});
}

}  // namespace tandem
