// End-to-end tests of `tandem serve` over real HTTP on 127.0.0.1 (tests/server_e2e.h): the real
// binary on a real model. The server at work: 32 concurrent streams independent and batched
// together, clients that hang up freeing their KV, settings from a config file, and SIGTERM
// stopping the shared server with exit code 0 (the last test).
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "tests/server_e2e.h"

using namespace tandem::test::e2e;
using namespace std::chrono_literals;

TEST_CASE("e2e: 32 concurrent streams are independent and batched", "[e2e][concurrency]") {
  // 24 tokens each: the 32 solo runs the streams are compared with are most of this test's time
  // (under the thread sanitizer, most of CI's time for it).
  constexpr int kTokens = 24;
  const char* subjects[] = {"girl", "boy", "dog", "cat", "bird", "fish", "frog", "king"};
  const char* openings[] = {"Once upon a time, there was a little ", "One day, a ",
                            "Lily saw a big ", "Tom had a red "};
  std::vector<json> bodies;
  for (const char* o : openings)
    for (const char* s : subjects)
      bodies.push_back({{"prompt", std::string(o) + s},
                        {"max_tokens", kTokens},
                        {"temperature", 0},
                        {"ignore_eos", true},
                        {"stream_options", {{"include_usage", true}}}});
  REQUIRE(bodies.size() == 32);
  std::vector<std::string> single;
  for (json b : bodies) {
    b.erase("stream_options");
    single.push_back(completion(b));
  }

  const double steps0 = metric_now("tandem_engine_steps_total");
  std::vector<Streamed> got(bodies.size());
  std::latch start(static_cast<std::ptrdiff_t>(bodies.size()));
  std::vector<std::thread> threads;
  std::vector<std::unique_ptr<httplib::Client>> clients;
  for (size_t i = 0; i < bodies.size(); ++i) clients.push_back(client(main_server().port()));
  std::vector<std::string> raw(bodies.size());
  std::vector<int> status(bodies.size(), 0);
  for (size_t i = 0; i < bodies.size(); ++i) {
    threads.emplace_back([&, i] {
      json b = bodies[i];
      b["stream"] = true;
      start.arrive_and_wait();
      auto r = clients[i]->Post("/v1/completions", b.dump(), "application/json");
      if (r) {
        status[i] = r->status;
        raw[i] = r->body;
      }
    });
  }
  for (auto& t : threads) t.join();
  const double steps = metric_now("tandem_engine_steps_total") - steps0;
  double tokens = 0;
  for (size_t i = 0; i < bodies.size(); ++i) {
    INFO("client " << i << ": " << raw[i]);
    REQUIRE(status[i] == 200);
    const Streamed s = parse_sse(raw[i], false);
    CHECK(s.text.at(0) == single[i]);
    CHECK(s.finish.at(0) == "length");
    REQUIRE(s.usage.is_object());
    tokens += s.usage["completion_tokens"].get<double>();
  }
  INFO("steps " << steps << " for " << tokens << " tokens");
  CHECK(tokens == 32 * kTokens);
  CHECK(steps * 4 < tokens);  // one batch: about 24 decode steps (+ prefills), not 768
}

TEST_CASE("e2e: clients that hang up free their KV", "[e2e][disconnect]") {
  const int port = main_server().port();
  const double cancelled0 =
      metric_now("tandem_engine_sequences_finished_total{reason=\"cancelled\"}");
  const double gen0 = metric_now("tandem_engine_generation_tokens_total");
  const double gone0 = metric_now("tandem_http_disconnects_total");
  const json body = {{"prompt", "Once upon a time"},
                     {"max_tokens", 480},
                     {"ignore_eos", true},
                     {"temperature", 0.8}};
  // 14 streaming clients hang up after their first token, 6 non-streaming ones while their
  // sequences run. All requests go out first, so that they run together for a short while.
  std::vector<int> fds;
  for (int i = 0; i < 20; ++i) {
    json b = body;
    b["stream"] = i < 14;
    fds.push_back(connect_to(port));
    send_all(fds.back(), http_post_text("/v1/completions", b.dump(), b.dump().size()));
  }
  for (int i = 0; i < 14; ++i) {
    const std::string got = read_until(fds[static_cast<size_t>(i)], "data: ");

    REQUIRE(got.find("HTTP/1.1 200") == 0);
  }
  const auto t_wait = std::chrono::steady_clock::now() + 10s;
  while (metric_now("tandem_num_requests_running") < 20 &&
         std::chrono::steady_clock::now() < t_wait)
    std::this_thread::sleep_for(2ms);
  CHECK(metric_now("tandem_kv_device_blocks_used") + metric_now("tandem_kv_host_blocks_used") > 0);
  for (size_t i = 0; i < fds.size(); ++i) {
    if (i % 2) {  // half of them reset the connection instead of closing it
      linger lg{1, 0};
      setsockopt(fds[i], SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    close(fds[i]);
  }
  // Within a few steps everything is retired and every block is free.
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  std::string m;
  while (std::chrono::steady_clock::now() < deadline) {
    m = get("/metrics");
    if (metric(m, "tandem_num_requests_running") == 0 &&
        metric(m, "tandem_num_requests_waiting") == 0 &&
        metric(m, "tandem_kv_device_blocks_used") == 0 &&
        metric(m, "tandem_kv_host_blocks_used") == 0)
      break;
    std::this_thread::sleep_for(5ms);
  }
  INFO(m);
  CHECK(metric(m, "tandem_num_requests_running") == 0);
  CHECK(metric(m, "tandem_kv_device_blocks_used") == 0);
  CHECK(metric(m, "tandem_kv_host_blocks_used") == 0);
  CHECK(metric(m, "tandem_engine_sequences_finished_total{reason=\"cancelled\"}") - cancelled0 ==
        20);
  CHECK(metric(m, "tandem_http_disconnects_total") - gone0 == 20);
  // They were cut short: far fewer tokens than 20 x 480.
  CHECK(metric(m, "tandem_engine_generation_tokens_total") - gen0 < 20 * 480 / 2);
  // And the server still serves.
  CHECK(!completion({{"prompt", "Once"}, {"max_tokens", 4}}).empty());
}

TEST_CASE("e2e: settings from a config file, flags win", "[e2e]") {
  // configs/tinystories.json: served-model-name "tinystories", a 128-token device window (long
  // sequences reach the host tier); the command line overrides the name.
  ServerProcess s({"--config", "tinystories", "--served-model-name", "from-flag"});
  auto c = client(s.port(), "");
  auto r = c->Get("/v1/models");
  REQUIRE(r);
  CHECK(json::parse(r->body)["data"][0]["id"] == "from-flag");
  CHECK(s.log().find("window=128") != std::string::npos);
  const Reply done = post(*c, "/v1/completions",
                          json{{"prompt", "Once upon a time"},
                               {"max_tokens", 300},
                               {"ignore_eos", true},
                               {"temperature", 0}}
                              .dump());
  INFO(done.body);
  REQUIRE(done.status == 200);
  CHECK(done.j["usage"]["completion_tokens"] == 300);
  CHECK(s.stop(SIGINT) == 0);
}

TEST_CASE("e2e: SIGTERM stops the main server with exit code 0", "[e2e]") {
  ServerProcess& s = main_server();
  const int port = s.port();
  CHECK(s.stop(SIGTERM) == 0);
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(1, 0);
  CHECK(!c.Get("/health"));  // no longer accepting
  main_server_slot().reset();
}
