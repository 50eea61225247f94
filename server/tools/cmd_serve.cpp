// `tandem serve`: loads a model, starts the engine and the OpenAI-compatible HTTP server.
// Every option may also come from a JSON config file (--config FILE, keys are option names, read
// by server/options.cpp); the command line wins. SIGINT/SIGTERM: stop accepting, let running
// requests finish for up to
// --shutdown-grace seconds, cancel the rest, exit 0.
#include <pthread.h>
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/cpu/isa.h"
#include "kvstore/kv_store.h"
#include "server/chat_template.h"
#include "server/http_server.h"
#include "server/options.h"
#include "server/tool_calls/tool_format.h"
#include "server/tools/commands.h"
#include "server/tools/device_check.h"
#include "server/tools/kv_options.h"

namespace tandem {

namespace {

namespace fs = std::filesystem;

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
  g.kv_host_bytes_used = m.kv_host_bytes_used;
  g.kv_host_bytes_budget = m.kv_host_bytes_budget;
  g.prefix_queried_tokens = m.prefix_queried_tokens;
  g.prefix_hit_tokens = m.prefix_hit_tokens;
  g.prefix_cached_blocks = m.prefix_cached_blocks;
  g.prefix_evicted_blocks = m.prefix_evicted_blocks;
  g.similarity_reuse_lookups = m.similarity_reuse_lookups;
  g.similarity_reuse_hits = m.similarity_reuse_hits;
  g.cpu_compute_ratio = m.cpu_compute_ratio;
  g.recalls = m.recalls;
  g.recall_blocks = m.recall_blocks;
  g.recall_bytes = m.recall_bytes;
  g.mean_recall_interval = m.mean_recall_interval;
  g.value_offload_logits = m.value_offload_logits;
  g.value_offload_err_sum = m.value_offload_err_sum;
  g.value_offload_err_max = m.value_offload_err_max;
  g.host_kv_bytes_read = m.host_kv_bytes_read;
  return g;
}

}  // namespace

int cmd_serve(const Options& f) {
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

  auto log = spdlog::get("server");
  if (!log) log = spdlog::stderr_color_mt("server");
  spdlog::set_level(spdlog::level::from_str(f.str("log-level")));

  const KvConfig kv_cfg = kv_config_of(f);
  const std::string dir = f.str("model");
  const auto threads = ThreadLimit(f.integer("threads"));
  const auto t_load = std::chrono::steady_clock::now();
  log->info("loading {} ...", dir);
  LoadedModel loaded = load_model(f, dir, [&](const std::string& w) { log->warn("{}", w); });
  auto& model = loaded.model;
  const Tokenizer tok = Tokenizer::load(dir);
  const ChatTemplate tmpl = ChatTemplate::from_model_dir(dir);
  const ModelConfig& c = model->config();
  log->info(
      "loaded {} ({} layers, {:.1f}M parameters) on the {} backend{} in {:.1f} s; chat "
      "template: {}",
      arch_name(c.arch), c.n_layer, static_cast<double>(c.n_params()) / 1e6, loaded.backend->name(),
      loaded.backend->name() == "cpu"
          ? " (CPU kernels: " + std::string(cpu::isa_name(cpu::active_isa())) + " on " +
                cpu::describe_cpu_id() + "; weights " + model->weight_memory_note() + ")"
          : std::string(),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count(),
      tmpl.is_fallback() ? "ChatML fallback" : "the model's");

  EngineOptions eo;
  eo.max_batch = static_cast<int32_t>(f.integer("max-batch"));
  eo.max_model_len =
      static_cast<int32_t>(f.integer_in("max-model-len", c.max_context, 1, c.max_context));
  eo.max_waiting = static_cast<int32_t>(f.integer("max-waiting"));
  eo.prefill_chunk = static_cast<int32_t>(f.integer("prefill-chunk"));
  eo.step_token_budget = static_cast<int32_t>(f.integer("step-token-budget"));
  eo.seed = static_cast<uint64_t>(
      f.integer("seed", static_cast<int64_t>(std::random_device{}() & 0x7fffffff)));
  KvStore store(model->backend(), model->kv_shape(), kv_cfg, eo.max_batch, eo.max_model_len);
  log->info("kv: {}; max batch {}, max model len {}, max waiting {}", store.config().describe(),
            eo.max_batch, eo.max_model_len, eo.max_waiting);
  if (!kv_cfg.dense) {
    constexpr double kGiB = double(int64_t{1} << 30);
    log->info(
        "kv budgets: host tier {:.2f} GiB ({} blocks of {} KiB{}), device pool {:.3f} GiB ({} "
        "blocks); prefix cache {}",
        static_cast<double>(store.host_budget_bytes()) / kGiB, store.host_blocks_limit(),
        store.host_block_bytes() / 1024, kv_cfg.host_gib > 0 ? "" : ", half of MemAvailable",
        static_cast<double>(store.device_blocks_total() * store.device_block_bytes()) / kGiB,
        store.device_blocks_total(), kv_cfg.prefix_cache ? "on" : "off");
  }
  Engine engine(*model, tok, store, eo);

  HttpOptions ho;
  ho.host = f.str("host");
  ho.port = static_cast<int>(f.integer("port"));
  ho.api_key = f.str("api-key");
  ho.metrics_public = f.flag("metrics-public");
  ho.allowed_origins.clear();
  for (std::string o : f.list("allowed-origins")) {  // "a, b": items may carry spaces
    o.erase(0, o.find_first_not_of(' '));
    o.erase(o.find_last_not_of(' ') + 1);
    if (!o.empty()) ho.allowed_origins.push_back(std::move(o));
  }
  ho.conn.max_body_bytes = static_cast<size_t>(f.integer("max-body-bytes"));
  ho.conn.max_header_bytes = static_cast<size_t>(f.integer("max-header-bytes"));
  ho.conn.request_timeout_s = f.number("request-timeout");
  ho.sse_keepalive_s = f.number("sse-keepalive-seconds");
  ho.conn.keep_alive_s = static_cast<int>(f.integer("keep-alive-timeout"));
  // One worker per open connection: room for a full batch, the queue and a few more.
  ho.conn.workers =
      static_cast<int>(f.integer("http-threads", std::min<int64_t>(eo.max_batch + 64, 1024)));
  ho.sampling_defaults.temperature = c.gen.temperature;
  ho.sampling_defaults.top_p = c.gen.top_p;
  ho.sampling_defaults.top_k = c.gen.top_k;
  ho.sampling_defaults.repetition_penalty = c.gen.repetition_penalty;
  openai::ModelInfo mi;
  mi.tokenizer = &tok;
  mi.chat_template = &tmpl;
  mi.tool_format = tool_calls::resolve_tool_format(f.str("tool-call-parser"), tmpl.source());
  mi.reasoning_format =
      tool_calls::resolve_reasoning_format(f.str("reasoning-parser"), tmpl.source());
  log->info("tool calls: {}; reasoning: {}", tool_calls::tool_format_name(mi.tool_format),
            tool_calls::reasoning_format_name(mi.reasoning_format));
  mi.max_model_len = engine.max_model_len();
  mi.served_name = f.has("served-model-name")
                       ? f.str("served-model-name")
                       : fs::path(dir).lexically_normal().filename().string();
  if (mi.served_name.empty()) mi.served_name = fs::path(dir).parent_path().filename().string();
  ServerHooks hooks;
  hooks.submit = [&engine](GenerationRequest r) { return engine.submit(std::move(r)); };
  hooks.gauges = [&engine] { return gauges_of(engine.metrics()); };
  HttpServer server(ho, mi, hooks);
  server.bind();
  const double grace = f.number("shutdown-grace");

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
