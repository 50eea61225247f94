// Binary operators of the chat-template Jinja engine with Python semantics: arithmetic (ints
// overflow into floats), comparison, `in`, `~`, and + / * on strings and lists. Errors are thrown
// as JinjaError; the interpreter adds the template line.
#pragma once

#include <string>

#include "server/jinja/value.h"

namespace tandem::jinja {

// `l op r` for op in == != < > <= >= in, not in, ~, + - * / // % **.
Value binary_op(const std::string& op, const Value& l, const Value& r);

}  // namespace tandem::jinja
