// The request-parameter table (server/openai_params.cpp): the README shows it as generated, and
// every row behaves as it says — its example is accepted (supported, ignored) or refused with a
// 400 naming the parameter (rejected) — on each endpoint it belongs to; a key outside the table is
// refused. Then the limits of the parameters the table added (logit_bias, min_tokens, best_of,
// response_format, tool_choice, modalities).
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/tokenizer/tokenizer.h"
#include "server/chat_template.h"
#include "server/openai_codec.h"
#include "server/openai_params.h"
#include "tests/codec_fixture.h"

using namespace tandem;
using namespace tandem::openai;
using json = nlohmann::json;

namespace {

ModelInfo model_info() { return test::codec_model(); }

json base(Endpoint ep) {
  return ep == Endpoint::kChat ? json{{"messages", {{{"role", "user"}, {"content", "Hi"}}}}}
                               : json{{"prompt", "def f("}};
}

std::variant<ApiRequest, ApiError> parse(Endpoint ep, const json& body) {
  return parse_request(ep, body.dump(), SamplingParams{});
}

ApiError refused(Endpoint ep, const json& body) {
  auto r = parse(ep, body);
  REQUIRE(std::holds_alternative<ApiError>(r));
  const ApiError e = std::get<ApiError>(r);
  CHECK(e.status == 400);
  return e;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("the README's parameter table is the code's", "[openai][params][docs]") {
  // Regenerate with: build/tandem help --params-markdown, pasted between the markers.
  const std::string readme = read_file(test::repo_path("README.md"));
  const std::string begin = "<!-- params:begin -->\n", end = "<!-- params:end -->";
  const size_t a = readme.find(begin), b = readme.find(end);
  REQUIRE(a != std::string::npos);
  REQUIRE(b != std::string::npos);
  CHECK(readme.substr(a + begin.size(), b - a - begin.size()) == params_markdown());
}

TEST_CASE("every row of the parameter table behaves as it says", "[openai][params]") {
  int rows = 0;
  for (const ParamInfo& p : request_params()) {
    for (Endpoint ep : {Endpoint::kChat, Endpoint::kCompletions}) {
      if (!(ep == Endpoint::kChat ? p.chat : p.completions)) continue;
      ++rows;
      json body = base(ep);
      if (*p.with) body.update(json::parse(p.with));
      body[p.name] = json::parse(p.example);
      INFO(p.name << " on " << (ep == Endpoint::kChat ? "chat" : "completions") << ": "
                  << body.dump());
      auto r = parse(ep, body);
      if (p.support == ParamSupport::kRejected) {
        REQUIRE(std::holds_alternative<ApiError>(r));
        CHECK(std::get<ApiError>(r).status == 400);
        CHECK(std::get<ApiError>(r).param == p.name);
        // null is the same as leaving it out
        body[p.name] = nullptr;
        CHECK(std::holds_alternative<ApiRequest>(parse(ep, body)));
      } else {
        if (auto* e = std::get_if<ApiError>(&r)) FAIL(e->message);
        const auto plan = plan_request(std::get<ApiRequest>(r), model_info());
        if (auto* e = std::get_if<ApiError>(&plan)) FAIL(e->message);
      }
    }
    // The other endpoint does not know it.
    if (p.chat != p.completions &&
        !find_param(p.name, p.chat ? Endpoint::kCompletions : Endpoint::kChat)) {
      const Endpoint other = p.chat ? Endpoint::kCompletions : Endpoint::kChat;
      json body = base(other);
      body[p.name] = json::parse(p.example);
      INFO(p.name);
      CHECK(refused(other, body).param == p.name);
    }
  }
  CHECK(rows > 50);
  // Supported rows do what they say (spot checks; each has its own tests elsewhere).
  json body = base(Endpoint::kCompletions);
  body["logit_bias"] = {{"13", -100}, {"42", 5}};
  body["min_tokens"] = 4;
  const ApiRequest req = std::get<ApiRequest>(parse(Endpoint::kCompletions, body));
  CHECK(req.sampling.logit_bias ==
        std::vector<std::pair<int32_t, float>>{{13, -100.0f}, {42, 5.0f}});
  const Plan plan = std::get<Plan>(plan_request(req, model_info()));
  CHECK(plan.choices[0].min_tokens == 4);
  CHECK(plan.choices[0].sampling.logit_bias == req.sampling.logit_bias);
}

TEST_CASE("keys outside the table are a 400 naming them", "[openai][params]") {
  for (const char* key : {"temprature", "guided_json", "foo", ""}) {
    json body = base(Endpoint::kChat);
    body[key] = 1;
    const ApiError e = refused(Endpoint::kChat, body);
    CHECK(e.param == key);
    CHECK(e.message.find("Unrecognized request argument") != std::string::npos);
  }
}

TEST_CASE("logit_bias, min_tokens, best_of, response_format, tool_choice, modalities: limits",
          "[openai][params]") {
  auto with = [](Endpoint ep, const char* key, const json& v) {
    json body = base(ep);
    body[key] = v;
    return body;
  };
  const Endpoint chat = Endpoint::kChat, compl_ = Endpoint::kCompletions;
  for (const json& lb :
       {json::array({1}), json{{"x", 1}}, json{{"-1", 1}}, json{{"1.5", 1}},
        json{{"99999999999", 1}}, json{{"3", 101}}, json{{"3", "1"}}, json{{"3", -100.5}}}) {
    INFO(lb.dump());
    CHECK(refused(chat, with(chat, "logit_bias", lb)).param == "logit_bias");
  }
  json many = json::object();
  for (int i = 0; i < 1025; ++i) many[std::to_string(i)] = 1;
  CHECK(refused(chat, with(chat, "logit_bias", many)).param == "logit_bias");
  // A token id past the vocabulary is found when the request is planned.
  const ApiRequest far =
      std::get<ApiRequest>(parse(compl_, with(compl_, "logit_bias", {{"2000000", 1}})));
  const auto plan = plan_request(far, model_info());
  REQUIRE(std::holds_alternative<ApiError>(plan));
  CHECK(std::get<ApiError>(plan).param == "logit_bias");

  json b = with(compl_, "min_tokens", 9);
  b["max_tokens"] = 8;
  CHECK(refused(compl_, b).param == "min_tokens");
  CHECK(refused(compl_, with(compl_, "min_tokens", -1)).param == "min_tokens");
  // Without max_tokens, min_tokens is capped by the rest of the context when planned.
  const ApiRequest mt = std::get<ApiRequest>(parse(compl_, with(compl_, "min_tokens", 5000)));
  const Plan p = std::get<Plan>(plan_request(mt, model_info()));
  CHECK(p.choices[0].min_tokens == p.choices[0].max_tokens);

  b = with(compl_, "best_of", 2);
  CHECK(refused(compl_, b).param == "best_of");
  b["n"] = 2;
  CHECK(std::holds_alternative<ApiRequest>(parse(compl_, b)));

  for (const json& rf :
       {json{{"type", "json_schema"}}, json{{"type", "json_schema"}, {"json_schema", 1}},
        json{{"type", "xml"}}, json("text"), json::object()}) {
    INFO(rf.dump());
    CHECK(refused(chat, with(chat, "response_format", rf)).param == "response_format");
  }
  // Forcing a call needs tools (tests/test_openai_tool_output.cpp has the rest).
  for (const json& tc : {json("required"), json("sometimes"), json(3),
                         json{{"type", "function"}, {"function", {{"name", "f"}}}}}) {
    INFO(tc.dump());
    CHECK(refused(chat, with(chat, "tool_choice", tc)).param == "tool_choice");
  }
  CHECK(std::holds_alternative<ApiRequest>(parse(chat, with(chat, "tool_choice", "none"))));
  CHECK(refused(chat, with(chat, "modalities", {"text", "audio"})).param == "modalities");
  CHECK(refused(chat, with(chat, "modalities", json::array())).param == "modalities");
  CHECK(refused(chat, with(chat, "parallel_tool_calls", "yes")).param == "parallel_tool_calls");
}
