// The tool-call parser with stream_arguments (server/tool_calls/tool_call_parser.h): a call is
// committed at {"name": ..., "arguments": and its arguments follow in fragments. Checked: the
// deltas a client sees, agreement with the whole-call mode on well-formed output, what a cut-off
// or broken call leaves, and (tests/tool_call_split.h) that every cut of every text gives the
// one-shot result.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/tool_calls/tool_call_parser.h"
#include "tests/tool_call_split.h"

using tandem::test::parse_checked;
using namespace tandem::tool_calls;

namespace {

ParserOptions streaming(ToolFormat format) {
  ParserOptions o;
  o.tool_format = format;
  o.stream_arguments = true;
  return o;
}

// Well-formed outputs of each format: streamed arguments must be the same JSON as whole calls.
const std::vector<std::pair<ToolFormat, std::string>> kWellFormed = {
    {ToolFormat::kHermes,
     "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich "
     "東京\", \"days\": [1, {\"x\": \"}\"}]}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", "
     "\"arguments\": {}}\n</tool_call>"},
    {ToolFormat::kHermes,
     "<tool_call>{\"arguments\": {\"a\": 1}, \"name\": \"other_order\"}"
     "</tool_call> after"},
    {ToolFormat::kHermes,
     "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"extra\": true}</tool_call>"},
    {ToolFormat::kLlama3Json,
     "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"q\": \"x;y\"}}; {\"name\": \"b\", "
     "\"parameters\": {}}"},
    {ToolFormat::kMistral,
     "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Köln\"}[TOOL_CALLS]f[ARGS]{\"n\": null}"},
    {ToolFormat::kMistral, "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"b\": 2}}]"},
};

}  // namespace

TEST_CASE("stream_arguments: the deltas of one Hermes call", "[tool_calls]") {
  ToolCallParser p(streaming(ToolFormat::kHermes), 3);
  CHECK(p.push("<tool_call>\n{\"name\": \"get_wea").empty());
  ParserDelta d = p.push("ther\", \"arguments\": {\"ci");
  REQUIRE(d.tool_calls.size() == 1);
  CHECK(d.tool_calls[0].index == 0);
  CHECK(d.tool_calls[0].id.size() == 29);
  CHECK(d.tool_calls[0].name == "get_weather");
  CHECK(d.tool_calls[0].arguments == "{\"ci");
  d = p.push("ty\": \"Paris\"}");
  REQUIRE(d.tool_calls.size() == 1);
  CHECK(d.tool_calls[0].id.empty());
  CHECK(d.tool_calls[0].name.empty());
  CHECK(d.tool_calls[0].arguments == "ty\": \"Paris\"}");
  CHECK(p.push("}\n</tool_call>").empty());
  d = p.push("\nDone.");
  CHECK(d.content == "Done.");
  CHECK(d.tool_calls.empty());
  CHECK(p.finish().empty());
}

TEST_CASE("stream_arguments: well-formed output parses as in whole-call mode", "[tool_calls]") {
  for (const auto& [format, text] : kWellFormed) {
    INFO(text);
    ParserOptions whole_options;
    whole_options.tool_format = format;
    const ParsedOutput whole = parse_checked(text, whole_options);
    const ParsedOutput streamed = parse_checked(text, streaming(format));
    CHECK(streamed.content == whole.content);
    REQUIRE(streamed.tool_calls.size() == whole.tool_calls.size());
    for (size_t i = 0; i < whole.tool_calls.size(); ++i) {
      CHECK(streamed.tool_calls[i].id == whole.tool_calls[i].id);
      CHECK(streamed.tool_calls[i].name == whole.tool_calls[i].name);
      CHECK(nlohmann::json::parse(streamed.tool_calls[i].arguments) ==
            nlohmann::json::parse(whole.tool_calls[i].arguments));
    }
  }
}

TEST_CASE("stream_arguments: a cut-off call keeps what was written", "[tool_calls]") {
  ParsedOutput out = parse_checked("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, 2",
                                   streaming(ToolFormat::kHermes));
  CHECK(out.content.empty());
  REQUIRE(out.tool_calls.size() == 1);
  CHECK(out.tool_calls[0].name == "f");
  CHECK(out.tool_calls[0].arguments == "{\"a\": [1, 2");
  // Cut before the arguments began: nothing was committed, the text is content.
  const std::string early = "<tool_call>{\"name\": \"f\", \"argu";
  out = parse_checked(early, streaming(ToolFormat::kHermes));
  CHECK(out.content == early);
  CHECK(out.tool_calls.empty());
}

TEST_CASE("stream_arguments: text after a broken committed call is content", "[tool_calls]") {
  ParsedOutput out =
      parse_checked("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}} oops</tool_call>",
                    streaming(ToolFormat::kHermes));
  REQUIRE(out.tool_calls.size() == 1);
  CHECK(out.tool_calls[0].arguments == "{\"a\": 1}");
  CHECK(out.content == "oops</tool_call>");
  out = parse_checked("{\"name\": \"f\", \"parameters\": {\"a\": 1]} tail",
                      streaming(ToolFormat::kLlama3Json));
  REQUIRE(out.tool_calls.size() == 1);
  CHECK(out.tool_calls[0].arguments == "{\"a\": 1");
  CHECK(out.content == "]} tail");
}

TEST_CASE("stream_arguments: undeclared names are not committed under kAsContent", "[tool_calls]") {
  ParserOptions o = streaming(ToolFormat::kHermes);
  o.undeclared = UndeclaredPolicy::kAsContent;
  o.declared_functions = {"f"};
  const std::string bad = "<tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>";
  ParsedOutput out = parse_checked(bad + "\n<tool_call>{\"name\": \"f\", \"arguments\": {}}", o);
  CHECK(out.content == bad);
  REQUIRE(out.tool_calls.size() == 1);
  CHECK(out.tool_calls[0].name == "f");
  o.tool_format = ToolFormat::kMistral;
  out = parse_checked("[TOOL_CALLS]g[ARGS]{}", o);
  CHECK(out.content == "[TOOL_CALLS]g[ARGS]{}");
}

TEST_CASE("stream_arguments: malformed text still agrees across every cut", "[tool_calls]") {
  for (ToolFormat format : {ToolFormat::kHermes, ToolFormat::kLlama3Json, ToolFormat::kMistral}) {
    for (const char* text : {
             "<tool_call>{\"name\": \"f\", \"arguments\": {]}</tool_call>x",
             "<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>",
             "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
             "{\"name\": \"\\u00e9\\\"q\", \"arguments\": {\"s\": \"\\\"}\"}} ; {\"name\": \"g\"",
             "[TOOL_CALLS]f[ARGS]{\"a\": {\"b\": [}}",
             "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": 1}}}",
         }) {
      INFO(tool_format_name(format) << ": " << text);
      parse_checked(text, streaming(format));
    }
  }
}
