// Unicode helpers for the tokenizer: UTF-8 decoding with WHATWG-style repair (every maximal
// invalid subpart becomes one U+FFFD), general categories, ECMAScript whitespace, the four
// normalization forms and lowercasing. Tables come from engine/tokenizer/unicode_data.cpp,
// generated from Node's ICU so that categories match the JS reference tokenizer exactly.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::unicode {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// General category; the order is shared with scripts/gen_tokenizer_fixtures.mjs.
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

// ---- UTF-8 -------------------------------------------------------------------------------------
void append_utf8(std::string& out, char32_t cp);
// Decodes one code point at s[pos] and advances pos; an invalid maximal subpart yields U+FFFD.
char32_t next_code_point(std::string_view s, size_t& pos);
bool is_valid_utf8(std::string_view s);
// Returns s with every invalid maximal subpart replaced by U+FFFD (what TextDecoder does).
std::string repair_utf8(std::string_view s);
// Code points of valid UTF-8 (invalid subparts decode as U+FFFD).
std::vector<char32_t> code_points(std::string_view s);
std::string to_utf8(const std::vector<char32_t>& cps);

// Incremental repair: feed bytes, get only complete, valid UTF-8 back. Incomplete trailing
// sequences are held until they complete or become invalid; finish() turns a held incomplete
// tail into U+FFFD. Feeding a whole string and finishing equals repair_utf8.
class Utf8Repairer {
 public:
  void feed(std::string_view bytes, std::string& out);
  void finish(std::string& out);
  bool pending() const { return needed_ != 0; }

 private:
  void reset();
  std::string held_;
  char32_t cp_ = 0;
  int needed_ = 0;
  int seen_ = 0;
  uint8_t lower_ = 0x80;
  uint8_t upper_ = 0xBF;
};

// ---- Normalization
// -------------------------------------------------------------------------------
enum class NormForm : uint8_t { kNfc, kNfd, kNfkc, kNfkd };
std::string normalize(std::string_view s, NormForm form);
// Full lowercase mapping per code point (like String.prototype.toLowerCase without the final
// sigma context rule).
std::string to_lower(std::string_view s);

}  // namespace tandem::unicode
