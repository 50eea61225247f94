// The load-test run: a warm-up request, the server's /metrics before and after, and the timed
// requests from max_concurrency workers (each a kept-alive connection) at their arrival times:
// single requests, or whole multi-turn conversations whose turns carry the replies received.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>

#include "kernels/common.h"
#include "server/tools/bench_client.h"
#include "server/tools/bench_http.h"

namespace tandem::bench {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double load_average() {
  std::ifstream in("/proc/loadavg");
  double v = -1;
  if (!(in >> v)) return -1;
  return v;
}

std::map<std::string, double> scrape(const std::string& host, const std::string& prefix,
                                     const BenchConfig& cfg) {
  try {
    httplib::Client cli(host);
    cli.set_connection_timeout(3);
    cli.set_read_timeout(5);
    httplib::Headers h;
    if (!cfg.api_key.empty()) h.emplace("Authorization", auth_header(cfg));
    auto res = cli.Get(prefix + "/metrics", h);
    if (!res || res->status != 200) return {};
    return parse_prometheus(res->body);
  } catch (const std::exception&) {
    return {};
  }
}

}  // namespace

std::map<std::string, double> parse_prometheus(std::string_view text) {
  std::map<std::string, double> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty() || line[0] == '#') continue;
    // The series ends at the space after the closing brace (label values may hold spaces).
    size_t end = line.find('{');
    end = end == std::string_view::npos ? line.find(' ') : line.find("} ", end);
    if (end == std::string_view::npos) continue;
    if (line[end] == '}') ++end;
    const std::string series(line.substr(0, end));
    std::string_view rest = line.substr(end);
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    const std::string value(rest.substr(0, rest.find(' ')));  // a timestamp may follow
    char* stop = nullptr;
    const double v = std::strtod(value.c_str(), &stop);
    if (stop != value.c_str()) out[series] = v;
  }
  return out;
}

std::optional<double> prom_sum(const std::map<std::string, double>& m, const std::string& name) {
  std::optional<double> sum;
  for (auto it = m.lower_bound(name); it != m.end() && it->first.rfind(name, 0) == 0; ++it) {
    if (it->first.size() != name.size() && it->first[name.size()] != '{') continue;
    sum = sum.value_or(0) + it->second;
  }
  return sum;
}

namespace {

// One unit of work of a worker: job i on the worker's kept-alive client; `record` stores a
// request's result at its index of BenchOutcome::results.
using Record = std::function<void(size_t, RequestResult)>;
using Job = std::function<void(int32_t, httplib::Client&, Clock::time_point, const Record&)>;

// Warm-up (`warm`), scrape, `n_jobs` jobs from max_concurrency workers at their arrival times,
// scrape. `n_results` requests are recorded in all.
BenchOutcome run_jobs(const BenchConfig& cfg, int32_t n_jobs, size_t n_results,
                      const BenchPrompt& warm, const Tokenizer* tok, const Job& job) {
  // Named copies, not structured bindings: clang 14 cannot capture those in the lambdas below.
  const auto url = split_url(cfg.base_url);
  const std::string host = url.first, prefix = url.second;
  BenchOutcome out;
  TANDEM_REQUIRE(n_jobs >= 1, kInvalidArgument, "no prompts to send");
  if (cfg.warmup) {
    if (cfg.progress) std::fprintf(stderr, "[bench] warm-up request ...\n");
    const RequestResult w = send_request(cfg, warm, tok);
    TANDEM_REQUIRE(w.success, kInvalidArgument,
                   "the warm-up request failed, check the arguments (--base-url, --endpoint, "
                   "--model): ",
                   w.error);
  }
  if (cfg.scrape_metrics) out.before = scrape(host, prefix, cfg);
  out.load_avg_before = load_average();

  const std::vector<double> arrive =
      arrival_times(n_jobs, cfg.request_rate, cfg.burstiness, cfg.seed);
  const int32_t workers = std::min<int32_t>(cfg.max_concurrency > 0 ? cfg.max_concurrency : n_jobs,
                                            std::min(n_jobs, 4096));
  const auto n = static_cast<int32_t>(n_results);
  out.results.resize(n_results);
  std::atomic<int32_t> next{0};
  std::mutex mu;
  std::condition_variable cv;
  int32_t done = 0, failed = 0;
  const auto t0 = Clock::now();
  double last_end = 0;
  const Record record = [&](size_t i, RequestResult r) {
    const double end = since(t0);
    {
      std::lock_guard<std::mutex> lock(mu);
      failed += r.success ? 0 : 1;
      out.results[i] = std::move(r);
      ++done;
      last_end = std::max(last_end, end);
    }
    cv.notify_one();
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(workers));
  for (int32_t w = 0; w < workers; ++w) {
    pool.emplace_back([&] {
      httplib::Client cli(host);
      cli.set_connection_timeout(10);
      cli.set_read_timeout(static_cast<time_t>(cfg.timeout_s));
      cli.set_keep_alive(true);
      cli.set_tcp_nodelay(true);
      for (;;) {
        const int32_t i = next.fetch_add(1);
        if (i >= n_jobs) return;
        std::this_thread::sleep_until(
            t0 + std::chrono::duration_cast<Clock::duration>(
                     std::chrono::duration<double>(arrive[static_cast<size_t>(i)])));
        job(i, cli, t0, record);
      }
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    // A progress line at most every second, and one at the end.
    int32_t shown = -1;
    double shown_at = 0;
    while (done < n) {
      cv.wait_for(lock, std::chrono::seconds(1));
      const double t = since(t0);
      if (cfg.progress && done != shown && (done == n || t - shown_at >= 1)) {
        std::fprintf(stderr, "[bench] %d/%d requests done (%d failed), %.1f s\n", done, n, failed,
                     t);
        shown = done;
        shown_at = t;
      }
    }
  }
  for (auto& t : pool) t.join();
  out.duration = last_end;
  out.load_avg_after = load_average();
  if (cfg.scrape_metrics) out.after = scrape(host, prefix, cfg);
  out.server_metrics = !out.before.empty() && !out.after.empty();
  return out;
}

// One request on `cli`, timed from the run's start; never throws.
RequestResult timed(httplib::Client& cli, const std::string& prefix, const BenchConfig& cfg,
                    const BenchPrompt& p, const Tokenizer* tok, Clock::time_point t0) {
  const double start = since(t0);
  RequestResult r;
  try {
    r = send_with(cli, prefix, cfg, p, tok);
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  r.start = start;
  return r;
}

}  // namespace

BenchOutcome run_benchmark(const BenchConfig& cfg, const std::vector<BenchPrompt>& prompts,
                           const Tokenizer* tok) {
  TANDEM_REQUIRE(!prompts.empty(), kInvalidArgument, "no prompts to send");
  const std::string prefix = split_url(cfg.base_url).second;
  return run_jobs(cfg, static_cast<int32_t>(prompts.size()), prompts.size(), prompts[0], tok,
                  [&](int32_t i, httplib::Client& cli, Clock::time_point t0, const Record& rec) {
                    const auto k = static_cast<size_t>(i);
                    rec(k, timed(cli, prefix, cfg, prompts[k], tok, t0));
                  });
}

BenchOutcome run_conversations(const BenchConfig& cfg, const std::vector<Conversation>& convs,
                               const Tokenizer* tok) {
  TANDEM_REQUIRE(!convs.empty() && !convs[0].turns.empty(), kInvalidArgument,
                 "no conversations to run");
  TANDEM_REQUIRE(is_chat(cfg), kInvalidArgument,
                 "multi_turn needs the chat endpoint (--endpoint /v1/chat/completions)");
  const size_t turns = convs[0].turns.size();
  for (const Conversation& c : convs)
    TANDEM_REQUIRE(c.turns.size() == turns, kInvalidArgument,
                   "every conversation must have the same number of turns");
  const std::string prefix = split_url(cfg.base_url).second;
  return run_jobs(
      cfg, static_cast<int32_t>(convs.size()), convs.size() * turns, convs[0].turns[0], tok,
      [&](int32_t c, httplib::Client& cli, Clock::time_point t0, const Record& rec) {
        const Conversation& conv = convs[static_cast<size_t>(c)];
        const size_t base = static_cast<size_t>(c) * turns;
        std::vector<std::string> replies;
        for (size_t t = 0; t < turns; ++t) {
          RequestResult r = timed(cli, prefix, cfg, next_turn(conv, replies, tok), tok, t0);
          r.turn = static_cast<int32_t>(t);
          const bool ok = r.success;
          replies.push_back(r.text);
          rec(base + t, std::move(r));
          if (ok) continue;
          for (size_t u = t + 1; u < turns; ++u) {  // nothing to continue the history with
            RequestResult skip;
            skip.turn = static_cast<int32_t>(u);
            skip.start = since(t0);
            skip.error = cat("not sent: turn ", t + 1, " of its conversation failed");
            rec(base + u, std::move(skip));
          }
          return;
        }
      });
}

}  // namespace tandem::bench
