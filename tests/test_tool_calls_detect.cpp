// Tool-call format and reasoning detection on every chat template of tests/fixtures/templates,
// the --tool-call-parser / --reasoning-parser names, the prompt that opens <think>, the declared
// function check, the OpenAI JSON shapes of parsed calls, and how the parser holds text back
// while it streams (the parser itself: tests/test_tool_calls.cpp).
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "kernels/common.h"
#include "server/chat_template.h"
#include "server/tool_calls/tool_call_parser.h"
#include "server/tool_calls/tool_declarations.h"
#include "server/tool_calls/tool_format.h"
#include "tests/test_helpers.h"
#include "tests/tool_call_split.h"

using namespace tandem::tool_calls;

namespace {

nlohmann::json read_fixture(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

std::string fixture_template(const std::string& name) {
  return read_fixture(tandem::test::repo_path("tests/fixtures/templates/" + name + ".json"))
      .at("template")
      .get<std::string>();
}

}  // namespace

TEST_CASE("detection: the expected format of every fixture template", "[tool_calls]") {
  struct Expected {
    ToolFormat tools;
    ReasoningFormat reasoning;
  };
  const auto none = Expected{ToolFormat::kNone, ReasoningFormat::kNone};
  // Fixtures with a template (snippets and whitespace_random hold one per case: skipped).
  const std::map<std::string, Expected> expected = {
      {"chatml_fallback", none},
      {"deepseek_v3", none},  // its <｜tool▁calls▁begin｜> syntax is not parsed
      {"features_errors", none},
      {"features_expressions", none},
      {"features_filters", none},
      {"features_macros", none},
      {"features_statements", none},
      // Splits a string on '</think>' as the Qwen 3 template does: read as a reasoning template.
      {"features_strings", {ToolFormat::kNone, ReasoningFormat::kThink}},
      {"features_tool_schema", none},
      {"features_whitespace", none},
      {"gemma", none},
      {"gemma3", none},
      {"llama2", none},
      {"llama3", none},
      {"llama3_1_lenml", none},  // a Llama 3.1 template without its tool part
      {"llama3_1_tools", {ToolFormat::kLlama3Json, ReasoningFormat::kNone}},
      {"mistral_v0_1", none},
      {"mistral_v0_2", none},
      {"mistral_v0_3_tools", {ToolFormat::kMistral, ReasoningFormat::kNone}},
      {"phi3", none},
      {"qwen2", none},
      {"qwen2_5", {ToolFormat::kHermes, ReasoningFormat::kNone}},
      {"qwen3", {ToolFormat::kHermes, ReasoningFormat::kThink}},
      {"zephyr", none},
  };
  size_t seen = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(tandem::test::repo_path("tests/fixtures/templates"))) {
    const nlohmann::json fixture = read_fixture(entry.path());
    if (!fixture.at("template").is_string()) continue;
    const std::string name = fixture.at("name").get<std::string>();
    INFO("fixture " << name << " (add new fixtures to the table)");
    REQUIRE(expected.count(name) == 1);
    const std::string source = fixture.at("template").get<std::string>();
    CHECK(detect_tool_format(source) == expected.at(name).tools);
    CHECK(detect_reasoning_format(source) == expected.at(name).reasoning);
    ++seen;
  }
  CHECK(seen == expected.size());
  CHECK(detect_tool_format(tandem::ChatTemplate::fallback_source()) == ToolFormat::kNone);
}

TEST_CASE("flag names: resolve against the template, unknown names rejected", "[tool_calls]") {
  const std::string qwen3 = fixture_template("qwen3");
  CHECK(resolve_tool_format("auto", qwen3) == ToolFormat::kHermes);
  CHECK(resolve_tool_format("mistral", qwen3) == ToolFormat::kMistral);
  CHECK(resolve_tool_format("none", qwen3) == ToolFormat::kNone);
  CHECK(resolve_reasoning_format("auto", qwen3) == ReasoningFormat::kThink);
  CHECK(resolve_reasoning_format("none", qwen3) == ReasoningFormat::kNone);
  CHECK(resolve_reasoning_format("think", "") == ReasoningFormat::kThink);
  CHECK_THROWS_AS(resolve_tool_format("qwen", qwen3), tandem::Error);
  CHECK_THROWS_WITH(resolve_reasoning_format("deepseek_r1", qwen3),
                    Catch::Contains("auto, think, none"));
  for (ToolFormat f :
       {ToolFormat::kNone, ToolFormat::kHermes, ToolFormat::kLlama3Json, ToolFormat::kMistral})
    CHECK(tool_format_from_name(tool_format_name(f)) == f);
  for (ReasoningFormat r : {ReasoningFormat::kNone, ReasoningFormat::kThink})
    CHECK(reasoning_format_from_name(reasoning_format_name(r)) == r);
  CHECK_FALSE(tool_format_from_name("auto").has_value());
}

TEST_CASE("prompt_opens_reasoning: rendered Qwen 3 prompts and an R1-style prompt",
          "[tool_calls]") {
  const tandem::ChatTemplate qwen3(fixture_template("qwen3"));
  nlohmann::json ctx = {{"messages", {{{"role", "user"}, {"content", "2+2?"}}}},
                        {"add_generation_prompt", true}};
  CHECK_FALSE(prompt_opens_reasoning(qwen3.render(ctx)));  // the model writes <think> itself
  ctx["enable_thinking"] = false;
  CHECK_FALSE(prompt_opens_reasoning(qwen3.render(ctx)));  // closed: <think>\n\n</think>\n\n
  CHECK(prompt_opens_reasoning("<｜User｜>2+2?<｜Assistant｜><think>\n"));
  CHECK_FALSE(prompt_opens_reasoning(""));
}

TEST_CASE("declared functions from an OpenAI tools array", "[tool_calls]") {
  const auto tools = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "search"}},
    {"type": "code_interpreter"}, {"type": "function", "function": {"name": 3}}, 7])");
  const auto names = declared_function_names(tools);
  CHECK(names == std::vector<std::string>{"get_weather", "search"});
  CHECK(declared_function_names(nlohmann::json::parse(tools.dump())) == names);
  CHECK(is_declared("search", names));
  CHECK_FALSE(is_declared("rm_rf", names));
  CHECK(declared_function_names(nlohmann::json()).empty());
}

TEST_CASE("OpenAI shapes of a streamed and of a complete call", "[tool_calls]") {
  ParserOptions o;
  o.tool_format = ToolFormat::kHermes;
  ToolCallParser parser(o, 1);
  const ParserDelta d =
      parser.push("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>");
  REQUIRE(d.tool_calls.size() == 1);
  const auto j = tool_call_delta_json(d.tool_calls[0]);
  CHECK(j.dump() == R"({"index":0,"id":")" + d.tool_calls[0].id +
                        R"(","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}})");
  ToolCallDelta fragment;
  fragment.index = 2;
  fragment.arguments = "{\"b\"";
  CHECK(tool_call_delta_json(fragment).dump() ==
        R"({"index":2,"function":{"arguments":"{\"b\""}})");
  const ToolCall call{"call_x", "f", "{}"};
  CHECK(tool_call_json(call).dump() ==
        R"({"id":"call_x","type":"function","function":{"name":"f","arguments":"{}"}})");
}

TEST_CASE("ids: the same seed gives the same ids, another seed others", "[tool_calls]") {
  ParserOptions o;
  o.tool_format = ToolFormat::kHermes;
  const std::string text = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
  const auto a = parse_all(text, o, 42), b = parse_all(text, o, 42), c = parse_all(text, o, 43);
  REQUIRE(a.tool_calls.size() == 1);
  CHECK(a == b);
  CHECK(a.tool_calls[0].id != c.tool_calls[0].id);
}

TEST_CASE("streaming: text is held only while it may become a marker", "[tool_calls]") {
  ParserOptions o;
  o.tool_format = ToolFormat::kHermes;
  o.reasoning = ReasoningFormat::kThink;
  ToolCallParser p(o, 1);
  CHECK(p.push("<thi").empty());  // may open reasoning
  CHECK(p.push("nk>plan").reasoning_content == "plan");
  CHECK(p.push(" more</th").reasoning_content == " more");
  ParserDelta d = p.push("ink>\n\nSure");
  CHECK(d.reasoning_content.empty());
  CHECK(d.content == "Sure");
  CHECK(p.push(", calling.\n<tool_").content == ", calling.");  // whitespace before a marker held
  CHECK(p.push("call>\n{\"name\": \"f\", ").empty());
  d = p.push("\"arguments\": {}}\n</tool_call>\n");
  REQUIRE(d.tool_calls.size() == 1);
  CHECK(d.content.empty());
  CHECK(p.push("Bye <tool").content == "Bye");
  d = p.finish();
  CHECK(d.content == " <tool");
  CHECK(p.push("late").empty());
  CHECK(p.finish().empty());
}
