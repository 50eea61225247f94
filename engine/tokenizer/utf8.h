// UTF-8, written once for the whole server: encode, decode with error handling, validate, repair
// (also incrementally), count. Every user (the tokenizer, the Jinja engine, the OpenAI codec)
// includes this header; it depends on nothing above the standard library.
//
// Errors follow the WHATWG Encoding Standard (what TextDecoder and Python's
// bytes.decode(errors="replace") do): each maximal invalid subpart — a byte that cannot start a
// sequence, or a valid prefix cut short — decodes to one U+FFFD. Overlong forms (C0, C1, E0 80..9F,
// F0 80..8F), UTF-16 surrogates (ED A0..BF) and code points above U+10FFFF (F4 90.., F5..FF)
// are invalid. The encoder never writes invalid UTF-8: a surrogate or a value above U+10FFFF
// becomes U+FFFD.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::utf8 {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// A continuation byte (10xxxxxx): never where a character starts.
inline bool is_continuation(char c) { return (static_cast<uint8_t>(c) & 0xC0) == 0x80; }

// Appends the UTF-8 form of cp (U+FFFD for a surrogate or a value above U+10FFFF).
void append(std::string& out, char32_t cp);
std::string encode(std::span<const char32_t> cps);

struct Decoded {
  char32_t cp;  // the code point, or U+FFFD for an invalid subpart
  uint8_t len;  // bytes consumed: the sequence, or the maximal invalid subpart (>= 1)
  bool valid;   // false when the bytes were invalid (a real U+FFFD in the text is valid)
};
// Decodes the character starting at s[pos] (pos < s.size()).
Decoded decode(std::string_view s, size_t pos);
// decode() that advances pos and returns the code point.
inline char32_t next(std::string_view s, size_t& pos) {
  const Decoded d = decode(s, pos);
  pos += d.len;
  return d.cp;
}

bool is_valid(std::string_view s);
// s with every maximal invalid subpart replaced by U+FFFD.
std::string repair(std::string_view s);
// Code points of s (invalid subparts decode as U+FFFD).
std::vector<char32_t> code_points(std::string_view s);
// Number of characters: code points, an invalid subpart counting as one.
size_t length(std::string_view s);
// The bytes of each character, in order (an invalid subpart is one entry).
std::vector<std::string_view> chars(std::string_view s);

// Incremental repair: feed bytes, get only complete, valid UTF-8 back. An incomplete trailing
// sequence is held until it completes or becomes invalid; finish() turns a held incomplete tail
// into U+FFFD. Feeding a whole string and finishing equals repair().
class Repairer {
 public:
  void feed(std::string_view bytes, std::string& out);
  void finish(std::string& out);
  bool pending() const { return needed_ != 0; }

 private:
  void reset();
  std::string held_;
  int needed_ = 0;
  int seen_ = 0;
  uint8_t lower_ = 0x80;
  uint8_t upper_ = 0xBF;
};

}  // namespace tandem::utf8
