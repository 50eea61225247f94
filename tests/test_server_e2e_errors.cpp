// End-to-end tests of `tandem serve` over real HTTP on 127.0.0.1 (tests/server_e2e.h): the real
// binary on a real model. Requests it refuses, with OpenAI-shaped errors: bad input (400, naming
// the parameter), a missing or wrong API key (401), unknown routes (404), oversize bodies (413),
// a full queue (429); and SIGTERM finishing the streams that run before it exits 0.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <latch>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/server_e2e.h"

using namespace tandem::test::e2e;
using namespace std::chrono_literals;

TEST_CASE("e2e: bad input gets 400 with the param", "[e2e][errors]") {
  auto c = client(main_server().port());
  json e = error_of(post(*c, "/v1/chat/completions", "{\"messages\": [}"), 400);
  CHECK(e["type"] == "invalid_request_error");
  e = error_of(post(*c, "/v1/completions", "{\"prompt\": \"\xff\xfe\"}"), 400);
  CHECK(e["message"].get<std::string>().find("UTF-8") != std::string::npos);
  CHECK(error_of(post("/v1/chat/completions", {{"messages", json::array()}}), 400)["param"] ==
        "messages");
  CHECK(error_of(post("/v1/chat/completions", json::object()), 400)["param"] == "messages");
  CHECK(error_of(post("/v1/completions", json::object()), 400)["param"] == "prompt");
  // Longer than the context (1024 tokens for tandem-demo).
  e = error_of(post("/v1/completions", {{"prompt", std::vector<int>(1100, 100)}}), 400);
  CHECK(e["param"] == "prompt");
  CHECK(e["code"] == "context_length_exceeded");
  std::string long_text;
  for (int i = 0; i < 300; ++i) long_text += "The dog ran to the park. ";
  e = error_of(
      post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", long_text}}}}}),
      400);
  CHECK(e["code"] == "context_length_exceeded");
  CHECK(error_of(post("/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 100000}}),
                 400)["param"] == "max_tokens");
  // Wrong types and out-of-range values.
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"temperature", "hot"}}, "temperature"},
      {{{"temperature", 3}}, "temperature"},
      {{{"top_p", 0}}, "top_p"},
      {{{"top_k", "x"}}, "top_k"},
      {{{"min_p", -1}}, "min_p"},
      {{{"presence_penalty", 5}}, "presence_penalty"},
      {{{"frequency_penalty", "a"}}, "frequency_penalty"},
      {{{"repetition_penalty", -1}}, "repetition_penalty"},
      {{{"n", "2"}}, "n"},
      {{{"n", 0}}, "n"},
      {{{"max_tokens", 0}}, "max_tokens"},
      {{{"max_tokens", 1.5}}, "max_tokens"},
      {{{"seed", "s"}}, "seed"},
      {{{"stop", 5}}, "stop"},
      {{{"stop", {1, 2}}}, "stop"},
      {{{"logprobs", "yes"}}, "logprobs"},
      {{{"logprobs", true}, {"top_logprobs", 99}}, "top_logprobs"},
      {{{"stream", 1}}, "stream"},
      {{{"stream_options", {{"include_usage", true}}}}, "stream_options"},
      {{{"user", 1}}, "user"},
      {{{"messages", "hi"}}, "messages"},
      {{{"messages", {{{"role", "robot"}, {"content", "x"}}}}}, "messages[0].role"},
      {{{"messages", {{{"role", "user"}, {"content", 5}}}}}, "messages[0].content"},
  };
  for (const auto& [field, param] : cases) {
    json b = {{"messages", kChatMessages}};
    b.update(field);
    INFO(b.dump());
    CHECK(error_of(post("/v1/chat/completions", b), 400)["param"] == param);
  }
  CHECK(error_of(post("/v1/completions", {{"prompt", "x"}, {"echo", "no"}}), 400)["param"] ==
        "echo");
  CHECK(error_of(post("/v1/completions", {{"prompt", {1, 99999}}}), 400)["param"] == "prompt");
  e = error_of(post("/v1/completions", {{"prompt", "x"}, {"model", "gpt-4"}}), 404);
  CHECK(e["code"] == "model_not_found");
  // The server still serves.
  CHECK(!completion({{"prompt", "Hi"}, {"max_tokens", 2}}).empty());
}

TEST_CASE("e2e: API key, unknown routes and oversize bodies", "[e2e][errors]") {
  const int port = main_server().port();
  for (const std::string key : {"", "wrong-key"}) {
    auto c = client(port, key);
    const json body = {{"prompt", "x"}, {"max_tokens", 1}};
    json e = error_of(post(*c, "/v1/completions", body.dump()), 401);
    CHECK(e["code"] == "invalid_api_key");
    error_of(post(*c, "/v1/chat/completions", body.dump()), 401);
    auto r = c->Get("/v1/models");
    REQUIRE(r);
    CHECK(r->status == 401);
    r = c->Get("/metrics");
    REQUIRE(r);
    CHECK(r->status == 401);
    r = c->Get("/health");  // stays open
    REQUIRE(r);
    CHECK(r->status == 200);
  }
  auto c = client(port);
  json e = error_of(post(*c, "/v1/embeddings", "{}"), 404);
  CHECK(e["code"] == "unknown_url");
  auto r = c->Delete("/v1/models");
  REQUIRE(r);
  CHECK(r->status == 404);
  CHECK(json::parse(r->body)["error"]["code"] == "unknown_url");

  // 413: the server was started with --max-body-bytes 200000; it answers from the headers.
  const int fd = connect_to(port);
  send_all(fd, http_post_text("/v1/completions", "", 300000));
  const std::string resp = read_until(fd, "}}");
  close(fd);
  INFO(resp);
  CHECK(resp.rfind("HTTP/1.1 413", 0) == 0);
  const size_t body_at = resp.find("\r\n\r\n");
  REQUIRE(body_at != std::string::npos);
  CHECK(json::parse(resp.substr(body_at + 4))["error"]["code"] == "request_too_large");
  // `curl -d` labels bodies form-urlencoded, which httplib would cap at 8 KB: still parsed.
  std::string prompt;
  for (int i = 0; i < 800; ++i) prompt += "The dog ran. ";
  auto form = c->Post("/v1/completions", json{{"prompt", prompt}}.dump(),
                      "application/x-www-form-urlencoded");
  REQUIRE(form);
  CHECK(error_of(Reply{form->status, form->body, json::parse(form->body, nullptr, false)},
                 400)["code"] == "context_length_exceeded");
  // A body just under the limit is read and parsed (and is bad JSON here).
  error_of(post(*c, "/v1/completions", std::string(150000, ' ') + "{"), 400);
}

TEST_CASE("e2e: a full queue answers 429; SIGTERM finishes streams and exits 0", "[e2e][errors]") {
  ServerProcess small({"--max-batch", "1", "--max-waiting", "1", "--shutdown-grace", "120",
                       "--allowed-origins", "https://a.example, https://b.example"});
  {  // CORS with a list of origins: a listed one is echoed (with Vary), another gets nothing.
    auto c = client(small.port(), "");
    auto r = c->Get("/v1/models", {{"Origin", "https://b.example"}});
    REQUIRE(r);
    CHECK(r->get_header_value("Access-Control-Allow-Origin") == "https://b.example");
    CHECK(r->get_header_value("Vary") == "Origin");
    r = c->Options("/v1/models", {{"Origin", "https://c.example"}});
    REQUIRE(r);
    CHECK(r->status == 204);
    CHECK_FALSE(r->has_header("Access-Control-Allow-Origin"));
  }
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 300}, {"ignore_eos", true}};
  std::vector<std::thread> threads;
  std::vector<Reply> replies(8);
  std::latch start(8);
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      auto c = client(small.port(), "");
      start.arrive_and_wait();
      auto r = c->Post("/v1/completions", body.dump(), "application/json");
      if (r) replies[i] = Reply{r->status, r->body, json::parse(r->body, nullptr, false)};
    });
  for (auto& t : threads) t.join();
  int ok = 0, busy = 0;
  for (const Reply& r : replies) {
    INFO(r.body);
    if (r.status == 200) {
      ++ok;
      CHECK(r.j["usage"]["completion_tokens"] == 300);
    } else {
      ++busy;
      CHECK(error_of(r, 429)["code"] == "rate_limit_exceeded");
    }
  }
  CHECK(ok >= 1);
  CHECK(busy >= 1);

  // A stream running when SIGTERM arrives still ends properly, then the server exits 0. The
  // signal goes only once the first frame has arrived: polling /metrics for a running request
  // could see the gauge of the requests above and signal before this one had connected.
  const int fd = connect_to(small.port());
  const std::string req =
      json{{"prompt", "Once"}, {"max_tokens", 1000}, {"ignore_eos", true}, {"stream", true}}.dump();
  send_all(fd,
           "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
           "Content-Type: application/json\r\nContent-Length: " +
               std::to_string(req.size()) + "\r\n\r\n" + req);
  const std::string before = read_until(fd, "data: ");
  REQUIRE(before.find("data: ") != std::string::npos);
  std::string after;  // read while the server drains: a full socket would hold its exit
  std::thread reader([&] {
    char buf[4096];
    for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) after.append(buf, size_t(n));
  });
  CHECK(small.stop(SIGTERM, 120s) == 0);
  reader.join();
  close(fd);
  INFO(before + after);
  CHECK((before + after).find("data: [DONE]") != std::string::npos);
  CHECK(after.find("\"finish_reason\":\"length\"") != std::string::npos);
}
