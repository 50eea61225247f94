// The OpenAI codec without sockets: request validation (types, ranges, param names), planning
// (templates, tokenization, context limits), and the wire format of responses (SSE chunks, full
// bodies, logprobs, usage, errors).
#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"
#include "server/chat_template.h"
#include "server/metrics.h"
#include "server/openai_codec.h"
#include "tests/codec_fixture.h"

using namespace tandem;
using namespace tandem::openai;
using tandem::test::chatml;
using tandem::test::demo_tok;
using json = nlohmann::json;

namespace {

ModelInfo model_info(int32_t max_len = 512) { return test::codec_model(max_len, "tiny"); }

ApiRequest ok(Endpoint ep, const std::string& body) {
  auto r = parse_request(ep, body, SamplingParams{});
  if (auto* e = std::get_if<ApiError>(&r)) FAIL("unexpected error: " << e->message);
  return std::get<ApiRequest>(r);
}

ApiError bad(Endpoint ep, const std::string& body) {
  auto r = parse_request(ep, body, SamplingParams{});
  REQUIRE(std::holds_alternative<ApiError>(r));
  return std::get<ApiError>(r);
}

Plan plan_ok(const ApiRequest& req, const ModelInfo& m = model_info()) {
  auto p = plan_request(req, m);
  if (auto* e = std::get_if<ApiError>(&p)) FAIL("unexpected plan error: " << e->message);
  return std::get<Plan>(p);
}

// The JSON objects of the `data:` lines of an SSE text ([DONE] as the string "[DONE]").
std::vector<json> sse_objects(const std::string& text) {
  std::vector<json> out;
  size_t pos = 0;
  while ((pos = text.find("data: ", pos)) != std::string::npos) {
    const size_t end = text.find("\n\n", pos);
    REQUIRE(end != std::string::npos);
    const std::string payload = text.substr(pos + 6, end - pos - 6);
    out.push_back(payload == "[DONE]" ? json("[DONE]") : json::parse(payload));
    pos = end + 2;
  }
  return out;
}

TokenEvent event(const std::string& text, std::vector<int32_t> tokens,
                 FinishReason finish = FinishReason::kNone, int32_t completion = 0) {
  TokenEvent ev;
  ev.text = text;
  ev.tokens = std::move(tokens);
  ev.finish = finish;
  ev.completion_tokens = completion;
  return ev;
}

}  // namespace

TEST_CASE("codec: chat request fields reach the sampling params", "[codec]") {
  const ApiRequest r = ok(Endpoint::kChat, R"({
    "model": "tiny", "messages": [{"role": "user", "content": "hi"}],
    "temperature": 0.5, "top_p": 0.9, "top_k": 7, "min_p": 0.05, "presence_penalty": 0.5,
    "frequency_penalty": -0.5, "repetition_penalty": 1.1, "seed": 42, "n": 3,
    "max_tokens": 9, "max_completion_tokens": 11, "stop": "END", "logprobs": true,
    "top_logprobs": 2, "stream": true, "stream_options": {"include_usage": true},
    "user": "someone", "metadata": {"ignored": true}})");
  CHECK(r.sampling.temperature == Approx(0.5));
  CHECK(r.sampling.top_p == Approx(0.9));
  CHECK(r.sampling.top_k == 7);
  CHECK(r.sampling.min_p == Approx(0.05));
  CHECK(r.sampling.presence_penalty == Approx(0.5));
  CHECK(r.sampling.frequency_penalty == Approx(-0.5));
  CHECK(r.sampling.repetition_penalty == Approx(1.1));
  CHECK(r.sampling.seed == 42u);
  CHECK(r.n == 3);
  CHECK(r.max_tokens == 11);  // max_completion_tokens wins
  CHECK(r.stop == std::vector<std::string>{"END"});
  CHECK(r.logprobs);
  CHECK(r.top_logprobs == 2);
  CHECK(r.stream);
  CHECK(r.include_usage);

  const Plan p = plan_ok(r);
  REQUIRE(p.choices.size() == 3);
  CHECK(p.choices[0].sampling.seed == 42u);
  CHECK(p.choices[2].sampling.seed == 44u);  // choice j gets seed + j
  CHECK(p.choices[1].max_tokens == 11);
  CHECK(p.choices[1].top_logprobs == 2);
  CHECK(p.choices[0].prompt == p.prompts[0].ids);
  // The ChatML fallback, tokenized without BOS.
  CHECK(p.prompts[0].ids ==
        demo_tok().encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", false));
}

TEST_CASE("codec: defaults and null fields", "[codec]") {
  SamplingParams defaults;
  defaults.temperature = 0.7f;
  auto r = parse_request(Endpoint::kCompletions,
                         R"({"prompt": "Once", "temperature": null, "top_k": -1})", defaults);
  const ApiRequest& a = std::get<ApiRequest>(r);
  CHECK(a.sampling.temperature == Approx(0.7));
  CHECK(a.sampling.top_k == 0);
  CHECK_FALSE(a.sampling.seed);
  CHECK_FALSE(a.logprobs);
  const Plan p = plan_ok(a, model_info(100));
  REQUIRE(p.choices.size() == 1);
  // Default max_tokens: the rest of the context.
  CHECK(p.choices[0].max_tokens == 100 - static_cast<int32_t>(p.prompts[0].ids.size()));
  CHECK(p.choices[0].top_logprobs == -1);
  CHECK(p.prompts[0].ids == demo_tok().encode("Once"));  // BOS added for completions
}

TEST_CASE("codec: completion prompt forms", "[codec]") {
  CHECK(ok(Endpoint::kCompletions, R"({"prompt": "a"})").prompts.size() == 1);
  const ApiRequest strs = ok(Endpoint::kCompletions, R"({"prompt": ["a", "b c"], "n": 2})");
  REQUIRE(strs.prompts.size() == 2);
  CHECK(strs.prompts[1].text == "b c");
  CHECK(plan_ok(strs).choices.size() == 4);
  const ApiRequest ids = ok(Endpoint::kCompletions, R"({"prompt": [1, 400, 50]})");
  REQUIRE(ids.prompts.size() == 1);
  CHECK(ids.prompts[0].is_ids);
  CHECK(ids.prompts[0].ids == std::vector<int32_t>{1, 400, 50});
  const ApiRequest lists = ok(Endpoint::kCompletions, R"({"prompt": [[1, 2], [3]]})");
  REQUIRE(lists.prompts.size() == 2);
  CHECK(lists.prompts[1].ids == std::vector<int32_t>{3});

  CHECK(bad(Endpoint::kCompletions, R"({"prompt": []})").param == "prompt");
  CHECK(bad(Endpoint::kCompletions, R"({"prompt": ["a", 1]})").param == "prompt[1]");
  CHECK(bad(Endpoint::kCompletions, R"({"prompt": [1, -2]})").param == "prompt");
  CHECK(bad(Endpoint::kCompletions, R"({"prompt": [[]]})").param == "prompt[0]");
  CHECK(bad(Endpoint::kCompletions, R"({"prompt": 5})").param == "prompt");
  CHECK(bad(Endpoint::kCompletions, R"({})").param == "prompt");
  // A token id beyond the vocabulary is caught when planning.
  auto p = plan_request(ok(Endpoint::kCompletions, R"({"prompt": [1, 99999]})"), model_info());
  REQUIRE(std::holds_alternative<ApiError>(p));
  CHECK(std::get<ApiError>(p).param == "prompt");
}

TEST_CASE("codec: echo", "[codec]") {
  // Completions: the prompt text; chat: the last message when it is the assistant's (vLLM).
  const Plan c = plan_ok(ok(Endpoint::kCompletions, R"({"prompt": ["a b", "c"], "echo": true})"));
  CHECK(c.echo == std::vector<std::string>{"a b", "c"});
  const Plan chat = plan_ok(ok(Endpoint::kChat, R"({"echo": true, "messages": [
      {"role": "user", "content": "x"}, {"role": "assistant", "content": "Once"}]})"));
  CHECK(chat.echo == std::vector<std::string>{"Once"});
  const Plan user_last = plan_ok(
      ok(Endpoint::kChat, R"({"echo": true, "messages": [{"role": "user", "content": "x"}]})"));
  CHECK(user_last.echo == std::vector<std::string>{""});
  const Plan off = plan_ok(ok(Endpoint::kCompletions, R"({"prompt": "a"})"));
  CHECK(off.echo == std::vector<std::string>{""});
}

TEST_CASE("codec: malformed bodies", "[codec]") {
  CHECK(bad(Endpoint::kChat, "{not json").message.find("not valid JSON") != std::string::npos);
  CHECK(bad(Endpoint::kChat, "[1,2]").status == 400);
  CHECK(bad(Endpoint::kChat, "").status == 400);
  const std::string invalid_utf8 = "{\"messages\":[{\"role\":\"user\",\"content\":\"\xC3\x28\"}]}";
  CHECK(bad(Endpoint::kChat, invalid_utf8).message.find("UTF-8") != std::string::npos);
  CHECK(utf8::is_valid("h\xC3\xA9llo \xF0\x9F\x98\x80"));
  CHECK_FALSE(utf8::is_valid("\xC0\x80"));          // overlong
  CHECK_FALSE(utf8::is_valid("\xED\xA0\x80"));      // surrogate
  CHECK_FALSE(utf8::is_valid("\xF4\x90\x80\x80"));  // beyond U+10FFFF
  CHECK_FALSE(utf8::is_valid("\xE2\x82"));          // truncated
}

TEST_CASE("codec: messages are validated with their path", "[codec]") {
  CHECK(bad(Endpoint::kChat, R"({"messages": []})").param == "messages");
  CHECK(bad(Endpoint::kChat, R"({"messages": "hi"})").param == "messages");
  CHECK(bad(Endpoint::kChat, R"({})").param == "messages");
  CHECK(bad(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "a"}, 3]})").param ==
        "messages[1]");
  CHECK(bad(Endpoint::kChat, R"({"messages": [{"role": "wizard", "content": "a"}]})").param ==
        "messages[0].role");
  CHECK(bad(Endpoint::kChat, R"({"messages": [{"role": "user"}]})").param == "messages[0].content");
  CHECK(bad(Endpoint::kChat,
            R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})")
            .param == "messages[0].content[0].type");
  const ApiRequest parts = ok(Endpoint::kChat, R"({"messages": [{"role": "developer",
      "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]})");
  CHECK(parts.messages[0]["role"] == "system");
  CHECK(parts.messages[0]["content"] == "a\nb");
}

TEST_CASE("codec: wrong types and out-of-range values name their param", "[codec]") {
  const std::string m = R"("messages": [{"role": "user", "content": "x"}])";
  auto param_of = [&](const std::string& field) {
    const ApiError e = bad(Endpoint::kChat, "{" + m + ", " + field + "}");
    CHECK(e.status == 400);
    CHECK(e.type == "invalid_request_error");
    return e.param;
  };
  CHECK(param_of(R"("temperature": "hot")") == "temperature");
  CHECK(param_of(R"("temperature": 2.5)") == "temperature");
  CHECK(param_of(R"("temperature": -0.1)") == "temperature");
  CHECK(param_of(R"("top_p": 0)") == "top_p");
  CHECK(param_of(R"("top_p": 1.5)") == "top_p");
  CHECK(param_of(R"("top_k": -2)") == "top_k");
  CHECK(param_of(R"("top_k": 1.5)") == "top_k");
  CHECK(param_of(R"("min_p": 2)") == "min_p");
  CHECK(param_of(R"("presence_penalty": 3)") == "presence_penalty");
  CHECK(param_of(R"("frequency_penalty": -3)") == "frequency_penalty");
  CHECK(param_of(R"("repetition_penalty": 0)") == "repetition_penalty");
  CHECK(param_of(R"("seed": "x")") == "seed");
  CHECK(param_of(R"("n": 0)") == "n");
  CHECK(param_of(R"("n": 1000)") == "n");
  CHECK(param_of(R"("max_tokens": 0)") == "max_tokens");
  CHECK(param_of(R"("max_tokens": true)") == "max_tokens");
  CHECK(param_of(R"("max_completion_tokens": -1)") == "max_completion_tokens");
  CHECK(param_of(R"("stop": 3)") == "stop");
  CHECK(param_of(R"("stop": [""])") == "stop");
  CHECK(param_of(R"("logprobs": 1)") == "logprobs");
  CHECK(param_of(R"("top_logprobs": 50, "logprobs": true)") == "top_logprobs");
  CHECK(param_of(R"("top_logprobs": 2)") == "top_logprobs");  // needs logprobs: true
  CHECK(param_of(R"("stream": "yes")") == "stream");
  CHECK(param_of(R"("stream_options": {"include_usage": true})") == "stream_options");
  CHECK(param_of(R"("stream": true, "stream_options": {"include_usage": 1})") ==
        "stream_options.include_usage");
  CHECK(param_of(R"("user": 5)") == "user");
  CHECK(param_of(R"("model": 5)") == "model");
  CHECK(bad(Endpoint::kCompletions, R"({"prompt": "a", "logprobs": true})").param == "logprobs");
  CHECK(bad(Endpoint::kCompletions, R"({"prompt": "a", "echo": 1})").param == "echo");
  CHECK(ok(Endpoint::kCompletions, R"({"prompt": "a", "logprobs": 3})").top_logprobs == 3);
  CHECK(ok(Endpoint::kCompletions, R"({"prompt": "a", "n": 2.0})").n == 2);
}

TEST_CASE("codec: context limits and unknown models", "[codec]") {
  const ApiRequest r =
      ok(Endpoint::kCompletions, R"({"prompt": "Once upon a time", "max_tokens": 10})");
  const int32_t len = static_cast<int32_t>(demo_tok().encode("Once upon a time").size());
  CHECK(std::holds_alternative<Plan>(plan_request(r, model_info(len + 10))));
  auto over = plan_request(r, model_info(len + 9));
  REQUIRE(std::holds_alternative<ApiError>(over));
  CHECK(std::get<ApiError>(over).param == "max_tokens");
  CHECK(std::get<ApiError>(over).code == "context_length_exceeded");
  auto full = plan_request(ok(Endpoint::kCompletions, R"({"prompt": "Once upon a time"})"),
                           model_info(len));
  REQUIRE(std::holds_alternative<ApiError>(full));
  CHECK(std::get<ApiError>(full).param == "prompt");

  auto unknown = plan_request(ok(Endpoint::kCompletions, R"({"prompt": "a", "model": "gpt-9"})"),
                              model_info());
  REQUIRE(std::holds_alternative<ApiError>(unknown));
  CHECK(std::get<ApiError>(unknown).status == 404);
  CHECK(std::get<ApiError>(unknown).code == "model_not_found");
}

TEST_CASE("codec: error objects have the OpenAI shape", "[codec]") {
  const json j = json::parse(error_json(invalid_request("bad value", "top_p")));
  CHECK(j["error"]["message"] == "bad value");
  CHECK(j["error"]["type"] == "invalid_request_error");
  CHECK(j["error"]["param"] == "top_p");
  CHECK(j["error"]["code"].is_null());
  CHECK(error_for_kind(ErrorKind::kOutOfMemory, "full").status == 429);
  CHECK(error_for_kind(ErrorKind::kInvalidArgument, "x").status == 400);
  CHECK(error_for_kind(ErrorKind::kInternal, "x").status == 500);
  const std::string frame = sse_error(invalid_request("x"));
  CHECK(frame.rfind("data: {\"error\":", 0) == 0);
}

TEST_CASE("codec: chat stream chunks and the full body agree", "[codec]") {
  const ApiRequest r = ok(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}],
      "stream": true, "stream_options": {"include_usage": true}, "n": 2})");
  const Plan p = plan_ok(r);
  ResponseEncoder s(r, p, "chatcmpl-1", 7, "tiny");
  std::string text = s.sse_start();
  text += s.sse_event(0, event("Hel", {10}));
  text += s.sse_event(1, event("A", {11}));
  text += s.sse_event(0, event("lo", {12}, FinishReason::kStop, 2));
  text += s.sse_event(1, event("", {13}, FinishReason::kLength, 2));
  CHECK(s.all_finished());
  text += s.sse_end();
  const auto objs = sse_objects(text);
  REQUIRE(objs.size() >= 7);
  CHECK(objs[0]["choices"][0]["delta"]["role"] == "assistant");
  CHECK(objs[0]["object"] == "chat.completion.chunk");
  CHECK(objs[0]["usage"].is_null());
  std::string t0, t1, f0, f1;
  for (const json& o : objs) {
    if (!o.is_object() || o["choices"].empty()) continue;
    CHECK(o["id"] == "chatcmpl-1");
    const json& c = o["choices"][0];
    std::string& t = c["index"] == 0 ? t0 : t1;
    if (c["delta"].contains("content")) t += c["delta"]["content"].get<std::string>();
    if (!c["finish_reason"].is_null()) (c["index"] == 0 ? f0 : f1) = c["finish_reason"];
  }
  CHECK(t0 == "Hello");
  CHECK(t1 == "A");
  CHECK(f0 == "stop");
  CHECK(f1 == "length");
  // The usage chunk: empty choices, after every finish chunk, then [DONE].
  const json& usage = objs[objs.size() - 2];
  CHECK(usage["choices"].empty());
  CHECK(usage["usage"]["prompt_tokens"] == p.prompts[0].ids.size());
  CHECK(usage["usage"]["completion_tokens"] == 4);
  CHECK(objs.back() == "[DONE]");

  ApiRequest rn = r;
  rn.stream = false;
  ResponseEncoder b(rn, p, "chatcmpl-2", 7, "tiny");
  b.add(0, event("Hel", {10}));
  b.add(1, event("A", {11}, FinishReason::kLength, 1));
  b.add(0, event("lo", {12}, FinishReason::kStop, 2));
  const json body = json::parse(b.body());
  CHECK(body["object"] == "chat.completion");
  CHECK(body["choices"][0]["message"]["content"] == "Hello");
  CHECK(body["choices"][0]["message"]["role"] == "assistant");
  CHECK(body["choices"][0]["finish_reason"] == "stop");
  CHECK(body["choices"][1]["finish_reason"] == "length");
  CHECK(body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"].get<int>() + 3);
}

TEST_CASE("codec: logprobs in both formats", "[codec]") {
  TokenEvent ev = event("Hi there", {5, 6});
  ev.logprobs = {{5, "Hi", -0.5f}, {6, " there", -1.25f}};
  ev.top = {{{5, "Hi", -0.5f}, {7, "Ho", -2.0f}}, {{6, " there", -1.25f}, {8, " you", -1.5f}}};
  TokenEvent end = event("", {}, FinishReason::kStop, 2);

  const ApiRequest chat = ok(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}],
      "logprobs": true, "top_logprobs": 2})");
  ResponseEncoder c(chat, plan_ok(chat), "id", 0, "tiny");
  c.add(0, ev);
  c.add(0, end);
  const json cj = json::parse(c.body());
  const json& content = cj["choices"][0]["logprobs"]["content"];
  REQUIRE(content.size() == 2);
  CHECK(content[1]["token"] == " there");
  CHECK(content[1]["logprob"].get<double>() == Approx(-1.25));
  CHECK(content[1]["bytes"] == json::array({32, 116, 104, 101, 114, 101}));
  CHECK(content[0]["top_logprobs"].size() == 2);
  CHECK(content[0]["top_logprobs"][1]["token"] == "Ho");

  const ApiRequest cmpl = ok(Endpoint::kCompletions, R"({"prompt": "Say", "logprobs": 2,
      "echo": true})");
  ResponseEncoder e(cmpl, plan_ok(cmpl), "id", 0, "tiny");
  e.add(0, ev);
  e.add(0, end);
  const json ej = json::parse(e.body());
  const json& lp = ej["choices"][0]["logprobs"];
  CHECK(ej["choices"][0]["text"] == "SayHi there");  // echo prepends the prompt
  CHECK(lp["tokens"] == json::array({"Hi", " there"}));
  CHECK(lp["token_logprobs"][0].get<double>() == Approx(-0.5));
  CHECK(lp["text_offset"] == json::array({3, 5}));  // after the echoed prompt
  CHECK(lp["top_logprobs"][1][" you"].get<double>() == Approx(-1.5));

  // A partial UTF-8 token does not break the JSON.
  TokenEvent partial = event("", {9});
  partial.logprobs = {{9, "\xE2\x82", -0.1f}};
  partial.top = {{}};
  ResponseEncoder c2(chat, plan_ok(chat), "id", 0, "tiny");
  c2.add(0, partial);
  c2.add(0, end);
  const json pj = json::parse(c2.body());
  CHECK(pj["choices"][0]["logprobs"]["content"][0]["bytes"] == json::array({0xE2, 0x82}));
}

TEST_CASE("codec: engine errors become error objects", "[codec]") {
  const ApiRequest r = ok(Endpoint::kCompletions, R"({"prompt": "x", "stream": true})");
  ResponseEncoder s(r, plan_ok(r), "id", 0, "tiny");
  TokenEvent ev = event("", {}, FinishReason::kError);
  ev.error = "out of blocks";
  const auto objs = sse_objects(s.sse_event(0, ev));
  REQUIRE(objs.size() == 1);
  CHECK(objs[0]["error"]["message"] == "out of blocks");
  CHECK(objs[0]["error"]["type"] == "server_error");
  REQUIRE(s.error());
  CHECK(s.error()->status == 500);
}

TEST_CASE("codec: text the tokenizer's regex cannot finish is a 400, not a hang", "[codec]") {
  // A tokenizer.json whose Split pattern backtracks exponentially on "aaa...a!".
  const Tokenizer tok = Tokenizer::from_json_text(R"({
    "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a|aa)+$"}, "behavior": "Isolated",
                      "invert": false},
    "model": {"type": "BPE", "vocab": {"a": 0, "!": 1}, "merges": []}})");
  ModelInfo m = model_info();
  m.tokenizer = &tok;
  const std::string prompt = std::string(60, 'a') + "!";
  const auto t0 = std::chrono::steady_clock::now();
  auto p = plan_request(ok(Endpoint::kCompletions, R"({"prompt": ")" + prompt + R"("})"), m);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(std::holds_alternative<ApiError>(p));
  const ApiError& e = std::get<ApiError>(p);
  INFO(e.message);
  CHECK(e.status == 400);
  CHECK(e.param == "prompt");
  CHECK(e.message.find("could not be tokenized") != std::string::npos);
  CHECK(took < 5.0);
}

TEST_CASE("codec: models list", "[codec]") {
  const json j = json::parse(models_json("tiny", 5, 512));
  CHECK(j["object"] == "list");
  CHECK(j["data"][0]["id"] == "tiny");
  CHECK(j["data"][0]["object"] == "model");
}

TEST_CASE("metrics: Prometheus text", "[codec]") {
  ServerMetrics m;
  m.request_done("/v1/completions", 200);
  m.request_done("/v1/completions", 200);
  m.request_done("other", 404);
  m.sequence_done(10, 5, 0.02, 0.1);
  EngineGauges g;
  g.running = 3;
  g.kv_device_blocks_used = 7;
  const std::string t = m.render(g);
  CHECK(t.find("tandem_http_requests_total{route=\"/v1/completions\",status=\"200\"} 2") !=
        std::string::npos);
  CHECK(t.find("tandem_http_requests_total{route=\"other\",status=\"404\"} 1") !=
        std::string::npos);
  CHECK(t.find("tandem_prompt_tokens_total 10\n") != std::string::npos);
  CHECK(t.find("tandem_generation_tokens_total 5\n") != std::string::npos);
  CHECK(t.find("tandem_time_to_first_token_seconds_bucket{le=\"0.04\"} 1") != std::string::npos);
  CHECK(t.find("tandem_time_to_first_token_seconds_bucket{le=\"0.01\"} 0") != std::string::npos);
  CHECK(t.find("tandem_time_per_output_token_seconds_count 1") != std::string::npos);
  CHECK(t.find("tandem_e2e_request_latency_seconds_bucket{le=\"+Inf\"} 1") != std::string::npos);
  CHECK(t.find("tandem_num_requests_running 3\n") != std::string::npos);
  CHECK(t.find("tandem_kv_device_blocks_used 7\n") != std::string::npos);
}

TEST_CASE("codec: prefill progress (include_progress, return_progress)", "[codec]") {
  const std::string head = R"({"messages": [{"role": "user", "content": "x"}], )";
  CHECK(
      ok(Endpoint::kChat, head + R"("stream": true, "stream_options": {"include_progress": true}})")
          .include_progress);
  CHECK(ok(Endpoint::kCompletions, R"({"prompt": "a", "stream": true, "return_progress": true})")
            .include_progress);
  CHECK(
      !ok(Endpoint::kChat, head + R"("stream": true, "return_progress": false})").include_progress);
  CHECK(!ok(Endpoint::kChat, head + R"("return_progress": false})").include_progress);
  // OpenAI's obfuscation padding is accepted and not sent; anything else is named.
  CHECK(!ok(Endpoint::kChat,
            head + R"("stream": true, "stream_options": {"include_obfuscation": true}})")
             .include_progress);
  CHECK(bad(Endpoint::kChat, head + R"("return_progress": true})").param == "return_progress");
  CHECK(bad(Endpoint::kChat, head + R"("stream": true, "return_progress": 1})").param ==
        "return_progress");
  CHECK(bad(Endpoint::kChat, head + R"("stream": true, "stream_options": {"progress": true}})")
            .param == "stream_options.progress");
  CHECK(bad(Endpoint::kChat,
            head + R"("stream": true, "stream_options": {"include_progress": "yes"}})")
            .param == "stream_options.include_progress");

  for (const bool asked : {true, false}) {
    const ApiRequest r =
        ok(Endpoint::kChat, head + (asked ? R"("stream": true, "return_progress": true, "n": 2})"
                                          : R"("stream": true, "n": 2})"));
    const Plan p = plan_ok(r);
    for (const GenerationRequest& g : p.choices) CHECK(g.report_progress == asked);
    ResponseEncoder enc(r, p, "chatcmpl-1", 7, "tiny");
    TokenEvent ev;
    ev.processed = 3;
    ev.cached = 1;
    CHECK(enc.sse_event(1, ev).empty());  // progress is not a token event
    const std::string frame = enc.sse_progress(1, ev, 12.7);
    if (!asked) {
      CHECK(frame.empty());
      continue;
    }
    const auto objs = sse_objects(frame);
    REQUIRE(objs.size() == 1);
    CHECK(objs[0]["object"] == "chat.completion.chunk");
    CHECK(objs[0]["choices"] == json::array());
    CHECK(objs[0]["prompt_progress"] ==
          json{{"index", 1},
               {"total", static_cast<int64_t>(p.choices[1].prompt.size())},
               {"cache", 1},
               {"processed", 3},
               {"time_ms", 12}});
    CHECK(!enc.finished(1));
  }
}
