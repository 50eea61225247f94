// The pre-tokenizer and normalizer regexes of tokenizer.json files, run by PCRE2 (JIT-compiled,
// 32-bit code units, so it matches the tokenizer's code point arrays in place). Patterns are
// written for Oniguruma, the engine of the Rust HF tokenizers library; PCRE2 with UTF + UCP reads
// them the same way (\p{..}, Unicode \s \d \w, (?i:) with Unicode case folding, lookaround), and
// Tandem's ids equal the Rust library's on every fixture (docs/tokenizer-regex.md has the
// measurement). Oniguruma's \uHHHH escape is translated to PCRE2's \x{HHHH}.
//
// Step limit: user text must never hang a request. Each search gets PCRE2's match limit, and the
// whole find_all() a time budget (for a pattern that is merely slow per match but called once per
// match, which no per-call limit sees). Running out throws tandem::Error(kInvalidArgument), which
// the OpenAI layer answers with 400.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem {

struct RegexLimits {
  uint64_t match_limit = 10'000'000;  // PCRE2 match limit of one search (its default, like Onig's)
  double seconds = 2.0;               // time budget of one find_all, plus...
  double seconds_per_char = 1e-6;     // ...this per code point (~30x the normal speed)
};

class Regex {
 public:
  // Throws tandem::Error(kUnsupported) naming the pattern and PCRE2's message.
  static Regex compile(std::string_view pattern);
  // A regex matching exactly `text` (for {"String": ...} patterns).
  static Regex literal(std::string_view text);

  // All non-overlapping matches in text[0, n) as [begin, end) code point offsets, leftmost first.
  // As the Rust library's iterator, an empty match right where the previous match ended is
  // skipped. Throws tandem::Error(kInvalidArgument) when the step limit or time budget runs out.
  std::vector<std::pair<size_t, size_t>> find_all(const char32_t* text, size_t n) const;

  // For tests: the limits of this regex (the defaults otherwise).
  void set_limits(const RegexLimits& limits) { limits_ = limits; }
  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  static std::shared_ptr<const Code> compile_code(const std::vector<char32_t>& units,
                                                  uint32_t options, std::string_view pattern);
  std::shared_ptr<const Code> code_;
  std::string pattern_;
  RegexLimits limits_;
};

}  // namespace tandem
