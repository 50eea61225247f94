// The UTF-8 module (engine/tokenizer/utf8.h): valid 1-4 byte sequences at their boundaries,
// overlong forms, surrogates, truncated sequences and code points above U+10FFFF, decoded per the
// WHATWG rule (one U+FFFD per maximal invalid subpart); the incremental Repairer agrees with
// repair() however the bytes are cut.
#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <vector>

#include "engine/tokenizer/utf8.h"

namespace utf8 = tandem::utf8;

namespace {

const std::string kFffd = "\xEF\xBF\xBD";

std::string enc(char32_t cp) {
  std::string s;
  utf8::append(s, cp);
  return s;
}

// The byte lengths of the characters of s, as decode() splits them.
std::vector<int> lengths(const std::string& s) {
  std::vector<int> out;
  for (size_t pos = 0; pos < s.size();) {
    const utf8::Decoded d = utf8::decode(s, pos);
    out.push_back(d.len);
    pos += d.len;
  }
  return out;
}

std::string repair_in_pieces(const std::string& s, size_t piece) {
  utf8::Repairer r;
  std::string out;
  for (size_t i = 0; i < s.size(); i += piece) r.feed(std::string_view(s).substr(i, piece), out);
  r.finish(out);
  return out;
}

}  // namespace

TEST_CASE("valid 1-4 byte sequences round-trip at every length boundary", "[utf8]") {
  const struct {
    char32_t cp;
    const char* bytes;
  } kCases[] = {
      {0x0000, ""},  // NUL: the bytes are built below
      {0x007F, "\x7F"},
      {0x0080, "\xC2\x80"},
      {0x07FF, "\xDF\xBF"},
      {0x0800, "\xE0\xA0\x80"},
      {0xD7FF, "\xED\x9F\xBF"},  // just below the surrogates
      {0xE000, "\xEE\x80\x80"},  // just above them
      {0xFFFD, "\xEF\xBF\xBD"},  // a real replacement character is valid text
      {0xFFFF, "\xEF\xBF\xBF"},
      {0x10000, "\xF0\x90\x80\x80"},
      {0x1F600, "\xF0\x9F\x98\x80"},
      {0x10FFFF, "\xF4\x8F\xBF\xBF"},
  };
  for (const auto& c : kCases) {
    const std::string bytes = c.cp == 0 ? std::string(1, '\0') : std::string(c.bytes);
    INFO("U+" << std::hex << static_cast<uint32_t>(c.cp));
    CHECK(enc(c.cp) == bytes);
    const utf8::Decoded d = utf8::decode(bytes, 0);
    CHECK(d.cp == c.cp);
    CHECK(d.len == bytes.size());
    CHECK(d.valid);
    CHECK(utf8::is_valid(bytes));
    CHECK(utf8::repair(bytes) == bytes);
    CHECK(utf8::length(bytes) == 1);
  }
  const std::string mixed = "a\xC3\xA9\xE4\xBD\xA0\xF0\x9F\x98\x80z";
  CHECK(utf8::code_points(mixed) == std::vector<char32_t>{'a', 0xE9, 0x4F60, 0x1F600, 'z'});
  CHECK(utf8::encode(utf8::code_points(mixed)) == mixed);
  CHECK(utf8::length(mixed) == 5);
  CHECK(utf8::chars(mixed) ==
        std::vector<std::string_view>{"a", "\xC3\xA9", "\xE4\xBD\xA0", "\xF0\x9F\x98\x80", "z"});
}

TEST_CASE("overlong forms are invalid, one U+FFFD per byte", "[utf8]") {
  // C0 and C1 can only start overlongs, E0 80..9F and F0 80..8F likewise: none of them starts a
  // valid prefix, so every byte is its own maximal subpart.
  for (const std::string s : {"\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xE0\x9F\xBF",
                              "\xF0\x80\x80\x80", "\xF0\x8F\xBF\xBF"}) {
    INFO(utf8::repair(s));
    CHECK_FALSE(utf8::is_valid(s));
    CHECK(lengths(s) == std::vector<int>(s.size(), 1));
    std::string want;
    for (size_t i = 0; i < s.size(); ++i) want += kFffd;
    CHECK(utf8::repair(s) == want);
    CHECK(utf8::decode(s, 0).cp == utf8::kReplacementChar);
    CHECK_FALSE(utf8::decode(s, 0).valid);
  }
}

TEST_CASE("UTF-16 surrogates are invalid to decode and never encoded", "[utf8]") {
  for (const std::string s : {"\xED\xA0\x80", "\xED\xBF\xBF", "\xED\xB0\x80"}) {
    CHECK_FALSE(utf8::is_valid(s));
    CHECK(lengths(s) == std::vector<int>{1, 1, 1});
    CHECK(utf8::repair(s) == kFffd + kFffd + kFffd);
  }
  CHECK(enc(0xD800) == kFffd);
  CHECK(enc(0xDFFF) == kFffd);
  CHECK(utf8::encode(std::vector<char32_t>{'a', 0xDC00, 'b'}) == "a" + kFffd + "b");
}

TEST_CASE("code points above U+10FFFF are invalid to decode and never encoded", "[utf8]") {
  for (const std::string s : {"\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xF7\xBF\xBF\xBF"}) {
    CHECK_FALSE(utf8::is_valid(s));
    CHECK(lengths(s) == std::vector<int>{1, 1, 1, 1});
  }
  for (const std::string s : {"\xF8", "\xFE", "\xFF"}) {
    CHECK_FALSE(utf8::is_valid(s));
    CHECK(utf8::repair(s) == kFffd);
  }
  CHECK(enc(0x110000) == kFffd);
  CHECK(enc(0xFFFFFFFF) == kFffd);
}

TEST_CASE("truncated sequences: the valid prefix is one U+FFFD", "[utf8]") {
  CHECK_FALSE(utf8::is_valid("\xC3"));
  CHECK_FALSE(utf8::is_valid("\xE2\x82"));
  CHECK_FALSE(utf8::is_valid("\xF0\x9F\x98"));
  CHECK(lengths("\xF0\x9F\x98") == std::vector<int>{3});
  CHECK(utf8::repair("a\xF0\x9F\x98") == "a" + kFffd);
  // Cut short by a byte that is not a continuation: that byte starts afresh.
  CHECK(lengths("\xE4\xBD"
                "b") == std::vector<int>{2, 1});
  CHECK(utf8::repair("\xE4\xBD"
                     "b") == kFffd + "b");
  CHECK(utf8::repair("\xF0\x9F\xF0\x9F\x98\x80") == kFffd + "\xF0\x9F\x98\x80");
  // A stray continuation byte is one subpart each.
  CHECK(utf8::repair("\x80\xBF") == kFffd + kFffd);
  CHECK(utf8::length("\xE4\xBD"
                     "b") == 2);
  CHECK(utf8::chars("x\xE2\x82") == std::vector<std::string_view>{"x", "\xE2\x82"});
}

TEST_CASE("Repairer: fed in any pieces it equals repair(); holds incomplete tails", "[utf8]") {
  utf8::Repairer r;
  std::string out;
  r.feed("\xF0\x9F", out);
  CHECK(out.empty());
  CHECK(r.pending());
  r.feed("\x98\x80!", out);
  CHECK(out == "\xF0\x9F\x98\x80!");
  CHECK_FALSE(r.pending());
  r.feed("\xE4\xBD", out);
  r.finish(out);
  CHECK(out == "\xF0\x9F\x98\x80!" + kFffd);

  std::mt19937 rng(99);
  for (int trial = 0; trial < 200; ++trial) {
    std::string s;
    const int n = static_cast<int>(rng() % 64);
    for (int i = 0; i < n; ++i) {
      // Bias towards lead and continuation bytes so that broken sequences are common.
      const uint32_t r8 = rng() % 4;
      s.push_back(static_cast<char>(r8 == 0   ? rng() % 0x80
                                    : r8 == 1 ? 0x80 + rng() % 0x40
                                              : 0xC0 + rng() % 0x40));
    }
    const std::string repaired = utf8::repair(s);
    INFO("trial " << trial);
    CHECK(utf8::is_valid(repaired));
    CHECK(utf8::repair(repaired) == repaired);
    CHECK(utf8::encode(utf8::code_points(s)) == repaired);
    for (size_t piece : {1, 2, 3, 7}) CHECK(repair_in_pieces(s, piece) == repaired);
  }
}
