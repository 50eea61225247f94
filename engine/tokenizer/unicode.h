// Unicode helpers for the tokenizer: general categories, ECMAScript whitespace, the four
// normalization forms and lowercasing (UTF-8 itself is engine/tokenizer/utf8.h). Tables come from
// engine/tokenizer/unicode_data.cpp, generated from Node's ICU so that categories match the JS
// reference tokenizer exactly.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::unicode {

// General category; the order is shared with scripts/gen_unicode_tables.mjs.
enum class Gc : uint8_t {
  kCn,
  kLu,
  kLl,
  kLt,
  kLm,
  kLo,
  kMn,
  kMc,
  kMe,
  kNd,
  kNl,
  kNo,
  kPc,
  kPd,
  kPs,
  kPe,
  kPi,
  kPf,
  kPo,
  kSm,
  kSc,
  kSk,
  kSo,
  kZs,
  kZl,
  kZp,
  kCc,
  kCf,
  kCs,
  kCo,
};
inline constexpr int kGcCount = 30;

Gc general_category(char32_t cp);
inline uint32_t gc_bit(Gc gc) { return 1u << static_cast<unsigned>(gc); }
// Bit masks of the one-letter groups (\p{L}, \p{M}, ...).
uint32_t gc_group_mask(char letter);
bool is_letter(char32_t cp);
bool is_number(char32_t cp);
// ECMAScript \s (WhiteSpace + LineTerminator): includes U+FEFF, excludes U+0085 and U+180E.
bool is_js_space(char32_t cp);
uint8_t combining_class(char32_t cp);
const char* unicode_version();

// ---- Normalization
// -------------------------------------------------------------------------------
enum class NormForm : uint8_t { kNfc, kNfd, kNfkc, kNfkd };
std::string normalize(std::string_view s, NormForm form);
// Full lowercase mapping per code point (like String.prototype.toLowerCase without the final
// sigma context rule).
std::string to_lower(std::string_view s);

}  // namespace tandem::unicode
