// /tokenize, /detokenize and /v1/models/{id} without sockets (server/openai_routes.h): vLLM's
// shapes, the chat template for messages, the round trip, and 400/404s naming the parameter.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "engine/tokenizer/tokenizer.h"
#include "server/chat_template.h"
#include "server/openai_routes.h"
#include "tests/codec_fixture.h"

using namespace tandem;
using namespace tandem::openai;
using tandem::test::demo_template;
using tandem::test::demo_tok;
using json = nlohmann::json;

namespace {

ModelInfo model_info() { return test::codec_model(1024, "tandem-demo", test::demo_template()); }

json ok(const std::variant<std::string, ApiError>& r) {
  if (auto* e = std::get_if<ApiError>(&r)) FAIL(e->message);
  return json::parse(std::get<std::string>(r));
}

ApiError bad(const std::variant<std::string, ApiError>& r, int status = 400) {
  REQUIRE(std::holds_alternative<ApiError>(r));
  CHECK(std::get<ApiError>(r).status == status);
  return std::get<ApiError>(r);
}

}  // namespace

TEST_CASE("/tokenize: a prompt, with and without special tokens, and token strings",
          "[openai][routes]") {
  const std::string text = "def fibonacci(n):\n    return n";
  const json r = ok(tokenize_response(json{{"prompt", text}}.dump(), model_info()));
  const std::vector<int32_t> ids = demo_tok().encode(text, /*add_special=*/true);
  CHECK(r["tokens"].get<std::vector<int32_t>>() == ids);
  CHECK(r["count"] == ids.size());
  CHECK(r["max_model_len"] == 1024);
  CHECK(r["token_strs"].is_null());
  const json plain = ok(tokenize_response(
      json{{"prompt", text}, {"add_special_tokens", false}, {"return_token_strs", true}}.dump(),
      model_info()));
  const auto plain_ids = plain["tokens"].get<std::vector<int32_t>>();
  CHECK(plain_ids == demo_tok().encode(text, /*add_special=*/false));
  REQUIRE(plain["token_strs"].size() == plain_ids.size());
  for (size_t i = 0; i < plain_ids.size(); ++i)
    CHECK(plain["token_strs"][i] == demo_tok().id_to_token(plain_ids[i]));
  // The round trip.
  const json d = ok(detokenize_response(
      json{{"tokens", plain_ids}, {"model", "tandem-demo"}}.dump(), model_info()));
  CHECK(d["prompt"] == text);
}

TEST_CASE("/tokenize: messages go through the chat template", "[openai][routes]") {
  const json msgs = {{{"role", "user"}, {"content", "Write a class."}}};
  const json r = ok(tokenize_response(json{{"messages", msgs}}.dump(), model_info()));
  const std::string rendered = demo_template().render(
      nlohmann::ordered_json{{"messages", msgs}, {"add_generation_prompt", true}});
  CHECK(r["tokens"].get<std::vector<int32_t>>() == demo_tok().encode(rendered, false));
  const json no_gen = ok(tokenize_response(
      json{{"messages", msgs}, {"add_generation_prompt", false}}.dump(), model_info()));
  CHECK(no_gen["count"].get<int>() < r["count"].get<int>());
  // Bad messages get the chat codec's errors.
  CHECK(bad(tokenize_response(json{{"messages", json::array()}}.dump(), model_info())).param ==
        "messages");
}

TEST_CASE("/tokenize, /detokenize: bad input is a 400 naming it; another model a 404",
          "[openai][routes]") {
  const ModelInfo m = model_info();
  CHECK(bad(tokenize_response("{", m)).param.empty());
  CHECK(bad(tokenize_response("[]", m)).param.empty());
  CHECK(bad(tokenize_response("{}", m)).param == "prompt");
  CHECK(bad(tokenize_response(R"({"prompt": "a", "messages": []})", m)).param == "messages");
  CHECK(bad(tokenize_response(R"({"prompt": 3})", m)).param == "prompt");
  CHECK(bad(tokenize_response(R"({"prompt": "a", "temperature": 1})", m)).param == "temperature");
  CHECK(bad(tokenize_response(R"({"prompt": "a", "add_special_tokens": 1})", m)).param ==
        "add_special_tokens");
  CHECK(bad(tokenize_response(R"({"prompt": "a", "model": "gpt-4"})", m), 404).code ==
        "model_not_found");
  CHECK(bad(detokenize_response("{}", m)).param == "tokens");
  CHECK(bad(detokenize_response(R"({"tokens": "1 2"})", m)).param == "tokens");
  CHECK(bad(detokenize_response(R"({"tokens": [1, -2]})", m)).param == "tokens");
  CHECK(bad(detokenize_response(R"({"tokens": [1, 1.5]})", m)).param == "tokens");
  CHECK(bad(detokenize_response(json{{"tokens", {demo_tok().vocab_size()}}}.dump(), m)).param ==
        "tokens");
  CHECK(bad(detokenize_response(R"({"tokens": [1], "skip": true})", m)).param == "skip");
  CHECK(ok(detokenize_response(R"({"tokens": []})", m))["prompt"] == "");
}

TEST_CASE("/v1/models/{id}", "[openai][routes]") {
  const json r = ok(model_response("tandem-demo", model_info(), 1700000000));
  CHECK(r["id"] == "tandem-demo");
  CHECK(r["object"] == "model");
  CHECK(r["created"] == 1700000000);
  CHECK(r["max_model_len"] == 1024);
  CHECK(bad(model_response("tandem-dem", model_info(), 0), 404).code == "model_not_found");
}
