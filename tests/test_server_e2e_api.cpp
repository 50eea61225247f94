// End-to-end tests of `tandem serve` over real HTTP on 127.0.0.1 (tests/server_e2e.h): the real
// binary on a real model. What the API answers: every route, stream and non-stream agreeing,
// n > 1 and the prompt forms, stop strings, seeds and the effects of the sampling parameters,
// max_tokens and usage, logprobs, the /metrics counters, the small routes and headers, and the
// OpenAI Node SDK (plain, and what agents use: tests/sdk/agent_sdk_test.mjs) against the
// server. The metrics test reads the counter of successful completions, which exists once the
// tests before it have made one.
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "tests/server_e2e.h"

using namespace tandem::test::e2e;
using namespace std::chrono_literals;

TEST_CASE("e2e: every route answers", "[e2e]") {
  int status = 0;
  CHECK(json::parse(get("/health", &status, ""))["status"] == "ok");  // open without a key
  CHECK(status == 200);
  const json models = json::parse(get("/v1/models", &status));
  CHECK(status == 200);
  CHECK(models["data"][0]["id"] == "tiny");
  CHECK(models["data"][0]["max_model_len"].get<int>() > 0);
  const std::string m = get("/metrics", &status);
  CHECK(status == 200);
  CHECK(m.find("# TYPE tandem_time_to_first_token_seconds histogram") != std::string::npos);
  for (const char* name :
       {"tandem_num_requests_running", "tandem_num_requests_waiting",
        "tandem_kv_device_blocks_used", "tandem_kv_host_blocks_used",
        "tandem_cpu_attention_seconds_total", "tandem_cpu_attention_wait_seconds_total",
        "tandem_step_forward_seconds_total", "tandem_step_other_seconds_total",
        "tandem_step_other_cpu_seconds_total", "tandem_engine_steps_total",
        "tandem_prompt_tokens_total", "tandem_generation_tokens_total",
        "tandem_time_per_output_token_seconds_count", "tandem_e2e_request_latency_seconds_count"})
    CHECK(m.find(std::string("\n") + name + " ") != std::string::npos);

  const json chat = ok_post("/v1/chat/completions",
                            {{"messages", kChatMessages}, {"max_tokens", 8}, {"model", "tiny"}});
  CHECK(chat["object"] == "chat.completion");
  CHECK(chat["model"] == "tiny");
  CHECK(chat["id"].get<std::string>().rfind("chatcmpl-", 0) == 0);
  CHECK(chat["choices"][0]["message"]["role"] == "assistant");
  const json cmpl = ok_post("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 8}});
  CHECK(cmpl["object"] == "text_completion");
  CHECK(cmpl["id"].get<std::string>().rfind("cmpl-", 0) == 0);

  error_of(post("/v1/nothing", json::object()), 404);
  auto c = client(main_server().port());
  auto r = c->Get("/v2/models");
  REQUIRE(r);
  CHECK(error_of(Reply{r->status, r->body, json::parse(r->body, nullptr, false)}, 404)["code"] ==
        "unknown_url");
}

TEST_CASE("e2e: stream and non-stream agree at temperature 0", "[e2e]") {
  const json cbody = {{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0}};
  const json full = ok_post("/v1/completions", cbody);
  const Streamed s = stream("/v1/completions", cbody);
  CHECK(s.text.at(0) == full["choices"][0]["text"]);
  CHECK(s.finish.at(0) == full["choices"][0]["finish_reason"]);
  CHECK(s.frames.back() == "[DONE]");

  json chat = {{"messages", kChatMessages},
               {"max_tokens", 24},
               {"temperature", 0},
               {"stream_options", {{"include_usage", true}}}};
  const Streamed cs = stream("/v1/chat/completions", chat);
  chat.erase("stream_options");
  const json cfull = ok_post("/v1/chat/completions", chat);
  CHECK(cs.text.at(0) == cfull["choices"][0]["message"]["content"]);
  // One id; the first delta carries the role; the usage chunk has empty choices and comes after
  // the finish chunk; [DONE] last.
  std::set<std::string> ids;
  for (const json& f : cs.frames)
    if (f.is_object()) ids.insert(f["id"].get<std::string>());
  CHECK(ids.size() == 1);
  CHECK(cs.frames[0]["choices"][0]["delta"]["role"] == "assistant");
  const size_t nf = cs.frames.size();
  REQUIRE(nf >= 3);
  CHECK(cs.frames[nf - 1] == "[DONE]");
  CHECK(cs.frames[nf - 2]["choices"].empty());
  CHECK(cs.frames[nf - 2]["usage"] == cfull["usage"]);
  CHECK(!cs.frames[nf - 3]["choices"][0]["finish_reason"].is_null());
}

TEST_CASE("e2e: n=2 and prompt forms", "[e2e]") {
  const json two = ok_post(
      "/v1/completions", {{"prompt", "The dog"}, {"max_tokens", 16}, {"temperature", 0}, {"n", 2}});
  REQUIRE(two["choices"].size() == 2);
  CHECK(two["choices"][0]["index"] == 0);
  CHECK(two["choices"][1]["index"] == 1);
  CHECK(two["choices"][0]["text"] == two["choices"][1]["text"]);  // greedy: the same
  // Sampled with a seed: choice j uses seed + j, so the two differ.
  const json sampled = ok_post("/v1/chat/completions", {{"messages", kChatMessages},
                                                        {"max_tokens", 40},
                                                        {"temperature", 1.0},
                                                        {"seed", 5},
                                                        {"n", 2}});
  REQUIRE(sampled["choices"].size() == 2);
  CHECK(sampled["choices"][0]["message"]["content"] != sampled["choices"][1]["message"]["content"]);

  const json base = {{"max_tokens", 12}, {"temperature", 0}};
  auto with = [&](json prompt) {
    json b = base;
    b["prompt"] = std::move(prompt);
    return ok_post("/v1/completions", b);
  };
  const std::string a =
      completion({{"prompt", "Once upon a time"}, {"max_tokens", 12}, {"temperature", 0}});
  const std::string b = completion({{"prompt", "The cat"}, {"max_tokens", 12}, {"temperature", 0}});
  const json list = with(json::array({"Once upon a time", "The cat"}));
  REQUIRE(list["choices"].size() == 2);
  CHECK(list["choices"][0]["text"] == a);
  CHECK(list["choices"][1]["text"] == b);
  const std::vector<int32_t> ids = tokenizer().encode("Once upon a time");
  CHECK(with(ids)["choices"][0]["text"] == a);
  const json lists = with(json::array({ids, tokenizer().encode("The cat")}));
  CHECK(lists["choices"][0]["text"] == a);
  CHECK(lists["choices"][1]["text"] == b);
  // Usage counts every prompt once and every choice's tokens.
  CHECK(lists["usage"]["prompt_tokens"] == ids.size() + tokenizer().encode("The cat").size());
}

TEST_CASE("e2e: stop strings cut the text, also across token boundaries", "[e2e]") {
  const json base = {{"prompt", "Once upon a time"},
                     {"max_tokens", 40},
                     {"temperature", 0},
                     {"ignore_eos", true},
                     {"logprobs", 0}};
  const json full = ok_post("/v1/completions", base);
  const std::string text = full["choices"][0]["text"];
  const json& tokens = full["choices"][0]["logprobs"]["tokens"];
  // A stop string made of the end of one token and the start of the next.
  std::string stop;
  for (size_t i = 3; i + 1 < tokens.size() && stop.empty(); ++i) {
    const std::string t0 = tokens[i], t1 = tokens[i + 1];
    if (t0.size() >= 2 && t1.size() >= 2) stop = t0.substr(t0.size() - 2) + t1.substr(0, 2);
  }
  REQUIRE(!stop.empty());
  const size_t at = text.find(stop);
  REQUIRE(at != std::string::npos);
  const std::string expected = text.substr(0, at);
  INFO("text: " << text << " | stop: '" << stop << "'");

  json b = base;
  b.erase("logprobs");
  b["stop"] = stop;
  const json cut = ok_post("/v1/completions", b);
  CHECK(cut["choices"][0]["text"] == expected);
  CHECK(cut["choices"][0]["finish_reason"] == "stop");
  b["stop"] = json::array({"qqqq", stop});
  const Streamed s = stream("/v1/completions", b);
  CHECK(s.text.at(0) == expected);  // nothing of the stop string was streamed
  CHECK(s.finish.at(0) == "stop");
}

TEST_CASE("e2e: seed reproduces, and sampling parameters have effects", "[e2e]") {
  const std::string prompt = "Once upon a time";
  auto run = [&](json extra) {
    json b = {{"prompt", prompt}, {"max_tokens", 48}, {"ignore_eos", true}};
    b.update(extra);
    return completion(b);
  };
  const std::string greedy = run({{"temperature", 0}});
  CHECK(run({{"temperature", 1.0}, {"seed", 11}}) == run({{"temperature", 1.0}, {"seed", 11}}));
  // Different seeds, or sampling instead of greedy decoding, change the text.
  std::set<std::string> by_seed;
  for (int seed : {1, 2, 3}) by_seed.insert(run({{"temperature", 1.2}, {"seed", seed}}));
  CHECK(by_seed.size() >= 2);
  CHECK(!by_seed.count(greedy));
  // Truncations that leave only the most likely token give back the greedy text.
  CHECK(run({{"temperature", 1.5}, {"seed", 1}, {"top_k", 1}}) == greedy);
  CHECK(run({{"temperature", 1.5}, {"seed", 1}, {"top_p", 0.001}}) == greedy);
  CHECK(run({{"temperature", 1.5}, {"seed", 1}, {"min_p", 1.0}}) == greedy);
  // Penalties steer greedy decoding away from repeating itself.
  CHECK(run({{"temperature", 0}, {"presence_penalty", 2.0}}) != greedy);
  CHECK(run({{"temperature", 0}, {"frequency_penalty", 2.0}}) != greedy);
  CHECK(run({{"temperature", 0}, {"repetition_penalty", 1.8}}) != greedy);
  // `user` is accepted and changes nothing.
  CHECK(run({{"temperature", 0}, {"user", "someone"}}) == greedy);
  // echo prepends the prompt.
  CHECK(run({{"temperature", 0}, {"echo", true}}) == prompt + greedy);
}

TEST_CASE("e2e: max_tokens, max_completion_tokens and usage", "[e2e]") {
  const std::string prompt = "Once upon a time";
  const json r =
      ok_post("/v1/completions", {{"prompt", prompt}, {"max_tokens", 7}, {"ignore_eos", true}});
  CHECK(r["choices"][0]["finish_reason"] == "length");
  CHECK(r["usage"]["completion_tokens"] == 7);
  CHECK(r["usage"]["prompt_tokens"] == tokenizer().encode(prompt).size());
  CHECK(r["usage"]["total_tokens"] == r["usage"]["prompt_tokens"].get<int>() + 7);
  const json c = ok_post("/v1/chat/completions", {{"messages", kChatMessages},
                                                  {"max_tokens", 9},
                                                  {"max_completion_tokens", 5},
                                                  {"ignore_eos", true}});
  CHECK(c["usage"]["completion_tokens"] == 5);
  CHECK(c["choices"][0]["finish_reason"] == "length");
}

TEST_CASE("e2e: logprobs are <= 0 and their tokens make the text", "[e2e]") {
  const json r = ok_post("/v1/completions", {{"prompt", "The little bird"},
                                             {"max_tokens", 20},
                                             {"temperature", 0},
                                             {"ignore_eos", true},
                                             {"logprobs", 3}});
  const json& ch = r["choices"][0];
  const json& lp = ch["logprobs"];
  REQUIRE(lp["tokens"].size() == 20);
  CHECK(r["usage"]["completion_tokens"] == lp["tokens"].size());
  std::string joined;
  for (size_t i = 0; i < lp["tokens"].size(); ++i) {
    CHECK(lp["text_offset"][i] == joined.size());
    joined += lp["tokens"][i].get<std::string>();
    const double chosen = lp["token_logprobs"][i];
    CHECK(chosen <= 0);
    const json& top = lp["top_logprobs"][i];
    CHECK(top.size() >= 1);
    CHECK(top.size() <= 3);
    double best = -1e30;
    for (const auto& [tok, v] : top.items()) {
      CHECK(v.get<double>() <= 0);
      best = std::max(best, v.get<double>());
    }
    CHECK(chosen == Approx(best));  // greedy picks the most likely token
  }
  CHECK(joined == ch["text"]);

  const json c = ok_post("/v1/chat/completions", {{"messages", kChatMessages},
                                                  {"max_tokens", 16},
                                                  {"temperature", 0},
                                                  {"logprobs", true},
                                                  {"top_logprobs", 2}});
  const json& content = c["choices"][0]["logprobs"]["content"];
  REQUIRE(content.size() == c["usage"]["completion_tokens"].get<size_t>());
  std::string bytes;
  for (const json& e : content) {
    CHECK(e["logprob"].get<double>() <= 0);
    CHECK(e["top_logprobs"].size() == 2);
    for (int b : e["bytes"]) bytes += static_cast<char>(b);
  }
  // With a stop token the text ends before it; the tokens before make the text.
  const std::string text = c["choices"][0]["message"]["content"];
  CHECK(bytes.rfind(text, 0) == 0);
  if (c["choices"][0]["finish_reason"] == "length") CHECK(bytes == text);
  // Streaming logprobs arrive with their chunks.
  const Streamed s = stream("/v1/completions", {{"prompt", "The little bird"},
                                                {"max_tokens", 5},
                                                {"temperature", 0},
                                                {"ignore_eos", true},
                                                {"logprobs", 1}});
  size_t streamed_tokens = 0;
  for (const json& f : s.frames)
    if (f.is_object() && !f["choices"].empty() && f["choices"][0]["logprobs"].is_object())
      streamed_tokens += f["choices"][0]["logprobs"]["tokens"].size();
  CHECK(streamed_tokens == 5);
}

TEST_CASE("e2e: /metrics counters move", "[e2e]") {
  const std::string before = get("/metrics");
  const json r = ok_post("/v1/completions",
                         {{"prompt", "Once upon a time"}, {"max_tokens", 6}, {"ignore_eos", true}});
  const std::string after = get("/metrics");
  const std::string ok = "tandem_http_requests_total{route=\"/v1/completions\",status=\"200\"}";
  CHECK(metric(after, ok) == metric(before, ok) + 1);
  CHECK(metric(after, "tandem_generation_tokens_total") ==
        metric(before, "tandem_generation_tokens_total") + 6);
  CHECK(metric(after, "tandem_prompt_tokens_total") ==
        metric(before, "tandem_prompt_tokens_total") + r["usage"]["prompt_tokens"].get<double>());
  // The engine publishes a step's counters after streaming its tokens: the last step may not be
  // counted yet.
  CHECK(metric(after, "tandem_engine_steps_total") >=
        metric(before, "tandem_engine_steps_total") + 5);
  CHECK(metric(after, "tandem_time_to_first_token_seconds_count") ==
        metric(before, "tandem_time_to_first_token_seconds_count") + 1);
  CHECK(metric(after, "tandem_e2e_request_latency_seconds_count") ==
        metric(before, "tandem_e2e_request_latency_seconds_count") + 1);
  CHECK(metric(after, "tandem_step_forward_seconds_total") >
        metric(before, "tandem_step_forward_seconds_total"));
}

TEST_CASE("e2e: /tokenize, /detokenize, /v1/models/{id}, X-Request-Id and CORS", "[e2e]") {
  auto ok_json = [](const std::string& path, const json& body) {
    const Reply r = post(path, body);
    INFO(r.body);
    REQUIRE(r.status == 200);
    return r.j;
  };
  const json t = ok_json("/tokenize", {{"prompt", "def f(x):"}, {"return_token_strs", true}});
  CHECK(t["count"].get<size_t>() == t["tokens"].size());
  CHECK(t["token_strs"].size() == t["tokens"].size());
  CHECK(ok_json("/detokenize", {{"tokens", t["tokens"]}})["prompt"].get<std::string>().find(
            "def f(x):") != std::string::npos);
  CHECK(ok_json("/tokenize", {{"messages", kChatMessages}})["count"].get<int>() > 0);
  CHECK(error_of(post("/tokenize", {{"prompt", "a"}, {"model", "other"}}), 404)["code"] ==
        "model_not_found");
  int status = 0;
  CHECK(json::parse(get("/v1/models/tiny", &status))["id"] == "tiny");
  CHECK(status == 200);
  CHECK(json::parse(get("/v1/models/nope", &status))["error"]["code"] == "model_not_found");
  CHECK(status == 404);

  // X-Request-Id: echoed when sane, made up otherwise, on errors too.
  auto c = client(main_server().port());
  auto r = c->Post("/v1/completions", {{"X-Request-Id", "abc-123"}},
                   json{{"prompt", "Hi"}, {"max_tokens", 2}}.dump(), "application/json");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->get_header_value("X-Request-Id") == "abc-123");
  r = c->Post("/v1/completions", {{"X-Request-Id", "bad id"}}, "{}", "application/json");
  REQUIRE(r);
  CHECK(r->status == 400);
  CHECK(r->get_header_value("X-Request-Id").rfind("req-", 0) == 0);

  // CORS: a preflight needs no key; responses allow the origin (default --allowed-origins *).
  auto anon = client(main_server().port(), "");
  r = anon->Options("/v1/chat/completions", {{"Origin", "http://localhost:3000"},
                                             {"Access-Control-Request-Method", "POST"},
                                             {"Access-Control-Request-Headers", "authorization"}});
  REQUIRE(r);
  CHECK(r->status == 204);
  CHECK(r->get_header_value("Access-Control-Allow-Origin") == "*");
  CHECK(r->get_header_value("Access-Control-Allow-Headers") == "authorization");
  CHECK(r->get_header_value("Access-Control-Allow-Methods").find("POST") != std::string::npos);
  r = c->Get("/v1/models", {{"Origin", "http://localhost:3000"}});
  REQUIRE(r);
  CHECK(r->get_header_value("Access-Control-Allow-Origin") == "*");
  CHECK(r->get_header_value("Access-Control-Expose-Headers") == "X-Request-Id");
  r = c->Get("/v1/models");  // no Origin, no CORS headers
  REQUIRE(r);
  CHECK_FALSE(r->has_header("Access-Control-Allow-Origin"));
}

TEST_CASE("e2e: a long prefill sends keep-alives and, when asked, progress", "[e2e]") {
  // 250 prefill steps of 4 tokens: far longer than the 10 ms keep-alive period (the response
  // polls its stream every 20 ms).
  ServerProcess server(
      {"--api-key", kKey, "--prefill-chunk", "4", "--sse-keepalive-seconds", "0.01"});
  auto c = client(server.port());
  std::vector<int32_t> prompt(1000, 7);
  const json body = {{"prompt", prompt}, {"max_tokens", 2}, {"stream", true}};
  auto first_data = [](const std::string& text) {  // offset of the first token's frame
    size_t pos = 0;
    while ((pos = text.find("data: {", pos)) != std::string::npos) {
      const json f = json::parse(text.substr(pos + 6, text.find("\n\n", pos) - pos - 6));
      if (!f["choices"].empty()) return pos;
      pos += 6;
    }
    return std::string::npos;
  };

  Reply r = post(*c, "/v1/completions", body.dump());
  REQUIRE(r.status == 200);
  const size_t keepalive = r.body.find(": keep-alive\n\n");
  CHECK(keepalive != std::string::npos);
  CHECK(keepalive < first_data(r.body));
  CHECK(r.body.find("prompt_progress") == std::string::npos);
  Streamed s = parse_sse(r.body, false);
  CHECK(s.finish[0] == "length");
  CHECK(s.frames.back() == "[DONE]");

  // Another prompt (the first is cached now), with progress; then that one again, whose
  // progress starts after what the prefix cache held.
  json with = body;
  with["prompt"] = std::vector<int32_t>(1000, 8);
  with["return_progress"] = true;
  for (const bool cached : {false, true}) {
    r = post(*c, "/v1/completions", with.dump());
    REQUIRE(r.status == 200);
    s = parse_sse(r.body, false);
    std::vector<int64_t> processed;
    int64_t time_ms = 0, cache = -1;
    for (const json& f : s.frames) {
      if (!f.is_object() || !f.contains("prompt_progress")) continue;
      const json& p = f["prompt_progress"];
      CHECK(f["choices"].empty());
      CHECK(p["index"] == 0);
      CHECK(p["total"] == 1000);
      if (cache < 0) cache = p["cache"];
      CHECK(p["cache"] == cache);
      CHECK(p["time_ms"].get<int64_t>() >= time_ms);
      time_ms = p["time_ms"];
      processed.push_back(p["processed"]);
    }
    // Blocks of 64 after 4 sinks: all but the last 36 tokens were cached.
    CHECK(cache == (cached ? 4 + 15 * 64 : 0));
    const int64_t start = cache, steps = (1000 - start + 3) / 4;
    REQUIRE(static_cast<int64_t>(processed.size()) == steps);
    for (size_t i = 0; i < processed.size(); ++i)
      CHECK(processed[i] == std::min<int64_t>(start + 4 * static_cast<int64_t>(i + 1), 1000));
    CHECK(r.body.rfind("prompt_progress") < first_data(r.body));
    CHECK(s.finish[0] == "length");
  }
  CHECK(metric(c->Get("/metrics")->body, "tandem_sse_keepalives_total") >= 1);
}

TEST_CASE("e2e: a repeated prompt reports cached_tokens and skips its prefill", "[e2e]") {
  // A prompt of its own (other tests share the server and its cache) sent twice: the second
  // finds all but its last block cached.
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 900; ++i) prompt.push_back(100 + (i * 7919) % 3000);
  const json body = {{"prompt", prompt}, {"max_tokens", 3}, {"temperature", 0}};
  const double hits0 = metric_now("tandem_prefix_cache_hits_total");
  const json a = ok_post("/v1/completions", body);
  CHECK(a["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);
  const json b = ok_post("/v1/completions", body);
  const int64_t cached = b["usage"]["prompt_tokens_details"]["cached_tokens"];
  CHECK(cached >= 900 - 64 - 4);
  CHECK(cached < 900);
  CHECK(b["choices"][0]["text"] == a["choices"][0]["text"]);
  CHECK(metric_now("tandem_prefix_cache_hits_total") - hits0 >= static_cast<double>(cached));
  // Streamed usage carries it too.
  json st = body;
  st["stream_options"] = {{"include_usage", true}};
  const Streamed s = stream("/v1/completions", st);
  CHECK(s.usage["prompt_tokens_details"]["cached_tokens"] == cached);
  CHECK(s.text.at(0) == a["choices"][0]["text"]);
  const std::string m = get("/metrics");
  CHECK(metric(m, "tandem_prefix_cache_blocks") > 0);
  CHECK(metric(m, "tandem_kv_host_bytes_budget") > 0);
  CHECK(metric(m, "tandem_kv_host_bytes_used") <= metric(m, "tandem_kv_host_bytes_budget"));
}

// Runs a script of tests/sdk against the shared server: it must exit 0 and print `marker`.
static void run_sdk_script(const char* script, const char* marker) {
  const fs::path sdk = tandem::test::repo_path("tests/sdk");
  REQUIRE(std::system("node --version > /dev/null 2>&1") == 0);
  INFO("install the SDK first: npm ci --prefix tests/sdk --no-audit --no-fund");
  REQUIRE(fs::exists(sdk / "node_modules" / "openai" / "package.json"));
  const std::string cmd =
      "TANDEM_BASE_URL=http://127.0.0.1:" + std::to_string(main_server().port()) +
      "/v1 TANDEM_API_KEY=" + kKey + " TANDEM_MODEL=tiny node " + (sdk / script).string() + " 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  const int rc = pclose(p);
  INFO(out);
  CHECK(rc == 0);
  CHECK(out.find(marker) != std::string::npos);
}

TEST_CASE("e2e: the OpenAI Node SDK", "[e2e][sdk]") {
  run_sdk_script("openai_sdk_test.mjs", "all SDK checks passed");
}

TEST_CASE("e2e: agents through the OpenAI Node SDK: structured outputs, forced tool calls",
          "[e2e][sdk]") {
  run_sdk_script("agent_sdk_test.mjs", "all agent SDK checks passed");
}
