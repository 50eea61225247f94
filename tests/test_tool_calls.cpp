// The tool-call and reasoning parser (server/tool_calls/tool_call_parser.h) on the output formats
// of Hermes/Qwen, Llama 3 JSON and Mistral: calls alone, in parallel, after and before content,
// after reasoning, with unicode arguments, malformed, and empty output. Every text is also fed
// cut at each byte, byte by byte and at random points (tests/tool_call_split.h): the streamed
// result must equal the one-shot parse. Detection and helpers: tests/test_tool_calls_detect.cpp.
#include <catch2/catch.hpp>
#include <string>

#include "server/tool_calls/tool_call_parser.h"
#include "tests/tool_call_split.h"

using tandem::test::parse_checked;
using namespace tandem::tool_calls;

namespace {

ParserOptions opts(ToolFormat format, ReasoningFormat reasoning = ReasoningFormat::kNone) {
  ParserOptions o;
  o.tool_format = format;
  o.reasoning = reasoning;
  return o;
}

const ParserOptions kHermes = opts(ToolFormat::kHermes);
const ParserOptions kLlama = opts(ToolFormat::kLlama3Json);
const ParserOptions kMistral = opts(ToolFormat::kMistral);

bool is_alnum(const std::string& s) {
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) return false;
  return true;
}

void require_call(const ParsedOutput& out, size_t i, const std::string& name,
                  const std::string& arguments) {
  REQUIRE(out.tool_calls.size() > i);
  CHECK(out.tool_calls[i].name == name);
  CHECK(out.tool_calls[i].arguments == arguments);
}

void require_content_only(const std::string& text, const ParserOptions& o) {
  const ParsedOutput out = parse_checked(text, o);
  CHECK(out.content == text);
  CHECK(out.reasoning_content.empty());
  CHECK(out.tool_calls.empty());
}

}  // namespace

TEST_CASE("hermes: one call, its id and its compact arguments", "[tool_calls]") {
  const auto out = parse_checked(
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": "
      "3}}\n</tool_call>",
      kHermes);
  CHECK(out.content.empty());
  require_call(out, 0, "get_weather", R"({"city":"Paris","days":3})");
  const std::string& id = out.tool_calls[0].id;
  REQUIRE(id.size() == 29);
  CHECK(id.substr(0, 5) == "call_");
  CHECK(is_alnum(id.substr(5)));
}

TEST_CASE("hermes: content, then parallel calls; separators dropped", "[tool_calls]") {
  const auto out = parse_checked(
      "Let me check both.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, 2]}}\n"
      "</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>",
      kHermes);
  CHECK(out.content == "Let me check both.");
  REQUIRE(out.tool_calls.size() == 2);
  require_call(out, 0, "a", R"({"x":[1,2]})");
  require_call(out, 1, "b", "{}");
  CHECK(out.tool_calls[0].id != out.tool_calls[1].id);
}

TEST_CASE("hermes: content after a call, key order kept", "[tool_calls]") {
  const auto out = parse_checked(
      "<tool_call>{\"name\":\"f\",\"arguments\":{\"z\":1,\"a\":2}}</tool_call>\n\nDone. See you.\n",
      kHermes);
  CHECK(out.content == "Done. See you.\n");
  require_call(out, 0, "f", R"({"z":1,"a":2})");
}

TEST_CASE("hermes: unicode and markers inside string arguments", "[tool_calls]") {
  const auto out = parse_checked(
      "<tool_call>\n{\"name\": \"note\", \"arguments\": {\"text\": \"Zürich 東京 🌧 "
      "\\u00e9\", "
      "\"code\": \"if (a) { return \\\"</tool_call>\\\"; }\"}}\n</tool_call>",
      kHermes);
  CHECK(out.content.empty());
  require_call(out, 0, "note",
               "{\"text\":\"Zürich 東京 🌧 é\",\"code\":\"if (a) { return "
               "\\\"</tool_call>\\\"; }\"}");
}

TEST_CASE("hermes: arguments as a JSON string, parameters for arguments", "[tool_calls]") {
  auto out = parse_checked(
      "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>", kHermes);
  require_call(out, 0, "f", R"({"a":1})");
  out = parse_checked("<tool_call>{\"name\": \"g\", \"parameters\": {\"b\": null}}</tool_call>",
                      kHermes);
  require_call(out, 0, "g", R"({"b":null})");
}

TEST_CASE("hermes: a call left unclosed after complete JSON is a call", "[tool_calls]") {
  const auto out =
      parse_checked("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": true}}\n", kHermes);
  CHECK(out.content.empty());
  require_call(out, 0, "f", R"({"a":true})");
}

TEST_CASE("hermes: malformed calls are content, verbatim", "[tool_calls]") {
  for (const char* text : {
           "<tool_call>\n{not json}\n</tool_call>",
           "<tool_call>\nget_weather(city=\"Paris\")\n</tool_call>",
           "<tool_call>{\"arguments\": {}}</tool_call>",
           "<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>",
           "<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>",
           "<tool_call>{\"name\": \"f\"}</tool_call>",
           "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
           "<tool_call>{\"name\": \"f\", \"arguments\": \"not json\"}</tool_call>",
           "<tool_call>{\"name\": \"f\", \"arguments\": {}} trailing</tool_call>",
           "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1",
           "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"unterminated}}</tool_call>",
           "<tool_call>{\"name\": \"f\", \"arguments\": {]}</tool_call>",
           "<tool_call>",
           "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_c",
           "Use <tool_c",
       }) {
    INFO(text);
    require_content_only(text, kHermes);
  }
}

TEST_CASE("hermes: hostile JSON in a call is content, never an exception", "[tool_calls]") {
  const std::string deep = std::string(200, '[') + std::string(200, ']');
  for (const std::string& text : {
           std::string("<tool_call>{\"name\": \"f\", \"arguments\": {\"n\": 1e400}}</tool_call>"),
           std::string(
               "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"\xff\xfe\"}}</tool_call>"),
           std::string(
               "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"a\nb\"}}</tool_call>"),
           "<tool_call>{\"name\": \"f\", \"arguments\": {\"d\": " + deep + "}}</tool_call>",
           "<tool_call>{\"name\": \"f\", \"arguments\": \"" + deep + "\"}</tool_call>",
       }) {
    INFO(text);
    require_content_only(text, kHermes);
  }
}

TEST_CASE("hermes: a malformed call does not hide a later valid one", "[tool_calls]") {
  const auto out = parse_checked(
      "<tool_call>oops</tool_call> then\n<tool_call>{\"name\": \"f\", \"arguments\": {}}"
      "</tool_call>",
      kHermes);
  CHECK(out.content == "<tool_call>oops</tool_call> then");
  REQUIRE(out.tool_calls.size() == 1);
  require_call(out, 0, "f", "{}");
}

TEST_CASE("hermes: undeclared functions kept as calls, or as content on request", "[tool_calls]") {
  const std::string text =
      "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>\n"
      "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>";
  ParserOptions o = kHermes;
  o.declared_functions = {"get_weather"};
  auto out = parse_checked(text, o);
  REQUIRE(out.tool_calls.size() == 2);
  o.undeclared = UndeclaredPolicy::kAsContent;
  out = parse_checked(text, o);
  CHECK(out.content == "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>");
  REQUIRE(out.tool_calls.size() == 1);
  CHECK(out.tool_calls[0].name == "get_weather");
  CHECK(out.tool_calls[0].id.substr(0, 5) == "call_");
}

TEST_CASE("llama3_json: a call, with and without <|python_tag|>", "[tool_calls]") {
  auto out = parse_checked(
      "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"San Francisco, CA\"}}", kLlama);
  CHECK(out.content.empty());
  require_call(out, 0, "get_weather", R"({"city":"San Francisco, CA"})");
  out = parse_checked("<|python_tag|>{\"name\": \"f\", \"parameters\": {}}", kLlama);
  CHECK(out.content.empty());
  require_call(out, 0, "f", "{}");
}

TEST_CASE("llama3_json: several calls separated by ';' or newlines", "[tool_calls]") {
  auto out = parse_checked(
      "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": "
      "{\"x\": 1}};{\"name\": \"c\", \"parameters\": {}}",
      kLlama);
  CHECK(out.content.empty());
  REQUIRE(out.tool_calls.size() == 3);
  require_call(out, 1, "b", R"({"x":1})");
  out = parse_checked(
      "  {\"name\": \"a\", \"parameters\": {}}\n{\"name\": \"b\", \"arguments\": {}}\n", kLlama);
  CHECK(out.content.empty());
  REQUIRE(out.tool_calls.size() == 2);
  CHECK(out.tool_calls[1].name == "b");
}

TEST_CASE("llama3_json: content after a call; a '{' inside content is content", "[tool_calls]") {
  auto out = parse_checked("{\"name\": \"a\", \"parameters\": {}}; and then text {x}", kLlama);
  CHECK(out.content == "and then text {x}");
  REQUIRE(out.tool_calls.size() == 1);
  for (const char* text : {
           "The call would be {\"name\": \"a\", \"parameters\": {}}",
           "{\"answer\": 42}",
           "{\"name\": \"John\", \"age\": 30}",
           "<|python_tag|>brave_search.call(query=\"weather\")",
           "{\"name\": \"a\", \"parameters\": {",
           "{\"name\": \"a\", \"parameters\": {]}",
           "  \n",
           "",
       }) {
    INFO(text);
    require_content_only(text, kLlama);
  }
}

TEST_CASE("mistral: a list of calls after [TOOL_CALLS], ids of 9 alphanumerics", "[tool_calls]") {
  const auto out = parse_checked(
      "Sure.\n[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
      "{\"name\": \"b\", \"arguments\": {}, \"id\": \"abcDEF123\"}]",
      kMistral);
  CHECK(out.content == "Sure.");
  REQUIRE(out.tool_calls.size() == 2);
  require_call(out, 0, "get_weather", R"({"city":"Paris"})");
  require_call(out, 1, "b", "{}");
  for (const ToolCall& c : out.tool_calls) {
    CHECK(c.id.size() == 9);
    CHECK(is_alnum(c.id));
  }
}

TEST_CASE("mistral: [TOOL_CALLS]name[ARGS]{...} calls", "[tool_calls]") {
  const auto out = parse_checked(
      "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Köln\"}[TOOL_CALLS]get.time-2[ARGS]{}", kMistral);
  CHECK(out.content.empty());
  REQUIRE(out.tool_calls.size() == 2);
  require_call(out, 0, "get_weather", R"({"city":"Köln"})");
  require_call(out, 1, "get.time-2", "{}");
}

TEST_CASE("mistral: malformed calls are content", "[tool_calls]") {
  for (const char* text : {
           "[TOOL_CALLS] not a list",
           "[TOOL_CALLS][]",
           "[TOOL_CALLS][{\"name\": 1, \"arguments\": {}}]",
           "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, 3]",
           "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}",
           "[TOOL_CALLS]get[ARG]{}",
           "[TOOL_CALLS]get[ARGS][1]",
           "[TOOL_CALLS]get[ARGS]{\"a\": }",
           "[TOOL_CALLS]",
           "[TOOL_C",
       }) {
    INFO(text);
    require_content_only(text, kMistral);
  }
}

TEST_CASE("reasoning: <think> at the start, then content or calls", "[tool_calls]") {
  const ParserOptions qwen3 = opts(ToolFormat::kHermes, ReasoningFormat::kThink);
  auto out = parse_checked(
      "<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
      "\"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
      qwen3);
  CHECK(out.reasoning_content == "\nThe user wants weather.\n");
  CHECK(out.content.empty());
  require_call(out, 0, "get_weather", R"({"city":"Oslo"})");
  out = parse_checked("\n<think>a <tool_call>b</think>\n\nAnswer: 4.", qwen3);
  CHECK(out.reasoning_content == "a <tool_call>b");
  CHECK(out.content == "Answer: 4.");
  CHECK(out.tool_calls.empty());
  out = parse_checked("<think>cut off while thinking <", qwen3);
  CHECK(out.reasoning_content == "cut off while thinking <");
  CHECK(out.content.empty());
  const ParserOptions llama = opts(ToolFormat::kLlama3Json, ReasoningFormat::kThink);
  out = parse_checked("<think>x</think>\n{\"name\": \"f\", \"parameters\": {}}", llama);
  CHECK(out.reasoning_content == "x");
  require_call(out, 0, "f", "{}");
}

TEST_CASE("reasoning: <think> later than the start, and none configured, is content",
          "[tool_calls]") {
  require_content_only("Hi <think>x</think> there",
                       opts(ToolFormat::kNone, ReasoningFormat::kThink));
  require_content_only("<think>x</think>", opts(ToolFormat::kHermes));
  require_content_only(" <thin", opts(ToolFormat::kNone, ReasoningFormat::kThink));
}

TEST_CASE("reasoning: the prompt opened <think>", "[tool_calls]") {
  ParserOptions o = opts(ToolFormat::kHermes, ReasoningFormat::kThink);
  o.starts_in_reasoning = true;
  auto out = parse_checked("Let me think. <think> is literal here.</think>\n\nIt is 4.", o);
  CHECK(out.reasoning_content == "Let me think. <think> is literal here.");
  CHECK(out.content == "It is 4.");
  out = parse_checked("never closed", o);
  CHECK(out.reasoning_content == "never closed");
  CHECK(out.content.empty());
}

TEST_CASE("empty output and plain text pass through every format", "[tool_calls]") {
  const std::string plain = "Plain answer: a < b, [x] {y} </tool_call> [ARGS] ;\n\t ünïcødé 😀 ";
  for (ToolFormat f :
       {ToolFormat::kNone, ToolFormat::kHermes, ToolFormat::kLlama3Json, ToolFormat::kMistral}) {
    for (ReasoningFormat r : {ReasoningFormat::kNone, ReasoningFormat::kThink}) {
      INFO(tool_format_name(f) << " " << reasoning_format_name(r));
      const ParsedOutput empty = parse_checked("", opts(f, r));
      CHECK(empty == ParsedOutput{});
      require_content_only(plain, opts(f, r));
    }
  }
}
