// Lexer of the chat-template Jinja engine. Applies the whitespace settings HF uses
// (trim_blocks, lstrip_blocks, one trailing newline dropped, `{% generation %}` tags removed)
// the way @huggingface/jinja does, then splits the source into tokens that remember their
// line in the original source for error messages.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::jinja {

enum class TokType : uint8_t {
  kText,
  kNumber,      // 12, 1.5, -3 (a sign is folded in where it cannot be binary)
  kString,      // value holds the unescaped contents
  kIdentifier,  // names, keywords, true/false/none
  kEquals,      // =
  kOpenParen,
  kCloseParen,
  kOpenStatement,    // {%
  kCloseStatement,   // %}
  kOpenExpression,   // {{
  kCloseExpression,  // }}
  kOpenBracket,
  kCloseBracket,
  kOpenBrace,
  kCloseBrace,
  kComma,
  kDot,
  kColon,
  kPipe,
  kAdditive,        // + - ~
  kMultiplicative,  // * / // %
  kPower,           // **
  kComparison,      // < > <= >= == !=
  kUnary,           // - + in prefix position
  kComment,
};

struct Token {
  TokType type;
  std::string value;
  int line;  // 1-based line in the original source
};

// Throws tandem::Error (kInvalidArgument) "chat template syntax error at line N: ...".
std::vector<Token> tokenize(std::string_view source);

// Length in bytes of the whitespace character at s[i] (the JavaScript \s set), 0 if none.
size_t whitespace_len(std::string_view s, size_t i);

[[noreturn]] void syntax_error(int line, const std::string& msg);

}  // namespace tandem::jinja
