// A small backtracking regex engine over code points, for the pre-tokenizer patterns found in
// tokenizer.json files (GPT-2, Llama-3, Qwen, DeepSeek style). Semantics follow ECMAScript with
// the `u` flag, which is what the JS reference uses: leftmost-first alternation, \s is JS
// whitespace, \d and \w are ASCII, \p{..} uses the generated Unicode 17 tables. Extensions seen
// in HF patterns: (?i:...) groups (ASCII case folding only, as the JS port rewrites them), \pL.
// Supported: literals, escapes (\r \n \t \f \v \0 \xHH \x{H} \uHHHH \u{H} \s \S \d \D \w \W
// \p{..} \P{..}), classes with ranges, ., ^, $, groups (?:) (?i:) (..), lookahead (?=) (?!),
// quantifiers ? * + {n} {n,} {n,m} and their lazy forms. Anything else throws kUnsupported.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

class Regex {
 public:
  // Throws tandem::Error(kUnsupported) naming the pattern and the problem.
  static Regex compile(std::string_view pattern);
  // A regex matching exactly `text` (for {"String": ...} patterns).
  static Regex literal(std::string_view text);

  // Leftmost match in text[from, n): sets [*begin, *end) and returns true, or returns false.
  bool search(const char32_t* text, size_t n, size_t from, size_t* begin, size_t* end) const;
  // All non-overlapping matches as [begin, end) pairs, like String.prototype.matchAll.
  std::vector<std::pair<size_t, size_t>> find_all(const char32_t* text, size_t n) const;

 private:
  struct Item {
    enum Kind : uint8_t { kRange, kCategories, kSpace, kDigit, kWord, kAny } kind;
    bool negate = false;
    char32_t lo = 0, hi = 0;
    uint32_t mask = 0;
  };
  struct CharSet {
    std::vector<Item> items;
    bool negate = false;
    bool icase = false;
    bool matches(char32_t c) const;
    bool matches_exact(char32_t c) const;
  };
  enum class Op : uint8_t { kChar, kAlt, kRepeat, kLook, kBol, kEol };
  struct Node {
    Op op = Op::kChar;
    int set = -1;                // kChar
    std::vector<int> alts = {};  // kAlt: head of each branch (-1: empty branch)
    int body = -1;               // kRepeat, kLook: head of the body chain
    int min = 0, max = -1;       // kRepeat; max -1 = unbounded
    bool greedy = true;
    bool single = false;  // kRepeat whose body is one kChar node: matched by run length
    bool negate = false;  // kLook
    int next = -1;
  };
  struct Cont;
  class Parser;

  struct Subject {
    const char32_t* text;
    size_t n;
  };
  bool match(const Subject& s, int n, size_t pos, const Cont* k, size_t* end) const;
  bool match_repeat(const Subject& s, int r, int count, size_t pos, const Cont* k,
                    size_t* end) const;

  std::string pattern_;
  std::vector<Node> nodes_;
  std::vector<CharSet> sets_;
  int head_ = -1;
};

}  // namespace tandem
