// Helpers of the end-to-end tests of `tandem serve` (tests/test_server_e2e_*.cpp): the server
// under test on the bundled demo model (TANDEM_E2E_MODEL picks another), the shared server most
// tests talk to, HTTP requests and their replies, server-sent events parsed into frames and texts,
// /metrics samples, the OpenAI error shape, and raw sockets for requests a client library would not
// send and for hanging up mid-response.
#pragma once

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "tests/server_process.h"
#include "tests/test_helpers.h"

namespace tandem::test::e2e {

using json = nlohmann::json;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

inline constexpr const char* kKey = "sk-tandem-test";

inline fs::path model_dir() {
  // The bundled demo model: the repository ships it, so the tests run on a clone alone.
  // TANDEM_E2E_MODEL picks another model folder for a manual run.
  const char* env = std::getenv("TANDEM_E2E_MODEL");
  return tandem::test::repo_path(env != nullptr && *env != 0 ? env : "models/tandem-demo");
}

inline const tandem::Tokenizer& tokenizer() {
  static const tandem::Tokenizer t = tandem::Tokenizer::load(model_dir());
  return t;
}

// The server under test on model_dir(), with the flags given.
struct ServerProcess : tandem::test::ServerProcess {
  explicit ServerProcess(const std::vector<std::string>& extra)
      : tandem::test::ServerProcess(model_dir(), extra) {}
};

inline std::unique_ptr<ServerProcess>& main_server_slot() {
  static std::unique_ptr<ServerProcess> s;
  return s;
}

// The shared server: API key on, small body limit, room for the concurrency tests.
inline ServerProcess& main_server() {
  auto& s = main_server_slot();
  if (!s)
    s = std::make_unique<ServerProcess>(
        std::vector<std::string>{"--api-key", kKey, "--served-model-name", "tiny", "--max-batch",
                                 "64", "--max-waiting", "128", "--max-body-bytes", "200000"});
  return *s;
}

inline std::unique_ptr<httplib::Client> client(int port, const std::string& key = kKey) {
  auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
  c->set_read_timeout(60, 0);
  c->set_write_timeout(10, 0);
  if (!key.empty()) c->set_default_headers({{"Authorization", "Bearer " + key}});
  return c;
}

struct Reply {
  int status = 0;
  std::string body;
  json j;  // parsed when the body is JSON
};

inline Reply post(httplib::Client& c, const std::string& path, const std::string& body) {
  auto r = c.Post(path.c_str(), body, "application/json");
  REQUIRE(r);
  Reply out{r->status, r->body, json()};
  if (!r->body.empty() && r->body[0] == '{') out.j = json::parse(r->body, nullptr, false);
  return out;
}

inline Reply post(const std::string& path, const json& body) {
  auto c = client(main_server().port());
  return post(*c, path, body.dump());
}

inline json ok_post(const std::string& path, const json& body) {
  Reply r = post(path, body);
  INFO(r.body);
  REQUIRE(r.status == 200);
  REQUIRE(r.j.is_object());
  REQUIRE(r.j.contains("choices"));
  return r.j;
}

inline std::string completion(const json& body) {
  return ok_post("/v1/completions", body)["choices"][0]["text"].get<std::string>();
}

// A streamed response: its frames, and per choice the text and finish reason.
struct Streamed {
  std::vector<json> frames;  // [DONE] as the string "[DONE]"
  std::map<int, std::string> text, finish;
  json usage;
};

inline Streamed parse_sse(const std::string& text, bool chat) {
  Streamed s;
  size_t pos = 0;
  while ((pos = text.find("data: ", pos)) != std::string::npos) {
    const size_t end = text.find("\n\n", pos);
    REQUIRE(end != std::string::npos);
    const std::string payload = text.substr(pos + 6, end - pos - 6);
    pos = end + 2;
    if (payload == "[DONE]") {
      s.frames.push_back("[DONE]");
      continue;
    }
    json f = json::parse(payload);
    if (f.contains("usage") && f["usage"].is_object()) s.usage = f["usage"];
    for (const json& c : f.value("choices", json::array())) {
      const int i = c["index"];
      if (chat && c["delta"].contains("content"))
        s.text[i] += c["delta"]["content"].get<std::string>();
      if (!chat) s.text[i] += c["text"].get<std::string>();
      if (!c["finish_reason"].is_null()) s.finish[i] = c["finish_reason"];
    }
    s.frames.push_back(std::move(f));
  }
  return s;
}

inline Streamed stream(const std::string& path, json body, httplib::Client* c = nullptr) {
  body["stream"] = true;
  std::unique_ptr<httplib::Client> own;
  if (!c) {
    own = client(main_server().port());
    c = own.get();
  }
  Reply r = post(*c, path, body.dump());
  INFO(r.body);
  REQUIRE(r.status == 200);
  return parse_sse(r.body, path == "/v1/chat/completions");
}

inline std::string get(const std::string& path, int* status = nullptr,
                       const std::string& key = kKey) {
  auto c = client(main_server().port(), key);
  auto r = c->Get(path.c_str());
  REQUIRE(r);
  if (status) *status = r->status;
  return r->body;
}

// One sample of a metric (the first line starting with `name` + ' ' or `name{labels} `).
inline double metric(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  }
  FAIL("no metric " << name);
  return 0;
}

inline double metric_now(const std::string& name) { return metric(get("/metrics"), name); }

// Checks the OpenAI error shape and returns the error object.
inline json error_of(const Reply& r, int status) {
  INFO(r.body);
  CHECK(r.status == status);
  REQUIRE(r.j.is_object());
  REQUIRE(r.j.contains("error"));
  const json& e = r.j["error"];
  CHECK(e["message"].is_string());
  CHECK(e["type"].is_string());
  CHECK(e.contains("param"));
  CHECK(e.contains("code"));
  return e;
}

// Raw sockets, for requests a client library would not send and for hanging up mid-response.
inline int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

inline void send_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    REQUIRE(n > 0);
    off += static_cast<size_t>(n);
  }
}

inline std::string http_post_text(const std::string& path, const std::string& body, size_t length) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + kKey +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(length) +
         "\r\n\r\n" + body;
}

// Reads until `needle` arrived (or EOF / 10 s); returns what was read.
inline std::string read_until(int fd, const std::string& needle) {
  std::string got;
  char buf[4096];
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (got.find(needle) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

inline const json kChatMessages =
    json::array({{{"role", "user"}, {"content", "Tell me a story."}}});

}  // namespace tandem::test::e2e
