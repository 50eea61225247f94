// Chat responses with tool calls and reasoning (server/openai_encoder.cpp with the parser of
// server/tool_calls/): the plan picks the parser from the model's format and the request's tools
// and tool_choice; non-streamed bodies carry message.tool_calls (content null when there is
// none), reasoning_content and finish_reason "tool_calls"; streamed chunks carry the same as
// delta.tool_calls / delta.reasoning_content, and put together equal the body.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "engine/tokenizer/tokenizer.h"
#include "server/chat_template.h"
#include "server/openai_codec.h"
#include "tests/codec_fixture.h"

using namespace tandem;
using namespace tandem::openai;
using json = nlohmann::json;
using tool_calls::ReasoningFormat;
using tool_calls::ToolFormat;

namespace {

ModelInfo model_info(ToolFormat tf, ReasoningFormat rf) {
  ModelInfo m = test::codec_model(1024, "tiny");
  m.tool_format = tf;
  m.reasoning_format = rf;
  return m;
}

const json kTools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");

struct Planned {
  ApiRequest req;
  Plan plan;
};

Planned planned(json body, const ModelInfo& m) {
  body["messages"] = {{{"role", "user"}, {"content", "Weather in Paris?"}}};
  auto r = parse_request(Endpoint::kChat, body.dump(), SamplingParams{});
  if (auto* e = std::get_if<ApiError>(&r)) FAIL(e->message);
  Planned out{std::get<ApiRequest>(r), {}};
  auto p = plan_request(out.req, m);
  if (auto* e = std::get_if<ApiError>(&p)) FAIL(e->message);
  out.plan = std::move(std::get<Plan>(p));
  return out;
}

// Feeds `pieces` as events, the last one finishing with `finish`.
std::vector<TokenEvent> events(const std::vector<std::string>& pieces, FinishReason finish) {
  std::vector<TokenEvent> out;
  for (size_t i = 0; i < pieces.size(); ++i) {
    TokenEvent ev;
    ev.text = pieces[i];
    ev.tokens = {1};
    if (i + 1 == pieces.size()) {
      ev.finish = finish;
      ev.completion_tokens = static_cast<int32_t>(pieces.size());
    }
    out.push_back(ev);
  }
  return out;
}

json body_of(const Planned& p, const std::vector<TokenEvent>& evs) {
  ResponseEncoder enc(p.req, p.plan, "chatcmpl-x", 1, "tiny");
  for (const TokenEvent& ev : evs) enc.add(0, ev);
  return json::parse(enc.body());
}

// The streamed chunks put together as a message, and the last finish_reason.
std::pair<json, std::string> streamed(const Planned& p, const std::vector<TokenEvent>& evs) {
  ResponseEncoder enc(p.req, p.plan, "chatcmpl-x", 1, "tiny");
  std::string sse = enc.sse_start();
  for (const TokenEvent& ev : evs) sse += enc.sse_event(0, ev);
  sse += enc.sse_end();
  json msg = {{"content", ""}, {"reasoning_content", ""}, {"tool_calls", json::array()}};
  std::string finish;
  for (size_t pos = 0; (pos = sse.find("data: ", pos)) != std::string::npos;) {
    const size_t end = sse.find("\n\n", pos);
    const std::string payload = sse.substr(pos + 6, end - pos - 6);
    pos = end + 2;
    if (payload == "[DONE]") break;
    const json j = json::parse(payload);
    const json& ch = j["choices"][0];
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
    const json& d = ch["delta"];
    if (d.contains("content") && d["content"].is_string())
      msg["content"] = msg["content"].get<std::string>() + d["content"].get<std::string>();
    if (d.contains("reasoning_content"))
      msg["reasoning_content"] =
          msg["reasoning_content"].get<std::string>() + d["reasoning_content"].get<std::string>();
    if (d.contains("tool_calls"))
      for (const json& t : d["tool_calls"]) {
        const size_t i = t["index"];
        if (i >= msg["tool_calls"].size())
          msg["tool_calls"].push_back(
              {{"id", t["id"]},
               {"type", "function"},
               {"function", {{"name", t["function"]["name"]}, {"arguments", ""}}}});
        json& f = msg["tool_calls"][i]["function"];
        f["arguments"] =
            f["arguments"].get<std::string>() + t["function"]["arguments"].get<std::string>();
      }
  }
  return {msg, finish};
}

}  // namespace

TEST_CASE("tool calls: hermes calls come back as tool_calls, streamed and not", "[openai][tools]") {
  const Planned p =
      planned({{"tools", kTools}}, model_info(ToolFormat::kHermes, ReasoningFormat::kNone));
  CHECK(p.plan.parser.tool_format == ToolFormat::kHermes);
  const auto evs = events({"<tool_", "call>\n{\"name\": \"get_weather\", \"argu",
                           "ments\": {\"city\": \"Paris\"}}\n</tool_call>"},
                          FinishReason::kStop);
  const json body = body_of(p, evs);
  const json& ch = body["choices"][0];
  CHECK(ch["finish_reason"] == "tool_calls");
  CHECK(ch["message"]["content"].is_null());
  REQUIRE(ch["message"]["tool_calls"].size() == 1);
  const json& call = ch["message"]["tool_calls"][0];
  CHECK(call["type"] == "function");
  CHECK(call["id"].get<std::string>().rfind("call_", 0) == 0);
  CHECK(call["function"]["name"] == "get_weather");
  CHECK(json::parse(call["function"]["arguments"].get<std::string>()) == json{{"city", "Paris"}});

  const auto [msg, finish] = streamed(p, evs);
  CHECK(finish == "tool_calls");
  CHECK(msg["content"] == "");
  REQUIRE(msg["tool_calls"].size() == 1);
  CHECK(msg["tool_calls"][0]["function"]["name"] == "get_weather");
  CHECK(json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()) ==
        json{{"city", "Paris"}});
}

TEST_CASE("tool calls: content around calls, cut-off calls, tool_choice none, no tools",
          "[openai][tools]") {
  const ModelInfo m = model_info(ToolFormat::kHermes, ReasoningFormat::kNone);
  const Planned p = planned({{"tools", kTools}}, m);
  // Text before the call stays content; a call cut off by max_tokens is content and "length".
  json body = body_of(
      p, events({"Let me check. ", "<tool_call>\n{\"name\": \"get_wea"}, FinishReason::kLength));
  CHECK(body["choices"][0]["finish_reason"] == "length");
  CHECK(body["choices"][0]["message"]["content"] ==
        "Let me check. <tool_call>\n{\"name\": \"get_wea");
  CHECK_FALSE(body["choices"][0]["message"].contains("tool_calls"));
  const std::vector<std::string> call = {
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"};
  for (const json& extra : {json{{"tools", kTools}, {"tool_choice", "none"}}, json::object()}) {
    const Planned q = planned(extra, m);
    CHECK(q.plan.parser.tool_format == ToolFormat::kNone);
    body = body_of(q, events(call, FinishReason::kStop));
    CHECK(body["choices"][0]["finish_reason"] == "stop");
    CHECK(body["choices"][0]["message"]["content"] == call[0]);
  }
  // A model without a tool format: everything is content.
  const Planned none =
      planned({{"tools", kTools}}, model_info(ToolFormat::kNone, ReasoningFormat::kNone));
  CHECK(body_of(none, events(call, FinishReason::kStop))["choices"][0]["message"]["content"] ==
        call[0]);
}

TEST_CASE("reasoning: <think> becomes reasoning_content, streamed and not", "[openai][tools]") {
  const Planned p = planned(json::object(), model_info(ToolFormat::kNone, ReasoningFormat::kThink));
  const auto evs =
      events({"<thi", "nk>Paris is in France.</th", "ink>\n\nIt is sunny."}, FinishReason::kStop);
  const json body = body_of(p, evs);
  const json& msg = body["choices"][0]["message"];
  CHECK(msg["reasoning_content"] == "Paris is in France.");
  CHECK(msg["content"] == "It is sunny.");
  CHECK(body["choices"][0]["finish_reason"] == "stop");
  const auto [s, finish] = streamed(p, evs);
  CHECK(s["reasoning_content"] == "Paris is in France.");
  CHECK(s["content"] == "It is sunny.");
  CHECK(finish == "stop");
}

TEST_CASE("forced tool calls: a named function's arguments, `required` calls", "[openai][tools]") {
  const ModelInfo m = model_info(ToolFormat::kNone, ReasoningFormat::kNone);
  const json named_choice = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  const Planned named = planned({{"tools", kTools}, {"tool_choice", named_choice}}, m);
  CHECK(named.plan.forced == ApiRequest::ToolChoice::kNamed);
  REQUIRE(named.plan.choices[0].grammar);
  const auto args = events({"{\"city\": ", "\"Paris\"}"}, FinishReason::kStop);
  json body = body_of(named, args);
  CHECK(body["choices"][0]["finish_reason"] == "tool_calls");
  CHECK(body["choices"][0]["message"]["content"].is_null());
  REQUIRE(body["choices"][0]["message"]["tool_calls"].size() == 1);
  CHECK(body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather");
  CHECK(json::parse(body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
                        .get<std::string>()) == json{{"city", "Paris"}});
  auto [msg, finish] = streamed(named, args);
  CHECK(finish == "tool_calls");
  REQUIRE(msg["tool_calls"].size() == 1);
  CHECK(msg["tool_calls"][0]["function"]["arguments"] == "{\"city\": \"Paris\"}");

  const Planned req = planned({{"tools", kTools}, {"tool_choice", "required"}}, m);
  CHECK(req.plan.forced == ApiRequest::ToolChoice::kRequired);
  const auto calls = events({"[{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
                             ", {\"name\": \"get_weather\", \"parameters\": {}}]"},
                            FinishReason::kStop);
  body = body_of(req, calls);
  CHECK(body["choices"][0]["finish_reason"] == "tool_calls");
  REQUIRE(body["choices"][0]["message"]["tool_calls"].size() == 2);
  CHECK(body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] ==
        "{\"city\":\"Oslo\"}");
  std::tie(msg, finish) = streamed(req, calls);
  CHECK(finish == "tool_calls");
  CHECK(msg["tool_calls"].size() == 2);
  // Cut off: not an array yet, so content, and "length".
  body = body_of(req, events({"[{\"name\": \"get_w"}, FinishReason::kLength));
  CHECK(body["choices"][0]["finish_reason"] == "length");
  CHECK(body["choices"][0]["message"]["content"] == "[{\"name\": \"get_w");
}

TEST_CASE("forced tool calls and response_format: what is refused", "[openai][tools]") {
  auto refused = [](const json& extra) {
    json body = extra;
    body["messages"] = {{{"role", "user"}, {"content", "x"}}};
    auto r = parse_request(Endpoint::kChat, body.dump(), SamplingParams{});
    REQUIRE(std::holds_alternative<ApiError>(r));
    return std::get<ApiError>(r);
  };
  CHECK(refused({{"tool_choice", "required"}}).param == "tool_choice");
  CHECK(refused({{"tools", kTools},
                 {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}})
            .message.find("'nope'") != std::string::npos);
  json bad_tools = kTools;
  bad_tools[0]["function"]["parameters"] = {{"type", "object"},
                                            {"patternProperties", json::object()}};
  const ApiError e = refused({{"tools", bad_tools}, {"tool_choice", "required"}});
  CHECK(e.param == "tool_choice");
  CHECK(e.message.find("patternProperties") != std::string::npos);
  const json rf = {{"type", "json_schema"},
                   {"json_schema", {{"name", "x"}, {"schema", {{"not", {{"type", "null"}}}}}}}};
  CHECK(refused({{"response_format", rf}}).message.find("'not'") != std::string::npos);
  CHECK(refused({{"response_format", {{"type", "json_schema"}}}}).param == "response_format");
  CHECK(refused({{"tools", kTools},
                 {"tool_choice", "required"},
                 {"response_format", {{"type", "json_object"}}}})
            .param == "response_format");
  // What is accepted gets a grammar.
  json ok = {{"messages", {{{"role", "user"}, {"content", "x"}}}},
             {"response_format", {{"type", "json_object"}}}};
  auto r = parse_request(Endpoint::kChat, ok.dump(), SamplingParams{});
  REQUIRE(std::holds_alternative<ApiRequest>(r));
  CHECK(std::get<ApiRequest>(r).grammar != nullptr);
}
