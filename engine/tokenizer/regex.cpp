// Backtracking regex over code points (see engine/tokenizer/regex.h for the dialect).
#include "engine/tokenizer/regex.h"

#include <utility>

#include "engine/tokenizer/unicode.h"
#include "engine/tokenizer/utf8.h"
#include "kernels/common.h"

namespace tandem {

namespace {

using unicode::Gc;
using unicode::gc_bit;

char32_t ascii_other_case(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c >= 'A' && c <= 'Z') return c + 32;
  return c;
}

// Category mask for a \p{...} name, or 0 when unknown.
uint32_t property_mask(std::string_view name) {
  static constexpr std::pair<std::string_view, const char*> kLong[] = {
      {"Letter", "L"},
      {"Mark", "M"},
      {"Number", "N"},
      {"Punctuation", "P"},
      {"Symbol", "S"},
      {"Separator", "Z"},
      {"Other", "C"},
      {"Cased_Letter", "LC"},
      {"Uppercase_Letter", "Lu"},
      {"Lowercase_Letter", "Ll"},
      {"Titlecase_Letter", "Lt"},
      {"Modifier_Letter", "Lm"},
      {"Other_Letter", "Lo"},
      {"Nonspacing_Mark", "Mn"},
      {"Spacing_Mark", "Mc"},
      {"Enclosing_Mark", "Me"},
      {"Decimal_Number", "Nd"},
      {"Letter_Number", "Nl"},
      {"Other_Number", "No"},
      {"Control", "Cc"},
      {"Format", "Cf"},
      {"Private_Use", "Co"},
      {"Unassigned", "Cn"},
      {"Space_Separator", "Zs"},
  };
  for (std::string_view prefix : {"gc=", "General_Category="}) {
    if (name.substr(0, prefix.size()) == prefix) name.remove_prefix(prefix.size());
  }
  for (const auto& [long_name, short_name] : kLong) {
    if (name == long_name) {
      name = short_name;
      break;
    }
  }
  if (name.size() == 1) return unicode::gc_group_mask(name[0]);
  if (name == "LC") return gc_bit(Gc::kLu) | gc_bit(Gc::kLl) | gc_bit(Gc::kLt);
  static constexpr const char* kShort[] = {
      "Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps",
      "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"};
  for (int i = 0; i < unicode::kGcCount; ++i) {
    if (name == kShort[i]) return 1u << i;
  }
  return 0;
}

}  // namespace

// ---- Character sets
// ------------------------------------------------------------------------------

bool Regex::CharSet::matches_exact(char32_t c) const {
  bool hit = false;
  for (const Item& it : items) {
    bool m = false;
    switch (it.kind) {
      case Item::kRange:
        m = c >= it.lo && c <= it.hi;
        break;
      case Item::kCategories:
        m = (gc_bit(unicode::general_category(c)) & it.mask) != 0;
        break;
      case Item::kSpace:
        m = unicode::is_js_space(c);
        break;
      case Item::kDigit:
        m = c >= '0' && c <= '9';
        break;
      case Item::kWord:
        m = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
        break;
      case Item::kAny:
        m = c != '\n' && c != '\r' && c != 0x2028 && c != 0x2029;
        break;
    }
    if (m != it.negate) {
      hit = true;
      break;
    }
  }
  return hit;
}

bool Regex::CharSet::matches(char32_t c) const {
  bool hit = matches_exact(c);
  if (!hit && icase) {
    const char32_t o = ascii_other_case(c);
    if (o != c) hit = matches_exact(o);
  }
  return hit != negate;
}

// ---- Parser
// ----------------------------------------------------------------------------------------

struct Regex::Cont {
  int node;      // the kAlt or kRepeat node to resume after a body chain ends
  int count;     // kRepeat: iterations completed including the one that just ended
  size_t start;  // kRepeat: where that iteration began (an empty iteration stops the loop)
  const Cont* up;
};

class Regex::Parser {
 public:
  Parser(Regex& re, std::string_view pattern)
      : re_(re), pattern_(pattern), cps_(utf8::code_points(pattern)) {}

  int parse() {
    const int head = parse_alt(false);
    if (pos_ != cps_.size()) fail("unbalanced ')'");
    return head;
  }

 private:
  [[noreturn]] void fail(std::string_view what) const {
    TANDEM_FAIL(kUnsupported, "regex '", pattern_, "': ", what, " at code point ", pos_);
  }
  bool at_end() const { return pos_ >= cps_.size(); }
  char32_t peek(size_t ahead = 0) const {
    return pos_ + ahead < cps_.size() ? cps_[pos_ + ahead] : 0;
  }
  char32_t take() {
    if (at_end()) fail("unexpected end");
    return cps_[pos_++];
  }

  int add_node(Node n) {
    re_.nodes_.push_back(std::move(n));
    return static_cast<int>(re_.nodes_.size()) - 1;
  }
  int add_set(CharSet s) {
    re_.sets_.push_back(std::move(s));
    return static_cast<int>(re_.sets_.size()) - 1;
  }
  int char_node(CharSet s) {
    Node n{Op::kChar};
    n.set = add_set(std::move(s));
    return add_node(std::move(n));
  }

  // alt := seq ('|' seq)*; returns the head of a chain (-1 when empty).
  int parse_alt(bool icase) {
    std::vector<int> branches{parse_seq(icase)};
    while (peek() == '|' && !at_end()) {
      ++pos_;
      branches.push_back(parse_seq(icase));
    }
    if (branches.size() == 1) return branches[0];
    Node n{Op::kAlt};
    n.alts = std::move(branches);
    return add_node(std::move(n));
  }

  int parse_seq(bool icase) {
    int head = -1, tail = -1;
    while (!at_end() && peek() != '|' && peek() != ')') {
      const int atom = parse_quantified(icase);
      if (atom < 0) continue;
      if (head < 0) {
        head = atom;
      } else {
        re_.nodes_[tail].next = atom;
      }
      tail = atom;
    }
    return head;
  }

  bool parse_int(int* value) {
    if (peek() < '0' || peek() > '9') return false;
    int v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + static_cast<int>(take() - '0');
      if (v > 100000) fail("repeat count too large");
    }
    *value = v;
    return true;
  }

  // Parses {n}, {n,}, {n,m} at pos_ (just past '{'); restores pos_ and returns false otherwise.
  bool parse_braces(int* min, int* max) {
    const size_t save = pos_;
    if (!parse_int(min)) {
      pos_ = save;
      return false;
    }
    *max = *min;
    if (peek() == ',') {
      ++pos_;
      *max = -1;
      parse_int(max);
    }
    if (peek() != '}') {
      pos_ = save;
      return false;
    }
    ++pos_;
    return true;
  }

  int parse_quantified(bool icase) {
    const int atom = parse_atom(icase);
    int min, max;
    const char32_t q = peek();
    if (q == '*') {
      min = 0, max = -1;
    } else if (q == '+') {
      min = 1, max = -1;
    } else if (q == '?') {
      min = 0, max = 1;
    } else if (q == '{') {
      ++pos_;
      if (!parse_braces(&min, &max)) {
        --pos_;
        return atom;
      }
      --pos_;  // re-point at the last '}' so the shared ++pos_ below skips it
    } else {
      return atom;
    }
    ++pos_;
    if (atom < 0) fail("quantifier without an operand");
    if (max >= 0 && max < min) fail("bad repeat bounds");
    Node n{Op::kRepeat};
    n.min = min;
    n.max = max;
    n.body = atom;
    n.single = re_.nodes_[atom].op == Op::kChar && re_.nodes_[atom].next < 0;
    if (peek() == '?') {
      ++pos_;
      n.greedy = false;
    } else if (peek() == '+') {
      fail("possessive quantifiers are not supported");
    }
    return add_node(std::move(n));
  }

  int parse_atom(bool icase) {
    const char32_t c = take();
    switch (c) {
      case '(':
        return parse_group(icase);
      case '[':
        return char_node(parse_class(icase));
      case '.': {
        CharSet s;
        s.items.push_back({Item::kAny});
        return char_node(std::move(s));
      }
      case '^':
        return add_node(Node{Op::kBol});
      case '$':
        return add_node(Node{Op::kEol});
      case '\\': {
        CharSet s;
        s.icase = icase;
        s.items.push_back(parse_escape(false));
        return char_node(std::move(s));
      }
      case '*':
      case '+':
      case '?':
        fail("nothing to repeat");
      default: {
        CharSet s;
        s.icase = icase;
        s.items.push_back({Item::kRange, false, c, c});
        return char_node(std::move(s));
      }
    }
  }

  int parse_group(bool icase) {
    Node look{Op::kLook};
    bool is_look = false;
    if (peek() == '?') {
      ++pos_;
      const char32_t k = take();
      if (k == ':') {
      } else if (k == '=' || k == '!') {
        is_look = true;
        look.negate = k == '!';
      } else if (k == 'i' && peek() == ':') {
        ++pos_;
        icase = true;
      } else {
        fail("unsupported group syntax");
      }
    }
    const int body = parse_alt(icase);
    if (take() != ')') fail("expected ')'");
    if (is_look) {
      look.body = body;
      return add_node(std::move(look));
    }
    if (body >= 0 && re_.nodes_[body].next < 0) return body;  // a single node: no wrapper
    // Wrap the chain in a one-branch alternation so that quantifiers see one node.
    Node n{Op::kAlt};
    n.alts = {body};
    return add_node(std::move(n));
  }

  char32_t parse_hex(int digits) {
    char32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char32_t h = take();
      int d;
      if (h >= '0' && h <= '9') {
        d = static_cast<int>(h - '0');
      } else if (h >= 'a' && h <= 'f') {
        d = static_cast<int>(h - 'a' + 10);
      } else if (h >= 'A' && h <= 'F') {
        d = static_cast<int>(h - 'A' + 10);
      } else {
        fail("bad hex escape");
      }
      v = v * 16 + static_cast<char32_t>(d);
    }
    return v;
  }
  char32_t parse_braced_hex() {
    char32_t v = 0;
    int n = 0;
    while (peek() != '}') {
      v = v * 16 + parse_hex(1);
      if (++n > 6) fail("bad hex escape");
    }
    ++pos_;
    if (n == 0 || v > 0x10FFFF) fail("bad hex escape");
    return v;
  }

  // After a backslash.
  Item parse_escape(bool in_class) {
    const char32_t e = take();
    const auto single = [](char32_t v) { return Item{Item::kRange, false, v, v}; };
    switch (e) {
      case 'n':
        return single('\n');
      case 'r':
        return single('\r');
      case 't':
        return single('\t');
      case 'f':
        return single('\f');
      case 'v':
        return single('\v');
      case '0':
        return single(0);
      case 's':
        return Item{Item::kSpace};
      case 'S':
        return Item{Item::kSpace, true};
      case 'd':
        return Item{Item::kDigit};
      case 'D':
        return Item{Item::kDigit, true};
      case 'w':
        return Item{Item::kWord};
      case 'W':
        return Item{Item::kWord, true};
      case 'x':
        if (peek() == '{') {
          ++pos_;
          return single(parse_braced_hex());
        }
        return single(parse_hex(2));
      case 'u':
        if (peek() == '{') {
          ++pos_;
          return single(parse_braced_hex());
        }
        return single(parse_hex(4));
      case 'p':
      case 'P': {
        std::string name;
        if (peek() == '{') {
          ++pos_;
          while (peek() != '}') utf8::append(name, take());
          ++pos_;
        } else {
          utf8::append(name, take());
        }
        const uint32_t mask = property_mask(name);
        if (mask == 0) fail("unsupported Unicode property \\p{" + name + "}");
        Item it{Item::kCategories, e == 'P'};
        it.mask = mask;
        return it;
      }
      case 'b':
        if (in_class) return single('\b');
        fail("word boundaries are not supported");
      default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '1' && e <= '9')) {
          fail("unsupported escape");
        }
        return single(e);  // an escaped metacharacter or punctuation
    }
  }

  CharSet parse_class(bool icase) {
    CharSet s;
    s.icase = icase;
    if (peek() == '^') {
      ++pos_;
      s.negate = true;
    }
    bool first = true;
    while (true) {
      if (at_end()) fail("unterminated character class");
      char32_t c = take();
      if (c == ']' && !first) break;
      first = false;
      Item lo;
      if (c == '\\') {
        lo = parse_escape(true);
      } else {
        if (c == '[') fail("nested classes are not supported");
        lo = Item{Item::kRange, false, c, c};
      }
      if (peek() == '-' && peek(1) != ']' && peek(1) != 0 && lo.kind == Item::kRange &&
          !lo.negate) {
        ++pos_;
        const char32_t h = take();
        Item hi = h == '\\' ? parse_escape(true) : Item{Item::kRange, false, h, h};
        if (hi.kind != Item::kRange || hi.lo < lo.lo) fail("bad class range");
        lo.hi = hi.lo;
      }
      s.items.push_back(lo);
    }
    return s;
  }

  Regex& re_;
  std::string_view pattern_;
  std::vector<char32_t> cps_;
  size_t pos_ = 0;
};

Regex Regex::compile(std::string_view pattern) {
  Regex re;
  re.pattern_ = std::string(pattern);
  Parser p(re, re.pattern_);
  re.head_ = p.parse();
  return re;
}

Regex Regex::literal(std::string_view text) {
  Regex re;
  re.pattern_ = std::string(text);
  int tail = -1;
  for (char32_t c : utf8::code_points(text)) {
    CharSet s;
    s.items.push_back({Item::kRange, false, c, c});
    re.sets_.push_back(std::move(s));
    Node n{Op::kChar};
    n.set = static_cast<int>(re.sets_.size()) - 1;
    re.nodes_.push_back(std::move(n));
    const int idx = static_cast<int>(re.nodes_.size()) - 1;
    if (tail < 0) {
      re.head_ = idx;
    } else {
      re.nodes_[tail].next = idx;
    }
    tail = idx;
  }
  return re;
}

// ---- Matcher -----------------------------------------------------------------------------------

bool Regex::match(const Subject& s, int n, size_t pos, const Cont* k, size_t* end) const {
  while (true) {
    if (n < 0) {
      if (k == nullptr) {
        *end = pos;
        return true;
      }
      const Node& owner = nodes_[k->node];
      if (owner.op == Op::kRepeat) {
        if (pos == k->start) return match(s, owner.next, pos, k->up, end);  // empty iteration
        return match_repeat(s, k->node, k->count, pos, k->up, end);
      }
      n = owner.next;
      k = k->up;
      continue;
    }
    const Node& nd = nodes_[n];
    switch (nd.op) {
      case Op::kChar:
        if (pos >= s.n || !sets_[nd.set].matches(s.text[pos])) return false;
        ++pos;
        n = nd.next;
        continue;
      case Op::kBol:
        if (pos != 0) return false;
        n = nd.next;
        continue;
      case Op::kEol:
        if (pos != s.n) return false;
        n = nd.next;
        continue;
      case Op::kLook: {
        size_t ignored;
        if (match(s, nd.body, pos, nullptr, &ignored) == nd.negate) return false;
        n = nd.next;
        continue;
      }
      case Op::kAlt:
        for (int b : nd.alts) {
          const Cont c{n, 0, 0, k};
          if (match(s, b, pos, &c, end)) return true;
        }
        return false;
      case Op::kRepeat: {
        if (!nd.single) return match_repeat(s, n, 0, pos, k, end);
        const CharSet& set = sets_[nodes_[nd.body].set];
        size_t run = 0;
        const size_t limit = nd.max < 0 ? s.n - pos : std::min<size_t>(nd.max, s.n - pos);
        while (run < limit && set.matches(s.text[pos + run])) ++run;
        if (run < static_cast<size_t>(nd.min)) return false;
        if (nd.greedy) {
          for (size_t i = run + 1; i-- > static_cast<size_t>(nd.min);) {
            if (match(s, nd.next, pos + i, k, end)) return true;
          }
        } else {
          for (size_t i = nd.min; i <= run; ++i) {
            if (match(s, nd.next, pos + i, k, end)) return true;
          }
        }
        return false;
      }
    }
  }
}

bool Regex::match_repeat(const Subject& s, int r, int count, size_t pos, const Cont* k,
                         size_t* end) const {
  const Node& nd = nodes_[r];
  const bool more = nd.max < 0 || count < nd.max;
  const Cont c{r, count + 1, pos, k};
  if (nd.greedy) {
    if (more && match(s, nd.body, pos, &c, end)) return true;
    return count >= nd.min && match(s, nd.next, pos, k, end);
  }
  if (count >= nd.min && match(s, nd.next, pos, k, end)) return true;
  return more && match(s, nd.body, pos, &c, end);
}

bool Regex::search(const char32_t* text, size_t n, size_t from, size_t* begin, size_t* end) const {
  const Subject s{text, n};
  for (size_t start = from; start <= n; ++start) {
    if (match(s, head_, start, nullptr, end)) {
      *begin = start;
      return true;
    }
  }
  return false;
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(const char32_t* text, size_t n) const {
  std::vector<std::pair<size_t, size_t>> out;
  size_t from = 0, b, e;
  while (from <= n && search(text, n, from, &b, &e)) {
    out.emplace_back(b, e);
    from = e > b ? e : e + 1;  // an empty match advances one code point
  }
  return out;
}

}  // namespace tandem
