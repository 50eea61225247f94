// The recursive-descent parser of the chat-template Jinja engine, shared by its two halves:
// statements (server/jinja/parser.cpp) and expressions (server/jinja/parser_expr.cpp). Internal
// to the Jinja engine; everything else uses parse_template() of server/jinja/parser.h.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

#include "server/jinja/parser.h"

namespace tandem::jinja {

// Deeper nesting than this is rejected instead of overflowing the stack (while parsing,
// evaluating or destroying the tree).
constexpr int kMaxParseDepth = 256;
constexpr int kMaxExprHeight = 512;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  std::vector<NodePtr> run() {
    std::vector<NodePtr> body;
    while (pos_ < t_.size()) {
      if (NodePtr n = parse_any()) body.push_back(std::move(n));
    }
    return body;
  }

 private:
  // Guards recursion depth for nested expressions and blocks.
  struct DepthGuard {
    Parser* p;
    explicit DepthGuard(Parser* parser) : p(parser) {
      if (++p->depth_ > kMaxParseDepth) p->fail("template nested too deeply");
    }
    ~DepthGuard() { --p->depth_; }
  };

  int line() const {
    if (pos_ < t_.size()) return t_[pos_].line;
    return t_.empty() ? 1 : t_.back().line;
  }
  [[noreturn]] void fail(const std::string& msg) const { syntax_error(line(), msg); }

  bool at_end() const { return pos_ >= t_.size(); }
  bool is(TokType type, size_t ahead = 0) const {
    return pos_ + ahead < t_.size() && t_[pos_ + ahead].type == type;
  }
  bool is_ident(const char* name, size_t ahead = 0) const {
    return is(TokType::kIdentifier, ahead) && t_[pos_ + ahead].value == name;
  }
  bool is_statement(std::initializer_list<const char*> names) const {
    if (!is(TokType::kOpenStatement) || !is(TokType::kIdentifier, 1)) return false;
    for (const char* n : names) {
      if (t_[pos_ + 1].value == n) return true;
    }
    return false;
  }
  static const char* describe(TokType type) {
    switch (type) {
      case TokType::kCloseStatement:
        return "'%}'";
      case TokType::kCloseExpression:
        return "'}}'";
      case TokType::kCloseParen:
        return "')'";
      case TokType::kCloseBracket:
        return "']'";
      case TokType::kColon:
        return "':'";
      case TokType::kOpenParen:
        return "'('";
      case TokType::kIdentifier:
        return "a name";
      default:
        return "a token";
    }
  }
  const Token& expect(TokType type, const char* what) {
    if (at_end()) fail(std::string("unexpected end of template, expected ") + what);
    if (t_[pos_].type != type) {
      fail(std::string("expected ") + what + ", got '" + t_[pos_].value + "'");
    }
    return t_[pos_++];
  }
  void expect_ident(const char* name) {
    if (!is_ident(name)) {
      if (at_end()) fail(std::string("unexpected end of template, expected '") + name + "'");
      fail(std::string("expected '") + name + "', got '" + t_[pos_].value + "'");
    }
    ++pos_;
  }
  // Sets n's height from its children; rejects chains long enough to threaten the stack.
  NodePtr checked(NodePtr n) {
    int h = 0;
    for (const NodePtr* c : {&n->a, &n->b, &n->c, &n->d}) {
      if (*c) h = std::max(h, (*c)->height);
    }
    for (const NodePtr& c : n->items) {
      if (c) h = std::max(h, c->height);
    }
    for (const Arg& arg : n->args) {
      if (arg.value) h = std::max(h, arg.value->height);
    }
    n->height = h + 1;
    if (n->height > kMaxExprHeight)
      syntax_error(n->line, "expression too long or nested too deeply");
    return n;
  }

  NodePtr make(NodeKind kind, int at_line) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->line = at_line;
    return n;
  }

  // ---- statements (parser.cpp) ----
  NodePtr parse_any();
  // Parses statements until one of `names` opens a tag (not consumed).
  std::vector<NodePtr> parse_block(std::initializer_list<const char*> names, const char* end);
  void expect_end(const char* name);
  NodePtr parse_statement();
  NodePtr parse_set(int start_line);
  // After `{% if` / `{% elif`: test, body, and the elif/else chain; not the endif.
  NodePtr parse_if(int start_line);
  NodePtr parse_for(int start_line);

  // ---- expressions (parser_expr.cpp) ----
  NodePtr parse_expression_sequence(bool primary);
  NodePtr parse_expression();
  NodePtr binary(std::string op, NodePtr a, NodePtr b, int at_line);
  NodePtr parse_or();
  NodePtr parse_and();
  NodePtr parse_not();
  NodePtr parse_comparison();
  NodePtr parse_additive();
  NodePtr parse_multiplicative();
  NodePtr parse_power();
  NodePtr parse_test();
  // Jinja2 takes one argument without parentheses after a test name when a literal, a name
  // (other than and/or/else and the like) or a list/dict follows.
  bool bare_test_argument_follows() const;
  NodePtr parse_filter();
  NodePtr parse_unary();
  // Member access, subscripts, slices and calls after a primary expression.
  NodePtr parse_postfix(NodePtr node);
  // After '[': an index or a slice [start:stop:step]; consumes ']'.
  NodePtr parse_subscript(NodePtr object, int l);
  std::vector<Arg> parse_args(bool parameters);
  NodePtr parse_primary();

  const std::vector<Token>& t_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace tandem::jinja
