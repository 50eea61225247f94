// StopMatcher: finds stop strings in streamed text across token boundaries. Text that could still
// become the start of a match is held back; on a match the text is cut before it and the matched
// text (and anything after it) is never released.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tandem {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Adds newly decoded (complete UTF-8) text; returns the text safe to release now. After a
  // match, matched() is true and nothing more is ever released.
  std::string push(std::string_view text);
  // No more text will come: releases what is held back (it did not become a match).
  std::string finish();
  bool matched() const { return matched_; }
  // Bytes held back now (for tests).
  size_t held() const { return held_.size(); }

 private:
  std::vector<std::string> stops_;  // non-empty stop strings
  std::string held_;                // text not yet released
  bool matched_ = false;
};

}  // namespace tandem
