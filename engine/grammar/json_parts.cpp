// JsonParts: the JSON building blocks of the schema compiler (engine/grammar/json_parts.h).
#include "engine/grammar/json_parts.h"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "kernels/common.h"

namespace tandem::grammar {

namespace {

// Digits of an integer part: below 10^16, so every integer is exact in a double and in int64.
constexpr int kMaxIntDigits = 16;
// Fraction digits and exponent digits: every number parses as a finite double (no overflow
// error in a strict parser) and a model cannot write digits forever.
constexpr int kMaxFracDigits = 16;
constexpr const char* kFrac = "(\\.[0-9]{1,16})?";
constexpr const char* kExp = "([eE][+-]?[0-9]{1,2})?";

std::string digits_regex(const std::string& lo, const std::string& hi) {
  // lo and hi have the same length, lo <= hi.
  if (lo.size() == 1) return lo == hi ? lo : "[" + lo + "-" + hi + "]";
  if (lo[0] == hi[0]) return lo.substr(0, 1) + digits_regex(lo.substr(1), hi.substr(1));
  const size_t rest = lo.size() - 1;
  std::string out = "(" + lo.substr(0, 1) + digits_regex(lo.substr(1), std::string(rest, '9'));
  if (hi[0] - lo[0] > 1) {
    out += "|[" + std::string(1, static_cast<char>(lo[0] + 1)) + "-" +
           std::string(1, static_cast<char>(hi[0] - 1)) + "][0-9]{" + std::to_string(rest) + "}";
  }
  out += "|" + hi.substr(0, 1) + digits_regex(std::string(rest, '0'), hi.substr(1)) + ")";
  return out;
}

uint64_t pow10(int n) {
  uint64_t v = 1;
  while (n-- > 0) v *= 10;
  return v;
}

}  // namespace

std::string nonneg_range_regex(uint64_t lo, uint64_t hi) {
  const uint64_t top = pow10(kMaxIntDigits) - 1;
  const uint64_t h = std::min(hi, top);
  TANDEM_REQUIRE(lo <= h, kInvalidArgument, "empty integer range");
  std::string out;
  // Whole length bands (all numbers of len digits) are merged into one [1-9][0-9]{m,n}: one
  // matcher stack for any digit count instead of one per length.
  int full_from = 0, full_to = 0;
  auto flush_full = [&] {
    if (full_from == 0) return;
    out += (out.empty() ? "" : "|") + std::string("[1-9][0-9]{") + std::to_string(full_from - 1) +
           "," + std::to_string(full_to - 1) + "}";
    full_from = 0;
  };
  for (int len = 1; len <= kMaxIntDigits; ++len) {
    const uint64_t a = std::max(lo, len == 1 ? 0 : pow10(len - 1));
    const uint64_t b = std::min(h, pow10(len) - 1);
    if (a > b) continue;
    if (len > 1 && a == pow10(len - 1) && b == pow10(len) - 1) {
      if (full_from == 0) full_from = len;
      full_to = len;
      continue;
    }
    flush_full();
    out += (out.empty() ? "" : "|") + digits_regex(std::to_string(a), std::to_string(b));
  }
  flush_full();
  return "(" + out + ")";
}

Elem JsonParts::literal(std::string_view bytes) { return b_.rule("literal", {b_.literal(bytes)}); }

Elem JsonParts::literal_set(std::vector<std::string> values) {
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  // Rule for the values in [lo, hi) that share their first `depth` bytes (sorted: contiguous).
  std::function<Elem(size_t, size_t, size_t)> node = [&](size_t lo, size_t hi, size_t depth) {
    TANDEM_REQUIRE(depth < 100000, kInvalidArgument, "enum values too long");
    if (hi - lo == 1) return literal(std::string_view(values[lo]).substr(depth));
    std::vector<Seq> alts;
    size_t i = lo;
    if (values[i].size() == depth) alts.push_back({}), ++i;  // a value ends here
    while (i < hi) {
      const char c = values[i][depth];
      size_t j = i;
      while (j < hi && values[j][depth] == c) ++j;
      alts.push_back({b_.byte(static_cast<uint8_t>(c)), node(i, j, depth + 1)});
      i = j;
    }
    return b_.rule("literals", std::move(alts));
  };
  return node(0, values.size(), 0);
}

Elem JsonParts::ws() {
  if (!ws_) {
    ByteSet indent;
    indent.add(' ');
    indent.add('\t');
    const Elem more = b_.repeat("indent", {b_.byte_class(indent)}, 0, 24);
    ws_ = b_.rule("ws", {{}, {b_.byte(' ')}, {b_.byte('\n'), more}});
  }
  return *ws_;
}

Elem JsonParts::sep() {
  if (!sep_) sep_ = b_.rule("comma", {{b_.byte(','), ws()}});
  return *sep_;
}

Elem JsonParts::colon() {
  if (!colon_) colon_ = b_.rule("colon", {{b_.byte(':')}, {b_.byte(':'), b_.byte(' ')}});
  return *colon_;
}

Elem JsonParts::string_char() {
  if (!char_) {
    const Elem plain = b_.codepoints("char", {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true);
    ByteSet simple;
    for (char c : std::string("\"\\/bfnrt")) simple.add(static_cast<uint8_t>(c));
    ByteSet hex, hex_no_d, d, lo8;
    hex.add_range('0', '9');
    hex.add_range('a', 'f');
    hex.add_range('A', 'F');
    hex_no_d = hex;
    hex_no_d.w[1] &= ~((uint64_t{1} << ('d' - 64)) | (uint64_t{1} << ('D' - 64)));
    d.add('d');
    d.add('D');
    lo8.add_range('0', '7');
    const Elem h = b_.byte_class(hex);
    // \uXXXX without the surrogates D800-DFFF (a lone one fails strict parsers).
    const Elem u = b_.rule("unicode_escape", {{b_.byte_class(hex_no_d), h, h, h},
                                              {b_.byte_class(d), b_.byte_class(lo8), h, h}});
    char_ = b_.rule(
        "string_char",
        {{plain}, {b_.byte('\\'), b_.byte_class(simple)}, {b_.byte('\\'), b_.byte('u'), u}});
  }
  return *char_;
}

Elem JsonParts::string() {
  if (!string_) string_ = string_len(0, kUnbounded);
  return *string_;
}

Elem JsonParts::string_len(uint32_t min, uint32_t max) {
  const Elem chars = b_.repeat("string_chars", {string_char()}, min, max);
  return b_.rule("string", {{b_.byte('"'), chars, b_.byte('"')}});
}

Elem JsonParts::number() {
  if (!number_) number_ = regex_exact("-?" + nonneg_range_regex(0, kNoBound) + kFrac + kExp);
  return *number_;
}

Elem JsonParts::integer() {
  if (!integer_) integer_ = regex_exact("-?" + nonneg_range_regex(0, kNoBound));
  return *integer_;
}

Elem JsonParts::boolean() {
  if (!boolean_) boolean_ = b_.rule("boolean", {b_.literal("true"), b_.literal("false")});
  return *boolean_;
}

Elem JsonParts::null() {
  if (!null_) null_ = b_.rule("null", {b_.literal("null")});
  return *null_;
}

Elem JsonParts::object() {
  value();
  return *object_;
}

Elem JsonParts::value() {
  if (value_) return *value_;
  value_ = b_.declare("value");
  const Elem member = b_.rule("member", {{string(), colon(), *value_}});
  const Elem more_members = b_.repeat("members", {sep(), member}, 0, kUnbounded);
  object_ = b_.rule("object", {{b_.byte('{'), ws(), b_.byte('}')},
                               {b_.byte('{'), ws(), member, more_members, ws(), b_.byte('}')}});
  const Elem more_items = b_.repeat("items", {sep(), *value_}, 0, kUnbounded);
  const Elem array =
      b_.rule("array", {{b_.byte('['), ws(), b_.byte(']')},
                        {b_.byte('['), ws(), *value_, more_items, ws(), b_.byte(']')}});
  b_.define(*value_, {{*object_}, {array}, {string()}, {number()}, {boolean()}, {null()}});
  return *value_;
}

Elem JsonParts::integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  if (lo && hi) TANDEM_REQUIRE(*lo <= *hi, kInvalidArgument, "integer minimum above maximum");
  std::string re;
  if (!hi || *hi >= 0) {
    const uint64_t a = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    re = nonneg_range_regex(a, hi ? static_cast<uint64_t>(*hi) : kNoBound);
  }
  if (!lo || *lo < 0) {
    const uint64_t a = hi && *hi < 0 ? static_cast<uint64_t>(-*hi) : 1;
    const uint64_t b = lo ? static_cast<uint64_t>(-*lo) : kNoBound;
    re += (re.empty() ? "-" : "|-") + nonneg_range_regex(a, b);
  }
  return regex_exact(re);
}

// Non-negative magnitudes in [lo, hi] with fractions: integer part lo..hi-1 with any fraction,
// hi with a zero fraction; an exclusive side drops its end point (lo: then lo needs a non-zero
// fraction). hi == kNoBound: no upper bound.
static std::string nonneg_number_regex(uint64_t lo, bool lo_excl, uint64_t hi, bool hi_excl) {
  const std::string frac = kFrac;
  const std::string nz_frac = "\\.[0-9]{0," + std::to_string(kMaxFracDigits - 1) + "}[1-9]";
  std::vector<std::string> parts;
  uint64_t first = lo;
  if (lo_excl) {
    if (lo < hi) parts.push_back(std::to_string(lo) + nz_frac);
    first = lo + 1;
  }
  if (hi == kNoBound) {
    parts.push_back(nonneg_range_regex(first, kNoBound) + frac);
  } else {
    if (hi >= 1 && first <= hi - 1) parts.push_back(nonneg_range_regex(first, hi - 1) + frac);
    if (!hi_excl && first <= hi) parts.push_back(std::to_string(hi) + "(\\.0{1,16})?");
  }
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : "|") + p;
  return out;
}

Elem JsonParts::number_range(std::optional<int64_t> lo, bool lo_excl, std::optional<int64_t> hi,
                             bool hi_excl) {
  if (!lo && !hi) return number();
  std::string re;
  if (!hi || *hi > 0 || (*hi == 0 && !hi_excl)) {
    const bool excl = lo && *lo >= 0 && lo_excl;
    const uint64_t a = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    re = nonneg_number_regex(a, excl, hi ? static_cast<uint64_t>(*hi) : kNoBound, hi_excl);
  }
  if (!lo || *lo < 0) {
    // -m with m >= -hi (hi < 0) or m > 0 (hi == 0 exclusive), m <= -lo.
    const uint64_t a = hi && *hi < 0 ? static_cast<uint64_t>(-*hi) : 0;
    const bool a_excl = hi && *hi <= 0 && hi_excl;
    const uint64_t b = lo ? static_cast<uint64_t>(-*lo) : kNoBound;
    const std::string neg = nonneg_number_regex(a, a_excl, b, lo_excl);
    if (!neg.empty()) re += (re.empty() ? "-(" : "|-(") + neg + ")";
  }
  TANDEM_REQUIRE(!re.empty(), kInvalidArgument, "number bounds leave no value");
  return regex_exact(re);
}

}  // namespace tandem::grammar
