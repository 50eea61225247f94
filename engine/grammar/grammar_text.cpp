// compile_grammar_text: the GBNF-like text syntax of engine/grammar/grammar.h, parsed by
// recursive descent straight into a GrammarBuilder.
#include <cstring>
#include <map>
#include <set>

#include "engine/grammar/grammar.h"
#include "engine/tokenizer/utf8.h"
#include "kernels/common.h"

namespace tandem::grammar {

namespace {

constexpr size_t kMaxText = 1 << 20;
constexpr int kMaxNesting = 100;
constexpr uint32_t kMaxCount = 10000;  // largest {m,n} bound

bool is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

class Parser {
 public:
  explicit Parser(std::string_view t) : t_(t) {}

  std::shared_ptr<const Grammar> run() {
    skip_space();
    while (i_ < t_.size()) {
      const std::string name = word();
      skip_space();
      expect("::=");
      const Elem r = ref(name);
      TANDEM_REQUIRE(defined_.insert(name).second, kInvalidArgument, "grammar: rule '", name,
                     "' defined twice");
      b_.define(r, alternatives(0));
      skip_space();
    }
    const auto it = rules_.find("root");
    TANDEM_REQUIRE(it != rules_.end() && defined_.count("root"), kInvalidArgument,
                   "grammar: no rule 'root'");
    for (const auto& [name, e] : rules_)
      TANDEM_REQUIRE(defined_.count(name), kInvalidArgument, "grammar: rule '", name,
                     "' is used but not defined");
    return b_.finish(it->second);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    TANDEM_FAIL(kInvalidArgument, "grammar: ", what, " at offset ", i_);
  }
  void skip_space() {
    while (i_ < t_.size()) {
      if (t_[i_] == '#') {
        while (i_ < t_.size() && t_[i_] != '\n') ++i_;
      } else if (t_[i_] == ' ' || t_[i_] == '\t' || t_[i_] == '\n' || t_[i_] == '\r') {
        ++i_;
      } else {
        break;
      }
    }
  }
  void expect(const char* s) {
    if (t_.substr(i_, std::strlen(s)) != s) fail(cat("expected '", s, "'"));
    i_ += std::strlen(s);
  }
  std::string word() {
    const size_t start = i_;
    while (i_ < t_.size() && is_word(t_[i_])) ++i_;
    if (i_ == start) fail("expected a rule name");
    return std::string(t_.substr(start, i_ - start));
  }
  Elem ref(const std::string& name) {
    const auto it = rules_.find(name);
    if (it != rules_.end()) return it->second;
    return rules_[name] = b_.declare(name);
  }
  // A rule name followed by ::= begins the next rule.
  bool at_rule_start() const {
    size_t j = i_;
    while (j < t_.size() && is_word(t_[j])) ++j;
    if (j == i_) return false;
    while (j < t_.size() && (t_[j] == ' ' || t_[j] == '\t' || t_[j] == '\n' || t_[j] == '\r')) ++j;
    return t_.substr(j, 3) == "::=";
  }

  std::vector<Seq> alternatives(int depth) {
    if (depth > kMaxNesting) fail("groups nested too deeply");
    std::vector<Seq> alts{sequence(depth)};
    while (i_ < t_.size() && t_[i_] == '|') {
      ++i_;
      alts.push_back(sequence(depth));
    }
    return alts;
  }

  Seq sequence(int depth) {
    Seq seq;
    for (;;) {
      skip_space();
      if (i_ >= t_.size() || t_[i_] == '|' || t_[i_] == ')' || at_rule_start()) return seq;
      Seq item = primary(depth);
      postfix(item);
      seq.insert(seq.end(), item.begin(), item.end());
    }
  }

  Seq primary(int depth) {
    const char c = t_[i_];
    if (c == '"') {
      ++i_;
      std::string bytes;
      while (i_ < t_.size() && t_[i_] != '"') utf8::append(bytes, character());
      expect("\"");
      return b_.literal(bytes);
    }
    if (c == '[') return {char_class()};
    if (c == '.') {
      ++i_;
      return {b_.codepoints("any", {}, true)};
    }
    if (c == '(') {
      ++i_;
      std::vector<Seq> alts = alternatives(depth + 1);
      expect(")");
      if (alts.size() == 1) return alts[0];
      return {b_.rule("group", std::move(alts))};
    }
    if (is_word(c)) return {ref(word())};
    fail(cat("unexpected '", c, "'"));
  }

  uint32_t count() {
    uint64_t v = 0;
    const size_t start = i_;
    while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9') {
      v = v * 10 + static_cast<uint64_t>(t_[i_++] - '0');
      if (v > kMaxCount) fail(cat("repetition count above ", kMaxCount));
    }
    if (i_ == start) fail("expected a number");
    return static_cast<uint32_t>(v);
  }

  void postfix(Seq& item) {
    for (;;) {
      if (i_ >= t_.size()) return;
      uint32_t lo, hi;
      const char c = t_[i_];
      if (c == '*' || c == '+' || c == '?') {
        ++i_;
        lo = c == '+' ? 1 : 0;
        hi = c == '?' ? 1 : kUnbounded;
      } else if (c == '{') {
        ++i_;
        lo = hi = count();
        if (i_ < t_.size() && t_[i_] == ',') {
          ++i_;
          hi = i_ < t_.size() && t_[i_] == '}' ? kUnbounded : count();
        }
        expect("}");
      } else {
        return;
      }
      item = {b_.repeat("rep", item, lo, hi)};
    }
  }

  // One character of a literal or class, escapes decoded.
  char32_t character() {
    if (i_ >= t_.size()) fail("unterminated literal");
    if (t_[i_] != '\\') return utf8::next(t_, i_);
    if (++i_ >= t_.size()) fail("unterminated escape");
    const char e = t_[i_++];
    switch (e) {
      case 'n':
        return '\n';
      case 't':
        return '\t';
      case 'r':
        return '\r';
      case 'x':
        return hex(2);
      case 'u':
        return hex(4);
      case 'U':
        return hex(8);
      default:
        return static_cast<unsigned char>(e);
    }
  }
  char32_t hex(int n) {
    char32_t v = 0;
    for (int k = 0; k < n; ++k, ++i_) {
      if (i_ >= t_.size()) fail("short hex escape");
      const char c = t_[i_];
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) fail("bad hex escape");
      v = v * 16 + static_cast<char32_t>(d);
    }
    return v;
  }

  Elem char_class() {
    ++i_;  // [
    const bool negate = i_ < t_.size() && t_[i_] == '^';
    if (negate) ++i_;
    std::vector<CpRange> ranges;
    while (i_ < t_.size() && t_[i_] != ']') {
      const char32_t lo = character();
      char32_t hi = lo;
      if (i_ + 1 < t_.size() && t_[i_] == '-' && t_[i_ + 1] != ']') {
        ++i_;
        hi = character();
        if (hi < lo) fail("class range out of order");
      }
      ranges.emplace_back(lo, hi);
    }
    expect("]");
    return b_.codepoints("class", std::move(ranges), negate);
  }

  std::string_view t_;
  size_t i_ = 0;
  GrammarBuilder b_;
  std::map<std::string, Elem> rules_;
  std::set<std::string> defined_;
};

}  // namespace

std::shared_ptr<const Grammar> compile_grammar_text(std::string_view text) {
  TANDEM_REQUIRE(text.size() <= kMaxText, kInvalidArgument, "grammar text longer than ", kMaxText,
                 " bytes");
  return Parser(text).run();
}

}  // namespace tandem::grammar
