// String helpers of the chat-template Jinja engine (Python str semantics on UTF-8).
#include "server/jinja/text.h"

#include <cstdlib>

#include "engine/tokenizer/utf8.h"
#include "server/jinja/lexer.h"
#include "server/jinja/value.h"

namespace tandem::jinja {
namespace {

// Simple one-to-one case mappings for the common scripts; 0 when there is none.
uint32_t upper_of(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return 0;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return (c & 1) ? c - 1 : 0;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? 0 : c - 1;
  if (c >= 0x3B1 && c <= 0x3C9) return c == 0x3C2 ? 0x3A3 : c - 32;
  if (c == 0x3AC) return 0x386;  // Greek letters with tonos
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return 0;
}

uint32_t lower_of(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return 0;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return (c & 1) ? 0 : c + 1;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c + 1 : 0;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return 0;
}

bool is_cased(uint32_t c) { return upper_of(c) != 0 || lower_of(c) != 0 || c == 0xDF; }

void append_upper(std::string& out, uint32_t c) {
  if (c == 0xDF) {  // sharp s
    out += "SS";
    return;
  }
  const uint32_t u = upper_of(c);
  utf8::append(out, u ? u : c);
}

void append_lower(std::string& out, uint32_t c) {
  const uint32_t l = lower_of(c);
  utf8::append(out, l ? l : c);
}

}  // namespace

std::string to_upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : utf8::code_points(s)) append_upper(out, c);
  return out;
}

std::string to_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : utf8::code_points(s)) append_lower(out, c);
  return out;
}

std::string to_title(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool prev_cased = false;
  for (char32_t c : utf8::code_points(s)) {
    if (prev_cased) {
      append_lower(out, c);
    } else {
      append_upper(out, c);
    }
    prev_cased = is_cased(c);
  }
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool first = true;
  for (char32_t c : utf8::code_points(s)) {
    if (first) {
      append_upper(out, c);
    } else {
      append_lower(out, c);
    }
    first = false;
  }
  return out;
}

std::string strip(std::string_view s, const std::string* chars, StripSide side) {
  const std::vector<char32_t> set =
      chars != nullptr ? utf8::code_points(*chars) : std::vector<char32_t>();
  // Length of the strippable character starting at s[i], 0 when it is not strippable.
  const auto strippable = [&](size_t i) -> size_t {
    if (chars == nullptr) return whitespace_len(s, i);
    const utf8::Decoded d = utf8::decode(s, i);
    for (char32_t x : set) {
      if (x == d.cp) return static_cast<size_t>(d.len);
    }
    return size_t{0};
  };
  size_t b = 0;
  size_t e = s.size();
  if (side != StripSide::kRight) {
    while (b < e) {
      const size_t len = strippable(b);
      if (len == 0) break;
      b += len;
    }
  }
  if (side != StripSide::kLeft) {
    while (e > b) {
      size_t start = e - 1;  // back to the first byte of the last character
      while (start > b && utf8::is_continuation(s[start])) --start;
      const size_t len = strippable(start);
      if (len == 0 || start + len != e) break;
      e = start;
    }
  }
  return std::string(s.substr(b, e - b));
}

std::vector<std::string> split(std::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep == nullptr) {
    size_t i = 0;
    while (true) {
      while (size_t w = whitespace_len(s, i)) i += w;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        out.emplace_back(s.substr(i));
        break;
      }
      const size_t start = i;
      while (i < s.size() && whitespace_len(s, i) == 0) ++i;
      out.emplace_back(s.substr(start, i - start));
    }
    return out;
  }
  if (sep->empty()) throw JinjaError("empty separator");
  size_t start = 0;
  while (true) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) break;
    const size_t hit = s.find(*sep, start);
    if (hit == std::string_view::npos) break;
    out.emplace_back(s.substr(start, hit - start));
    start = hit + sep->size();
  }
  out.emplace_back(s.substr(start));
  return out;
}

std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count) {
  if (count == 0) return std::string(s);
  std::string out;
  int64_t left = count < 0 ? INT64_MAX : count;
  if (from.empty()) {  // insert `to` around every code point
    out.reserve(s.size());
    size_t i = 0;
    while (true) {
      if (left > 0) {
        out += to;
        --left;
        check_size(out.size());
      }
      if (i >= s.size()) break;
      const size_t len = utf8::decode(s, i).len;
      out += s.substr(i, len);
      i += len;
    }
    return out;
  }
  size_t start = 0;
  while (left > 0) {
    const size_t hit = s.find(from, start);
    if (hit == std::string_view::npos) break;
    out += s.substr(start, hit - start);
    out += to;
    check_size(out.size());
    start = hit + from.size();
    --left;
  }
  out += s.substr(start);
  return out;
}

int64_t find(std::string_view s, std::string_view sub) {
  const size_t hit = s.find(sub);
  if (hit == std::string_view::npos) return -1;
  return static_cast<int64_t>(utf8::length(s.substr(0, hit)));
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(utf8::length(s)) + 1;
  int64_t n = 0;
  for (size_t start = s.find(sub); start != std::string_view::npos;
       start = s.find(sub, start + sub.size())) {
    ++n;
  }
  return n;
}

std::optional<int64_t> parse_int_prefix(std::string_view s) {
  size_t i = 0;
  while (size_t w = whitespace_len(s, i)) i += w;
  bool neg = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  const size_t digits = i;
  int64_t v = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
    if (v < INT64_MAX / 10) v = v * 10 + (s[i] - '0');
    ++i;
  }
  if (i == digits) return std::nullopt;
  return neg ? -v : v;
}

std::optional<double> parse_float_prefix(std::string_view s) {
  size_t i = 0;
  while (size_t w = whitespace_len(s, i)) i += w;
  std::string rest(s.substr(i));
  size_t j = 0;
  if (j < rest.size() && (rest[j] == '+' || rest[j] == '-')) ++j;
  const bool digit_next = j < rest.size() && rest[j] >= '0' && rest[j] <= '9';
  const bool dot_digit =
      j + 1 < rest.size() && rest[j] == '.' && rest[j + 1] >= '0' && rest[j + 1] <= '9';
  if (rest.compare(j, 8, "Infinity") == 0) {
    return rest[0] == '-' ? -HUGE_VAL : HUGE_VAL;
  }
  if (!digit_next && !dot_digit) return std::nullopt;
  return std::strtod(rest.c_str(), nullptr);
}

}  // namespace tandem::jinja
