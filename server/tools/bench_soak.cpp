// The soak mode of `tandem bench`: workers on kept-alive connections, the request mix, the
// counts, and the resident-memory sampler.
#include "server/tools/bench_soak.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "server/tools/bench_http.h"

namespace tandem::bench {

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

enum class Kind : uint8_t { kStreamed, kWhole, kAborted, kMalformed };

// What every worker adds to.
struct Tally {
  std::mutex mu;
  std::map<int, int64_t> status;         // HTTP status -> responses
  std::map<std::string, int64_t> kinds;  // request kind -> requests
  int64_t transport_errors = 0;          // no HTTP status at all (refused, reset, timed out)
  int64_t incomplete = 0;          // 200 but a stream without [DONE] or a body without choices
  int64_t malformed_accepted = 0;  // a malformed request that got 2xx
  int64_t rejected = 0;            // a well-formed request that got 4xx (e.g. too long)
  std::vector<std::string> first_errors;
  std::atomic<int64_t> requests{0};

  void note_error(const std::string& e) {
    if (first_errors.size() < 10) first_errors.push_back(e);
  }
};

long rss_bytes(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      long kb = 0;
      in >> kb;
      return kb * 1024;
    }
    in.ignore(1 << 12, '\n');
  }
  return -1;  // the process is gone
}

// A body the server must refuse with a 4xx.
std::string malformed_body(std::mt19937_64& rng, const BenchConfig& cfg) {
  const bool chat = is_chat(cfg);
  const std::string field =
      chat ? "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]" : "\"prompt\":\"hi\"";
  switch (rng() % 5) {
    case 0:
      return "{\"model\":\"" + cfg.model + "\"," + field + ",\"max_tokens\":";  // cut short
    case 1:
      return "{" + field + ",\"max_tokens\":\"many\"}";  // a string for a number
    case 2:
      return "{" + field + ",\"max_tokens\":-3}";  // out of range
    case 3:
      return "{\"max_tokens\":4}";  // no prompt or messages
    default:
      return std::string("\xff\xfe{not json", 11);
  }
}

// One request of `kind` on `cli`; adds what happened to `t`.
void one_request(httplib::Client& cli, const std::string& path, const BenchConfig& cfg,
                 const BenchPrompt& prompt, Kind kind, std::mt19937_64& rng, Tally& t) {
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.headers.emplace("Content-Type", "application/json");
  if (!cfg.api_key.empty()) req.headers.emplace("Authorization", auth_header(cfg));
  const bool stream = kind == Kind::kStreamed || kind == Kind::kAborted;
  req.body =
      kind == Kind::kMalformed ? malformed_body(rng, cfg) : request_body(cfg, prompt, stream);
  int status = 0;
  std::string body;
  bool aborted = false;
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    body.append(data, n);
    // Aborted: hang up once the first chunk of generated text is here.
    if (kind == Kind::kAborted && status == 200 && body.find("data: {") != std::string::npos) {
      aborted = true;
      return false;
    }
    return true;
  };
  const bool reused = cli.is_socket_open() != 0;
  httplib::Result res = cli.send(req);
  if (closed_unannounced(res, reused, status != 0)) res = cli.send(req);
  std::lock_guard<std::mutex> lock(t.mu);
  if (aborted) {
    ++t.status[200];
    return;
  }
  if (!res || status == 0) {
    ++t.transport_errors;
    t.note_error("transport: " + httplib::to_string(res.error()));
    return;
  }
  ++t.status[status];
  if (kind == Kind::kMalformed) {
    if (status < 400) ++t.malformed_accepted;
    return;
  }
  if (status != 200) {
    if (status >= 400 && status < 500) ++t.rejected;
    t.note_error("HTTP " + std::to_string(status) + ": " + body.substr(0, 200));
    return;
  }
  const bool complete = stream ? body.find("data: [DONE]") != std::string::npos
                               : body.find("\"choices\"") != std::string::npos;
  if (!complete) {
    ++t.incomplete;
    t.note_error("incomplete: " + body.substr(0, 200));
  }
}

}  // namespace

json run_soak(const BenchConfig& cfg, const SoakConfig& soak,
              const std::vector<BenchPrompt>& prompts) {
  const auto url = split_url(cfg.base_url);
  const std::string host = url.first, prefix = url.second;
  const int workers = cfg.max_concurrency > 0 ? cfg.max_concurrency : 64;
  Tally t;
  const auto t0 = Clock::now();
  const auto end =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(soak.seconds));
  std::atomic<bool> stop{false};

  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937_64 rng(cfg.seed * 1000003u + static_cast<uint64_t>(w));
      // Both generation routes, half the requests each.
      BenchConfig chat = cfg, text = cfg;
      chat.endpoint = "/v1/chat/completions";
      text.endpoint = "/v1/completions";
      std::uniform_real_distribution<double> u(0, 1);
      auto cli = std::make_unique<httplib::Client>(host);
      cli->set_connection_timeout(10);
      cli->set_read_timeout(static_cast<time_t>(cfg.timeout_s));
      cli->set_keep_alive(true);
      while (!stop.load() && Clock::now() < end) {
        const double r = u(rng);
        const Kind kind = r < soak.malformed_ratio                      ? Kind::kMalformed
                          : r < soak.malformed_ratio + soak.abort_ratio ? Kind::kAborted
                          : u(rng) < soak.stream_ratio                  ? Kind::kStreamed
                                                                        : Kind::kWhole;
        const BenchPrompt& p = prompts[rng() % prompts.size()];
        const BenchConfig& c = rng() % 2 ? chat : text;
        one_request(*cli, prefix + c.endpoint, c, p, kind, rng, t);
        t.requests.fetch_add(1);
        {
          std::lock_guard<std::mutex> lock(t.mu);
          static const char* names[] = {"streamed", "whole", "aborted", "malformed"};
          ++t.kinds[names[static_cast<int>(kind)]];
        }
        // An aborted request leaves the connection half-read: start a fresh one.
        if (kind == Kind::kAborted) {
          cli = std::make_unique<httplib::Client>(host);
          cli->set_connection_timeout(10);
          cli->set_read_timeout(static_cast<time_t>(cfg.timeout_s));
          cli->set_keep_alive(true);
        }
      }
    });
  }

  // The sampler: memory and progress every interval, and once more at the end.
  json samples = json::array();
  auto sample = [&] {
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    const long rss = soak.server_pid > 0 ? rss_bytes(soak.server_pid) : -1;
    const int64_t n = t.requests.load();
    samples.push_back({s, rss, n});
    if (cfg.progress) {
      std::lock_guard<std::mutex> lock(t.mu);
      std::string codes;
      for (const auto& [code, c] : t.status)
        codes += " " + std::to_string(code) + ":" + std::to_string(c);
      std::fprintf(stderr, "[soak] %6.0f s  %8lld requests  rss %.1f MB %s  errors %lld\n", s,
                   static_cast<long long>(n), static_cast<double>(rss) / 1e6, codes.c_str(),
                   static_cast<long long>(t.transport_errors));
    }
    return rss;
  };
  sample();
  bool server_gone = false;
  while (Clock::now() < end) {
    const auto next = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(soak.sample_interval));
    while (Clock::now() < std::min(next, end))
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (Clock::now() < end && sample() < 0 && soak.server_pid > 0) {
      server_gone = true;  // crashed: stop now, the samples say when
      break;
    }
  }
  stop.store(true);
  for (std::thread& th : threads) th.join();
  if (!server_gone) sample();

  json out;
  out["seconds"] = std::chrono::duration<double>(Clock::now() - t0).count();
  out["concurrency"] = workers;
  out["requests"] = t.requests.load();
  json codes = json::object();
  int64_t server_errors = 0;
  for (const auto& [code, c] : t.status) {
    codes[std::to_string(code)] = c;
    if (code >= 500) server_errors += c;
  }
  out["status"] = codes;
  out["server_errors"] = server_errors;
  out["kinds"] = t.kinds;
  out["transport_errors"] = t.transport_errors;
  out["incomplete"] = t.incomplete;
  out["malformed_accepted"] = t.malformed_accepted;
  out["rejected"] = t.rejected;
  out["first_errors"] = t.first_errors;
  out["server_gone"] = server_gone;
  out["samples"] = samples;  // [seconds, rss bytes (-1: not sampled or gone), requests]
  return out;
}

}  // namespace tandem::bench
