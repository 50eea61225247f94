// The load-test report: vllm's result JSON (same keys) with failed requests, input throughput,
// the prompt tokens the server reports cached, TTFT by turn (multi_turn), the server's metric
// deltas and the machine's load, and the readable table printed from it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <sstream>

#include "server/tools/bench_client.h"
#include "server/tools/bench_http.h"

namespace tandem::bench {

namespace {

using json = nlohmann::json;

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

// usage.prompt_tokens_details.cached_tokens of the successful requests that reported it (the
// field is optional): the sum, and its share of those requests' prompt tokens.
json cache_json(const std::vector<RequestResult>& results) {
  int64_t reported = 0, cached = 0, prompt = 0;
  json per = json::array();
  for (const RequestResult& r : results) {
    per.push_back(r.cached_tokens >= 0 ? json(r.cached_tokens) : json(nullptr));
    if (!r.success || r.cached_tokens < 0) continue;
    ++reported;
    cached += r.cached_tokens;
    prompt += r.prompt_len;
  }
  json j;
  j["cached_tokens_reported"] = reported;
  j["total_cached_tokens"] = reported ? json(cached) : json(nullptr);
  j["cached_token_share"] = reported && prompt > 0
                                ? json(static_cast<double>(cached) / static_cast<double>(prompt))
                                : json(nullptr);
  j["cached_tokens"] = per;
  return j;
}

// multi_turn: TTFT by turn (of the successful requests), and turn 1 against the later ones.
json turns_json(const std::vector<RequestResult>& results) {
  std::map<int32_t, std::vector<double>> ttft;
  std::map<int32_t, std::pair<int64_t, int64_t>> tokens;  // prompt, cached (where reported)
  std::vector<double> later;
  for (const RequestResult& r : results) {
    if (!r.success || r.turn < 0) continue;
    ttft[r.turn].push_back(r.ttft);
    if (r.turn > 0) later.push_back(r.ttft);
    if (r.cached_tokens >= 0) {
      tokens[r.turn].first += r.prompt_len;
      tokens[r.turn].second += r.cached_tokens;
    }
  }
  auto mean_ms = [](const std::vector<double>& v) -> json {
    if (v.empty()) return nullptr;
    double s = 0;
    for (double x : v) s += x;
    return s / static_cast<double>(v.size()) * 1e3;
  };
  json per = json::array();
  for (const auto& [turn, v] : ttft) {
    json t = {{"turn", turn + 1},
              {"completed", v.size()},
              {"mean_ttft_ms", mean_ms(v)},
              {"median_ttft_ms", percentile(v, 50) * 1e3}};
    auto c = tokens.find(turn);
    t["cached_token_share"] =
        c != tokens.end() && c->second.first > 0
            ? json(static_cast<double>(c->second.second) / static_cast<double>(c->second.first))
            : json(nullptr);
    per.push_back(t);
  }
  json j;
  j["turn_stats"] = per;
  j["mean_ttft_first_turn_ms"] = ttft.count(0) ? mean_ms(ttft[0]) : json(nullptr);
  j["mean_ttft_later_turns_ms"] = mean_ms(later);
  return j;
}

}  // namespace

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
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
  j["dataset_name"] = cfg.dataset;
  if (cfg.dataset == "prefix_repetition") {
    j["prefix_repetition_prefix_len"] = cfg.prefix_len;
    j["prefix_repetition_suffix_len"] = cfg.suffix_len;
    j["prefix_repetition_num_prefixes"] = cfg.num_prefixes;
    j["prefix_repetition_output_len"] = cfg.prefix_output_len;
  } else if (cfg.dataset == "multi_turn") {
    j["multi_turn_turns"] = cfg.turns;
    j["multi_turn_input_len"] = cfg.turn_input_len;
    j["multi_turn_output_len"] = cfg.turn_output_len;
  }

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
  j.update(cache_json(out.results));
  if (cfg.dataset == "multi_turn") j.update(turns_json(out.results));
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
  auto pct = [&](const json& share) {
    return share.is_number() ? num(json(share.get<double>() * 100), 1) + "%" : std::string("n/a");
  };
  line("Cached prompt tokens (server):",
       j.value("cached_tokens_reported", 0) > 0
           ? num(j["total_cached_tokens"], 0) + " (" + pct(j["cached_token_share"]) + ")"
           : std::string("not reported"));
  if (j.contains("turn_stats")) {
    rule("Multi-turn");
    line("Mean TTFT, turn 1 (ms):", num(j["mean_ttft_first_turn_ms"], 2));
    line("Mean TTFT, later turns (ms):", num(j["mean_ttft_later_turns_ms"], 2));
    for (const auto& t : j["turn_stats"]) {
      const std::string label = "  turn " + t["turn"].dump() + ", mean TTFT (ms):";
      std::string v = num(t["mean_ttft_ms"], 2);
      if (t["cached_token_share"].is_number())
        v += " (" + pct(t["cached_token_share"]) + " cached)";
      line(label.c_str(), v);
    }
  }
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
