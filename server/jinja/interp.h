// Interpreter of the chat-template Jinja engine: runs a parsed template against a context
// object. Bounded: output and string sizes, loop iterations plus macro calls, and macro
// recursion are capped, so a hostile template fails with an error instead of exhausting the
// machine. Strings (the output included) are capped at kMaxStringBytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "server/jinja/parser.h"
#include "server/jinja/value.h"

namespace tandem::jinja {

struct RenderLimits {
  int64_t max_steps = 1'000'000;  // loop iterations + macro calls (also bounds range())
  int max_call_depth = 64;        // nested macro calls
};

// Renders `program` with the variables of `context` (plus the globals namespace, range,
// dict, raise_exception, strftime_now). Throws tandem::Error (kInvalidArgument): the message
// of raise_exception as is, otherwise "chat template error at line N: ...".
std::string render(const std::vector<NodePtr>& program, const Object& context,
                   const RenderLimits& limits = {});

}  // namespace tandem::jinja
