// `tandem serve`: loads a model, starts the engine and the OpenAI-compatible HTTP server.
// Every flag may also come from a JSON config file (--config FILE, keys are flag names); flags on
// the command line win. SIGINT/SIGTERM: stop accepting, let running requests finish for up to
// --shutdown-grace seconds, cancel the rest, exit 0.
#include <pthread.h>
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "kvstore/kv_store.h"
#include "server/chat_template.h"
#include "server/cli.h"
#include "server/commands.h"
#include "server/device_check.h"
#include "server/http_server.h"
#include "server/kv_flags.h"

namespace tandem {

namespace {

namespace fs = std::filesystem;

// Finds a config: the path as given, else NAME[.json] in $TANDEM_CONFIG_DIR (the Docker image
// sets it), else in configs/ of the source tree.
fs::path find_config(const std::string& name) {
  if (fs::exists(name)) return name;
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("TANDEM_CONFIG_DIR"); env != nullptr && *env != 0)
    dirs.emplace_back(env);
  dirs.push_back(fs::path(TANDEM_SOURCE_DIR) / "configs");
  std::string tried;
  for (const fs::path& dir : dirs) {
    fs::path p = dir / name;
    if (!p.has_extension()) p += ".json";
    if (fs::exists(p)) return p;
    tried += (tried.empty() ? "" : ", ") + p.string();
  }
  TANDEM_FAIL(kNotFound, "--config: no file \"", name, "\" (nor ", tried, ")");
}

// The config file as flag arguments, to go before the command line's (later values win).
std::vector<std::string> config_args(const std::vector<std::string>& args,
                                     const std::set<std::string>& values,
                                     const std::set<std::string>& bools) {
  std::string name;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config" && i + 1 < args.size()) name = args[i + 1];
    if (args[i].rfind("--config=", 0) == 0) name = args[i].substr(9);
  }
  if (name.empty()) return {};
  const fs::path path = find_config(name);
  std::ifstream in(path);
  TANDEM_REQUIRE(in, kIo, "--config: cannot read ", path.string());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    TANDEM_FAIL(kInvalidArgument, path.string(), ": not valid JSON: ", e.what());
  }
  TANDEM_REQUIRE(j.is_object(), kInvalidArgument, path.string(), ": must be a JSON object");
  std::vector<std::string> out;
  for (const auto& [key, v] : j.items()) {
    std::string flag = key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    if (flag == "config" || flag.rfind("//", 0) == 0 || flag.rfind("#", 0) == 0) continue;
    if (bools.count(flag)) {
      TANDEM_REQUIRE(v.is_boolean(), kInvalidArgument, path.string(), ": \"", key,
                     "\" must be true or false");
      if (v.get<bool>()) out.push_back("--" + flag);
    } else if (values.count(flag)) {
      std::string s;
      if (v.is_string())
        s = v.get<std::string>();
      else if (v.is_number())
        s = v.dump();
      else
        TANDEM_FAIL(kInvalidArgument, path.string(), ": \"", key, "\" must be a string or number");
      out.push_back("--" + flag + "=" + s);
    } else {
      TANDEM_FAIL(kInvalidArgument, path.string(), ": unknown setting \"", key, "\"");
    }
  }
  return out;
}

EngineGauges gauges_of(const EngineMetrics& m) {
  EngineGauges g;
  g.running = m.running;
  g.waiting = m.waiting;
  g.steps = m.steps;
  g.engine_prompt_tokens = m.prompt_tokens;
  g.engine_generation_tokens = m.generation_tokens;
  g.finished_stop = m.finished_stop;
  g.finished_length = m.finished_length;
  g.finished_cancelled = m.finished_cancelled;
  g.finished_error = m.finished_error;
  g.preemptions = m.preemptions;
  g.forward_seconds = m.forward_seconds;
  g.step_other_seconds = m.step_other_seconds;
  g.step_other_cpu_seconds = m.step_other_cpu_seconds;
  g.cpu_attention_seconds = m.cpu_attention_busy_seconds;
  g.cpu_attention_wait_seconds = m.cpu_attention_wait_seconds;
  g.kv_device_blocks_used = m.kv_device_blocks_used;
  g.kv_device_blocks_total = m.kv_device_blocks_total;
  g.kv_host_blocks_used = m.kv_host_blocks_used;
  g.kv_host_blocks_total = m.kv_host_blocks_total;
  return g;
}

}  // namespace

int cmd_serve(const std::vector<std::string>& args) {
  // SIGINT/SIGTERM are taken by one thread with sigwait: block them before any thread starts
  // (threads inherit the mask). SIGUSR1 wakes that thread when the server ends on its own. A
  // client that hangs up must not kill the process with SIGPIPE.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::set<std::string> values = {"model",         "host",
                                  "port",          "config",
                                  "api-key",       "served-model-name",
                                  "max-batch",     "max-model-len",
                                  "max-waiting",   "max-body-bytes",
                                  "http-threads",  "threads",
                                  "prefill-chunk", "step-token-budget",
                                  "seed",          "log-level",
                                  "shutdown-grace"};
  values.insert(kv_value_flags().begin(), kv_value_flags().end());
  std::set<std::string> bools;
  bools.insert(kv_bool_flags().begin(), kv_bool_flags().end());
  std::vector<std::string> all = config_args(args, values, bools);
  all.insert(all.end(), args.begin(), args.end());
  const Flags f(all, values, bools);

  auto log = spdlog::get("server");
  if (!log) log = spdlog::stderr_color_mt("server");
  const std::string level = f.str("log-level", "info");
  const auto lvl = spdlog::level::from_str(level);
  TANDEM_REQUIRE(lvl != spdlog::level::off || level == "off", kInvalidArgument,
                 "--log-level must be trace, debug, info, warn, error or off");
  spdlog::set_level(lvl);

  const KvConfig kv_cfg = parse_kv_flags(f);
  const std::string dir = f.required("model");
  const auto threads = ThreadLimit(f.integer("threads", 0, 0, 4096));
  const auto t_load = std::chrono::steady_clock::now();
  log->info("loading {} ...", dir);
  LoadedModel loaded = load_model(f, dir, [&](const std::string& w) { log->warn("{}", w); });
  auto& model = loaded.model;
  const Tokenizer tok = Tokenizer::load(dir);
  const ChatTemplate tmpl = ChatTemplate::from_model_dir(dir);
  const ModelConfig& c = model->config();
  log->info(
      "loaded {} ({} layers, {:.1f}M parameters) on the {} backend in {:.1f} s; chat "
      "template: {}",
      arch_name(c.arch), c.n_layer, static_cast<double>(c.n_params()) / 1e6, loaded.backend->name(),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count(),
      tmpl.is_fallback() ? "ChatML fallback" : "the model's");

  EngineOptions eo;
  eo.max_batch = static_cast<int32_t>(f.integer("max-batch", eo.max_batch, 1, 4096));
  eo.max_model_len =
      static_cast<int32_t>(f.integer("max-model-len", c.max_context, 1, c.max_context));
  eo.max_waiting = static_cast<int32_t>(f.integer("max-waiting", eo.max_waiting, 0, 1 << 20));
  eo.prefill_chunk = static_cast<int32_t>(f.integer("prefill-chunk", eo.prefill_chunk, 1, 1 << 20));
  eo.step_token_budget =
      static_cast<int32_t>(f.integer("step-token-budget", eo.step_token_budget, 1, 1 << 24));
  eo.seed = static_cast<uint64_t>(
      f.integer("seed", static_cast<int64_t>(std::random_device{}() & 0x7fffffff), 0, INT64_MAX));
  KvStore store(model->backend(), model->kv_shape(), kv_cfg, eo.max_batch, eo.max_model_len);
  log->info("kv: {}; max batch {}, max model len {}, max waiting {}", kv_cfg.describe(),
            eo.max_batch, eo.max_model_len, eo.max_waiting);
  Engine engine(*model, tok, store, eo);

  HttpOptions ho;
  ho.host = f.str("host", "127.0.0.1");
  ho.port = static_cast<int>(f.integer("port", 8000, 0, 65535));
  ho.api_key = f.str("api-key", "");
  ho.max_body_bytes = static_cast<size_t>(
      f.integer("max-body-bytes", static_cast<int64_t>(ho.max_body_bytes), 1, int64_t{1} << 34));
  // One worker per open connection: room for a full batch, the queue and a few more.
  ho.threads = static_cast<int>(
      f.integer("http-threads", std::min<int64_t>(eo.max_batch + 64, 1024), 4, 65536));
  ho.sampling_defaults.temperature = c.gen.temperature;
  ho.sampling_defaults.top_p = c.gen.top_p;
  ho.sampling_defaults.top_k = c.gen.top_k;
  ho.sampling_defaults.repetition_penalty = c.gen.repetition_penalty;
  openai::ModelInfo mi;
  mi.tokenizer = &tok;
  mi.chat_template = &tmpl;
  mi.max_model_len = engine.max_model_len();
  mi.served_name = f.str("served-model-name", fs::path(dir).lexically_normal().filename().string());
  if (mi.served_name.empty()) mi.served_name = fs::path(dir).parent_path().filename().string();
  ServerHooks hooks;
  hooks.submit = [&engine](GenerationRequest r) { return engine.submit(std::move(r)); };
  hooks.gauges = [&engine] { return gauges_of(engine.metrics()); };
  HttpServer server(ho, mi, hooks);
  server.bind();
  const double grace = f.number("shutdown-grace", 5.0, 0, 3600);

  std::atomic<bool> served{false};
  std::thread watcher([&] {
    int sig = 0;
    do {
      sigwait(&sigs, &sig);
      if (served.load()) return;
    } while (sig == SIGUSR1);
    log->info("{}: stopping (running requests get {:.0f} s to finish)", strsignal(sig), grace);
    server.stop();
    const auto t0 = std::chrono::steady_clock::now();
    while (server.active_generations() > 0 && !served.load() &&
           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < grace)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (server.active_generations() > 0) log->info("cancelling the requests still running");
    engine.shutdown(/*cancel_running=*/true);
  });
  server.run();
  served.store(true);
  pthread_kill(watcher.native_handle(), SIGUSR1);
  watcher.join();
  engine.shutdown(/*cancel_running=*/true);
  log->info("stopped");
  return 0;
}

}  // namespace tandem
