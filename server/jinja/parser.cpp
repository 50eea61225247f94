// Parser of the chat-template Jinja engine, statements: recursive descent over the tokens,
// mirroring @huggingface/jinja ({% if %}, {% for %}, {% set %}, macros, call and filter blocks).
// Expressions are server/jinja/parser_expr.cpp.
#include "server/jinja/parser.h"

#include "server/jinja/parser_state.h"

namespace tandem::jinja {

NodePtr Parser::parse_any() {
  const Token& tok = t_[pos_];
  switch (tok.type) {
    case TokType::kComment:
      ++pos_;
      return nullptr;
    case TokType::kText: {
      NodePtr n = make(NodeKind::kText, tok.line);
      n->name = tok.value;
      ++pos_;
      return n;
    }
    case TokType::kOpenStatement:
      return parse_statement();
    case TokType::kOpenExpression: {
      ++pos_;
      NodePtr n = make(NodeKind::kOutput, tok.line);
      n->a = parse_expression();
      expect(TokType::kCloseExpression, "'}}'");
      return n;
    }
    default:
      fail("unexpected '" + tok.value + "'");
  }
}

// Parses statements until one of `names` opens a tag (not consumed).
std::vector<NodePtr> Parser::parse_block(std::initializer_list<const char*> names,
                                         const char* end) {
  DepthGuard guard(this);
  std::vector<NodePtr> body;
  while (!is_statement(names)) {
    if (at_end()) fail(std::string("unexpected end of template, expected {% ") + end + " %}");
    if (NodePtr n = parse_any()) body.push_back(std::move(n));
  }
  return body;
}

void Parser::expect_end(const char* name) {
  expect(TokType::kOpenStatement, "'{%'");
  expect_ident(name);
  expect(TokType::kCloseStatement, "'%}'");
}

NodePtr Parser::parse_statement() {
  const int start_line = line();
  ++pos_;  // {%
  if (!is(TokType::kIdentifier)) fail("expected a statement name after '{%'");
  const std::string name = t_[pos_++].value;
  if (name == "set") return parse_set(start_line);
  if (name == "if") {
    NodePtr n = parse_if(start_line);
    expect_end("endif");
    return n;
  }
  if (name == "for") {
    NodePtr n = parse_for(start_line);
    expect_end("endfor");
    return n;
  }
  if (name == "macro") {
    NodePtr n = make(NodeKind::kMacro, start_line);
    n->name = expect(TokType::kIdentifier, "a macro name").value;
    n->args = parse_args(/*parameters=*/true);
    expect(TokType::kCloseStatement, "'%}'");
    n->body = parse_block({"endmacro"}, "endmacro");
    expect_end("endmacro");
    return n;
  }
  if (name == "call") {
    NodePtr n = make(NodeKind::kCallBlock, start_line);
    if (is(TokType::kOpenParen)) n->args = parse_args(/*parameters=*/true);
    NodePtr callee = make(NodeKind::kName, line());
    callee->name = expect(TokType::kIdentifier, "a macro name").value;
    NodePtr call = make(NodeKind::kCall, start_line);
    call->a = std::move(callee);
    call->args = parse_args(/*parameters=*/false);
    n->a = std::move(call);
    expect(TokType::kCloseStatement, "'%}'");
    n->body = parse_block({"endcall"}, "endcall");
    expect_end("endcall");
    return n;
  }
  if (name == "filter") {
    NodePtr n = make(NodeKind::kFilterBlock, start_line);
    n->name = expect(TokType::kIdentifier, "a filter name").value;
    if (is(TokType::kOpenParen)) n->args = parse_args(/*parameters=*/false);
    expect(TokType::kCloseStatement, "'%}'");
    n->body = parse_block({"endfilter"}, "endfilter");
    expect_end("endfilter");
    return n;
  }
  if (name == "break" || name == "continue") {
    expect(TokType::kCloseStatement, "'%}'");
    return make(name == "break" ? NodeKind::kBreak : NodeKind::kContinue, start_line);
  }
  fail("unknown statement '" + name + "'");
}

NodePtr Parser::parse_set(int start_line) {
  NodePtr target = parse_expression_sequence(/*primary=*/false);
  if (target->kind != NodeKind::kName && target->kind != NodeKind::kTuple &&
      target->kind != NodeKind::kAttr) {
    fail("invalid target of set");
  }
  if (is(TokType::kEquals)) {
    ++pos_;
    NodePtr n = make(NodeKind::kSet, start_line);
    n->a = std::move(target);
    n->b = parse_expression_sequence(/*primary=*/false);
    expect(TokType::kCloseStatement, "'%}'");
    return n;
  }
  expect(TokType::kCloseStatement, "'%}' or '='");
  NodePtr n = make(NodeKind::kSetBlock, start_line);
  n->a = std::move(target);
  n->body = parse_block({"endset"}, "endset");
  expect_end("endset");
  return n;
}

// After `{% if` / `{% elif`: test, body, and the elif/else chain; not the endif.
NodePtr Parser::parse_if(int start_line) {
  NodePtr n = make(NodeKind::kIf, start_line);
  n->a = parse_expression();
  expect(TokType::kCloseStatement, "'%}'");
  n->body = parse_block({"elif", "else", "endif"}, "endif");
  if (is_statement({"elif"})) {
    const int elif_line = line();
    pos_ += 2;
    DepthGuard guard(this);
    n->else_body.push_back(parse_if(elif_line));
  } else if (is_statement({"else"})) {
    pos_ += 2;
    expect(TokType::kCloseStatement, "'%}'");
    n->else_body = parse_block({"endif"}, "endif");
  }
  return n;
}

NodePtr Parser::parse_for(int start_line) {
  NodePtr n = make(NodeKind::kFor, start_line);
  n->a = parse_expression_sequence(/*primary=*/true);
  if (n->a->kind == NodeKind::kTuple) {
    for (const NodePtr& item : n->a->items) {
      if (item->kind != NodeKind::kName) fail("expected names as loop variables");
    }
  } else if (n->a->kind != NodeKind::kName) {
    fail("expected a name as loop variable");
  }
  expect_ident("in");
  NodePtr iterable = parse_expression();
  if (iterable->kind == NodeKind::kSelect) {  // for x in xs if cond
    n->b = std::move(iterable->b);
    n->c = std::move(iterable->a);
  } else {
    n->b = std::move(iterable);
  }
  expect(TokType::kCloseStatement, "'%}'");
  n->body = parse_block({"endfor", "else"}, "endfor");
  if (is_statement({"else"})) {
    pos_ += 2;
    expect(TokType::kCloseStatement, "'%}'");
    n->else_body = parse_block({"endfor"}, "endfor");
  }
  return n;
}

std::vector<NodePtr> parse_template(const std::vector<Token>& tokens) {
  return Parser(tokens).run();
}

}  // namespace tandem::jinja
