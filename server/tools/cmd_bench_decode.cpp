// `tandem bench-decode`: prefill and decode speed of the forward pass at several batch sizes and
// context depths, dense or hybrid KV, one JSON line per (batch, depth). Not a test.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <utility>

#include "kernels/cpu/membw.h"
#include "kernels/cuda/emulator.h"
#include "kvstore/kv_store.h"
#include "models/model.h"
#include "server/options.h"
#include "server/tools/commands.h"
#include "server/tools/device_check.h"
#include "server/tools/kv_options.h"

namespace tandem {
namespace {

// --batch: sizes, or "max" (returned as 0): the largest batch whose KV fits.
std::vector<int64_t> batches_of(const Options& o) {
  std::vector<int64_t> out;
  for (const std::string& item : o.list("batch"))
    out.push_back(item == "max" ? 0 : std::stoll(item));  // checked by the option table
  return out;
}

// KV bytes one sequence of `tokens` tokens holds in backend memory and in host memory under cfg
// (a hybrid store on a backend the host cannot read also keeps a host mirror of its device
// blocks).
struct KvFootprint {
  int64_t device = 0, host = 0;
};

KvFootprint kv_footprint(const KvShape& s, const KvConfig& cfg, int32_t tokens, bool mirrored) {
  KvFootprint f;
  if (cfg.dense) {
    f.device =
        2 * int64_t{s.n_layer} * tokens * s.n_head_kv * s.head_dim * dtype_size(cfg.kv_dtype);
    return f;
  }
  const BlockLayout layout{cfg.block, s.n_head_kv, s.head_dim, cfg.kv_dtype,
                           cfg.value_offload ? cfg.key_bits : 0};
  f.device = HybridKv::device_blocks_for(cfg, s.n_layer, tokens) * layout.dev_bytes();
  const int32_t sinks = cfg.window == 0 ? 0 : std::min(cfg.sinks, cfg.block);
  const int64_t host_tokens = std::max<int64_t>(0, tokens - sinks - cfg.window);
  f.host = (host_tokens + cfg.block - 1) / cfg.block * s.n_layer * layout.host_bytes();
  if (mirrored) f.host += f.device;
  return f;
}

constexpr int64_t kMaxBatchCap = 1024;  // --batch max stops here (then "batch_limit": "cap")

// The largest batch whose KV fits beside what is allocated now, keeping `reserve` bytes free in
// each memory (workspace growth, allocator slack), and what limits it ("device", "host",
// "cap"); 0 when not even one sequence fits. On a host-accessible backend both tiers draw from
// the one host memory ("host").
std::pair<int64_t, std::string> max_batch(const Backend& backend, const KvFootprint& per_seq,
                                          int64_t reserve) {
  const MemoryInfo host = host_memory_info();
  double fit = 0;
  std::string limit = "host";
  if (backend.host_accessible()) {
    fit = static_cast<double>(host.free_bytes - reserve) /
          static_cast<double>(std::max<int64_t>(1, per_seq.device + per_seq.host));
  } else {
    const MemoryInfo dev = backend.memory_info();
    fit = static_cast<double>(dev.free_bytes - reserve) /
          static_cast<double>(std::max<int64_t>(1, per_seq.device));
    limit = "device";
    const double host_fit = per_seq.host > 0 ? static_cast<double>(host.free_bytes - reserve) /
                                                   static_cast<double>(per_seq.host)
                                             : 1e18;
    if (host_fit < fit) {
      fit = host_fit;
      limit = "host";
    }
  }
  if (fit >= static_cast<double>(kMaxBatchCap)) return {kMaxBatchCap, "cap"};
  return {std::max<int64_t>(0, static_cast<int64_t>(fit)), limit};
}

}  // namespace

// The SIMT emulator's counters of the timed decode steps, per step (kernels/cuda/emulator.h);
// scripts/gpu_model.py reads them.
static nlohmann::json emulator_json(const CudaEmulatorCounters& c, double steps) {
  const auto per = [steps](double v) { return v / steps; };
  nlohmann::json kernels = nlohmann::json::object();
  for (const auto& [name, k] : c.kernels)
    kernels[name] = {{"launches", per(k.launches)},
                     {"blocks", per(k.blocks)},
                     {"threads", per(k.threads)},
                     {"device_read_bytes", per(k.device_read_bytes)},
                     {"device_write_bytes", per(k.device_write_bytes)},
                     {"mapped_read_bytes", per(k.mapped_read_bytes)},
                     {"mapped_write_bytes", per(k.mapped_write_bytes)}};
  return {{"steps", steps},
          {"settings", cuda_emulator_settings()},
          {"per_step",
           {{"launches", per(c.launches)},
            {"copies", per(c.copies)},
            {"h2d_bytes", per(c.h2d_bytes)},
            {"d2h_bytes", per(c.d2h_bytes)},
            {"d2d_bytes", per(c.d2d_bytes)},
            {"memset_bytes", per(c.memset_bytes)},
            {"host_syncs", per(c.host_syncs)},
            {"host_sync_seconds", per(c.host_sync_seconds)},
            {"kernel_device_read_bytes", per(c.kernel_device_read_bytes)},
            {"kernel_device_write_bytes", per(c.kernel_device_write_bytes)},
            {"kernel_mapped_read_bytes", per(c.kernel_mapped_read_bytes)},
            {"kernel_mapped_write_bytes", per(c.kernel_mapped_write_bytes)},
            {"cublas_calls", per(c.cublas_calls)},
            {"cublas_flops", per(c.cublas_flops)},
            {"cublas_bytes", per(c.cublas_bytes)}}},
          {"kernels_per_step", kernels}};
}

int cmd_bench_decode(const Options& f) {
  using Clock = std::chrono::steady_clock;
  const ThreadLimit limit(f.integer("threads"));
  // Without KV options the cache is the dense one (the forward pass alone); any KV option selects
  // the store those options describe, as `serve` would build it.
  const bool any_kv = any_kv_option(f) || f.has("window-frac");
  KvConfig kv_cfg = kv_config_of(f);
  if (!any_kv) kv_cfg.dense = true;
  // --window-frac F: the device window of each depth is F x (depth + gen) tokens, rounded up to
  // a block (F = 1: every token on the device, the all-on-device baseline of the hybrid store).
  const double window_frac = f.number("window-frac");
  TANDEM_REQUIRE(!(f.has("window-frac") && (kv_cfg.dense || f.has("window"))), kInvalidArgument,
                 "--window-frac sets the window of a hybrid store: not with --dense or --window");
  // --fill prefill: the context is built by chunked prefill (the real path, quadratic in the
  // depth); import: random K/V rows are stored directly (SequenceKv::import_kv), for the
  // decode speed at depths whose prefill would take too long. Decode does the same work either
  // way, except that hgca selects no imported host entry (they carry no MAW).
  const std::string fill = f.str("fill");
  const int64_t reserve = static_cast<int64_t>(f.number("reserve-gib") * double(int64_t{1} << 30));
  LoadedModel loaded = load_model(f, f.str("model"), [](const std::string& w) {
    std::fprintf(stderr, "tandem: warning: %s\n", w.c_str());
  });
  auto& model = loaded.model;
  Backend* backend = loaded.backend.get();
  const ModelConfig& c = model->config();
  const KvShape shape = model->kv_shape();
  // --depth: tokens already in the cache when decoding starts (llama-bench -d); each depth is
  // filled into fresh sequences. Without it, one depth: --prompt-len.
  std::vector<int64_t> depths;
  if (f.has("depth")) {
    depths = f.int_list("depth");
  } else {
    depths = {f.integer_in("prompt-len", 128, 1, c.max_context - 1)};
  }
  const int64_t max_depth = *std::max_element(depths.begin(), depths.end());
  TANDEM_REQUIRE(max_depth < c.max_context, kInvalidArgument, "--depth ", max_depth,
                 " does not fit the model's context of ", c.max_context, " tokens");
  const int32_t gen = static_cast<int32_t>(f.integer_in("gen", 32, 2, c.max_context - max_depth));
  const int32_t chunk = static_cast<int32_t>(f.integer("chunk"));
  // The host read bandwidth is the limit of the CPU backend's decode; on a device it is not.
  // Measured on the kind of pages the weights are read from.
  const bool on_host = backend->host_accessible();
  const bool huge = model->weight_memory() == "huge";
  const double bw = on_host ? measure_read_bandwidth_gbs(static_cast<size_t>(f.integer("bw-bytes")),
                                                         limit.threads(), huge)
                            : 0.0;
  // The prefill's limit: the peak rate of the active CPU kernel path's multiply-add instruction.
  const cpu::Isa isa = cpu::active_isa();
  const double peak = on_host ? measure_peak_gflops(limit.threads(), isa) : 0.0;
  const double step_bytes = static_cast<double>(model->matmul_weight_bytes());
  const std::string policy = kv_cfg.dense ? "dense" : std::string(policy_name(kv_cfg.sparse));

  // Random K/V rows for --fill import, reused for every chunk, layer and sequence.
  const int64_t row = int64_t{shape.n_head_kv} * shape.head_dim;
  std::vector<float> pool_k, pool_v;
  if (fill == "import") {
    pool_k.resize(static_cast<size_t>(chunk * row));
    pool_v.resize(pool_k.size());
    uint64_t x = 99;
    auto normal = [&x] {  // sum of 4 uniforms, scaled to unit variance: roughly normal
      float sum = 0;
      for (int i = 0; i < 4; ++i) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        sum += static_cast<float>((x >> 40) & 0xFFFFFF) / 16777216.0f - 0.5f;
      }
      return sum * 1.7320508f;
    };
    for (float& e : pool_k) e = normal();
    for (float& e : pool_v) e = normal();
  }

  // Warm-up (as llama-bench does): one prefill chunk on a scratch sequence, so that the timed
  // prefill does not pay the first touch of the memory-mapped weights and of the workspaces.
  if (fill == "prefill") {
    const int32_t n = static_cast<int32_t>(std::min<int64_t>(max_depth, chunk));
    auto scratch = model->new_dense_kv(n);
    const std::vector<int32_t> ids(static_cast<size_t>(n), 1);
    const StepSequence warm{scratch.get(), ids, false, false, false};
    model->forward(std::span<const StepSequence>(&warm, 1));
    backend->synchronize();
  }

  for (int64_t batch_arg : batches_of(f)) {
    for (int64_t depth64 : depths) {
      const int32_t depth = static_cast<int32_t>(depth64);
      const int32_t cap = depth + gen + 1;
      KvConfig cfg = kv_cfg;
      if (window_frac > 0)
        cfg.window = static_cast<int32_t>(
            std::max<int64_t>(
                1, static_cast<int64_t>(std::ceil(window_frac * (depth + gen) / cfg.block))) *
            cfg.block);
      cfg.validate();
      // Only hgca keeps a host mirror of the device blocks on a device backend.
      const KvFootprint per_seq = kv_footprint(
          shape, cfg, cap, !on_host && !cfg.dense && cfg.sparse == SparsePolicy::kHgca);
      int64_t batch = batch_arg;
      std::string batch_limit = "given";
      if (batch == 0) {
        std::tie(batch, batch_limit) = max_batch(*backend, per_seq, reserve);
        TANDEM_REQUIRE(batch > 0, kOutOfMemory, "--batch max: not one sequence of ", cap,
                       " tokens fits (", per_seq.device, " device and ", per_seq.host,
                       " host KV bytes per sequence)");
      }
      KvStore store(model->backend(), shape, cfg, static_cast<int32_t>(batch), cap);
      std::vector<std::unique_ptr<SequenceKv>> kvs;
      for (int64_t b = 0; b < batch; ++b) kvs.push_back(store.new_sequence(cap));

      std::vector<StepSequence> step(static_cast<size_t>(batch));
      const auto t0 = Clock::now();
      if (fill == "import") {
        for (auto& kv : kvs) {
          for (int32_t at = 0; at < depth; at += chunk) {
            const int32_t n = std::min(chunk, depth - at);
            for (int32_t l = 0; l < shape.n_layer; ++l)
              kv->import_kv(*backend, l, pool_k.data(), pool_v.data(), n);
            kv->advance(n);
          }
        }
      } else {
        // Prefill: every sequence's next chunk in one step (batched matrix products).
        std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(batch));
        uint64_t x = 12345;
        for (auto& p : prompts)
          for (int32_t i = 0; i < depth; ++i) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            p.push_back(static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(c.vocab_size)));
          }
        for (int32_t at = 0; at < depth; at += chunk) {
          const int32_t n = std::min(chunk, depth - at);
          for (int64_t b = 0; b < batch; ++b)
            step[static_cast<size_t>(b)] = {
                kvs[static_cast<size_t>(b)].get(),
                std::span<const int32_t>(prompts[static_cast<size_t>(b)])
                    .subspan(static_cast<size_t>(at), static_cast<size_t>(n)),
                false, false, at + n == depth};
          model->forward(step);
        }
      }
      backend->synchronize();
      const double fill_s = std::chrono::duration<double>(Clock::now() - t0).count();

      // Decode: gen steps of one token per sequence (token ids fixed: speed does not depend on
      // them), the first one a warm-up.
      std::vector<int32_t> next(static_cast<size_t>(batch), 1);
      for (int64_t b = 0; b < batch; ++b)
        step[static_cast<size_t>(b)] = {kvs[static_cast<size_t>(b)].get(),
                                        std::span<const int32_t>(&next[static_cast<size_t>(b)], 1),
                                        false, true, false};
      model->forward(step);  // warm-up step, not timed
      backend->synchronize();
      const CudaEmulatorCounters emu0 = cuda_emulator_counters();
      HostAttention* ha = store.host_attention();
      const double wait0 = ha ? ha->wait_seconds() : 0.0, busy0 = ha ? ha->busy_seconds() : 0.0;
      std::vector<double> step_s;  // each step's time: the median shrugs off preempted steps
      const auto t1 = Clock::now();
      for (int32_t g = 1; g < gen; ++g) {
        const auto ts = Clock::now();
        model->forward(step);
        step_s.push_back(std::chrono::duration<double>(Clock::now() - ts).count());
      }
      const double decode_s = std::chrono::duration<double>(Clock::now() - t1).count();
      const double steps = gen - 1;
      backend->synchronize();  // after the timing: the counters see every step's work
      const CudaEmulatorCounters emu = cuda_emulator_counters() - emu0;
      const double wait_ms = ha ? (ha->wait_seconds() - wait0) / steps * 1e3 : 0.0;
      const double busy_ms = ha ? (ha->busy_seconds() - busy0) / steps * 1e3 : 0.0;
      const double ms_step = decode_s / steps * 1e3;
      std::sort(step_s.begin(), step_s.end());
      const size_t mid = step_s.size() / 2;
      const double ms_median =
          (step_s.size() % 2 ? step_s[mid] : (step_s[mid - 1] + step_s[mid]) / 2) * 1e3;
      double load = -1;
      if (std::FILE* la = std::fopen("/proc/loadavg", "r")) {
        if (std::fscanf(la, "%lf", &load) != 1) load = -1;
        std::fclose(la);
      }
      HostStats host{};
      for (const auto& kv : kvs) {
        const HostStats st = KvStore::stats_of(*kv);
        host += st;
      }
      nlohmann::json j = {
          {"model", model->dir().filename().string()},
          {"device", std::string(backend->name())},
          {"weights_dtype", std::string(dtype_name(model->weight_dtype()))},
          {"params", c.n_params()},
          {"threads", limit.threads()},
          {"batch", batch},
          {"batch_is_max", batch_arg == 0},
          {"batch_limit", batch_limit},  // given, or what --batch max hit: device, host, cap
          {"depth", depth},
          {"prompt_len", depth},
          {"fill", fill},
          {"kv", cfg.dense ? std::string("dense") : store.config().describe()},
          {"policy", policy},
          {"window", cfg.dense ? 0 : cfg.window},
          {"window_frac", window_frac},
          {"cpu_attn", std::string(cfg.dense ? "none" : mode_name(store.config().cpu_attn))},
          {"kv_dtype", std::string(dtype_name(cfg.kv_dtype))},
          {"device_kv_bytes_per_seq", per_seq.device},
          {"host_kv_bytes_per_seq", per_seq.host},
          {"fill_s", fill_s},
          {"prefill_tokens_per_s", fill == "prefill" && depth > 0 ? batch * depth / fill_s : 0.0},
          {"decode_steps", steps},
          {"decode_tokens_per_s", batch * steps / decode_s},
          {"ms_per_step", ms_step},
          {"ms_per_step_median", ms_median},
          {"decode_tokens_per_s_median", batch / (ms_median * 1e-3)},
          {"host_wait_ms_per_step", wait_ms},
          {"cpu_attn_busy_ms_per_step", busy_ms},
          {"host_fraction_attended", host.attended_fraction()},
          {"weight_bytes_per_step", step_bytes},
          {"weight_bytes_per_token", step_bytes / static_cast<double>(batch)},
          {"weight_read_gbs", step_bytes / (ms_step * 1e-3) / 1e9},
          {"load_avg_1m", load}};
      add_host_stats(j, cfg, host);
      if (cuda_is_emulated() && std::string_view(backend->name()) == "cuda")
        j["emulator"] = emulator_json(emu, steps);
      if (on_host) {
        // Prefill FLOPs: every layer matrix for every token, lm_head for each sequence's last
        // token, causal attention (QK^T and PV: 4 * heads * head_dim per token pair).
        const double lm_head = double(c.vocab_size) * c.embed_dim;
        const double layer_params =
            step_bytes / static_cast<double>(dtype_size(model->weight_dtype())) - lm_head;
        const double attn = 2.0 * c.n_layer * c.n_head_q * c.head_dim * double(depth) * (depth + 1);
        const double flop = batch * (2.0 * layer_params * depth + 2.0 * lm_head + attn);
        const double gflops = fill == "prefill" && depth > 0 ? flop / fill_s / 1e9 : 0.0;
        j["cpu_isa"] = std::string(cpu::isa_name(isa));
        j["weight_memory"] = std::string(model->weight_memory());
        j["peak_gflops"] = peak;
        j["prefill_gflops"] = gflops;
        j["prefill_fraction_of_peak"] = peak > 0 ? gflops / peak : 0.0;
        j["measured_read_bw_gbs"] = bw;
        j["fraction_of_bw"] = step_bytes / (ms_step * 1e-3) / 1e9 / bw;
      }
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace tandem
