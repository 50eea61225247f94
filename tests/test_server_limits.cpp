// The HTTP limits of `tandem serve` end to end, on the bundled demo model (no ../shared needed):
// oversized headers (431) and bodies (413, with and without Content-Length), a slow client
// trickling headers or body cut off at the request deadline (408) without holding its worker,
// connections beyond the workers refused with 503, every wrong API key refused (401), and the
// /health and /metrics policy under --api-key. Deadlines are short so that each case takes
// about a second.
#include <sys/socket.h>
#include <sys/time.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/server_e2e.h"

namespace {

using namespace tandem::test::e2e;
using Clock = std::chrono::steady_clock;

constexpr double kDeadline = 1.0;  // --request-timeout of the limited server, seconds

tandem::test::ServerProcess& limited_server() {
  static tandem::test::ServerProcess s(
      tandem::test::repo_path("models/tandem-demo"),
      {"--api-key", kKey, "--max-header-bytes", "2048", "--max-body-bytes", "1000",
       "--request-timeout", std::to_string(kDeadline), "--max-batch", "4"});
  return s;
}

// A connection to `port` whose reads give up after 10 s.
int open_socket(int port) {
  const int fd = connect_to(port);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// Everything the server sends until it closes the connection (or 10 s pass).
std::string read_all(int fd) {
  std::string got;
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

// The status of a raw HTTP response ("HTTP/1.1 431 ..."), 0 when there is none.
int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0) return 0;
  return std::atoi(response.c_str() + 9);
}

// Sends `request` on a fresh connection and returns the whole answer.
std::string round_trip(int port, const std::string& request) {
  const int fd = open_socket(port);
  send_all(fd, request);
  const std::string got = read_all(fd);
  close(fd);
  return got;
}

std::string headers_of_size(size_t n) {
  std::string h;
  for (int i = 0; h.size() < n; ++i)
    h += "X-Pad-" + std::to_string(i) + ": " + std::string(90, 'a') + "\r\n";
  return h;
}

int get_status(int port, const std::string& path, const std::string& key) {
  auto c = client(port, key);
  auto r = c->Get(path.c_str());
  REQUIRE(r);
  return r->status;
}

}  // namespace

TEST_CASE("request line and headers over --max-header-bytes get 431", "[server][limits]") {
  const int port = limited_server().port();
  const std::string auth = std::string("Authorization: Bearer ") + kKey + "\r\n";
  // Under the limit: served.
  std::string r = round_trip(port, "GET /v1/models HTTP/1.1\r\nHost: x\r\n" + auth +
                                       headers_of_size(1000) + "Connection: close\r\n\r\n");
  CHECK(status_of(r) == 200);
  // Many short lines over it (each far below httplib's own 8 KB line limit).
  r = round_trip(port,
                 "GET /v1/models HTTP/1.1\r\nHost: x\r\n" + auth + headers_of_size(4000) + "\r\n");
  INFO(r);
  CHECK(status_of(r) == 431);
  CHECK(r.find("headers_too_large") != std::string::npos);
  // A flood that never ends the headers is cut at the limit, not read to the end.
  r = round_trip(port, "GET /health HTTP/1.1\r\n" + headers_of_size(200000));
  CHECK(status_of(r) == 431);
}

TEST_CASE("bodies over --max-body-bytes get 413, whatever their framing", "[server][limits]") {
  const int port = limited_server().port();
  const std::string body = "{\"prompt\":\"" + std::string(3000, 'a') + "\"}";
  // Content-Length over the limit.
  std::string head = http_post_text("/v1/completions", "", body.size());
  head.insert(head.size() - 2, "Connection: close\r\n");  // else it stays open for more
  std::string r = round_trip(port, head + body);
  INFO(r);
  CHECK(status_of(r) == 413);
  CHECK(r.find("request_too_large") != std::string::npos);
  // Chunked: httplib 0.11 applies no limit there; the connection layer does.
  std::string chunked = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                        std::string(kKey) +
                        "\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 100; ++i) chunked += "3e8\r\n" + std::string(1000, 'a') + "\r\n";
  chunked += "0\r\n\r\n";
  r = round_trip(port, chunked);
  CHECK(status_of(r) == 413);
}

TEST_CASE("a client trickling its request is cut off at --request-timeout", "[server][limits]") {
  const int port = limited_server().port();
  for (const bool in_body : {false, true}) {
    DYNAMIC_SECTION((in_body ? "body" : "headers") << " trickled a byte every 200 ms") {
      const int fd = open_socket(port);
      const auto t0 = Clock::now();
      if (in_body) {
        send_all(fd, http_post_text("/v1/completions", "", 200));
      } else {
        send_all(fd, "POST /v1/completions HTTP/1.1\r\n");
      }
      // Keeps trickling until the server gives up (a send fails or the answer is there).
      std::string got;
      char buf[4096];
      while (std::chrono::duration<double>(Clock::now() - t0).count() < 8) {
        if (send(fd, in_body ? "a" : "X", 1, MSG_NOSIGNAL) != 1) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        const ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) got.append(buf, static_cast<size_t>(n));
        if (n == 0 || !got.empty()) break;
      }
      const double held = std::chrono::duration<double>(Clock::now() - t0).count();
      got += read_all(fd);
      close(fd);
      INFO(got);
      CHECK(held < kDeadline + 1.0);
      CHECK(status_of(got) == 408);
      CHECK(got.find("request_timeout") != std::string::npos);
    }
  }
  // The worker is free again.
  CHECK(get_status(port, "/health", "") == 200);
}

TEST_CASE("connections beyond --http-threads are refused with 503", "[server][limits]") {
  tandem::test::ServerProcess s(tandem::test::repo_path("models/tandem-demo"),
                                {"--http-threads", "4", "--keep-alive-timeout", "30"});
  // Four idle connections take the four workers (each waits for its first request).
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(open_socket(s.port()));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const std::string r = round_trip(s.port(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  INFO(r);
  CHECK(status_of(r) == 503);
  CHECK(r.find("connection limit") != std::string::npos);
  close(open_socket(s.port()));  // refused too: the counter below says 2
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // One hangs up: its worker serves the next connection.
  close(idle.back());
  idle.pop_back();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const std::string metrics =
      round_trip(s.port(), "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  CHECK(metric(metrics.substr(metrics.find("\r\n\r\n")), "tandem_http_refused_connections_total") ==
        2);
  // The /metrics worker returns to the pool just after its reply goes out: on a loaded machine
  // the next connection can come first and be refused, so it is retried for a while.
  int status = 0;
  for (int i = 0; i < 50 && status != 200; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    status = status_of(
        round_trip(s.port(), "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  }
  CHECK(status == 200);
  for (const int fd : idle) close(fd);
}

TEST_CASE("every wrong API key gets 401, whatever its length", "[server][limits][auth]") {
  const int port = limited_server().port();
  const std::string key = kKey;
  // (Trailing blanks are not among them: HTTP strips them from header values.)
  std::vector<std::string> wrong = {"", " ", " " + key, key + "x", "sk-tandem-tesT"};
  for (size_t n = 1; n <= 2 * key.size() + 2; ++n) {
    std::string w(n, 'x');
    for (size_t i = 0; i < n; ++i) w[i] = key[i % key.size()];  // the key's bytes, repeated
    if (w != key) wrong.push_back(w);
  }
  for (const std::string& w : wrong) {
    INFO("key '" << w << "'");
    CHECK(get_status(port, "/v1/models", w) == 401);
  }
  CHECK(get_status(port, "/v1/models", key) == 200);
  // Not a bearer token at all.
  const std::string r =
      round_trip(port, "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: " + key +
                           "\r\nConnection: close\r\n\r\n");
  CHECK(status_of(r) == 401);
}

TEST_CASE("under --api-key /health is open and /metrics needs the key unless --metrics-public",
          "[server][limits][auth]") {
  const int port = limited_server().port();
  CHECK(get_status(port, "/health", "") == 200);
  CHECK(get_status(port, "/metrics", "") == 401);
  CHECK(get_status(port, "/metrics", kKey) == 200);

  tandem::test::ServerProcess open(tandem::test::repo_path("models/tandem-demo"),
                                   {"--api-key", kKey, "--metrics-public"});
  CHECK(get_status(open.port(), "/health", "") == 200);
  CHECK(get_status(open.port(), "/metrics", "") == 200);
  CHECK(get_status(open.port(), "/v1/models", "") == 401);
  CHECK(get_status(open.port(), "/v1/models", kKey) == 200);
}
