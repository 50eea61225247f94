// `tandem bench`: load-tests an OpenAI-compatible server with the flags of `vllm bench serve`
// (random dataset): prints progress on stderr, the result table on stdout and, with
// --save-result FILE (or vllm's bare --save-result [--result-dir D] [--result-filename F]), the
// same figures as JSON. The client itself lives in server/bench_client.*.
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>

#include "engine/tokenizer/tokenizer.h"
#include "kernels/common.h"
#include "server/bench_client.h"
#include "server/cli.h"
#include "server/commands.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

// vllm's --goodput takes several words ("ttft:300 tpot:50"): they are joined into one value here
// so that the common flag parser sees `--goodput "ttft:300 tpot:50"`.
std::vector<std::string> join_goodput(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    out.push_back(args[i]);
    if (args[i] != "--goodput") continue;
    std::string v;
    while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0)
      v += (v.empty() ? "" : " ") + args[++i];
    out.push_back(v);
  }
  return out;
}

// --save-result takes a file here; in vllm it is a switch with --result-dir/--result-filename.
// A bare --save-result (followed by another flag or nothing) is read the vllm way.
std::vector<std::string> vllm_save_result(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    out.push_back(args[i]);
    if (args[i] == "--save-result" && (i + 1 == args.size() || args[i + 1].rfind("--", 0) == 0))
      out.push_back("");  // the name comes from --result-dir/--result-filename
  }
  return out;
}

std::map<std::string, double> parse_goodput(const std::string& s) {
  std::map<std::string, double> out;
  std::string text = s;
  std::replace(text.begin(), text.end(), ',', ' ');
  std::istringstream in(text);
  std::string item;
  while (in >> item) {
    const size_t colon = item.find(':');
    TANDEM_REQUIRE(colon != std::string::npos, kInvalidArgument,
                   "--goodput takes METRIC:MS pairs (ttft, tpot, e2el), got \"", item, "\"");
    const std::string name = item.substr(0, colon);
    TANDEM_REQUIRE(name == "ttft" || name == "tpot" || name == "e2el", kInvalidArgument,
                   "--goodput: unknown metric \"", name, "\" (ttft, tpot or e2el)");
    char* end = nullptr;
    const std::string v = item.substr(colon + 1);
    const double ms = std::strtod(v.c_str(), &end);
    TANDEM_REQUIRE(end != v.c_str() && *end == '\0' && std::isfinite(ms) && ms > 0,
                   kInvalidArgument, "--goodput: \"", v, "\" is not a positive number of ms");
    out[name] = ms;
  }
  TANDEM_REQUIRE(!out.empty(), kInvalidArgument, "--goodput needs at least one METRIC:MS pair");
  return out;
}

double parse_rate(const std::string& s) {
  if (s == "inf" || s == "Inf" || s == "INF") return 0;
  char* end = nullptr;
  const double r = std::strtod(s.c_str(), &end);
  TANDEM_REQUIRE(end != s.c_str() && *end == '\0' && (r > 0 || std::isinf(r)), kInvalidArgument,
                 "--request-rate must be a positive number or inf, got \"", s, "\"");
  return std::isinf(r) ? 0 : r;
}

}  // namespace

int cmd_bench(const std::vector<std::string>& args) {
  signal(SIGPIPE, SIG_IGN);
  const std::set<std::string> values = {"base-url",
                                        "host",
                                        "port",
                                        "endpoint",
                                        "model",
                                        "served-model-name",
                                        "tokenizer",
                                        "num-prompts",
                                        "max-concurrency",
                                        "request-rate",
                                        "burstiness",
                                        "random-input-len",
                                        "random-output-len",
                                        "random-range-ratio",
                                        "api-key",
                                        "percentile-metrics",
                                        "metric-percentiles",
                                        "goodput",
                                        "seed",
                                        "save-result",
                                        "temperature",
                                        "timeout",
                                        "backend",
                                        "dataset-name",
                                        "result-dir",
                                        "result-filename"};
  const std::set<std::string> bools = {"ignore-eos",       "stream", "no-stream",
                                       "no-warmup",        "quiet",  "disable-tqdm",
                                       "trust-remote-code"};
  const Flags f(join_goodput(vllm_save_result(args)), values, bools);
  bench::BenchConfig cfg;
  if (f.has("base-url")) {
    cfg.base_url = f.str("base-url");
  } else {
    cfg.base_url = "http://" + f.str("host", "127.0.0.1") + ":" +
                   std::to_string(f.integer("port", 8000, 1, 65535));
  }
  bench::split_url(cfg.base_url);  // validates
  const std::string backend = f.str("backend", "openai");
  TANDEM_REQUIRE(backend == "openai" || backend == "vllm" || backend == "openai-chat",
                 kInvalidArgument, "--backend must be openai, vllm or openai-chat");
  cfg.endpoint =
      f.str("endpoint", backend == "openai-chat" ? "/v1/chat/completions" : "/v1/completions");
  TANDEM_REQUIRE(
      cfg.endpoint == "/v1/completions" || cfg.endpoint == "/v1/chat/completions", kInvalidArgument,
      "--endpoint must be /v1/completions or /v1/chat/completions, got \"", cfg.endpoint, "\"");
  TANDEM_REQUIRE(f.str("dataset-name", "random") == "random", kInvalidArgument,
                 "--dataset-name: only the random dataset is built in");
  cfg.num_prompts = static_cast<int32_t>(f.integer("num-prompts", 1000, 1, 1 << 24));
  cfg.max_concurrency = static_cast<int32_t>(f.integer("max-concurrency", 0, 0, 4096));
  cfg.request_rate = parse_rate(f.str("request-rate", "inf"));
  cfg.burstiness = f.number("burstiness", 1.0, 1e-3, 1e3);
  cfg.input_len = static_cast<int32_t>(f.integer("random-input-len", 1024, 1, 1 << 24));
  cfg.output_len = static_cast<int32_t>(f.integer("random-output-len", 128, 1, 1 << 24));
  cfg.range_ratio = f.number("random-range-ratio", 0.0, 0.0, 0.999);
  cfg.ignore_eos = f.flag("ignore-eos");
  TANDEM_REQUIRE(!(f.flag("stream") && f.flag("no-stream")), kInvalidArgument,
                 "--stream and --no-stream exclude each other");
  cfg.stream = !f.flag("no-stream");
  cfg.api_key = f.str("api-key", "");
  if (cfg.api_key.empty())
    if (const char* k = std::getenv("OPENAI_API_KEY")) cfg.api_key = k;
  cfg.temperature = f.number("temperature", 0.0, 0.0, 100.0);
  cfg.timeout_s = f.number("timeout", 600, 1, 86400);
  cfg.seed = static_cast<uint64_t>(f.integer("seed", 0, 0, INT64_MAX));
  cfg.warmup = !f.flag("no-warmup");
  cfg.progress = !f.flag("quiet") && !f.flag("disable-tqdm");
  cfg.percentile_metrics = split(f.str("percentile-metrics", "ttft,tpot,itl"), ',');
  for (const auto& m : cfg.percentile_metrics)
    TANDEM_REQUIRE(m == "ttft" || m == "tpot" || m == "itl" || m == "e2el", kInvalidArgument,
                   "--percentile-metrics: unknown metric \"", m, "\" (ttft, tpot, itl, e2el)");
  cfg.metric_percentiles.clear();
  for (const auto& p : split(f.str("metric-percentiles", "99"), ',')) {
    char* end = nullptr;
    const double v = std::strtod(p.c_str(), &end);
    TANDEM_REQUIRE(end != p.c_str() && *end == '\0' && v >= 0 && v <= 100, kInvalidArgument,
                   "--metric-percentiles: \"", p, "\" is not a number in [0, 100]");
    cfg.metric_percentiles.push_back(v);
  }
  if (f.has("goodput")) cfg.goodput_ms = parse_goodput(f.str("goodput"));

  // --model: a served name, or a model folder (its tokenizer builds the prompts; the name sent
  // is then the server's own, from /v1/models).
  std::string model = f.str("model", "");
  std::string tok_dir = f.str("tokenizer", "");
  const bool model_is_dir = !model.empty() && fs::is_directory(model);
  if (model_is_dir && tok_dir.empty()) tok_dir = model;
  if (f.has("served-model-name")) {
    cfg.model = f.str("served-model-name");
  } else if (!model.empty() && !model_is_dir) {
    cfg.model = model;
  } else if (auto served = bench::served_model(cfg)) {
    cfg.model = *served;
  } else if (model_is_dir) {
    cfg.model = fs::path(model).lexically_normal().filename().string();
  }
  std::unique_ptr<Tokenizer> tok;
  if (!tok_dir.empty()) tok = std::make_unique<Tokenizer>(Tokenizer::load(tok_dir));

  if (cfg.progress)
    std::fprintf(stderr,
                 "[bench] %s%s, model '%s', %d prompts of %d+%d tokens (%s), concurrency %s, "
                 "rate %s\n",
                 cfg.base_url.c_str(), cfg.endpoint.c_str(), cfg.model.c_str(), cfg.num_prompts,
                 cfg.input_len, cfg.output_len, tok ? "tokenizer" : "word list",
                 cfg.max_concurrency > 0 ? std::to_string(cfg.max_concurrency).c_str() : "inf",
                 cfg.request_rate > 0 ? std::to_string(cfg.request_rate).c_str() : "inf");
  const auto prompts = bench::make_random_prompts(cfg, tok.get());
  bench::BenchOutcome out = bench::run_benchmark(cfg, prompts, tok.get());
  out.tokenizer = tok_dir;
  const nlohmann::json report = bench::report_json(cfg, out);
  std::fputs(bench::format_table(report).c_str(), stdout);
  std::fflush(stdout);
  if (cfg.progress)
    for (const auto& r : out.results)
      if (!r.success) {
        std::fprintf(stderr, "[bench] first error: %s\n", r.error.c_str());
        break;
      }
  if (f.has("save-result") || f.has("result-filename")) {
    std::string path = f.str("save-result");
    if (path.empty()) {
      // vllm's default name: backend-rateqps[-concurrencyC]-model-date.json
      path = f.str("result-filename", "");
      if (path.empty()) {
        std::ostringstream rate;
        if (cfg.request_rate > 0)
          rate << cfg.request_rate;
        else
          rate << "inf";
        std::string name = fs::path(cfg.model).filename().string();
        path =
            report["backend"].get<std::string>() + "-" + rate.str() + "qps" +
            (cfg.max_concurrency > 0 ? "-concurrency" + std::to_string(cfg.max_concurrency) : "") +
            "-" + (name.empty() ? "model" : name) + "-" + report["date"].get<std::string>() +
            ".json";
      }
      if (f.has("result-dir")) path = (fs::path(f.str("result-dir")) / path).string();
    }
    std::ofstream o(path);
    TANDEM_REQUIRE(o, kIo, "--save-result: cannot write ", path);
    o << report.dump(2) << "\n";
    TANDEM_REQUIRE(o.good(), kIo, "--save-result: error writing ", path);
  }
  return 0;
}

}  // namespace tandem
