// A context-free grammar over bytes, the form every constraint (JSON Schema, the GBNF-like text,
// tool calls) is compiled to before decoding. A rule is a list of alternatives; an alternative is
// a sequence of elements, each a byte class (a set of bytes) or a reference to a rule. Literals,
// UTF-8 code point ranges and repetitions are lowered to these by GrammarBuilder, so the matcher
// (engine/grammar/matcher.h) knows only bytes: a token that ends in the middle of a UTF-8
// character is just a prefix the grammar can still complete.
//
// GrammarBuilder::finish() rejects what the matcher could not run safely: undefined rules, left
// recursion (a rule reaching itself without consuming a byte, e.g. `a ::= a "x"` or `(x?)*`), a
// root that derives no finite string, and sizes above the limits; it drops the alternatives that
// derive no finite string (so every live state can be completed, and a token mask never leads
// into a dead end). Errors are tandem::Error kInvalidArgument naming the rule.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::grammar {

// A set of bytes, 256 bits.
struct ByteSet {
  uint64_t w[4] = {0, 0, 0, 0};
  bool has(uint8_t b) const { return (w[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t b) { w[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  bool empty() const { return (w[0] | w[1] | w[2] | w[3]) == 0; }
  bool operator<(const ByteSet& o) const {
    return std::lexicographical_compare(w, w + 4, o.w, o.w + 4);
  }
  static ByteSet of(uint8_t b) {
    ByteSet s;
    s.add(b);
    return s;
  }
};

enum class ElemKind : uint8_t { kEnd, kClass, kRule };
struct Elem {
  ElemKind kind = ElemKind::kEnd;
  uint32_t id = 0;  // class index or rule index
};
using Seq = std::vector<Elem>;

// Inclusive code point range.
using CpRange = std::pair<char32_t, char32_t>;

// Sizes past which a grammar is refused (a hostile schema must fail fast, not exhaust memory).
inline constexpr size_t kMaxRules = 100000;
inline constexpr size_t kMaxElems = 1000000;
inline constexpr uint32_t kUnbounded = 0xFFFFFFFFu;

// The compiled grammar: a flat program. elems() holds every alternative of every rule, each
// ended by a kEnd element; a position is an index into elems().
class Grammar {
 public:
  const std::vector<Elem>& elems() const { return elems_; }
  const std::vector<uint32_t>& alts(uint32_t rule) const { return alts_[rule]; }
  const ByteSet& byte_class(uint32_t id) const { return classes_[id]; }
  uint32_t root() const { return root_; }
  size_t n_rules() const { return alts_.size(); }
  const std::string& rule_name(uint32_t rule) const { return names_[rule]; }

 private:
  friend class GrammarBuilder;
  std::vector<Elem> elems_;
  std::vector<std::vector<uint32_t>> alts_;  // per rule: start positions
  std::vector<ByteSet> classes_;
  std::vector<std::string> names_;
  uint32_t root_ = 0;
};

class GrammarBuilder {
 public:
  Elem byte_class(const ByteSet& s);
  Elem byte(uint8_t b) { return byte_class(ByteSet::of(b)); }
  Seq literal(std::string_view bytes);
  // A rule to define later (recursion); names need not be unique (a suffix is added).
  Elem declare(std::string_view name);
  void define(Elem rule, std::vector<Seq> alts);
  Elem rule(std::string_view name, std::vector<Seq> alts);
  // body{min,max} (max = kUnbounded for no bound), lowered to right-recursive rules.
  Elem repeat(std::string_view name, const Seq& body, uint32_t min, uint32_t max);
  // One UTF-8 character whose code point is in (or, negated, not in) the ranges; surrogates
  // are never included.
  Elem codepoints(std::string_view name, std::vector<CpRange> ranges, bool negate);
  size_t n_rules() const { return rules_.size(); }

  // Validates and flattens; the builder is left empty.
  std::shared_ptr<const Grammar> finish(Elem root);

 private:
  struct Rule {
    std::string name;
    std::vector<Seq> alts;
    bool defined = false;
  };
  void check_size() const;
  std::vector<Rule> rules_;
  std::vector<ByteSet> classes_;
  std::map<ByteSet, uint32_t> class_ids_;
  std::map<std::string, uint32_t, std::less<>> name_count_;
  size_t n_elems_ = 0;
};

// Ranges sorted and merged (empty ones dropped, clamped to U+10FFFF); with negate, the code
// points they do not cover.
std::vector<CpRange> normalize_ranges(std::vector<CpRange> ranges, bool negate);

// The UTF-8 byte-class sequences covering code points [lo, hi] (lo <= hi, no surrogates inside).
std::vector<std::vector<std::pair<uint8_t, uint8_t>>> utf8_sequences(char32_t lo, char32_t hi);

// A small GBNF-like text syntax (llama.cpp style), for tests and tool-call formats:
//   root ::= "{" ws item ("," ws item)* "}"   # comment
//   item ::= [a-z0-9_]+ | "\"" [^"\\]* "\""
// Literals "..." with \n \t \r \\ \" \xHH \uHHHH escapes, classes [...] / [^...] of code
// points, rule names, ( ... ) groups, postfix * + ? {m} {m,} {m,n}. The root rule is `root`.
std::shared_ptr<const Grammar> compile_grammar_text(std::string_view text);

}  // namespace tandem::grammar
