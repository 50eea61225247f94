// Lexer of the chat-template Jinja engine: preprocessing (whitespace settings, generation
// tags) with a line number kept per byte, then tokens, following @huggingface/jinja.
#include "server/jinja/lexer.h"

#include <cstring>

#include "engine/tokenizer/unicode.h"
#include "engine/tokenizer/utf8.h"
#include "kernels/common.h"
#include "server/jinja/text.h"

namespace tandem::jinja {

void syntax_error(int line, const std::string& msg) {
  TANDEM_FAIL(kInvalidArgument, "chat template syntax error at line ", line, ": ", msg);
}

size_t whitespace_len(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  const utf8::Decoded d = utf8::decode(s, i);
  return d.valid && unicode::is_js_space(d.cp) ? d.len : 0;
}

namespace {

// Source text after preprocessing, with the original line of every byte.
struct Source {
  std::string text;
  std::vector<int> line;
  void push(char c, int l) {
    text.push_back(c);
    line.push_back(l);
  }
};

// Length of the whitespace character that ends s, 0 if none.
size_t trailing_whitespace_len(std::string_view s) {
  for (size_t k = 1; k <= 3 && k <= s.size(); ++k) {
    if (whitespace_len(s, s.size() - k) == k) return k;
  }
  return 0;
}

bool is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }

Source preprocess(std::string_view src) {
  Source a;
  int line = 1;
  for (char c : src) {
    a.push(c, line);
    if (c == '\n') ++line;
  }
  // Like Jinja's default keep_trailing_newline=False: one trailing newline is dropped.
  if (!a.text.empty() && a.text.back() == '\n') {
    a.text.pop_back();
    a.line.pop_back();
  }
  // lstrip_blocks: spaces and tabs between a line start and `{%`, `{#` (or `{-`) go.
  Source b;
  for (size_t i = 0; i < a.text.size();) {
    const bool line_start = i == 0 || a.text[i - 1] == '\n' || a.text[i - 1] == '\r';
    if (line_start) {
      size_t j = i;
      while (j < a.text.size() && (a.text[j] == ' ' || a.text[j] == '\t')) ++j;
      if (j + 1 < a.text.size() && a.text[j] == '{' && std::strchr("#%-", a.text[j + 1]) &&
          a.text[j + 1] != '\0') {
        i = j;
      }
    }
    b.push(a.text[i], a.line[i]);
    ++i;
  }
  // trim_blocks: the first newline after `%}`, `#}` (or `-}`) goes.
  Source c;
  for (size_t i = 0; i < b.text.size();) {
    if (i + 2 < b.text.size() && std::strchr("#%-", b.text[i]) && b.text[i] != '\0' &&
        b.text[i + 1] == '}' && b.text[i + 2] == '\n') {
      c.push(b.text[i], b.line[i]);
      c.push(b.text[i + 1], b.line[i + 1]);
      i += 3;
      continue;
    }
    c.push(b.text[i], b.line[i]);
    ++i;
  }
  // transformers' `{% generation %}` / `{% endgeneration %}` tags are removed; the whitespace
  // around one goes too where the tag has `-` on that side.
  Source d;
  const std::string_view t = c.text;
  size_t copied = 0;  // c.text[0, copied) is already in d
  size_t search = 0;
  while (true) {
    const size_t open = t.find("{%", search);
    if (open == std::string_view::npos) break;
    size_t j = open + 2;
    const bool lstrip = j < t.size() && t[j] == '-';
    if (lstrip) ++j;
    while (size_t w = whitespace_len(t, j)) j += w;
    if (t.substr(j, 3) == "end") j += 3;
    if (t.substr(j, 10) != "generation") {
      search = open + 2;
      continue;
    }
    j += 10;
    while (size_t w = whitespace_len(t, j)) j += w;
    const bool rstrip = j < t.size() && t[j] == '-';
    if (rstrip) ++j;
    if (t.substr(j, 2) != "%}") {
      search = open + 2;
      continue;
    }
    j += 2;
    size_t before = open;  // start of the whitespace run before the tag
    while (before > copied) {
      const size_t k = trailing_whitespace_len(t.substr(copied, before - copied));
      if (k == 0) break;
      before -= k;
    }
    size_t after = j;  // end of the whitespace run after the tag
    while (size_t w = whitespace_len(t, after)) after += w;
    const size_t keep_before_end = lstrip ? before : open;
    for (size_t k = copied; k < keep_before_end; ++k) d.push(t[k], c.line[k]);
    if (!rstrip) {
      for (size_t k = j; k < after; ++k) d.push(t[k], c.line[k]);
    }
    copied = after;
    search = after;
  }
  for (size_t k = copied; k < t.size(); ++k) d.push(t[k], c.line[k]);
  return d;
}

struct OpEntry {
  const char* text;
  TokType type;
};

// Order matters: longer operators before their prefixes.
constexpr OpEntry kOps[] = {
    {"{%", TokType::kOpenStatement},  {"%}", TokType::kCloseStatement},
    {"{{", TokType::kOpenExpression}, {"}}", TokType::kCloseExpression},
    {"(", TokType::kOpenParen},       {")", TokType::kCloseParen},
    {"{", TokType::kOpenBrace},       {"}", TokType::kCloseBrace},
    {"[", TokType::kOpenBracket},     {"]", TokType::kCloseBracket},
    {",", TokType::kComma},           {".", TokType::kDot},
    {":", TokType::kColon},           {"|", TokType::kPipe},
    {"<=", TokType::kComparison},     {">=", TokType::kComparison},
    {"==", TokType::kComparison},     {"!=", TokType::kComparison},
    {"<", TokType::kComparison},      {">", TokType::kComparison},
    {"+", TokType::kAdditive},        {"-", TokType::kAdditive},
    {"~", TokType::kAdditive},        {"**", TokType::kPower},
    {"*", TokType::kMultiplicative},  {"//", TokType::kMultiplicative},
    {"/", TokType::kMultiplicative},  {"%", TokType::kMultiplicative},
    {"=", TokType::kEquals},
};

class Lexer {
 public:
  explicit Lexer(Source src) : src_(std::move(src)), s_(src_.text) {}

  std::vector<Token> run() {
    while (pos_ < s_.size()) step();
    return std::move(tokens_);
  }

 private:
  int line_at(size_t p) const {
    if (src_.line.empty()) return 1;
    return src_.line[p < src_.line.size() ? p : src_.line.size() - 1];
  }
  void push(TokType type, std::string value, size_t start) {
    tokens_.push_back(Token{type, std::move(value), line_at(start)});
  }
  bool last_is(TokType t) const { return !tokens_.empty() && tokens_.back().type == t; }
  bool starts_with(std::string_view p) const { return s_.substr(pos_, p.size()) == p; }

  void strip_trailing_whitespace() {
    if (!last_is(TokType::kText)) return;
    std::string& v = tokens_.back().value;
    while (size_t k = trailing_whitespace_len(v)) v.resize(v.size() - k);
    if (v.empty()) tokens_.pop_back();
  }
  void skip_whitespace() {
    while (size_t w = whitespace_len(s_, pos_)) pos_ += w;
  }

  void step() {
    const bool text_mode = tokens_.empty() || last_is(TokType::kCloseStatement) ||
                           last_is(TokType::kCloseExpression) || last_is(TokType::kComment);
    if (text_mode) {
      const size_t start = pos_;
      while (pos_ < s_.size() &&
             !(s_[pos_] == '{' && pos_ + 1 < s_.size() &&
               (s_[pos_ + 1] == '%' || s_[pos_ + 1] == '{' || s_[pos_ + 1] == '#'))) {
        ++pos_;
      }
      if (pos_ > start) {
        push(TokType::kText, std::string(s_.substr(start, pos_ - start)), start);
        return;
      }
    }
    if (starts_with("{#")) {
      lex_comment();
      return;
    }
    if (starts_with("{%-")) {
      strip_trailing_whitespace();
      push(TokType::kOpenStatement, "{%", pos_);
      pos_ += 3;
      return;
    }
    if (starts_with("{{-")) {
      strip_trailing_whitespace();
      push(TokType::kOpenExpression, "{{", pos_);
      brace_depth_ = 0;
      pos_ += 3;
      return;
    }
    skip_whitespace();
    if (pos_ >= s_.size()) syntax_error(line_at(pos_), "unexpected end of template inside a tag");
    if (starts_with("-%}")) {
      push(TokType::kCloseStatement, "%}", pos_);
      pos_ += 3;
      skip_whitespace();
      return;
    }
    if (starts_with("-}}")) {
      push(TokType::kCloseExpression, "}}", pos_);
      pos_ += 3;
      skip_whitespace();
      return;
    }
    const char ch = s_[pos_];
    if (ch == '-' || ch == '+') {
      if (tokens_.empty() || last_is(TokType::kText)) {
        syntax_error(line_at(pos_), std::string("unexpected character '") + ch + "'");
      }
      const TokType last = tokens_.back().type;
      const bool binary = last == TokType::kIdentifier || last == TokType::kNumber ||
                          last == TokType::kString || last == TokType::kCloseParen ||
                          last == TokType::kCloseBracket;
      if (!binary) {
        const size_t start = pos_++;
        std::string num = read_number();
        if (num.empty()) {
          push(TokType::kUnary, std::string(1, ch), start);
        } else {
          push(TokType::kNumber, std::string(1, ch) + num, start);
        }
        return;
      }
    }
    for (const OpEntry& op : kOps) {
      if (op.type == TokType::kCloseExpression && brace_depth_ > 0) continue;
      if (!starts_with(op.text)) continue;
      push(op.type, op.text, pos_);
      if (op.type == TokType::kOpenExpression) brace_depth_ = 0;
      if (op.type == TokType::kOpenBrace) ++brace_depth_;
      if (op.type == TokType::kCloseBrace) --brace_depth_;
      pos_ += std::strlen(op.text);
      return;
    }
    if (ch == '\'' || ch == '"') {
      lex_string(ch);
      return;
    }
    if (is_digit(ch)) {
      const size_t start = pos_;
      std::string num = read_number();
      push(TokType::kNumber, std::move(num), start);
      return;
    }
    if (is_word(ch)) {
      const size_t start = pos_;
      while (pos_ < s_.size() && is_word(s_[pos_])) ++pos_;
      push(TokType::kIdentifier, std::string(s_.substr(start, pos_ - start)), start);
      return;
    }
    syntax_error(line_at(pos_), std::string("unexpected character '") + ch + "'");
  }

  // Digits with an optional fraction and exponent (neither right after a dot: `x.0.1`).
  std::string read_number() {
    const size_t start = pos_;
    while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
    if (pos_ > start && !last_is(TokType::kDot) && pos_ + 1 < s_.size() && s_[pos_] == '.' &&
        is_digit(s_[pos_ + 1])) {
      ++pos_;
      while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
    }
    // An exponent (Python Jinja's 1e16, 2.5E-3; the reference has none).
    if (pos_ > start && !last_is(TokType::kDot) && pos_ < s_.size() &&
        (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      size_t j = pos_ + 1;
      if (j < s_.size() && (s_[j] == '+' || s_[j] == '-')) ++j;
      if (j < s_.size() && is_digit(s_[j])) {
        pos_ = j;
        while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
      }
    }
    return std::string(s_.substr(start, pos_ - start));
  }

  void lex_comment() {
    const size_t start = pos_;
    pos_ += 2;
    const bool strip_before = pos_ < s_.size() && s_[pos_] == '-';
    if (strip_before) ++pos_;
    const size_t end = s_.find("#}", pos_);
    if (end == std::string_view::npos) syntax_error(line_at(start), "missing end of comment tag");
    std::string body(s_.substr(pos_, end - pos_));
    const bool strip_after = !body.empty() && body.back() == '-';
    if (strip_after) body.pop_back();
    if (strip_before) strip_trailing_whitespace();
    push(TokType::kComment, std::move(body), start);
    pos_ = end + 2;
    if (strip_after) skip_whitespace();
  }

  void lex_string(char quote) {
    const size_t start = pos_++;
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) syntax_error(line_at(start), "unterminated string literal");
      const char c = s_[pos_];
      if (c == quote) break;
      if (c != '\\') {
        out.push_back(c);
        ++pos_;
        continue;
      }
      if (pos_ + 1 >= s_.size()) syntax_error(line_at(start), "unterminated string literal");
      const char e = s_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case 'n':
          out.push_back('\n');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case '\'':
        case '"':
        case '\\':
          out.push_back(e);
          break;
        case 'x':
        case 'u': {
          const size_t n = e == 'x' ? 2 : 4;
          unsigned cp = 0;
          for (size_t k = 0; k < n; ++k) {
            const char h = pos_ + k < s_.size() ? s_[pos_ + k] : '\0';
            int d = -1;
            if (h >= '0' && h <= '9') d = h - '0';
            if (h >= 'a' && h <= 'f') d = h - 'a' + 10;
            if (h >= 'A' && h <= 'F') d = h - 'A' + 10;
            if (d < 0) syntax_error(line_at(pos_), "invalid hexadecimal escape sequence");
            cp = cp * 16 + static_cast<unsigned>(d);
          }
          pos_ += n;
          utf8::append(out, cp);  // a lone surrogate escape becomes U+FFFD
          break;
        }
        default:  // Python keeps unknown escapes as written
          out.push_back('\\');
          out.push_back(e);
      }
    }
    ++pos_;  // closing quote
    push(TokType::kString, std::move(out), start);
  }

  Source src_;
  std::string_view s_;
  size_t pos_ = 0;
  int brace_depth_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(preprocess(source)).run(); }

}  // namespace tandem::jinja
