// UTF-8 encode, decode, validate and repair (see engine/tokenizer/utf8.h for the error rules).
#include "engine/tokenizer/utf8.h"

namespace tandem::utf8 {

namespace {

// What a lead byte promises: how many continuation bytes follow, the payload bits it carries, and
// the allowed range of the FIRST continuation byte. The narrowed ranges are what exclude overlong
// forms (E0, F0), surrogates (ED) and code points above U+10FFFF (F4) without decoding first.
struct Lead {
  int needed;  // -1: the byte cannot start a sequence (80..C1, F5..FF)
  char32_t bits;
  uint8_t lower, upper;
};

Lead lead_of(uint8_t b) {
  if (b < 0x80) return {0, b, 0x80, 0xBF};
  if (b >= 0xC2 && b <= 0xDF) return {1, static_cast<char32_t>(b & 0x1F), 0x80, 0xBF};
  if (b >= 0xE0 && b <= 0xEF) {
    return {2, static_cast<char32_t>(b & 0x0F), static_cast<uint8_t>(b == 0xE0 ? 0xA0 : 0x80),
            static_cast<uint8_t>(b == 0xED ? 0x9F : 0xBF)};
  }
  if (b >= 0xF0 && b <= 0xF4) {
    return {3, static_cast<char32_t>(b & 0x07), static_cast<uint8_t>(b == 0xF0 ? 0x90 : 0x80),
            static_cast<uint8_t>(b == 0xF4 ? 0x8F : 0xBF)};
  }
  return {-1, 0, 0, 0};
}

}  // namespace

void append(std::string& out, char32_t cp) {
  if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) cp = kReplacementChar;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string encode(std::span<const char32_t> cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) append(out, cp);
  return out;
}

Decoded decode(std::string_view s, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const Lead lead = lead_of(byte(pos));
  if (lead.needed == 0) return {lead.bits, 1, true};
  if (lead.needed < 0) return {kReplacementChar, 1, false};
  char32_t cp = lead.bits;
  uint8_t lower = lead.lower, upper = lead.upper;
  for (int k = 1; k <= lead.needed; ++k) {
    // The bytes so far are a valid prefix; a byte out of range ends the maximal subpart before it.
    if (pos + k >= s.size() || byte(pos + k) < lower || byte(pos + k) > upper) {
      return {kReplacementChar, static_cast<uint8_t>(k), false};
    }
    cp = (cp << 6) | (byte(pos + k) & 0x3F);
    lower = 0x80;
    upper = 0xBF;
  }
  return {cp, static_cast<uint8_t>(lead.needed + 1), true};
}

bool is_valid(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    // ASCII runs are the common case: skip them without decoding.
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const Decoded d = decode(s, pos);
    if (!d.valid) return false;
    pos += d.len;
  }
  return true;
}

std::string repair(std::string_view s) {
  if (is_valid(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t pos = 0; pos < s.size();) {
    const Decoded d = decode(s, pos);
    if (d.valid) {
      out.append(s.substr(pos, d.len));
    } else {
      append(out, kReplacementChar);
    }
    pos += d.len;
  }
  return out;
}

std::vector<char32_t> code_points(std::string_view s) {
  std::vector<char32_t> cps;
  cps.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) cps.push_back(next(s, pos));
  return cps;
}

size_t length(std::string_view s) {
  size_t n = 0;
  for (size_t pos = 0; pos < s.size(); ++n) pos += decode(s, pos).len;
  return n;
}

std::vector<std::string_view> chars(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    const size_t len = decode(s, pos).len;
    out.push_back(s.substr(pos, len));
    pos += len;
  }
  return out;
}

void Repairer::reset() {
  held_.clear();
  needed_ = seen_ = 0;
  lower_ = 0x80;
  upper_ = 0xBF;
}

void Repairer::feed(std::string_view bytes, std::string& out) {
  for (size_t i = 0; i < bytes.size(); ++i) {
    const uint8_t b = static_cast<uint8_t>(bytes[i]);
    if (needed_ == 0) {
      const Lead lead = lead_of(b);
      if (lead.needed == 0) {
        out.push_back(static_cast<char>(b));
      } else if (lead.needed < 0) {
        append(out, kReplacementChar);
      } else {
        needed_ = lead.needed;
        lower_ = lead.lower;
        upper_ = lead.upper;
        held_.push_back(static_cast<char>(b));
      }
      continue;
    }
    if (b < lower_ || b > upper_) {
      // The held prefix is a maximal invalid subpart; b starts afresh.
      reset();
      append(out, kReplacementChar);
      --i;
      continue;
    }
    lower_ = 0x80;
    upper_ = 0xBF;
    held_.push_back(static_cast<char>(b));
    if (++seen_ == needed_) {
      out += held_;
      reset();
    }
  }
}

void Repairer::finish(std::string& out) {
  if (needed_ != 0) append(out, kReplacementChar);
  reset();
}

}  // namespace tandem::utf8
