// Fuzz target: the tool-call and reasoning parser (server/tool_calls/). Byte 0 picks the options
// (tool format, <think> parsing, output starting inside reasoning, undeclared calls as content,
// streamed arguments),
// byte 1 the number of cuts (up to 32), then two bytes per cut give its position (modulo the text
// length); the rest is the model's output text. Invariants, beyond no crash and no sanitizer
// report: the text streamed in the fuzzer's pieces (and, for short texts, byte by byte) parses
// to exactly the one-shot result; without any format the content is the text itself; every call
// has a name and an id, and (unless arguments are streamed, where a cut-off call keeps partial
// arguments) arguments that parse as a JSON object; nothing is output that was not input.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "server/tool_calls/tool_call_parser.h"

// The harness is a function (tests/test_hostile_input.cpp can run regression inputs through it in
// the plain build); the libFuzzer entry point is defined unless TANDEM_FUZZ_NO_ENTRY.
namespace tandem::fuzz_tool_calls {

using namespace ::tandem::tool_calls;

[[noreturn]] inline void broken(const char* what) {
  std::fprintf(stderr, "invariant broken: %s\n", what);
  std::abort();
}

inline ParsedOutput streamed(std::string_view text, const ParserOptions& options,
                             const std::vector<size_t>& cuts) {
  ToolCallParser parser(options, 1);
  ParsedOutput out;
  size_t from = 0;
  for (size_t cut : cuts) {
    accumulate(out, parser.push(text.substr(from, cut - from)));
    from = cut;
  }
  accumulate(out, parser.push(text.substr(from)));
  accumulate(out, parser.finish());
  return out;
}

inline int run(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  ParserOptions options;
  options.tool_format = static_cast<ToolFormat>(data[0] & 3);
  options.reasoning = (data[0] & 4) != 0 ? ReasoningFormat::kThink : ReasoningFormat::kNone;
  options.starts_in_reasoning = (data[0] & 8) != 0;
  if ((data[0] & 16) != 0) {
    options.undeclared = UndeclaredPolicy::kAsContent;
    options.declared_functions = {"get_weather", "f"};
  }
  options.stream_arguments = (data[0] & 32) != 0;
  const size_t n_cuts = std::min<size_t>(data[1] % 33, (size - 2) / 2);
  const size_t header = 2 + 2 * n_cuts;
  const std::string_view text(reinterpret_cast<const char*>(data) + header, size - header);
  std::vector<size_t> cuts;
  for (size_t i = 0; i < n_cuts && !text.empty(); ++i)
    cuts.push_back((data[2 + 2 * i] | (data[3 + 2 * i] << 8)) % (text.size() + 1));
  std::sort(cuts.begin(), cuts.end());

  const ParsedOutput whole = parse_all(text, options, 1);
  if (streamed(text, options, cuts) != whole) broken("streamed != one-shot");
  if (text.size() <= 512) {
    std::vector<size_t> bytes;
    for (size_t i = 1; i < text.size(); ++i) bytes.push_back(i);
    if (streamed(text, options, bytes) != whole) broken("byte by byte != one-shot");
  }
  if (whole.content.size() + whole.reasoning_content.size() > text.size())
    broken("more text out than in");
  const bool plain =
      options.tool_format == ToolFormat::kNone && options.reasoning == ReasoningFormat::kNone;
  if (plain && whole.content != text) broken("content != text without any format");
  for (const ToolCall& call : whole.tool_calls) {
    if (call.name.empty() || call.id.empty()) broken("call without a name or an id");
    if (options.stream_arguments) continue;
    const auto args = nlohmann::json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
    if (!args.is_object()) broken("arguments are not a JSON object");
  }
  return 0;
}

}  // namespace tandem::fuzz_tool_calls

#ifndef TANDEM_FUZZ_NO_ENTRY
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tandem::fuzz_tool_calls::run(data, size);
}
#endif
