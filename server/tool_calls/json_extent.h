// Where one JSON object or array ends, found while its text arrives in pieces: brackets are
// matched outside strings (a '}' or "</tool_call>" inside a string argument does not end a call).
// Only the extent is found here; the parser validates the text once it is complete. Fed the
// same text, the scanner stops at the same byte however the text was cut.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace tandem::tool_calls {

class JsonExtent {
 public:
  enum class State { kRunning, kDone, kFailed };

  // Nesting deeper than max_depth fails (a parsed value is printed recursively).
  explicit JsonExtent(size_t max_depth) : max_depth_(max_depth) {}

  // Starts over; the next byte fed must be the opening '{' or '['.
  void reset();

  // Scans text[*pos, text.size()), advancing *pos. kDone: *pos is one past the closing bracket;
  // kFailed: *pos is at the offending byte (a mismatched bracket, too deep, or a first byte that
  // opens no object or array); kRunning: everything was consumed. Once kDone or kFailed, feed()
  // returns that again and leaves *pos alone.
  State feed(std::string_view text, size_t* pos);

 private:
  size_t max_depth_;
  std::vector<char> closers_;  // the closing bracket of each open level, innermost last
  bool started_ = false;
  bool in_string_ = false;
  bool escaped_ = false;
  State state_ = State::kRunning;
};

}  // namespace tandem::tool_calls
