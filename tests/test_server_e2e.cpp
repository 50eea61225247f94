// End-to-end tests of `tandem serve` over real HTTP on 127.0.0.1: the real binary
// (TANDEM_TANDEM_BIN) on a real model (tinystories-656k, else the bundled demo model), started on
// a free port. Routes, parameters and their effects, stream/non-stream agreement, stop strings,
// seeds, logprobs, usage, metrics, 32 concurrent streams batched together, bad input, 429, 401,
// 413, client disconnects freeing KV, the OpenAI Node SDK, and SIGTERM shutdown.
#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <latch>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "engine/tokenizer/tokenizer.h"
#include "test_helpers.h"
#include "tests/server_process.h"

using json = nlohmann::json;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

const char* kKey = "sk-tandem-test";

fs::path model_dir() {
  // TANDEM_E2E_MODEL picks another model folder (e.g. models/tandem-demo) for a manual run.
  if (const char* env = std::getenv("TANDEM_E2E_MODEL"); env != nullptr && *env != 0)
    return tandem::test::repo_path(env);
  for (const char* rel : {"../shared/models/tinystories-656k", "models/tandem-demo"}) {
    const fs::path p = tandem::test::repo_path(rel);
    if (fs::exists(p / "config.json") && fs::exists(p / "tokenizer.json")) return p;
  }
  std::fprintf(stderr, "test_server_e2e: no model (../shared/models/tinystories-656k); skipped\n");
  std::exit(4);  // ctest SKIP_RETURN_CODE
}

const tandem::Tokenizer& tokenizer() {
  static const tandem::Tokenizer t = tandem::Tokenizer::load(model_dir());
  return t;
}

// The server under test on model_dir(), with the flags given.
struct ServerProcess : tandem::test::ServerProcess {
  explicit ServerProcess(const std::vector<std::string>& extra)
      : tandem::test::ServerProcess(model_dir(), extra) {}
};

std::unique_ptr<ServerProcess>& main_server_slot() {
  static std::unique_ptr<ServerProcess> s;
  return s;
}

// The shared server: API key on, small body limit, room for the concurrency tests.
ServerProcess& main_server() {
  auto& s = main_server_slot();
  if (!s)
    s = std::make_unique<ServerProcess>(
        std::vector<std::string>{"--api-key", kKey, "--served-model-name", "tiny", "--max-batch",
                                 "64", "--max-waiting", "128", "--max-body-bytes", "200000"});
  return *s;
}

std::unique_ptr<httplib::Client> client(int port, const std::string& key = kKey) {
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

Reply post(httplib::Client& c, const std::string& path, const std::string& body) {
  auto r = c.Post(path.c_str(), body, "application/json");
  REQUIRE(r);
  Reply out{r->status, r->body, json()};
  if (!r->body.empty() && r->body[0] == '{') out.j = json::parse(r->body, nullptr, false);
  return out;
}

Reply post(const std::string& path, const json& body) {
  auto c = client(main_server().port());
  return post(*c, path, body.dump());
}

json ok_post(const std::string& path, const json& body) {
  Reply r = post(path, body);
  INFO(r.body);
  REQUIRE(r.status == 200);
  REQUIRE(r.j.is_object());
  REQUIRE(r.j.contains("choices"));
  return r.j;
}

std::string completion(const json& body) {
  return ok_post("/v1/completions", body)["choices"][0]["text"].get<std::string>();
}

// A streamed response: its frames, and per choice the text and finish reason.
struct Streamed {
  std::vector<json> frames;  // [DONE] as the string "[DONE]"
  std::map<int, std::string> text, finish;
  json usage;
};

Streamed parse_sse(const std::string& text, bool chat) {
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

Streamed stream(const std::string& path, json body, httplib::Client* c = nullptr) {
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

std::string get(const std::string& path, int* status = nullptr, const std::string& key = kKey) {
  auto c = client(main_server().port(), key);
  auto r = c->Get(path.c_str());
  REQUIRE(r);
  if (status) *status = r->status;
  return r->body;
}

// One sample of a metric (the first line starting with `name` + ' ' or `name{labels} `).
double metric(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  }
  FAIL("no metric " << name);
  return 0;
}

double metric_now(const std::string& name) { return metric(get("/metrics"), name); }

// Checks the OpenAI error shape and returns the error object.
json error_of(const Reply& r, int status) {
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
int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

void send_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    REQUIRE(n > 0);
    off += static_cast<size_t>(n);
  }
}

std::string http_post_text(const std::string& path, const std::string& body, size_t length) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + kKey +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(length) +
         "\r\n\r\n" + body;
}

// Reads until `needle` arrived (or EOF / 10 s); returns what was read.
std::string read_until(int fd, const std::string& needle) {
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

const json kChatMessages = json::array({{{"role", "user"}, {"content", "Tell me a story."}}});

}  // namespace

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

TEST_CASE("e2e: 32 concurrent streams are independent and batched", "[e2e][concurrency]") {
  const char* subjects[] = {"girl", "boy", "dog", "cat", "bird", "fish", "frog", "king"};
  const char* openings[] = {"Once upon a time, there was a little ", "One day, a ",
                            "Lily saw a big ", "Tom had a red "};
  std::vector<json> bodies;
  for (const char* o : openings)
    for (const char* s : subjects)
      bodies.push_back({{"prompt", std::string(o) + s},
                        {"max_tokens", 40},
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
  CHECK(tokens == 32 * 40);
  CHECK(steps * 4 < tokens);  // one batch: about 40 decode steps (+ prefills), not 1280
}

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
  // Longer than the context (512 tokens for tinystories-656k).
  e = error_of(post("/v1/completions", {{"prompt", std::vector<int>(600, 100)}}), 400);
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

TEST_CASE("e2e: the OpenAI Node SDK", "[e2e][sdk]") {
  const fs::path sdk = tandem::test::repo_path("tests/sdk");
  REQUIRE(std::system("node --version > /dev/null 2>&1") == 0);
  INFO("install the SDK first: npm ci --prefix tests/sdk --no-audit --no-fund");
  REQUIRE(fs::exists(sdk / "node_modules" / "openai" / "package.json"));
  const std::string cmd =
      "TANDEM_BASE_URL=http://127.0.0.1:" + std::to_string(main_server().port()) +
      "/v1 TANDEM_API_KEY=" + kKey + " TANDEM_MODEL=tiny node " +
      (sdk / "openai_sdk_test.mjs").string() + " 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  const int rc = pclose(p);
  INFO(out);
  CHECK(rc == 0);
  CHECK(out.find("all SDK checks passed") != std::string::npos);
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

TEST_CASE("e2e: a full queue answers 429; SIGTERM finishes streams and exits 0", "[e2e][errors]") {
  ServerProcess small({"--max-batch", "1", "--max-waiting", "1"});
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

  // A stream running when SIGTERM arrives still ends properly, then the server exits 0.
  auto c = client(small.port(), "");
  Streamed s;
  std::thread reader([&] {
    auto r = c->Post(
        "/v1/completions",
        json{{"prompt", "Once"}, {"max_tokens", 400}, {"ignore_eos", true}, {"stream", true}}
            .dump(),
        "application/json");
    if (r) s = parse_sse(r->body, false);
  });
  const auto t_wait = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < t_wait) {
    auto m = client(small.port(), "")->Get("/metrics");
    if (m && metric(m->body, "tandem_num_requests_running") >= 1) break;
    std::this_thread::sleep_for(2ms);
  }
  CHECK(small.stop(SIGTERM) == 0);
  reader.join();
  REQUIRE(!s.frames.empty());
  CHECK(s.frames.back() == "[DONE]");
  CHECK(s.finish[0] == "length");
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
