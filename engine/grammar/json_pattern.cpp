// JsonParts::pattern: the practical subset of ECMA-262 regexes JSON Schema `pattern` uses,
// compiled to grammar rules over the *JSON-escaped* characters of a string's content (a `"` in
// the pattern becomes `\"` in the output, a newline `\n`, ...). Supported: literals, escapes
// (\d \w \s and their negations, \n \t \r \f \v \0 \xHH \uHHHH, escaped punctuation), classes
// with ranges and negation, `.`, groups (capturing, (?:...), named), alternation, the
// quantifiers ? * + {m} {m,} {m,n} (lazy forms accepted as greedy: same language), and ^ / $ at
// the ends of top-level alternatives. Lookarounds, backreferences and word boundaries are
// tandem::Error(kUnsupported) naming the construct.
#include <algorithm>

#include "engine/grammar/json_parts.h"
#include "engine/tokenizer/utf8.h"
#include "kernels/common.h"

namespace tandem::grammar {

namespace {

constexpr int kMaxGroupDepth = 50;

// How a character that JSON must escape is written (one canonical form).
std::string json_escape(char32_t c) {
  switch (c) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\n':
      return "\\n";
    case '\t':
      return "\\t";
    case '\r':
      return "\\r";
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    default: {
      static const char* kHex = "0123456789abcdef";
      return std::string("\\u00") + kHex[c >> 4] + kHex[c & 15];
    }
  }
}

struct Frag {
  Seq seq;
  bool nullable = true;
};

class RegexParser {
 public:
  RegexParser(JsonParts& p, std::string_view re) : p_(p), b_(p.builder()), re_(re) {}

  Elem run(bool search) {
    std::vector<Seq> alts;
    do {
      alts.push_back(top_alternative(search));
    } while (eat('|'));
    if (i_ < re_.size()) fail("unbalanced ')'");
    return b_.rule("pattern", std::move(alts));
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    TANDEM_FAIL(kInvalidArgument, "pattern '", re_, "': ", what, " at offset ", i_);
  }
  [[noreturn]] void unsupported(const std::string& what) const {
    TANDEM_FAIL(kUnsupported, "pattern '", re_, "': ", what, " is not supported");
  }
  bool eat(char c) {
    if (i_ < re_.size() && re_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }

  Seq top_alternative(bool search) {
    const bool start = eat('^');
    Frag body = concat(0);
    const bool end = eat('$');
    if (i_ < re_.size() && re_[i_] != '|') fail("'$' before the end");
    Seq s;
    if (search && !start) s.push_back(any_star());
    s.insert(s.end(), body.seq.begin(), body.seq.end());
    if (search && !end) s.push_back(any_star());
    return s;
  }

  Elem any_star() {
    if (!any_star_) any_star_ = b_.repeat("pattern_any", {p_.string_char()}, 0, kUnbounded);
    return *any_star_;
  }

  Frag alternatives(int depth) {
    if (depth > kMaxGroupDepth) fail("groups nested too deeply");
    std::vector<Seq> alts;
    bool nullable = false;
    do {
      Frag f = concat(depth);
      nullable = nullable || f.nullable;
      alts.push_back(std::move(f.seq));
    } while (eat('|'));
    if (alts.size() == 1) return {std::move(alts[0]), nullable};
    return {{b_.rule("pattern_group", std::move(alts))}, nullable};
  }

  Frag concat(int depth) {
    Frag out;
    while (i_ < re_.size()) {
      const char c = re_[i_];
      if (c == '|' || c == ')') break;
      if (c == '$') {
        if (depth == 0 && (i_ + 1 == re_.size() || re_[i_ + 1] == '|')) break;
        unsupported("'$' inside the pattern");
      }
      if (c == '^') unsupported("'^' inside the pattern");
      Frag atom_frag = atom(depth);
      quantify(atom_frag);
      out.nullable = out.nullable && atom_frag.nullable;
      out.seq.insert(out.seq.end(), atom_frag.seq.begin(), atom_frag.seq.end());
    }
    return out;
  }

  Frag atom(int depth) {
    const char c = re_[i_];
    if (c == '(') {
      ++i_;
      if (eat('?')) {
        if (eat(':')) {
        } else if (i_ < re_.size() && re_[i_] == '<' && i_ + 1 < re_.size() && re_[i_ + 1] != '=' &&
                   re_[i_ + 1] != '!') {
          while (i_ < re_.size() && re_[i_] != '>') ++i_;
          if (!eat('>')) fail("unterminated group name");
        } else {
          unsupported("lookaround (?...)");
        }
      }
      Frag f = alternatives(depth + 1);
      if (!eat(')')) fail("missing ')'");
      return f;
    }
    if (c == '[') return {{set_elem(char_class())}, false};
    if (c == '.') {
      ++i_;
      return {{set_elem({{'\n', '\n'}}, true)}, false};
    }
    if (c == '*' || c == '+' || c == '?') fail("nothing to repeat");
    if (c == '\\') {
      ++i_;
      std::vector<CpRange> r;
      bool neg = false;
      if (class_escape(r, neg)) return {{set_elem(r, neg)}, false};
      return {{set_elem({{escape_char(), 0}}, false, true)}, false};
    }
    const char32_t cp = utf8::next(re_, i_);
    return {{set_elem({{cp, cp}})}, false};
  }

  void quantify(Frag& f) {
    if (i_ >= re_.size()) return;
    uint32_t lo, hi;
    const char c = re_[i_];
    if (c == '*' || c == '+' || c == '?') {
      ++i_;
      lo = c == '+' ? 1 : 0;
      hi = c == '?' ? 1 : kUnbounded;
    } else if (c == '{' && counted(lo, hi)) {
    } else {
      return;
    }
    eat('?');  // lazy: same language
    if (i_ < re_.size() && (re_[i_] == '+' || re_[i_] == '*' || re_[i_] == '{'))
      fail("nested quantifier");
    if (f.seq.empty()) return;
    if (f.nullable && hi == kUnbounded)
      unsupported("an unbounded repetition of something that can match the empty string");
    f.seq = {b_.repeat("pattern_rep", f.seq, lo, hi)};
    f.nullable = f.nullable || lo == 0;
  }

  // {m} {m,} {m,n}; false (nothing consumed) when the brace is a literal.
  bool counted(uint32_t& lo, uint32_t& hi) {
    const size_t save = i_++;
    auto num = [&](uint32_t& v) {
      const size_t start = i_;
      uint64_t x = 0;
      while (i_ < re_.size() && re_[i_] >= '0' && re_[i_] <= '9') {
        x = x * 10 + static_cast<uint64_t>(re_[i_++] - '0');
        if (x > kMaxCount)
          TANDEM_FAIL(kInvalidArgument, "pattern '", re_, "': repetition count above ", kMaxCount);
      }
      v = static_cast<uint32_t>(x);
      return i_ > start;
    };
    if (!num(lo)) {
      i_ = save;
      return false;
    }
    hi = lo;
    if (eat(',')) {
      if (!num(hi)) hi = kUnbounded;
    }
    if (!eat('}')) {
      i_ = save;
      return false;
    }
    if (hi < lo) fail("{m,n} with m > n");
    return true;
  }

  // \d \D \w \W \s \S after the backslash.
  bool class_escape(std::vector<CpRange>& r, bool& neg) {
    if (i_ >= re_.size()) fail("trailing backslash");
    const char c = re_[i_];
    const char lower = static_cast<char>(c | 0x20);
    if (lower != 'd' && lower != 'w' && lower != 's') return false;
    ++i_;
    neg = c != lower;
    if (lower == 'd') r = {{'0', '9'}};
    if (lower == 'w') r = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    if (lower == 's') r = {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0xFEFF, 0xFEFF}};
    return true;
  }

  char32_t escape_char() {
    if (i_ >= re_.size()) fail("trailing backslash");
    const char c = re_[i_++];
    switch (c) {
      case 'n':
        return '\n';
      case 't':
        return '\t';
      case 'r':
        return '\r';
      case 'f':
        return '\f';
      case 'v':
        return '\v';
      case '0':
        return 0;
      case 'x':
        return hex(2);
      case 'u':
        return hex(4);
      case 'b':
      case 'B':
        unsupported("a word boundary \\b");
      default:
        if (c >= '1' && c <= '9') unsupported("a backreference");
        --i_;
        return utf8::next(re_, i_);
    }
  }

  char32_t hex(int n) {
    char32_t v = 0;
    for (int k = 0; k < n; ++k) {
      if (i_ >= re_.size()) fail("short hex escape");
      const char c = re_[i_++];
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) fail("bad hex escape");
      v = v * 16 + static_cast<char32_t>(d);
    }
    return v;
  }

  // [...] after the '['; returns positive ranges.
  std::vector<CpRange> char_class() {
    ++i_;
    const bool negate = eat('^');
    std::vector<CpRange> r;
    bool first = true;
    while (i_ < re_.size() && (re_[i_] != ']' || first)) {
      first = false;
      char32_t lo;
      if (re_[i_] == '\\') {
        ++i_;
        std::vector<CpRange> sub;
        bool neg = false;
        if (class_escape(sub, neg)) {
          for (const CpRange& c : normalize_ranges(sub, neg)) r.push_back(c);
          continue;
        }
        lo = escape_char();
      } else {
        lo = utf8::next(re_, i_);
      }
      char32_t hi = lo;
      if (i_ + 1 < re_.size() && re_[i_] == '-' && re_[i_ + 1] != ']') {
        ++i_;
        if (re_[i_] == '\\') {
          ++i_;
          hi = escape_char();
        } else {
          hi = utf8::next(re_, i_);
        }
        if (hi < lo) fail("class range out of order");
      }
      r.emplace_back(lo, hi);
    }
    if (!eat(']')) fail("missing ']'");
    return normalize_ranges(std::move(r), negate);
  }

  // One JSON-escaped character whose value is in the set. `single`: ranges[0].first alone.
  Elem set_elem(std::vector<CpRange> ranges, bool negate = false, bool single = false) {
    if (single) ranges[0].second = ranges[0].first;
    const std::vector<CpRange> pos = normalize_ranges(std::move(ranges), negate);
    std::vector<CpRange> plain;
    std::vector<Seq> alts;
    auto special = [](char32_t c) { return c < 0x20 || c == '"' || c == '\\'; };
    for (const CpRange& r : pos) {
      char32_t lo = r.first;
      for (char32_t c = r.first; c <= std::min<char32_t>(r.second, 0x5C); ++c) {
        if (!special(c)) continue;
        alts.push_back(b_.literal(json_escape(c)));
        if (c > lo) plain.emplace_back(lo, c - 1);
        lo = c + 1;
      }
      if (lo <= r.second) plain.emplace_back(lo, r.second);
    }
    if (!plain.empty()) {
      const Elem e = b_.codepoints("pattern_char", std::move(plain), false);
      if (alts.empty()) return e;
      alts.insert(alts.begin(), Seq{e});
    }
    return b_.rule("pattern_char", std::move(alts));
  }

  JsonParts& p_;
  GrammarBuilder& b_;
  std::string_view re_;
  size_t i_ = 0;
  std::optional<Elem> any_star_;
};

}  // namespace

Elem JsonParts::pattern(std::string_view regex) {
  TANDEM_REQUIRE(regex.size() <= kMaxPattern, kInvalidArgument, "pattern longer than ", kMaxPattern,
                 " bytes");
  return RegexParser(*this, regex).run(true);
}

Elem JsonParts::regex_exact(std::string_view regex) {
  TANDEM_REQUIRE(regex.size() <= kMaxPattern, kInvalidArgument, "pattern longer than ", kMaxPattern,
                 " bytes");
  return RegexParser(*this, regex).run(false);
}

}  // namespace tandem::grammar
