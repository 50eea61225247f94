// Unit tests of the tokenizer's building blocks: the Unicode helpers (normalization forms, case
// mapping, categories) and the regex engine the pre-tokenizers compile to.
#include <catch2/catch.hpp>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/tokenizer/regex.h"
#include "engine/tokenizer/unicode.h"
#include "engine/tokenizer/utf8.h"
#include "kernels/common.h"

namespace uni = tandem::unicode;
namespace utf8 = tandem::utf8;
using tandem::Error;

TEST_CASE("unicode helpers", "[tokenizer][unicode]") {
  using uni::NormForm;
  CHECK(uni::normalize("cafe\xCC\x81", NormForm::kNfc) == "caf\xC3\xA9");
  CHECK(uni::normalize("caf\xC3\xA9", NormForm::kNfd) == "cafe\xCC\x81");
  CHECK(uni::normalize("\xE2\x84\xAB", NormForm::kNfc) == "\xC3\x85");  // Å sign -> Å
  CHECK(uni::normalize("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", NormForm::kNfc) == "\xEA\xB0\x81");
  CHECK(uni::normalize("\xEF\xAC\x81", NormForm::kNfkc) == "fi");  // ﬁ ligature
  CHECK(uni::normalize("\xEF\xAC\x81", NormForm::kNfc) == "\xEF\xAC\x81");
  CHECK(uni::normalize("a\xCC\x81\xCC\xA8", NormForm::kNfd) == "a\xCC\xA8\xCC\x81");  // reorder
  CHECK(uni::to_lower("\xC3\x84"
                      "BC\xCE\xA3") ==
        "\xC3\xA4"
        "bc\xCF\x83");

  CHECK(utf8::repair("a\xF0\x9F\x98") == "a\xEF\xBF\xBD");
  CHECK(utf8::repair("\xE0\x80\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  utf8::Repairer r;
  std::string out;
  r.feed("\xF0\x9F", out);
  CHECK(out.empty());
  r.feed("\x98\x80!", out);
  CHECK(out == "\xF0\x9F\x98\x80!");
  r.feed("\xE4\xBD", out);
  r.finish(out);
  CHECK(out == "\xF0\x9F\x98\x80!\xEF\xBF\xBD");

  CHECK(uni::general_category(U'A') == uni::Gc::kLu);
  CHECK(uni::general_category(0x4E2D) == uni::Gc::kLo);
  CHECK(uni::general_category(0x0661) == uni::Gc::kNd);
  CHECK(uni::is_js_space(0xFEFF));
  CHECK_FALSE(uni::is_js_space(0x85));
}

TEST_CASE("regex engine", "[tokenizer][regex]") {
  const auto all = [](const char* pattern, const std::string& text) {
    const tandem::Regex re = tandem::Regex::compile(pattern);
    const std::vector<char32_t> cps = utf8::code_points(text);
    std::vector<std::string> out;
    for (const auto& [b, e] : re.find_all(cps.data(), cps.size())) {
      out.push_back(utf8::encode(std::span<const char32_t>(cps.data() + b, cps.data() + e)));
    }
    return out;
  };
  using V = std::vector<std::string>;
  const char* llama3 =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  CHECK(all(llama3, "I'M here  now 12345!!\n\n x") ==
        V{"I", "'M", " here", " ", " now", " ", "123", "45", "!!\n\n", " x"});
  CHECK(all("a{2,3}?", "aaaaa") == V{"aa", "aa"});
  CHECK(all("(?:ab)+c|b", "ababcb") == V{"ababc", "b"});
  CHECK(all("x(?=y)", "xxy") == V{"x"});
  CHECK(all("[\\x{41}-\\x{43}]+", "ABCD") == V{"ABC"});
  CHECK(all("\\u0041.", "AbA\n") == V{"Ab"});          // Oniguruma's \uHHHH
  CHECK(all("\\\\u0041", "\\u0041") == V{"\\u0041"});  // an escaped backslash stays one
  // Oniguruma syntax beyond the old engine's subset works, as in the Rust library.
  CHECK(all("(?<w>a)\\b|\\p{Han}+", "a ab \xE4\xB8\xAD\xE6\x96\x87") ==
        V{"a", "\xE4\xB8\xAD\xE6\x96\x87"});
  // Oniguruma semantics (the Rust reference), not ECMAScript's: \s has U+0085 and lacks U+FEFF,
  // and (?i:) folds with Unicode case folding (long s folds to s).
  CHECK(all("\\s+",
            "a\xC2\x85"
            "b") == V{"\xC2\x85"});
  CHECK(all("\\s+",
            "a\xEF\xBB\xBF"
            "b")
            .empty());
  CHECK(all("(?i:'s)", "'S '\xC5\xBF") == V{"'S", "'\xC5\xBF"});
  // An empty match right after a match is skipped, as the Rust iterator does.
  const tandem::Regex star = tandem::Regex::compile("a*");
  const std::vector<char32_t> baa = utf8::code_points("baa");
  CHECK(star.find_all(baa.data(), baa.size()) ==
        std::vector<std::pair<size_t, size_t>>{{0, 0}, {1, 3}});
  CHECK(all("a.c", "a.c abc") == V{"a.c", "abc"});
  const tandem::Regex lit = tandem::Regex::literal("a.c");
  const std::vector<char32_t> abc = utf8::code_points("abc a.c");
  CHECK(lit.find_all(abc.data(), abc.size()) == std::vector<std::pair<size_t, size_t>>{{4, 7}});
  CHECK_THROWS_AS(tandem::Regex::compile("(a"), Error);
  CHECK_THROWS_AS(tandem::Regex::compile("\\p{NoSuchProperty}"), Error);
}
