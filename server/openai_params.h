// Every request parameter of /v1/chat/completions and /v1/completions the server knows: the
// OpenAI ones (each supported, accepted and ignored by convention, or rejected with a 400 naming
// it) and the extensions vLLM and llama.cpp clients send. A body key not in this table is a 400
// too, as the OpenAI API answers ("Unrecognized request argument"): a client that relies on a
// parameter this server does not implement learns it at once instead of getting output that
// silently ignores it. The README's parameter table is generated from it (`tandem help
// --params-markdown`); tests/test_openai_params.cpp walks it through the codec.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace tandem::openai {

enum class Endpoint : uint8_t;

enum class ParamSupport : uint8_t {
  kSupported,  // implemented as the API documents it (limits in `what`)
  kIgnored,    // accepted and ignored, as servers do by convention (user, metadata, ...)
  kRejected,   // a 400 naming the parameter (a value that is the default may be accepted)
};

struct ParamInfo {
  const char* name;
  bool chat;         // a parameter of /v1/chat/completions
  bool completions;  // a parameter of /v1/completions
  ParamSupport support;
  bool extension;       // not an OpenAI parameter (vLLM / llama.cpp)
  const char* example;  // JSON of a value: accepted (supported, ignored) or refused (rejected)
  const char* with;     // JSON object of the other parameters the example needs ("" for none)
  const char* what;     // one line for the README
};

std::span<const ParamInfo> request_params();
// The row of `name` for the endpoint, or null when the endpoint has no such parameter.
const ParamInfo* find_param(std::string_view name, Endpoint endpoint);
// The README table.
std::string params_markdown();

}  // namespace tandem::openai
