// Unicode helpers: table lookups and normalization (see engine/tokenizer/unicode.h).
#include "engine/tokenizer/unicode.h"

#include <algorithm>
#include <array>

#include "engine/tokenizer/unicode_data.h"
#include "engine/tokenizer/utf8.h"

namespace tandem::unicode {
namespace ud = unicode_data;

namespace {

// Value of a packed range table ((first << 8) | value, sorted by first) at cp.
uint8_t range_lookup(const uint32_t* table, size_t n, char32_t cp) {
  const uint32_t key = (static_cast<uint32_t>(cp) << 8) | 0xFF;
  const uint32_t* it = std::upper_bound(table, table + n, key);
  return it == table ? 0 : static_cast<uint8_t>(*(it - 1) & 0xFF);
}

// Direct table for the BMP: the tokenizer asks for the category of every character.
const std::array<uint8_t, 0x10000>& bmp_categories() {
  static const std::array<uint8_t, 0x10000> table = [] {
    std::array<uint8_t, 0x10000> t{};
    for (char32_t cp = 0; cp < 0x10000; ++cp)
      t[cp] = range_lookup(ud::kGeneralCategoryRanges, ud::kGeneralCategoryRangesSize, cp);
    return t;
  }();
  return table;
}

struct Mapping {
  const uint32_t* data = nullptr;
  uint32_t size = 0;
};

// Looks cp up in a (cp, offset, length) index.
Mapping find_mapping(const uint32_t* index, size_t index_size, const uint32_t* data, char32_t cp) {
  size_t lo = 0, hi = index_size / 3;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (index[mid * 3] < cp) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo < index_size / 3 && index[lo * 3] == cp)
    return {data + index[lo * 3 + 1], index[lo * 3 + 2]};
  return {};
}

// Hangul syllable arithmetic (Unicode chapter 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr char32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

void decompose_into(char32_t cp, bool compat, std::vector<char32_t>& out) {
  if (cp < 0xC0) {  // nothing below U+00C0 decomposes canonically
    if (!compat || cp < 0xA0) {
      out.push_back(cp);
      return;
    }
  }
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  Mapping m;
  if (compat) {
    m = find_mapping(ud::kCompatDecompositionIndex, ud::kCompatDecompositionIndexSize,
                     ud::kCompatDecompositionData, cp);
  }
  if (m.data == nullptr) {
    m = find_mapping(ud::kCanonicalDecompositionIndex, ud::kCanonicalDecompositionIndexSize,
                     ud::kCanonicalDecompositionData, cp);
  }
  if (m.data == nullptr) {
    out.push_back(cp);
    return;
  }
  out.insert(out.end(), m.data, m.data + m.size);
}

// Primary composite of (a, b), or 0.
char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  size_t lo = 0, hi = ud::kCompositionsSize / 3;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    const uint32_t* e = ud::kCompositions + mid * 3;
    if (e[0] < a || (e[0] == a && e[1] < b)) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo < ud::kCompositionsSize / 3) {
    const uint32_t* e = ud::kCompositions + lo * 3;
    if (e[0] == a && e[1] == b) return e[2];
  }
  return 0;
}

// Canonical ordering: stable sort of every run of non-starters by combining class.
void canonical_order(std::vector<char32_t>& cps) {
  for (size_t i = 0; i < cps.size();) {
    if (combining_class(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && combining_class(cps[j]) != 0) ++j;
    std::stable_sort(
        cps.begin() + static_cast<ptrdiff_t>(i), cps.begin() + static_cast<ptrdiff_t>(j),
        [](char32_t x, char32_t y) { return combining_class(x) < combining_class(y); });
    i = j;
  }
}

void compose(std::vector<char32_t>& cps) {
  if (cps.empty()) return;
  size_t starter = 0;
  bool have_starter = combining_class(cps[0]) == 0;
  int last_class = have_starter ? 0 : 256;  // 256: nothing can compose with a leading mark
  size_t out = 1;
  for (size_t i = 1; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    const int cls = combining_class(c);
    const char32_t composite = have_starter ? compose_pair(cps[starter], c) : 0;
    if (composite != 0 && (last_class < cls || last_class == 0)) {
      cps[starter] = composite;
      continue;
    }
    if (cls == 0) {
      starter = out;
      have_starter = true;
    }
    last_class = cls;
    cps[out++] = c;
  }
  cps.resize(out);
}

}  // namespace

Gc general_category(char32_t cp) {
  if (cp < 0x10000) return static_cast<Gc>(bmp_categories()[cp]);
  if (cp > 0x10FFFF) return Gc::kCn;
  return static_cast<Gc>(
      range_lookup(ud::kGeneralCategoryRanges, ud::kGeneralCategoryRangesSize, cp));
}

uint32_t gc_group_mask(char letter) {
  switch (letter) {
    case 'L':
      return gc_bit(Gc::kLu) | gc_bit(Gc::kLl) | gc_bit(Gc::kLt) | gc_bit(Gc::kLm) |
             gc_bit(Gc::kLo);
    case 'M':
      return gc_bit(Gc::kMn) | gc_bit(Gc::kMc) | gc_bit(Gc::kMe);
    case 'N':
      return gc_bit(Gc::kNd) | gc_bit(Gc::kNl) | gc_bit(Gc::kNo);
    case 'P':
      return gc_bit(Gc::kPc) | gc_bit(Gc::kPd) | gc_bit(Gc::kPs) | gc_bit(Gc::kPe) |
             gc_bit(Gc::kPi) | gc_bit(Gc::kPf) | gc_bit(Gc::kPo);
    case 'S':
      return gc_bit(Gc::kSm) | gc_bit(Gc::kSc) | gc_bit(Gc::kSk) | gc_bit(Gc::kSo);
    case 'Z':
      return gc_bit(Gc::kZs) | gc_bit(Gc::kZl) | gc_bit(Gc::kZp);
    case 'C':
      return gc_bit(Gc::kCc) | gc_bit(Gc::kCf) | gc_bit(Gc::kCs) | gc_bit(Gc::kCo) |
             gc_bit(Gc::kCn);
    default:
      return 0;
  }
}

bool is_letter(char32_t cp) { return (gc_bit(general_category(cp)) & gc_group_mask('L')) != 0; }
bool is_number(char32_t cp) { return (gc_bit(general_category(cp)) & gc_group_mask('N')) != 0; }

bool is_js_space(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
    case 0xFEFF:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  return range_lookup(ud::kCombiningClassRanges, ud::kCombiningClassRangesSize, cp);
}

const char* unicode_version() { return ud::kUnicodeVersion; }

// ---- Normalization
// -------------------------------------------------------------------------------

std::string normalize(std::string_view s, NormForm form) {
  const bool compat = form == NormForm::kNfkc || form == NormForm::kNfkd;
  const bool composed = form == NormForm::kNfc || form == NormForm::kNfkc;
  // Fast path: text below U+00A0 is invariant under every form (compat starts at U+00A0,
  // and nothing below U+0300 changes under NFC).
  const char32_t limit = compat ? 0xA0 : (composed ? 0x300 : 0xC0);
  bool simple = true;
  for (size_t pos = 0; pos < s.size() && simple;) simple = utf8::next(s, pos) < limit;
  if (simple) return std::string(s);

  std::vector<char32_t> cps;
  cps.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) decompose_into(utf8::next(s, pos), compat, cps);
  canonical_order(cps);
  if (composed) compose(cps);
  return utf8::encode(cps);
}

std::string to_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    const char32_t cp = utf8::next(s, pos);
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp));
      continue;
    }
    const Mapping m =
        find_mapping(ud::kLowercaseIndex, ud::kLowercaseIndexSize, ud::kLowercaseData, cp);
    if (m.data == nullptr) {
      utf8::append(out, cp);
    } else {
      for (uint32_t k = 0; k < m.size; ++k) utf8::append(out, m.data[k]);
    }
  }
  return out;
}

}  // namespace tandem::unicode
