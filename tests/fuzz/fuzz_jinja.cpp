// Fuzz target: the Jinja engine, template x context. The input is template bytes, then
// optionally a NUL byte and a JSON context object (without one: a small default conversation).
// The template is tokenized, parsed and rendered under the default limits; a tandem::Error
// (syntax error, render error, limit) is a fine outcome, anything else (a crash, another
// exception, a sanitizer report, a hang, an allocation past the RSS limit) is a finding.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "kernels/common.h"
#include "kernels/json_depth.h"
#include "server/jinja/interp.h"
#include "server/jinja/lexer.h"
#include "server/jinja/parser.h"

// The harness is a function (tests/test_hostile_input.cpp runs the regression inputs through it
// in the plain build); the libFuzzer entry point is defined unless TANDEM_FUZZ_NO_ENTRY.
namespace tandem::fuzz_jinja {

int run(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t sep = in.find('\0');
  const std::string source(in.substr(0, sep));
  nlohmann::ordered_json ctx = {{"messages",
                                 {{{"role", "system"}, {"content", "Be brief."}},
                                  {{"role", "user"}, {"content", "Hi {{ there }} <|im_end|>"}},
                                  {{"role", "assistant"}, {"content", "Hello."}}}},
                                {"add_generation_prompt", true},
                                {"bos_token", "<s>"},
                                {"eos_token", "</s>"}};
  if (sep != std::string_view::npos) {
    // As in the server, where parse_request refuses deeper bodies before anything walks them.
    if (json_depth(in.substr(sep + 1), kMaxRequestJsonDepth) > kMaxRequestJsonDepth) return 0;
    ctx = nlohmann::ordered_json::parse(in.substr(sep + 1), nullptr, /*allow_exceptions=*/false);
    if (!ctx.is_object()) return 0;
  }
  try {
    const auto program = jinja::parse_template(jinja::tokenize(source));
    const jinja::Value root = jinja::Value::from_json(ctx);
    // A tenth of the default step budget: an input must finish within libFuzzer's timeout
    // (10 s) with the sanitizers on, which make the interpreter ~10x slower.
    (void)jinja::render(program, root.object(), jinja::RenderLimits{.max_steps = 100'000});
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace tandem::fuzz_jinja

#ifndef TANDEM_FUZZ_NO_ENTRY
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tandem::fuzz_jinja::run(data, size);
}
#endif
