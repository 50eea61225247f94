// The bench client against a fake OpenAI-compatible server written here (httplib on an
// ephemeral port): canned SSE chunks with known sleeps between them must come out as the TTFT
// and inter-token latencies the fake produced, within 5 ms; also non-streamed responses, HTTP
// 500s and refused connections (counted as failed, the run goes on), the SSE parser on split
// input, Prometheus parsing, percentiles and Poisson arrivals; and kept-alive connections that
// the server closes unannounced after an answer (as llama-server does), which must not turn
// into failed requests.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/tools/bench_client.h"

namespace tandem::test {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr double kFirstDelay = 0.080;  // seconds before the first chunk
constexpr double kGap = 0.050;         // between chunks
constexpr int kChunks = 4;             // content chunks per streamed response
constexpr double kWholeDelay = 0.100;  // non-streamed response
constexpr double kTol = 0.005;

// The fake server. Every streamed response records when each content chunk was written,
// relative to the arrival of its request, so the test can compare with what the client saw.
class FakeServer {
 public:
  FakeServer() {
    http_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      const auto t0 = Clock::now();
      const int n = calls_.fetch_add(1);
      if (fail_every_ > 0 && n % fail_every_ == fail_every_ - 1) {
        res.status = 500;
        res.set_content(R"({"error":{"message":"boom","type":"server_error"}})",
                        "application/json");
        return;
      }
      const json body = json::parse(req.body);
      if (!body.value("stream", false)) {
        std::this_thread::sleep_until(t0 + std::chrono::duration<double>(kWholeDelay));
        res.set_content(
            json{{"choices", {{{"index", 0}, {"text", "a b c"}, {"finish_reason", "length"}}}},
                 {"usage", {{"prompt_tokens", 7}, {"completion_tokens", 3}, {"total_tokens", 10}}}}
                .dump(),
            "application/json");
        return;
      }
      const bool usage = body.contains("stream_options");
      const std::string prompt = body.value("prompt", "");
      auto provider = [this, t0, usage, prompt](size_t, httplib::DataSink& sink) {
        std::vector<double> sent;
        for (int i = 0; i < kChunks; ++i) {
          std::this_thread::sleep_until(t0 + std::chrono::duration<double>(kFirstDelay + kGap * i));
          // Two SSE events in odd pieces: the parser must reassemble them.
          const std::string ev =
              "data: " + json{{"choices", {{{"index", 0}, {"text", " tok"}}}}}.dump() + "\r\n\r\n";
          sent.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
          sink.write(ev.data(), 7);
          sink.write(ev.data() + 7, ev.size() - 7);
        }
        std::string tail;
        if (usage)
          tail += "data: " +
                  json{{"choices", json::array()},
                       {"usage", {{"prompt_tokens", 5}, {"completion_tokens", kChunks}}}}
                      .dump() +
                  "\n\n";
        tail += "data: [DONE]\n\n";
        {  // recorded before the end goes out: the client's run cannot end before this
          std::lock_guard<std::mutex> lock(mu_);
          sent_[prompt] = sent;
        }
        sink.write(tail.data(), tail.size());
        sink.done();
        return true;
      };
      res.set_chunked_content_provider("text/event-stream", provider);
    });
    port_ = http_.bind_to_any_port("127.0.0.1");
    REQUIRE(port_ > 0);
    thread_ = std::thread([this] { http_.listen_after_bind(); });
  }
  ~FakeServer() {
    http_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void fail_every(int n) { fail_every_ = n; }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    sent_.clear();
  }
  // Per prompt text: when each content chunk went out, seconds after its request arrived.
  std::map<std::string, std::vector<double>> sent() {
    std::lock_guard<std::mutex> lock(mu_);
    return sent_;
  }

 private:
  httplib::Server http_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<int> calls_{0};
  int fail_every_ = 0;
  std::mutex mu_;
  std::map<std::string, std::vector<double>> sent_;
};

// Whether every request's TTFT and ITLs are where the checks below want them.
bool within_tolerance(const bench::BenchOutcome& out,
                      const std::map<std::string, std::vector<double>>& sent,
                      const std::vector<bench::BenchPrompt>& prompts) {
  std::vector<double> ttft_diff;
  for (size_t i = 0; i < out.results.size(); ++i) {
    const bench::RequestResult& r = out.results[i];
    auto it = sent.find(prompts[i].text);
    if (!r.success || it == sent.end() || r.itl.size() + 1 != it->second.size()) return false;
    const std::vector<double>& s = it->second;
    if (std::abs(r.ttft - s[0]) >= 2 * kTol) return false;
    ttft_diff.push_back(r.ttft - s[0]);
    for (size_t k = 0; k + 1 < s.size(); ++k)
      if (std::abs(r.itl[k] - (s[k + 1] - s[k])) >= kTol) return false;
  }
  return std::abs(bench::percentile(ttft_diff, 50)) < kTol;
}

// A server on raw sockets that answers the first request of each connection with a streamed
// completion (chunked, and kept alive as far as its headers say) and then closes the connection,
// as llama-server does after every streamed answer (server/tools/bench_http.h). It closes only once
// the client has written its next request on the connection: the race a fast client sometimes loses
// against llama-server's close is lost here every time.
class ClosingServer {
 public:
  ClosingServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd_, 16) == 0);
    REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~ClosingServer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int answered() const { return answered_; }
  int dropped() const { return dropped_; }  // requests whose connection was closed unanswered

 private:
  static bool readable(int fd, int ms) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, ms) > 0;
  }
  static void send_all(int fd, const std::string& s) {
    for (size_t at = 0; at < s.size();) {
      const ssize_t n = ::send(fd, s.data() + at, s.size() - at, MSG_NOSIGNAL);
      if (n <= 0) return;
      at += static_cast<size_t>(n);
    }
  }
  static std::string chunk(const std::string& s) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "%zx\r\n", s.size());
    return hex + s + "\r\n";
  }
  // Reads one request (headers and a Content-Length body); false at end of stream.
  static bool read_request(int fd) {
    std::string in;
    char buf[4096];
    size_t body_at = std::string::npos, want = 0;
    while (body_at == std::string::npos || in.size() < body_at + want) {
      if (!readable(fd, 5000)) return false;
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return false;
      in.append(buf, static_cast<size_t>(n));
      if (body_at == std::string::npos && (body_at = in.find("\r\n\r\n")) != std::string::npos) {
        body_at += 4;
        const size_t cl = in.find("Content-Length: ");
        want = cl < body_at ? std::stoul(in.substr(cl + 16)) : 0;
      }
    }
    return true;
  }
  void serve() {
    while (!stop_) {
      if (!readable(fd_, 50)) continue;
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      if (read_request(c)) {
        std::string out =
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            "Transfer-Encoding: chunked\r\n\r\n";
        for (int i = 0; i < 2; ++i)
          out += chunk("data: {\"choices\":[{\"index\":0,\"text\":\" tok\"}]}\n\n");
        out += chunk("data: [DONE]\n\n") + "0\r\n\r\n";
        send_all(c, out);
        ++answered_;
        // The next request on this connection (or its end) arrives: close without answering.
        if (readable(c, 3000)) {
          char b;
          if (::recv(c, &b, 1, MSG_PEEK) > 0) ++dropped_;
        }
      }
      ::close(c);
    }
  }

  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> answered_{0}, dropped_{0};
  std::thread thread_;
};

bench::BenchConfig config(const std::string& url, int n) {
  bench::BenchConfig c;
  c.base_url = url;
  c.model = "fake";
  c.num_prompts = n;
  c.max_concurrency = 2;
  c.input_len = 8;
  c.output_len = kChunks;
  c.warmup = false;
  c.timeout_s = 10;
  c.percentile_metrics = {"ttft", "tpot", "itl", "e2el"};
  c.metric_percentiles = {50, 99};
  return c;
}

}  // namespace

TEST_CASE("bench client: streamed TTFT and ITL match the fake server's delays") {
  FakeServer fake;
  const auto cfg = config(fake.url(), 4);
  const auto prompts = bench::make_random_prompts(cfg, nullptr);
  // A timing test on a shared machine (ctest -j, other jobs): a run in which the client or the
  // fake was kept off the CPU longer than the tolerance is repeated, up to 3 runs. A client that
  // mis-times fails every run.
  bench::BenchOutcome out;
  std::map<std::string, std::vector<double>> sent;
  for (int attempt = 0; attempt < 3; ++attempt) {
    fake.clear();
    out = bench::run_benchmark(cfg, prompts, nullptr);
    sent = fake.sent();
    if (within_tolerance(out, sent, prompts)) break;
    WARN("timing outside the tolerance in run " << attempt + 1 << ", running again");
  }
  REQUIRE(out.results.size() == 4);
  REQUIRE(sent.size() == 4);
  std::vector<double> ttft_diff;
  for (size_t i = 0; i < out.results.size(); ++i) {
    const bench::RequestResult& r = out.results[i];
    INFO(r.error);
    REQUIRE(r.success);
    CHECK(r.output_tokens == kChunks);
    CHECK(r.usage_reported);
    CHECK(r.prompt_len == 5);
    CHECK(r.text == " tok tok tok tok");
    // Against what the fake did for this request: the times it wrote each chunk (on a loaded
    // machine its sleeps may end late; the client must see the same late times).
    REQUIRE(sent.count(prompts[i].text) == 1);
    const std::vector<double>& s = sent.at(prompts[i].text);
    REQUIRE(r.itl.size() == kChunks - 1);
    // The client's TTFT also holds the request's way to the fake's handler (connect, a thread
    // woken to read it): on a saturated CPU a few ms. Each within 2x, their median within 1x.
    CHECK(std::abs(r.ttft - s[0]) < 2 * kTol);
    ttft_diff.push_back(r.ttft - s[0]);
    for (size_t k = 0; k + 1 < s.size(); ++k) CHECK(std::abs(r.itl[k] - (s[k + 1] - s[k])) < kTol);
    // And the nominal delays: never early, and late only by scheduling noise.
    CHECK(r.ttft > kFirstDelay - 1e-3);
    CHECK(r.ttft < kFirstDelay + 0.050);
  }

  CHECK(std::abs(bench::percentile(ttft_diff, 50)) < kTol);

  const json j = bench::report_json(cfg, out);
  CHECK(j["completed"] == 4);
  CHECK(j["failed"] == 0);
  CHECK(j["total_output_tokens"] == 4 * kChunks);
  // The aggregates, against the same figures computed from the fake's own times.
  std::vector<double> f_ttft, f_itl, f_tpot;
  for (const auto& [prompt, s] : sent) {
    f_ttft.push_back(s[0] * 1e3);
    for (size_t k = 0; k + 1 < s.size(); ++k) f_itl.push_back((s[k + 1] - s[k]) * 1e3);
    f_tpot.push_back((s.back() - s[0]) / (kChunks - 1) * 1e3);
  }
  const double tol_ms = kTol * 1e3;
  CHECK(std::abs(j["mean_ttft_ms"].get<double>() - bench::percentile(f_ttft, 50)) < 2 * tol_ms);
  CHECK(std::abs(j["median_itl_ms"].get<double>() - bench::percentile(f_itl, 50)) < tol_ms);
  CHECK(std::abs(j["p99_itl_ms"].get<double>() - bench::percentile(f_itl, 99)) < tol_ms);
  // TPOT = (e2e - ttft) / (tokens - 1): the mean gap (the e2e ends after the last chunk).
  CHECK(std::abs(j["mean_tpot_ms"].get<double>() - bench::percentile(f_tpot, 50)) < 2 * tol_ms);
  // Nominal: 4 requests, 2 at a time, are two rounds of one response each.
  const double e2e = kFirstDelay + kGap * (kChunks - 1);
  CHECK(j["median_e2el_ms"].get<double>() > e2e * 1e3 - 1);
  CHECK(j["median_e2el_ms"].get<double>() < e2e * 1e3 + 50);
  CHECK(j["duration"].get<double>() > 2 * e2e - 1e-3);
  CHECK(j["duration"].get<double>() < 2 * e2e + 0.1);
  // No /metrics on the fake: reported as unavailable, not a failure.
  CHECK(j["server"]["available"] == false);
  const std::string table = bench::format_table(j);
  CHECK(table.find("Successful requests:                     4") != std::string::npos);
  CHECK(table.find("P99 ITL (ms):") != std::string::npos);
}

TEST_CASE("bench client: non-streamed responses") {
  FakeServer fake;
  auto cfg = config(fake.url(), 2);
  cfg.stream = false;
  const auto out = bench::run_benchmark(cfg, bench::make_random_prompts(cfg, nullptr), nullptr);
  for (const auto& r : out.results) {
    INFO(r.error);
    REQUIRE(r.success);
    CHECK(r.output_tokens == 3);
    CHECK(r.prompt_len == 7);
    CHECK(r.text == "a b c");
    // TTFT is the whole response: never early, late only by scheduling noise.
    CHECK(r.ttft > kWholeDelay - 1e-3);
    CHECK(r.ttft < kWholeDelay + 0.050);
    CHECK(r.itl.empty());
  }
}

TEST_CASE("bench client: HTTP 500 and refused connections count as failed requests") {
  FakeServer fake;
  fake.fail_every(2);
  auto cfg = config(fake.url(), 6);
  auto out = bench::run_benchmark(cfg, bench::make_random_prompts(cfg, nullptr), nullptr);
  json j = bench::report_json(cfg, out);
  CHECK(j["completed"] == 3);
  CHECK(j["failed"] == 3);
  int with_boom = 0;
  for (const auto& r : out.results)
    if (!r.success && r.error.find("HTTP 500: boom") != std::string::npos) ++with_boom;
  CHECK(with_boom == 3);

  // A port nobody listens on: bound (so the kernel picks a free one), never listened, closed.
  int port = 0;
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);
    ::close(fd);
  }
  cfg = config("http://127.0.0.1:" + std::to_string(port), 3);
  out = bench::run_benchmark(cfg, bench::make_random_prompts(cfg, nullptr), nullptr);
  j = bench::report_json(cfg, out);
  CHECK(j["completed"] == 0);
  CHECK(j["failed"] == 3);
  CHECK(j["errors"][0].get<std::string>().find("HTTP client error") != std::string::npos);
  // With a warm-up, a dead server is an error before anything is measured.
  cfg.warmup = true;
  CHECK_THROWS_WITH(bench::run_benchmark(cfg, bench::make_random_prompts(cfg, nullptr), nullptr),
                    Catch::Contains("warm-up request failed"));
}

TEST_CASE("bench client: a kept-alive connection the server closed is sent again, not failed") {
  ClosingServer srv;
  auto cfg = config(srv.url(), 5);
  cfg.max_concurrency = 1;  // one worker: every request after the first reuses its connection
  cfg.scrape_metrics = false;
  const auto out = bench::run_benchmark(cfg, bench::make_random_prompts(cfg, nullptr), nullptr);
  for (const auto& r : out.results) {
    INFO(r.error);
    CHECK(r.success);
    CHECK(r.text == " tok tok");
  }
  CHECK(srv.answered() == 5);
  CHECK(srv.dropped() == 4);  // requests 2 to 5 each met a closed connection first
}

TEST_CASE("bench client: SSE parser, Prometheus text, percentiles, arrivals, URLs") {
  std::vector<std::string> got;
  bench::SseParser p([&](std::string_view d) { got.emplace_back(d); });
  const std::string s =
      ": comment\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata:{\"b\":2}\n\ndata: [DONE]\n\n";
  for (char c : s) p.feed(std::string_view(&c, 1));  // byte by byte
  REQUIRE(got.size() == 3);
  CHECK(got[0] == "{\"a\":1}");
  CHECK(got[1] == "{\"b\":2}");
  CHECK(got[2] == "[DONE]");
  CHECK(p.done());

  const auto m = bench::parse_prometheus(
      "# HELP x y\n# TYPE x counter\nx_total 3\nreq{route=\"/a b\",status=\"200\"} 2\n"
      "req{route=\"/c\",status=\"500\"} 1.5 1700000000\nreq_other 9\n");
  CHECK(m.at("x_total") == 3);
  CHECK(m.at("req{route=\"/a b\",status=\"200\"}") == 2);
  CHECK(bench::prom_sum(m, "req") == 3.5);
  CHECK(!bench::prom_sum(m, "missing"));

  CHECK(bench::percentile({}, 99) == 0);
  CHECK(bench::percentile({1, 2, 3, 4}, 50) == Approx(2.5));
  CHECK(bench::percentile({1, 2, 3, 4}, 99) == Approx(3.97));
  CHECK(bench::percentile({5}, 90) == 5);

  const auto inf = bench::arrival_times(5, 0, 1, 1);
  CHECK(std::all_of(inf.begin(), inf.end(), [](double t) { return t == 0; }));
  const auto t = bench::arrival_times(20000, 50, 1, 7);
  CHECK(t.front() == 0);
  CHECK(std::is_sorted(t.begin(), t.end()));
  const double rate = static_cast<double>(t.size() - 1) / t.back();
  CHECK(std::abs(rate - 50) < 2);  // mean gap 1/rate

  CHECK(bench::split_url("http://h:1/v/").first == "http://h:1");
  CHECK(bench::split_url("http://h:1/v/").second == "/v");
  CHECK(bench::split_url("http://h:1").second.empty());
  CHECK_THROWS(bench::split_url("h:1"));
  CHECK_THROWS(bench::split_url("https://h:1"));
}

}  // namespace tandem::test
