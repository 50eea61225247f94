// Parser of the chat-template Jinja engine, expressions: the grammar and precedence of
// @huggingface/jinja (filters bind tighter than tests, which bind tighter than arithmetic; `not`
// binds looser than comparisons).
#include <charconv>
#include <cstdlib>

#include "server/jinja/parser_state.h"

namespace tandem::jinja {

NodePtr Parser::parse_expression_sequence(bool primary) {
  const int start_line = line();
  NodePtr first = primary ? parse_primary() : parse_expression();
  if (!is(TokType::kComma)) return first;
  NodePtr tuple = make(NodeKind::kTuple, start_line);
  tuple->items.push_back(std::move(first));
  while (is(TokType::kComma)) {
    ++pos_;
    tuple->items.push_back(primary ? parse_primary() : parse_expression());
  }
  return checked(std::move(tuple));
}

NodePtr Parser::parse_expression() {
  DepthGuard guard(this);
  const int start_line = line();
  NodePtr value = parse_or();
  if (!is_ident("if")) return value;
  ++pos_;
  NodePtr test = parse_or();
  if (is_ident("else")) {
    ++pos_;
    NodePtr n = make(NodeKind::kTernary, start_line);
    n->a = std::move(test);
    n->b = std::move(value);
    n->c = parse_expression();
    return checked(std::move(n));
  }
  NodePtr n = make(NodeKind::kSelect, start_line);
  n->a = std::move(test);
  n->b = std::move(value);
  return checked(std::move(n));
}

NodePtr Parser::binary(std::string op, NodePtr a, NodePtr b, int at_line) {
  NodePtr n = make(NodeKind::kBinary, at_line);
  n->name = std::move(op);
  n->a = std::move(a);
  n->b = std::move(b);
  return checked(std::move(n));
}

NodePtr Parser::parse_or() {
  NodePtr left = parse_and();
  while (is_ident("or")) {
    const int l = line();
    ++pos_;
    left = binary("or", std::move(left), parse_and(), l);
  }
  return left;
}

NodePtr Parser::parse_and() {
  NodePtr left = parse_not();
  while (is_ident("and")) {
    const int l = line();
    ++pos_;
    left = binary("and", std::move(left), parse_not(), l);
  }
  return left;
}

NodePtr Parser::parse_not() {
  if (is_ident("not")) {
    DepthGuard guard(this);
    NodePtr n = make(NodeKind::kUnary, line());
    ++pos_;
    n->name = "not";
    n->a = parse_not();
    return checked(std::move(n));
  }
  return parse_comparison();
}

NodePtr Parser::parse_comparison() {
  NodePtr left = parse_additive();
  while (true) {
    const int l = line();
    std::string op;
    if (is_ident("not") && is_ident("in", 1)) {
      op = "not in";
      pos_ += 2;
    } else if (is_ident("in")) {
      op = "in";
      ++pos_;
    } else if (is(TokType::kComparison)) {
      op = t_[pos_++].value;
    } else {
      break;
    }
    left = binary(std::move(op), std::move(left), parse_additive(), l);
  }
  return left;
}

NodePtr Parser::parse_additive() {
  NodePtr left = parse_multiplicative();
  while (is(TokType::kAdditive)) {
    const int l = line();
    std::string op = t_[pos_++].value;
    left = binary(std::move(op), std::move(left), parse_multiplicative(), l);
  }
  return left;
}

NodePtr Parser::parse_multiplicative() {
  NodePtr left = parse_power();
  while (is(TokType::kMultiplicative)) {
    const int l = line();
    std::string op = t_[pos_++].value;
    left = binary(std::move(op), std::move(left), parse_power(), l);
  }
  return left;
}

NodePtr Parser::parse_power() {
  NodePtr left = parse_test();
  while (is(TokType::kPower)) {
    const int l = line();
    ++pos_;
    left = binary("**", std::move(left), parse_test(), l);
  }
  return left;
}

NodePtr Parser::parse_test() {
  NodePtr operand = parse_filter();
  while (is_ident("is")) {
    NodePtr n = make(NodeKind::kTest, line());
    ++pos_;
    if (is_ident("not")) {
      n->negate = true;
      ++pos_;
    }
    n->name = expect(TokType::kIdentifier, "a test name").value;
    if (is(TokType::kOpenParen)) {
      n->args = parse_args(/*parameters=*/false);
    } else if (bare_test_argument_follows()) {  // Jinja2: `x is divisibleby 3`
      Arg arg;
      arg.value = parse_postfix(parse_primary());
      n->args.push_back(std::move(arg));
    }
    n->a = std::move(operand);
    operand = checked(std::move(n));
  }
  return operand;
}

// Jinja2 takes one argument without parentheses after a test name when a literal, a name
// (other than and/or/else and the like) or a list/dict follows.
bool Parser::bare_test_argument_follows() const {
  if (is(TokType::kString) || is(TokType::kNumber) || is(TokType::kOpenBracket) ||
      is(TokType::kOpenBrace)) {
    return true;
  }
  if (!is(TokType::kIdentifier)) return false;
  for (const char* kw : {"and", "or", "else", "if", "in", "is", "not"}) {
    if (t_[pos_].value == kw) return false;
  }
  return true;
}

NodePtr Parser::parse_filter() {
  NodePtr operand = parse_unary();
  while (is(TokType::kPipe)) {
    NodePtr n = make(NodeKind::kFilter, line());
    ++pos_;
    n->name = expect(TokType::kIdentifier, "a filter name").value;
    if (is(TokType::kOpenParen)) n->args = parse_args(/*parameters=*/false);
    n->a = std::move(operand);
    operand = checked(std::move(n));
  }
  return operand;
}

NodePtr Parser::parse_unary() {
  if ((is(TokType::kUnary) || is(TokType::kAdditive)) &&
      (t_[pos_].value == "-" || t_[pos_].value == "+")) {
    DepthGuard guard(this);
    NodePtr n = make(NodeKind::kUnary, line());
    n->name = t_[pos_++].value;
    n->a = parse_unary();
    return checked(std::move(n));
  }
  return parse_postfix(parse_primary());
}

// Member access, subscripts, slices and calls after a primary expression.
NodePtr Parser::parse_postfix(NodePtr node) {
  while (true) {
    const int l = line();
    if (is(TokType::kDot)) {
      ++pos_;
      if (!is(TokType::kIdentifier) && !is(TokType::kNumber)) fail("expected a name after '.'");
      NodePtr n = make(NodeKind::kAttr, l);
      n->name = t_[pos_++].value;
      n->a = std::move(node);
      node = checked(std::move(n));
    } else if (is(TokType::kOpenBracket)) {
      ++pos_;
      node = checked(parse_subscript(std::move(node), l));
    } else if (is(TokType::kOpenParen)) {
      NodePtr n = make(NodeKind::kCall, l);
      n->a = std::move(node);
      n->args = parse_args(/*parameters=*/false);
      node = checked(std::move(n));
    } else {
      return node;
    }
  }
}

// After '[': an index or a slice [start:stop:step]; consumes ']'.
NodePtr Parser::parse_subscript(NodePtr object, int l) {
  std::vector<NodePtr> parts;
  bool is_slice = false;
  while (!is(TokType::kCloseBracket)) {
    if (at_end()) fail("unexpected end of template, expected ']'");
    if (is(TokType::kColon)) {
      parts.push_back(nullptr);
      ++pos_;
      is_slice = true;
    } else {
      parts.push_back(parse_expression());
      if (is(TokType::kColon)) {
        ++pos_;
        is_slice = true;
      }
    }
  }
  ++pos_;  // ]
  if (parts.empty()) fail("expected an index or a slice inside '[]'");
  if (!is_slice) {
    NodePtr n = make(NodeKind::kIndex, l);
    n->a = std::move(object);
    n->b = std::move(parts[0]);
    return n;
  }
  if (parts.size() > 3) fail("a slice takes at most 3 parts");
  NodePtr n = make(NodeKind::kSlice, l);
  n->a = std::move(object);
  parts.resize(3);
  n->b = std::move(parts[0]);
  n->c = std::move(parts[1]);
  n->d = std::move(parts[2]);
  return n;
}

std::vector<Arg> Parser::parse_args(bool parameters) {
  expect(TokType::kOpenParen, "'('");
  std::vector<Arg> args;
  while (!is(TokType::kCloseParen)) {
    if (at_end()) fail("unexpected end of template, expected ')'");
    Arg arg;
    if (!parameters && is(TokType::kPower)) {
      ++pos_;
      arg.spread = 2;
      arg.value = parse_expression();
    } else if (!parameters && is(TokType::kMultiplicative) && t_[pos_].value == "*") {
      ++pos_;
      arg.spread = 1;
      arg.value = parse_expression();
    } else {
      NodePtr e = parse_expression();
      if (is(TokType::kEquals)) {
        ++pos_;
        if (e->kind != NodeKind::kName) fail("expected a name before '='");
        arg.name = e->name;
        arg.value = parse_expression();
      } else if (parameters) {
        if (e->kind != NodeKind::kName) fail("expected a parameter name");
        arg.name = e->name;
      } else {
        arg.value = std::move(e);
      }
    }
    args.push_back(std::move(arg));
    if (is(TokType::kComma)) {
      ++pos_;
    } else if (!is(TokType::kCloseParen)) {
      if (at_end()) fail("unexpected end of template, expected ')'");
      fail("expected ',' or ')', got '" + t_[pos_].value + "'");
    }
  }
  ++pos_;  // )
  return args;
}

NodePtr Parser::parse_primary() {
  if (at_end()) fail("unexpected end of template in an expression");
  DepthGuard guard(this);
  const Token& tok = t_[pos_++];
  switch (tok.type) {
    case TokType::kNumber: {
      NodePtr n = make(NodeKind::kLiteral, tok.line);
      if (tok.value.find_first_of(".eE") != std::string::npos) {
        n->literal = Value::from_float(std::strtod(tok.value.c_str(), nullptr));
      } else {
        int64_t v = 0;
        const char* b = tok.value.c_str();
        const char* e = b + tok.value.size();
        if (*b == '+') ++b;
        const auto res = std::from_chars(b, e, v);
        n->literal =
            res.ec == std::errc() ? Value::from_int(v) : Value::from_float(std::strtod(b, nullptr));
      }
      return n;
    }
    case TokType::kString: {
      NodePtr n = make(NodeKind::kLiteral, tok.line);
      std::string s = tok.value;
      while (is(TokType::kString)) s += t_[pos_++].value;
      n->literal = Value::from_string(std::move(s));
      return n;
    }
    case TokType::kIdentifier: {
      NodePtr n = make(NodeKind::kLiteral, tok.line);
      if (tok.value == "true" || tok.value == "True") {
        n->literal = Value::from_bool(true);
      } else if (tok.value == "false" || tok.value == "False") {
        n->literal = Value::from_bool(false);
      } else if (tok.value == "none" || tok.value == "None") {
        n->literal = Value::none();
      } else {
        n->kind = NodeKind::kName;
        n->name = tok.value;
      }
      return n;
    }
    case TokType::kOpenParen: {
      if (is(TokType::kCloseParen)) {
        ++pos_;
        return make(NodeKind::kTuple, tok.line);
      }
      NodePtr e = parse_expression_sequence(/*primary=*/false);
      expect(TokType::kCloseParen, "')'");
      return e;
    }
    case TokType::kOpenBracket: {
      NodePtr n = make(NodeKind::kList, tok.line);
      while (!is(TokType::kCloseBracket)) {
        if (at_end()) fail("unexpected end of template, expected ']'");
        n->items.push_back(parse_expression());
        if (is(TokType::kComma)) {
          ++pos_;
        } else if (!is(TokType::kCloseBracket)) {
          fail("expected ',' or ']' in a list");
        }
      }
      ++pos_;
      return checked(std::move(n));
    }
    case TokType::kOpenBrace: {
      NodePtr n = make(NodeKind::kDict, tok.line);
      while (!is(TokType::kCloseBrace)) {
        if (at_end()) fail("unexpected end of template, expected '}'");
        n->items.push_back(parse_expression());
        expect(TokType::kColon, "':'");
        n->items.push_back(parse_expression());
        if (is(TokType::kComma)) {
          ++pos_;
        } else if (!is(TokType::kCloseBrace)) {
          fail("expected ',' or '}' in a dict");
        }
      }
      ++pos_;
      return checked(std::move(n));
    }
    default:
      syntax_error(tok.line, "unexpected '" + tok.value + "' in an expression");
  }
}

}  // namespace tandem::jinja
