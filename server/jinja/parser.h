// Parser of the chat-template Jinja engine: tokens to a tree of Nodes (statements and
// expressions), with the operator precedence of @huggingface/jinja.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/jinja/lexer.h"
#include "server/jinja/value.h"

namespace tandem::jinja {

enum class NodeKind : uint8_t {
  // Statements (a template body is a list of these).
  kText,         // text: literal output
  kOutput,       // {{ a }}
  kIf,           // a = test, body, else_body (an elif is a nested kIf in else_body)
  kFor,          // a = target (kName or kTuple), b = iterable, c = optional filter, body, else
  kSet,          // a = target, b = value
  kSetBlock,     // a = target, body rendered into the value
  kMacro,        // name, params, body
  kCallBlock,    // a = the call (kCall), params = caller parameters, body
  kFilterBlock,  // name + args, body
  kBreak,
  kContinue,
  // Expressions.
  kLiteral,  // literal
  kName,     // name
  kList,     // items
  kTuple,    // items
  kDict,     // items = key, value, key, value, ...
  kAttr,     // a.name (a literal member such as `x.0` keeps its digits in name)
  kIndex,    // a[b]
  kSlice,    // a[b:c:d], missing parts null
  kCall,     // a(args)
  kFilter,   // a | name(args)
  kTest,     // a is [not] name(args); negate
  kUnary,    // name = "-", "+", "not"; a
  kBinary,   // name = operator; a, b
  kTernary,  // b if a else c
  kSelect,   // b if a  (undefined when false)
};

struct Node;
using NodePtr = std::unique_ptr<Node>;

// One argument of a call, a filter, a test or a macro parameter list.
struct Arg {
  std::string name;    // keyword name / parameter name; empty for positional
  NodePtr value;       // argument value / parameter default (may be null for parameters)
  uint8_t spread = 0;  // 1: *value, 2: **value
};

struct Node {
  NodeKind kind;
  int line = 0;
  int height = 1;  // longest chain of expression children below, bounded by the parser
  std::string name;
  Value literal;
  bool negate = false;
  NodePtr a, b, c, d;
  std::vector<NodePtr> items;
  std::vector<Arg> args;
  std::vector<NodePtr> body, else_body;
};

// Parses a whole template into a list of statements; throws tandem::Error (kInvalidArgument)
// "chat template syntax error at line N: ..." on bad input.
std::vector<NodePtr> parse_template(const std::vector<Token>& tokens);

}  // namespace tandem::jinja
