// `tandem bench`: load-tests an OpenAI-compatible server with the flags of `vllm bench serve`
// (random and prefix_repetition datasets; multi_turn chats): prints progress on stderr, the result
// table on stdout and, with
// --save-result FILE (or vllm's bare --save-result [--result-dir D] [--result-filename F]), the
// same figures as JSON; with --soak-seconds, the soak mode's summary instead
// (server/tools/bench_soak.h). The client itself is server/tools/bench_*.
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "engine/tokenizer/tokenizer.h"
#include "kernels/common.h"
#include "server/tools/bench_client.h"
#include "server/tools/bench_soak.h"
#include "server/tools/commands.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

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

void save_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream o(path);
  TANDEM_REQUIRE(o, kIo, "--save-result: cannot write ", path);
  o << j.dump(2) << "\n";
  TANDEM_REQUIRE(o.good(), kIo, "--save-result: error writing ", path);
}

// --soak-seconds: the summary on stdout and in --save-result FILE.
int soak(const Options& f, const bench::BenchConfig& cfg,
         const std::vector<bench::BenchPrompt>& prompts) {
  bench::SoakConfig sc;
  sc.seconds = f.number("soak-seconds");
  sc.abort_ratio = f.number("abort-ratio");
  sc.malformed_ratio = f.number("malformed-ratio");
  sc.stream_ratio = f.number("stream-ratio");
  sc.server_pid = static_cast<int>(f.integer("soak-pid"));
  sc.sample_interval = f.number("sample-interval");
  TANDEM_REQUIRE(sc.abort_ratio + sc.malformed_ratio <= 1, kInvalidArgument,
                 "--abort-ratio + --malformed-ratio must be at most 1");
  const nlohmann::json summary = bench::run_soak(cfg, sc, prompts);
  nlohmann::json brief = summary;
  brief.erase("samples");
  std::printf("%s\n", brief.dump(2).c_str());
  if (!f.str("save-result").empty()) save_json(f.str("save-result"), summary);
  return 0;
}

}  // namespace

int cmd_bench(const Options& f) {
  signal(SIGPIPE, SIG_IGN);
  bench::BenchConfig cfg;
  if (f.has("base-url")) {
    cfg.base_url = f.str("base-url");
  } else {
    cfg.base_url = "http://" + f.str("host") + ":" + std::to_string(f.integer("port"));
  }
  bench::split_url(cfg.base_url);  // validates
  const std::string backend = f.str("backend");
  cfg.dataset = f.str("dataset-name");
  const bool multi_turn = cfg.dataset == "multi_turn";
  cfg.endpoint = f.has("endpoint")                        ? f.str("endpoint")
                 : backend == "openai-chat" || multi_turn ? "/v1/chat/completions"
                                                          : "/v1/completions";
  TANDEM_REQUIRE(!multi_turn || cfg.endpoint == "/v1/chat/completions", kInvalidArgument,
                 "--dataset-name multi_turn sends chat messages: --endpoint must be "
                 "/v1/chat/completions");
  TANDEM_REQUIRE(!multi_turn || !f.has("soak-seconds"), kInvalidArgument,
                 "--soak-seconds sends single requests: not with --dataset-name multi_turn");
  cfg.num_prompts = static_cast<int32_t>(f.integer("num-prompts"));
  cfg.max_concurrency = static_cast<int32_t>(f.integer("max-concurrency"));
  cfg.request_rate = parse_rate(f.str("request-rate"));
  cfg.burstiness = f.number("burstiness");
  cfg.input_len = static_cast<int32_t>(f.integer("random-input-len"));
  cfg.output_len = static_cast<int32_t>(f.integer("random-output-len"));
  cfg.range_ratio = f.number("random-range-ratio");
  cfg.prefix_len = static_cast<int32_t>(f.integer("prefix-repetition-prefix-len"));
  cfg.suffix_len = static_cast<int32_t>(f.integer("prefix-repetition-suffix-len"));
  cfg.num_prefixes = static_cast<int32_t>(f.integer("prefix-repetition-num-prefixes"));
  cfg.prefix_output_len = static_cast<int32_t>(f.integer("prefix-repetition-output-len"));
  cfg.turns = static_cast<int32_t>(f.integer("multi-turn-turns"));
  cfg.turn_input_len = static_cast<int32_t>(f.integer("multi-turn-input-len"));
  cfg.turn_output_len = static_cast<int32_t>(f.integer("multi-turn-output-len"));
  cfg.ignore_eos = f.flag("ignore-eos");
  TANDEM_REQUIRE(!(f.flag("stream") && f.flag("no-stream")), kInvalidArgument,
                 "--stream and --no-stream exclude each other");
  cfg.stream = !f.flag("no-stream");
  cfg.api_key = f.str("api-key");
  if (cfg.api_key.empty())
    if (const char* k = std::getenv("OPENAI_API_KEY")) cfg.api_key = k;
  cfg.temperature = f.number("temperature");
  cfg.timeout_s = f.number("timeout");
  cfg.seed = static_cast<uint64_t>(f.integer("seed"));
  cfg.warmup = !f.flag("no-warmup");
  cfg.progress = !f.flag("quiet") && !f.flag("disable-tqdm");
  cfg.percentile_metrics = f.list("percentile-metrics");
  cfg.metric_percentiles = f.number_list("metric-percentiles");
  if (f.has("goodput")) cfg.goodput_ms = parse_goodput(f.str("goodput"));

  // --model: a served name, or a model folder (its tokenizer builds the prompts; the name sent
  // is then the server's own, from /v1/models).
  std::string model = f.str("model");
  std::string tok_dir = f.str("tokenizer");
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

  if (cfg.progress) {
    const std::string shape =
        cfg.dataset == "prefix_repetition"
            ? cat(cfg.num_prompts, " prompts of ", cfg.prefix_len, "+", cfg.suffix_len, "+",
                  cfg.prefix_output_len, " tokens over ", cfg.num_prefixes, " prefixes")
        : multi_turn
            ? cat(cfg.num_prompts, " conversations of ", cfg.turns, " turns of ",
                  cfg.turn_input_len, "+", cfg.turn_output_len, " tokens")
            : cat(cfg.num_prompts, " prompts of ", cfg.input_len, "+", cfg.output_len, " tokens");
    std::fprintf(stderr, "[bench] %s%s, model '%s', %s (%s), concurrency %s, rate %s\n",
                 cfg.base_url.c_str(), cfg.endpoint.c_str(), cfg.model.c_str(), shape.c_str(),
                 tok ? "tokenizer" : "word list",
                 cfg.max_concurrency > 0 ? std::to_string(cfg.max_concurrency).c_str() : "inf",
                 cfg.request_rate > 0 ? std::to_string(cfg.request_rate).c_str() : "inf");
  }
  bench::BenchOutcome out;
  if (multi_turn) {
    out = bench::run_conversations(cfg, bench::make_conversations(cfg, tok.get()), tok.get());
  } else {
    const auto prompts = cfg.dataset == "prefix_repetition"
                             ? bench::make_prefix_repetition_prompts(cfg, tok.get())
                             : bench::make_random_prompts(cfg, tok.get());
    if (f.has("soak-seconds")) return soak(f, cfg, prompts);
    out = bench::run_benchmark(cfg, prompts, tok.get());
  }
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
      path = f.str("result-filename");
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
    save_json(path, report);
  }
  return 0;
}

}  // namespace tandem
