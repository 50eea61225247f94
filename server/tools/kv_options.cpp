// Reading the shared model, device and KV options.
#include "server/tools/kv_options.h"

#include <charconv>

#include "kernels/common.h"
#include "kernels/cuda/cuda_backend.h"

namespace tandem {

int32_t recall_interval_of(const std::string& s) {
  if (s == "auto") return KvConfig::kRecallAuto;
  int64_t n = -1;
  const char* end = s.data() + s.size();
  const auto [p, ec] = std::from_chars(s.data(), end, n);
  TANDEM_REQUIRE(!s.empty() && ec == std::errc() && p == end && n >= 0 && n <= (1 << 24),
                 kInvalidArgument, "--recall-interval must be auto or an integer in [0, ", 1 << 24,
                 "], got \"", s, "\"");
  return static_cast<int32_t>(n);
}

KvConfig kv_config_of(const Options& o) {
  KvConfig c;
  c.dense = o.flag("dense");
  c.sinks = static_cast<int32_t>(o.integer("sinks"));
  c.window = static_cast<int32_t>(o.integer("window"));
  c.block = static_cast<int32_t>(o.integer("block"));
  c.sparse = o.pick<SparsePolicy>("sparse", {{"full", SparsePolicy::kFull},
                                             {"hgca", SparsePolicy::kHgca},
                                             {"topk", SparsePolicy::kTopk},
                                             {"tau", SparsePolicy::kTau}});
  c.hgca_beta = static_cast<float>(o.number("hgca-beta"));
  c.topk_blocks = static_cast<int32_t>(o.integer("topk-blocks"));
  c.tau = static_cast<float>(o.number("tau"));
  c.similarity_reuse = o.flag("similarity-reuse");
  c.reuse_eta = static_cast<float>(o.number("reuse-eta"));
  c.reuse_power = static_cast<float>(o.number("reuse-power"));
  c.value_offload = o.flag("value-offload");
  c.key_bits = o.pick<int32_t>("key-bits", {{"8", 8}, {"4", 4}});
  c.cpu_attn = o.pick<CpuAttnMode>("cpu-attn", {{"auto", CpuAttnMode::kAuto},
                                                {"parallel", CpuAttnMode::kParallel},
                                                {"ahead", CpuAttnMode::kAhead},
                                                {"ahead-oracle", CpuAttnMode::kAheadOracle}});
  c.cpu_threads = static_cast<int32_t>(o.integer("cpu-threads"));
  c.maw_alpha = static_cast<float>(o.number("maw-alpha"));
  c.kv_dtype = o.pick<DType>("kv-dtype",
                             {{"f32", DType::kF32}, {"bf16", DType::kBF16}, {"f16", DType::kF16}});
  c.host_gib = o.number("kv-host-gib");
  c.device_gib = o.number("kv-device-gib");
  c.prefix_cache = !o.flag("no-prefix-cache");
  c.device_budget = static_cast<int32_t>(o.integer("device-budget"));
  c.recall_interval = recall_interval_of(o.str("recall-interval"));
  c.recall_threshold = static_cast<float>(o.number("recall-threshold"));
  c.validate();
  return c;
}

void add_host_stats(nlohmann::json& j, const KvConfig& cfg, const HostStats& host) {
  if (cfg.dense) return;
  j["host_kv_bytes_read"] = host.host_bytes_read;
  if (cfg.similarity_reuse) {
    j["similarity_reuse_lookups"] = host.reuse_lookups;
    j["similarity_reuse_hit_ratio"] = host.reuse_hit_ratio();
  }
  if (cfg.value_offload) {
    j["key_bits"] = cfg.key_bits;
    j["quant_logits_sampled"] = host.quant_logits;
    j["quant_logit_abs_err_mean"] = host.quant_err_mean();
    j["quant_logit_abs_err_max"] = host.quant_err_max;
  }
  if (cfg.sparse != SparsePolicy::kTopk) return;
  j["cpu_compute_ratio"] = host.cpu_compute_ratio();
  if (cfg.device_budget == 0) return;
  j["device_budget"] = cfg.device_budget;
  if (cfg.recall_interval == KvConfig::kRecallAuto)
    j["recall_interval"] = "auto";
  else
    j["recall_interval"] = cfg.recall_interval;
  j["recall_threshold"] = cfg.recall_threshold;
  j["recalls"] = host.recalls;
  j["recall_blocks"] = host.recall_blocks;
  j["recall_bytes"] = host.recall_bytes;
  j["mean_recall_interval"] = host.mean_recall_interval();
}

bool any_kv_option(const Options& o) {
  for (const OptionSpec* s : options_of(o.command()))
    if (s->group == OptGroup::kKv && o.has(s->name)) return true;
  return false;
}

std::unique_ptr<Backend> make_backend(const Options& o) {
  const std::string device = o.str("device");
  if (device == "cpu") return make_cpu_backend();
  const CudaDeviceInfo info = cuda_device_info();  // count 0 in a build without CUDA
  if (device == "auto")
    // The SIMT emulator is a GPU for tests and counters, far slower than the CPU backend: only
    // an explicit --device cuda picks it.
    return info.count > 0 && info.runs_kernels && !info.emulated ? make_cuda_backend()
                                                                 : make_cpu_backend();
#ifdef TANDEM_HAVE_CUDA
  constexpr bool kBuiltWithCuda = true;
#else
  constexpr bool kBuiltWithCuda = false;
#endif
  TANDEM_REQUIRE(kBuiltWithCuda, kUnsupported,
                 "--device cuda: this build has no CUDA support (use --device cpu)");
  TANDEM_REQUIRE(info.count > 0, kUnsupported,
                 "--device cuda: no CUDA device is visible (use --device cpu)");
  return make_cuda_backend();  // throws, one line, where the device cannot run the kernels
}

}  // namespace tandem
