// The load-test client: prompts, arrivals, requests (streamed SSE or whole), metrics and report.
#include "server/bench_client.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <limits>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "engine/tokenizer/tokenizer.h"
#include "kernels/common.h"

namespace tandem::bench {

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

bool is_chat(const BenchConfig& cfg) {
  return cfg.endpoint.find("chat/completions") != std::string::npos;
}

double load_average() {
  std::ifstream in("/proc/loadavg");
  double v = -1;
  if (!(in >> v)) return -1;
  return v;
}

// Common English words: prompts without a tokenizer.
constexpr const char* kWords[] = {
    "the",   "of",     "and",    "to",    "in",     "is",    "was",    "that",    "for",
    "it",    "with",   "as",     "his",   "on",     "be",    "at",     "by",      "had",
    "are",   "but",    "from",   "or",    "have",   "an",    "they",   "which",   "one",
    "you",   "were",   "her",    "all",   "she",    "there", "would",  "their",   "we",
    "him",   "been",   "has",    "when",  "who",    "will",  "more",   "no",      "if",
    "out",   "so",     "said",   "what",  "up",     "its",   "about",  "into",    "than",
    "them",  "can",    "only",   "other", "new",    "some",  "could",  "time",    "these",
    "two",   "may",    "then",   "do",    "first",  "any",   "my",     "now",     "such",
    "like",  "our",    "over",   "man",   "me",     "even",  "most",   "made",    "after",
    "also",  "did",    "many",   "off",   "before", "must",  "well",   "back",    "through",
    "years", "much",   "where",  "your",  "way",    "down",  "should", "because", "each",
    "just",  "little", "friend", "happy", "garden", "dog",   "cat",    "tree",    "ball",
    "play",  "sun"};

std::vector<int32_t> special_free_ids(const Tokenizer& tok) {
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < tok.vocab_size(); ++i)
    if (!tok.is_special(i) && !tok.id_to_token(i).empty()) ids.push_back(i);
  return ids;
}

std::string auth_header(const BenchConfig& cfg) {
  return cfg.api_key.empty() ? std::string() : "Bearer " + cfg.api_key;
}

std::string request_body(const BenchConfig& cfg, const BenchPrompt& p) {
  json b;
  if (!cfg.model.empty()) b["model"] = cfg.model;
  if (is_chat(cfg))
    b["messages"] = json::array({{{"role", "user"}, {"content", p.text}}});
  else
    b["prompt"] = p.text;
  b["max_tokens"] = p.output_len;
  b["temperature"] = cfg.temperature;
  b["stream"] = cfg.stream;
  if (cfg.stream) b["stream_options"] = {{"include_usage", true}};
  if (cfg.ignore_eos) b["ignore_eos"] = true;
  return b.dump();
}

// The text of a chunk's or response's first choice; nullopt when the chunk has no choices (a
// usage-only chunk).
std::optional<std::string> choice_text(const json& j, bool chat, bool stream) {
  auto it = j.find("choices");
  if (it == j.end() || !it->is_array() || it->empty()) return std::nullopt;
  const json& c = (*it)[0];
  const json* v = nullptr;
  if (!chat) {
    if (auto t = c.find("text"); t != c.end()) v = &*t;
  } else {
    auto m = c.find(stream ? "delta" : "message");
    if (m != c.end() && m->is_object())
      if (auto t = m->find("content"); t != m->end()) v = &*t;
  }
  return v && v->is_string() ? v->get<std::string>() : std::string();
}

void read_usage(const json& j, RequestResult& r) {
  auto u = j.find("usage");
  if (u == j.end() || !u->is_object()) return;
  if (auto c = u->find("completion_tokens"); c != u->end() && c->is_number_integer()) {
    r.output_tokens = c->get<int32_t>();
    r.usage_reported = true;
  }
  if (auto p = u->find("prompt_tokens"); p != u->end() && p->is_number_integer())
    r.prompt_len = p->get<int32_t>();
}

std::string error_text(const std::string& body) {
  try {
    const json j = json::parse(body);
    if (j.contains("error") && j["error"].is_object() && j["error"].contains("message"))
      return j["error"]["message"].get<std::string>();
  } catch (const std::exception&) {
  }
  return body.substr(0, 200);
}

int32_t count_words(const std::string& s) {
  std::istringstream in(s);
  std::string w;
  int32_t n = 0;
  while (in >> w) ++n;
  return n;
}

RequestResult send_with(httplib::Client& cli, const std::string& prefix, const BenchConfig& cfg,
                        const BenchPrompt& prompt, const Tokenizer* tok) {
  RequestResult r;
  r.prompt_len = prompt.prompt_len;
  const bool chat = is_chat(cfg);
  httplib::Request req;
  req.method = "POST";
  req.path = prefix + cfg.endpoint;
  req.headers.emplace("Content-Type", "application/json");
  if (!cfg.api_key.empty()) req.headers.emplace("Authorization", auth_header(cfg));
  req.body = request_body(cfg, prompt);

  int status = 0;
  std::string raw;  // error bodies and non-streamed responses
  int32_t chunks = 0;
  bool first = true;
  Clock::time_point last;
  std::string parse_error;
  const auto st = Clock::now();
  Clock::time_point now = st;
  SseParser sse([&](std::string_view data) {
    if (data == "[DONE]" || !parse_error.empty()) return;
    json j;
    try {
      j = json::parse(data);
    } catch (const std::exception& e) {
      parse_error = cat("bad SSE data: ", e.what());
      return;
    }
    if (j.contains("error")) {
      parse_error = error_text(std::string(data));
      return;
    }
    if (auto text = choice_text(j, chat, true); text && !text->empty()) {
      if (first) {
        r.ttft = std::chrono::duration<double>(now - st).count();
        first = false;
      } else {
        r.itl.push_back(std::chrono::duration<double>(now - last).count());
      }
      last = now;
      r.text += *text;
      ++chunks;
    }
    read_usage(j, r);
  });
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    now = Clock::now();
    if (status == 200 && cfg.stream)
      sse.feed(std::string_view(data, n));
    else
      raw.append(data, n);
    return true;
  };
  const httplib::Result res = cli.send(req);
  const auto end = Clock::now();
  r.latency = std::chrono::duration<double>(end - st).count();
  if (!res) {
    r.error = cat("HTTP client error: ", httplib::to_string(res.error()));
    return r;
  }
  if (status != 200) {
    r.error = cat("HTTP ", status, ": ", error_text(raw));
    return r;
  }
  if (!parse_error.empty()) {
    r.error = parse_error;
    return r;
  }
  if (cfg.stream) {
    if (first) {
      r.error = "the stream carried no generated text";
      return r;
    }
    if (!r.usage_reported) r.output_tokens = chunks;
  } else {
    try {
      const json j = json::parse(raw);
      r.text = choice_text(j, chat, false).value_or("");
      read_usage(j, r);
    } catch (const std::exception& e) {
      r.error = cat("bad response JSON: ", e.what());
      return r;
    }
    r.ttft = r.latency;  // the first token arrives with the last
    if (!r.usage_reported)
      r.output_tokens = tok ? static_cast<int32_t>(tok->encode(r.text, false, false).size())
                            : count_words(r.text);
  }
  r.success = true;
  return r;
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

json stats_ms(const std::vector<double>& v_s, const std::string& name,
              const std::vector<double>& percentiles) {
  json j;
  std::vector<double> v(v_s.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = v_s[i] * 1e3;
  double mean = 0, var = 0;
  for (double x : v) mean += x;
  if (!v.empty()) mean /= static_cast<double>(v.size());
  for (double x : v) var += (x - mean) * (x - mean);
  if (!v.empty()) var /= static_cast<double>(v.size());
  j["mean_" + name + "_ms"] = mean;
  j["median_" + name + "_ms"] = percentile(v, 50);
  j["std_" + name + "_ms"] = std::sqrt(var);
  for (double p : percentiles) {
    std::ostringstream key;
    key << "p" << p << "_" << name << "_ms";  // p99, p99.9: as vllm writes them
    j[key.str()] = percentile(v, p);
  }
  return j;
}

}  // namespace

void SseParser::feed(std::string_view bytes) {
  for (char ch : bytes) {
    if (ch != '\n') {
      line_ += ch;
      continue;
    }
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    if (line_.rfind("data:", 0) == 0) {
      std::string_view v(line_);
      v.remove_prefix(5);
      if (!v.empty() && v.front() == ' ') v.remove_prefix(1);
      if (v == "[DONE]") done_ = true;
      on_data_(v);
    }
    line_.clear();
  }
}

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

std::vector<BenchPrompt> make_random_prompts(const BenchConfig& cfg, const Tokenizer* tok) {
  TANDEM_REQUIRE(cfg.num_prompts >= 1, kInvalidArgument, "--num-prompts must be at least 1");
  TANDEM_REQUIRE(cfg.range_ratio >= 0 && cfg.range_ratio < 1, kInvalidArgument,
                 "--random-range-ratio must be in [0, 1)");
  std::mt19937_64 rng(cfg.seed);
  auto length = [&](int32_t len) {
    const auto lo = static_cast<int64_t>(std::floor(len * (1 - cfg.range_ratio)));
    const auto hi = static_cast<int64_t>(std::ceil(len * (1 + cfg.range_ratio)));
    return static_cast<int32_t>(
        std::max<int64_t>(1, std::uniform_int_distribution<int64_t>(lo, hi)(rng)));
  };
  const std::vector<int32_t> ids = tok ? special_free_ids(*tok) : std::vector<int32_t>{};
  TANDEM_REQUIRE(!tok || !ids.empty(), kInvalidArgument, "the tokenizer has no ordinary tokens");
  std::vector<BenchPrompt> out;
  for (int32_t i = 0; i < cfg.num_prompts; ++i) {
    BenchPrompt p;
    const int32_t in_len = length(cfg.input_len);
    p.output_len = length(cfg.output_len);
    if (tok) {
      std::vector<int32_t> t(static_cast<size_t>(in_len));
      std::uniform_int_distribution<size_t> pick(0, ids.size() - 1);
      for (auto& x : t) x = ids[pick(rng)];
      // Decoded text re-encodes to about as many tokens, not exactly: cut to the length once.
      p.text = tok->decode(t);
      std::vector<int32_t> re = tok->encode(p.text, false, false);
      if (static_cast<int32_t>(re.size()) > in_len) {
        re.resize(static_cast<size_t>(in_len));
        p.text = tok->decode(re);
        re = tok->encode(p.text, false, false);
      }
      p.prompt_len = static_cast<int32_t>(re.size());
    } else {
      std::uniform_int_distribution<size_t> pick(0, std::size(kWords) - 1);
      for (int32_t w = 0; w < in_len; ++w) {
        if (w) p.text += ' ';
        p.text += kWords[pick(rng)];
      }
      p.prompt_len = in_len;
    }
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<double> arrival_times(int32_t n, double rate, double burstiness, uint64_t seed) {
  std::vector<double> t(static_cast<size_t>(std::max(n, 0)), 0.0);
  if (!(rate > 0) || std::isinf(rate)) return t;
  TANDEM_REQUIRE(burstiness > 0, kInvalidArgument, "--burstiness must be positive");
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  // Gamma(shape k, scale 1/(k*rate)) has mean 1/rate; k = 1 is the exponential (Poisson).
  std::gamma_distribution<double> gap(burstiness, 1.0 / (burstiness * rate));
  double at = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    t[i] = at;  // the first request goes at once
    at += gap(rng);
  }
  return t;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

std::pair<std::string, std::string> split_url(const std::string& url) {
  const size_t scheme = url.find("://");
  TANDEM_REQUIRE(scheme != std::string::npos && scheme > 0, kInvalidArgument,
                 "--base-url must look like http://HOST:PORT, got \"", url, "\"");
  const std::string s = url.substr(0, scheme);
  TANDEM_REQUIRE(s == "http", kInvalidArgument,
                 "--base-url: only http:// is supported (this build has no TLS), got \"", url,
                 "\"");
  const size_t path = url.find('/', scheme + 3);
  std::string host = url.substr(0, path);
  std::string prefix = path == std::string::npos ? "" : url.substr(path);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  TANDEM_REQUIRE(host.size() > scheme + 3, kInvalidArgument, "--base-url has no host: \"", url,
                 "\"");
  return {host, prefix};
}

RequestResult send_request(const BenchConfig& cfg, const BenchPrompt& prompt,
                           const Tokenizer* tok) {
  try {
    const auto [host, prefix] = split_url(cfg.base_url);
    httplib::Client cli(host);
    cli.set_connection_timeout(10);
    cli.set_read_timeout(static_cast<time_t>(cfg.timeout_s));
    return send_with(cli, prefix, cfg, prompt, tok);
  } catch (const std::exception& e) {
    RequestResult r;
    r.error = e.what();
    return r;
  }
}

std::optional<std::string> served_model(const BenchConfig& cfg) {
  try {
    const auto [host, prefix] = split_url(cfg.base_url);
    httplib::Client cli(host);
    cli.set_connection_timeout(5);
    cli.set_read_timeout(10);
    httplib::Headers h;
    if (!cfg.api_key.empty()) h.emplace("Authorization", auth_header(cfg));
    auto res = cli.Get(prefix + "/v1/models", h);
    if (!res || res->status != 200) return std::nullopt;
    const json j = json::parse(res->body);
    const json& id = j.at("data").at(0).at("id");
    if (id.is_string()) return id.get<std::string>();
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

BenchOutcome run_benchmark(const BenchConfig& cfg, const std::vector<BenchPrompt>& prompts,
                           const Tokenizer* tok) {
  const auto [host, prefix] = split_url(cfg.base_url);
  BenchOutcome out;
  const int32_t n = static_cast<int32_t>(prompts.size());
  TANDEM_REQUIRE(n >= 1, kInvalidArgument, "no prompts to send");
  if (cfg.warmup) {
    if (cfg.progress) std::fprintf(stderr, "[bench] warm-up request ...\n");
    const RequestResult w = send_request(cfg, prompts[0], tok);
    TANDEM_REQUIRE(w.success, kInvalidArgument,
                   "the warm-up request failed, check the arguments (--base-url, --endpoint, "
                   "--model): ",
                   w.error);
  }
  if (cfg.scrape_metrics) out.before = scrape(host, prefix, cfg);
  out.load_avg_before = load_average();

  const std::vector<double> arrive = arrival_times(n, cfg.request_rate, cfg.burstiness, cfg.seed);
  const int32_t workers =
      std::min<int32_t>(cfg.max_concurrency > 0 ? cfg.max_concurrency : n, std::min(n, 4096));
  out.results.resize(static_cast<size_t>(n));
  std::atomic<int32_t> next{0};
  std::mutex mu;
  std::condition_variable cv;
  int32_t done = 0, failed = 0;
  const auto t0 = Clock::now();
  double last_end = 0;
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
        if (i >= n) return;
        std::this_thread::sleep_until(
            t0 + std::chrono::duration_cast<Clock::duration>(
                     std::chrono::duration<double>(arrive[static_cast<size_t>(i)])));
        const double start = since(t0);
        RequestResult r;
        try {
          r = send_with(cli, prefix, cfg, prompts[static_cast<size_t>(i)], tok);
        } catch (const std::exception& e) {
          r.error = e.what();
        }
        r.start = start;
        const double end = since(t0);
        {
          std::lock_guard<std::mutex> lock(mu);
          out.results[static_cast<size_t>(i)] = std::move(r);
          ++done;
          failed += out.results[static_cast<size_t>(i)].success ? 0 : 1;
          last_end = std::max(last_end, end);
        }
        cv.notify_one();
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

nlohmann::json report_json(const BenchConfig& cfg, const BenchOutcome& out) {
  json j;
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y%m%d-%H%M%S", std::gmtime(&now));
  j["date"] = date;
  j["backend"] = is_chat(cfg) ? "openai-chat" : "openai";
  j["base_url"] = cfg.base_url;
  j["endpoint"] = cfg.endpoint;
  j["model_id"] = cfg.model;
  j["tokenizer_id"] = out.tokenizer;
  j["num_prompts"] = out.results.size();
  if (cfg.request_rate > 0 && !std::isinf(cfg.request_rate))
    j["request_rate"] = cfg.request_rate;
  else
    j["request_rate"] = "inf";
  j["burstiness"] = cfg.burstiness;
  j["max_concurrency"] = cfg.max_concurrency > 0 ? json(cfg.max_concurrency) : json(nullptr);
  j["stream"] = cfg.stream;
  j["ignore_eos"] = cfg.ignore_eos;
  j["random_input_len"] = cfg.input_len;
  j["random_output_len"] = cfg.output_len;
  j["random_range_ratio"] = cfg.range_ratio;
  j["seed"] = cfg.seed;

  const double dur = std::max(out.duration, 1e-9);
  int64_t completed = 0, failed = 0, in_tok = 0, out_tok = 0, good = 0;
  std::vector<double> ttft, tpot, itl, e2el;
  json input_lens = json::array(), output_lens = json::array(), ttfts = json::array(),
       itls = json::array(), errors = json::array();
  for (const RequestResult& r : out.results) {
    input_lens.push_back(r.prompt_len);
    output_lens.push_back(r.output_tokens);
    ttfts.push_back(r.success ? r.ttft : 0.0);
    itls.push_back(r.itl);
    errors.push_back(r.error);
    if (!r.success) {
      ++failed;
      continue;
    }
    ++completed;
    in_tok += r.prompt_len;
    out_tok += r.output_tokens;
    ttft.push_back(r.ttft);
    e2el.push_back(r.latency);
    double t = 0;
    if (r.output_tokens > 1 && cfg.stream) {
      t = (r.latency - r.ttft) / (r.output_tokens - 1);
      tpot.push_back(t);
    }
    itl.insert(itl.end(), r.itl.begin(), r.itl.end());
    bool ok = true;
    for (const auto& [metric, ms] : cfg.goodput_ms) {
      const double v = metric == "ttft" ? r.ttft : metric == "tpot" ? t : r.latency;
      ok = ok && v * 1e3 <= ms;
    }
    good += ok ? 1 : 0;
  }
  j["duration"] = out.duration;
  j["completed"] = completed;
  j["failed"] = failed;
  j["total_input_tokens"] = in_tok;
  j["total_output_tokens"] = out_tok;
  j["request_throughput"] = static_cast<double>(completed) / dur;
  j["request_goodput"] = cfg.goodput_ms.empty() ? json(nullptr) : json(good / dur);
  json slo = json::object();
  for (const auto& [k, v] : cfg.goodput_ms) slo[k + "_ms"] = v;
  j["goodput_slo"] = slo;
  j["input_throughput"] = static_cast<double>(in_tok) / dur;
  j["output_throughput"] = static_cast<double>(out_tok) / dur;
  j["total_token_throughput"] = static_cast<double>(in_tok + out_tok) / dur;
  j["percentile_metrics"] = cfg.percentile_metrics;
  j["metric_percentiles"] = cfg.metric_percentiles;
  for (const auto& [name, v] : {std::pair<const char*, const std::vector<double>*>{"ttft", &ttft},
                                {"tpot", &tpot},
                                {"itl", &itl},
                                {"e2el", &e2el}})
    j.update(stats_ms(*v, name, cfg.metric_percentiles));
  j["input_lens"] = input_lens;
  j["output_lens"] = output_lens;
  j["ttfts"] = ttfts;
  j["itls"] = itls;
  j["errors"] = errors;
  j["load_avg_1m_before"] = out.load_avg_before;
  j["load_avg_1m_after"] = out.load_avg_after;
  j["hardware_threads"] = std::thread::hardware_concurrency();

  json s;
  s["available"] = out.server_metrics;
  if (out.server_metrics) {
    auto delta = [&](const std::string& name) -> json {
      const auto a = prom_sum(out.before, name), b = prom_sum(out.after, name);
      if (!a || !b) return nullptr;
      return *b - *a;
    };
    json deltas = json::object();
    for (const auto& [series, v] : out.after) {
      if (series.size() < 6 || series.find("_total") == std::string::npos) continue;
      auto it = out.before.find(series);
      deltas[series] = v - (it == out.before.end() ? 0.0 : it->second);
    }
    s["deltas"] = deltas;
    const json steps = delta("tandem_engine_steps_total");
    const json fwd = delta("tandem_step_forward_seconds_total");
    const json other = delta("tandem_step_other_seconds_total");
    const json other_cpu = delta("tandem_step_other_cpu_seconds_total");
    const json gen = delta("tandem_generation_tokens_total");
    const json egen = delta("tandem_engine_generation_tokens_total");
    s["engine_steps"] = steps;
    s["forward_seconds"] = fwd;
    s["other_seconds"] = other;
    s["other_cpu_seconds"] = other_cpu;
    s["generation_tokens"] = gen;
    s["engine_generation_tokens"] = egen;
    s["prompt_tokens"] = delta("tandem_prompt_tokens_total");
    s["engine_prompt_tokens"] = delta("tandem_engine_prompt_tokens_total");
    s["cpu_attention_seconds"] = delta("tandem_cpu_attention_seconds_total");
    s["cpu_attention_wait_seconds"] = delta("tandem_cpu_attention_wait_seconds_total");
    s["preemptions"] = delta("tandem_preemptions_total");
    if (fwd.is_number() && other.is_number()) {
      const double f = fwd.get<double>(), o = other.get<double>();
      s["other_fraction"] = f + o > 0 ? o / (f + o) : 0.0;
      s["busy_fraction"] = (f + o) / dur;  // of the benchmark's wall time
      if (other_cpu.is_number())           // the engine thread's own work outside the forward pass
        s["other_cpu_fraction"] = f + o > 0 ? other_cpu.get<double>() / (f + o) : 0.0;
    }
    if (steps.is_number() && steps.get<double>() > 0) {
      const double st = steps.get<double>();
      if (fwd.is_number()) s["forward_ms_per_step"] = fwd.get<double>() / st * 1e3;
      if (other.is_number()) s["other_ms_per_step"] = other.get<double>() / st * 1e3;
      if (other_cpu.is_number()) s["other_cpu_ms_per_step"] = other_cpu.get<double>() / st * 1e3;
      if (egen.is_number()) s["tokens_per_step"] = egen.get<double>() / st;
    }
    if (gen.is_number()) s["output_throughput"] = gen.get<double>() / dur;
  }
  j["server"] = s;
  return j;
}

std::string format_table(const nlohmann::json& j) {
  std::string out;
  char buf[160];
  auto line = [&](const char* label, const std::string& v) {
    std::snprintf(buf, sizeof buf, "%-40s %s\n", label, v.c_str());
    out += buf;
  };
  auto num = [](const json& v, int digits) -> std::string {
    if (!v.is_number()) return v.is_null() ? "n/a" : v.dump();
    char b[64];
    std::snprintf(b, sizeof b, "%.*f", digits, v.get<double>());
    return b;
  };
  auto rule = [&](const std::string& title) {
    const size_t w = 50, pad = (w - std::min(w, title.size() + 2)) / 2;
    std::string s(pad, '-');
    s += title.empty() ? "--" : " " + title + " ";
    s += std::string(w - std::min(w, s.size()), '-');
    out += s + "\n";
  };
  out += "============ Serving Benchmark Result ============\n";
  line("Successful requests:", num(j["completed"], 0));
  line("Failed requests:", num(j["failed"], 0));
  line("Maximum request concurrency:", num(j["max_concurrency"], 0));
  line("Request rate (req/s):", j["request_rate"].is_string() ? j["request_rate"].get<std::string>()
                                                              : num(j["request_rate"], 2));
  line("Benchmark duration (s):", num(j["duration"], 2));
  line("Total input tokens:", num(j["total_input_tokens"], 0));
  line("Total generated tokens:", num(j["total_output_tokens"], 0));
  line("Request throughput (req/s):", num(j["request_throughput"], 2));
  if (!j["request_goodput"].is_null())
    line("Request goodput (req/s):", num(j["request_goodput"], 2));
  line("Input token throughput (tok/s):", num(j["input_throughput"], 2));
  line("Output token throughput (tok/s):", num(j["output_throughput"], 2));
  line("Total token throughput (tok/s):", num(j["total_token_throughput"], 2));
  const std::map<std::string, std::pair<std::string, std::string>> titles = {
      {"ttft", {"Time to First Token", "TTFT"}},
      {"tpot", {"Time per Output Token (excl. 1st token)", "TPOT"}},
      {"itl", {"Inter-token Latency", "ITL"}},
      {"e2el", {"End-to-end Latency", "E2EL"}}};
  for (const auto& m : j["percentile_metrics"]) {
    const std::string name = m.get<std::string>();
    auto t = titles.find(name);
    if (t == titles.end()) continue;
    rule(t->second.first);
    const std::string& u = t->second.second;
    line(("Mean " + u + " (ms):").c_str(), num(j["mean_" + name + "_ms"], 2));
    line(("Median " + u + " (ms):").c_str(), num(j["median_" + name + "_ms"], 2));
    for (const auto& p : j["metric_percentiles"]) {
      std::ostringstream key, label;
      key << "p" << p.get<double>() << "_" << name << "_ms";
      label << "P" << p.get<double>() << " " << u << " (ms):";
      line(label.str().c_str(), num(j[key.str()], 2));
    }
  }
  const json& s = j["server"];
  rule("Server (from /metrics)");
  if (!s.value("available", false)) {
    line("Server metrics:", "not available (no Tandem /metrics)");
  } else {
    line("Engine steps:", num(s["engine_steps"], 0));
    line("Generated tokens (server):", num(s["generation_tokens"], 0));
    line("Output token throughput (server):", num(s.value("output_throughput", json()), 2));
    line("Tokens per step (mean batch):", num(s.value("tokens_per_step", json()), 2));
    line("Forward ms per step:", num(s.value("forward_ms_per_step", json()), 3));
    line("Outside-forward ms per step:", num(s.value("other_ms_per_step", json()), 3));
    line("Outside-forward fraction of step:", num(s.value("other_fraction", json()), 4));
    line("  of it engine-thread CPU (ms per step):",
         num(s.value("other_cpu_ms_per_step", json()), 3));
    line("  engine-thread CPU fraction of step:", num(s.value("other_cpu_fraction", json()), 4));
    line("Engine busy fraction of duration:", num(s.value("busy_fraction", json()), 3));
    line("Preemptions:", num(s["preemptions"], 0));
  }
  line("Load average (1 min, before/after):",
       num(j["load_avg_1m_before"], 2) + " / " + num(j["load_avg_1m_after"], 2));
  out += "==================================================\n";
  return out;
}

}  // namespace tandem::bench
