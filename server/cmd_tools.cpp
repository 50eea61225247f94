// Developer subcommands: `tandem bench-decode` (prefill and decode speed of the forward pass at
// several batch sizes and context depths, dense or hybrid KV, JSON out) and `tandem make-model`
// (random-weight checkpoints).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/cpu/membw.h"
#include "kvstore/kv_store.h"
#include "models/model.h"
#include "models/random_model.h"
#include "server/cli.h"
#include "server/commands.h"
#include "server/kv_flags.h"

namespace tandem {
namespace {

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      out.push_back(std::stoll(item));
    } catch (...) {
      TANDEM_FAIL(kInvalidArgument, "bad list element \"", item, "\"");
    }
    TANDEM_REQUIRE(out.back() > 0, kInvalidArgument, "list elements must be positive");
  }
  return out;
}

DType parse_dtype(const std::string& s) {
  if (s == "f32") return DType::kF32;
  if (s == "bf16") return DType::kBF16;
  if (s == "f16") return DType::kF16;
  TANDEM_FAIL(kInvalidArgument, "--dtype must be f32, bf16 or f16");
}

}  // namespace

int cmd_bench_decode(const std::vector<std::string>& args) {
  using Clock = std::chrono::steady_clock;
  std::set<std::string> values = {"model",   "batch",    "prompt-len", "gen",
                                  "threads", "bw-bytes", "depth",      "chunk"};
  values.insert(kv_value_flags().begin(), kv_value_flags().end());
  const Flags f(args, values, kv_bool_flags());
  const ThreadLimit limit(f.integer("threads", 0, 0, 4096));
  // Without kv flags the cache is the dense one (the forward pass alone); any kv flag selects
  // the store those flags describe, as `serve` would build it.
  bool any_kv = f.flag("dense");
  for (const auto& k : kv_value_flags()) any_kv = any_kv || (k != "device" && f.has(k));
  KvConfig kv_cfg = parse_kv_flags(f);
  if (!any_kv) kv_cfg.dense = true;
  auto backend = make_backend(f);
  auto model = Model::load(f.required("model"), *backend);
  const ModelConfig& c = model->config();
  // --depth: tokens already in the cache when decoding starts (llama-bench -d); each depth is
  // filled by chunked prefill into fresh sequences. Without it, one depth: --prompt-len.
  std::vector<int64_t> depths;
  if (f.has("depth")) {
    depths = parse_list(f.str("depth"));
  } else {
    depths = {f.integer("prompt-len", 128, 1, c.max_context - 1)};
  }
  const int64_t max_depth = *std::max_element(depths.begin(), depths.end());
  TANDEM_REQUIRE(max_depth < c.max_context, kInvalidArgument, "--depth ", max_depth,
                 " does not fit the model's context of ", c.max_context, " tokens");
  const int32_t gen = static_cast<int32_t>(
      f.integer("gen", 32, 2, c.max_context - static_cast<int32_t>(max_depth)));
  const int32_t chunk = static_cast<int32_t>(f.integer("chunk", 512, 1, 1 << 20));
  const double bw = measure_read_bandwidth_gbs(
      static_cast<size_t>(f.integer("bw-bytes", 1 << 30, 1 << 20, int64_t{1} << 36)),
      limit.threads());
  const double step_bytes = static_cast<double>(model->matmul_weight_bytes());
  const std::string policy = kv_cfg.dense ? "dense" : std::string(policy_name(kv_cfg.sparse));

  for (int64_t batch : parse_list(f.str("batch", "1,8"))) {
    for (int64_t depth64 : depths) {
      const int32_t depth = static_cast<int32_t>(depth64);
      const int32_t cap = depth + gen + 1;
      KvStore store(model->backend(), model->kv_shape(), kv_cfg, static_cast<int32_t>(batch), cap);
      std::vector<std::unique_ptr<SequenceKv>> kvs;
      std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(batch));
      uint64_t x = 12345;
      for (auto& p : prompts)
        for (int32_t i = 0; i < depth; ++i) {
          x = x * 6364136223846793005ull + 1442695040888963407ull;
          p.push_back(static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(c.vocab_size)));
        }
      for (int64_t b = 0; b < batch; ++b) kvs.push_back(store.new_sequence(cap));

      // Prefill: every sequence's next chunk in one step (batched matrix products).
      std::vector<StepSequence> step(static_cast<size_t>(batch));
      const auto t0 = Clock::now();
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
      const double prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();

      // Decode: gen steps of one token per sequence (token ids fixed: speed does not depend on
      // them), the first one a warm-up.
      std::vector<int32_t> next(static_cast<size_t>(batch), 1);
      for (int64_t b = 0; b < batch; ++b)
        step[static_cast<size_t>(b)] = {kvs[static_cast<size_t>(b)].get(),
                                        std::span<const int32_t>(&next[static_cast<size_t>(b)], 1),
                                        false, true, false};
      model->forward(step);        // warm-up step, not timed
      std::vector<double> step_s;  // each step's time: the median shrugs off preempted steps
      const auto t1 = Clock::now();
      for (int32_t g = 1; g < gen; ++g) {
        const auto ts = Clock::now();
        model->forward(step);
        step_s.push_back(std::chrono::duration<double>(Clock::now() - ts).count());
      }
      const double decode_s = std::chrono::duration<double>(Clock::now() - t1).count();
      const double steps = gen - 1;
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
        host.host_entries += st.host_entries;
        host.attended += st.attended;
      }
      const nlohmann::json j = {
          {"model", model->dir().filename().string()},
          {"weights_dtype", std::string(dtype_name(model->weight_dtype()))},
          {"params", c.n_params()},
          {"threads", limit.threads()},
          {"batch", batch},
          {"depth", depth},
          {"prompt_len", depth},
          {"kv", kv_cfg.dense ? std::string("dense") : kv_cfg.describe()},
          {"policy", policy},
          {"prefill_tokens_per_s", depth > 0 ? batch * depth / prefill_s : 0.0},
          {"decode_steps", steps},
          {"decode_tokens_per_s", batch * steps / decode_s},
          {"ms_per_step", ms_step},
          {"ms_per_step_median", ms_median},
          {"decode_tokens_per_s_median", batch / (ms_median * 1e-3)},
          {"host_fraction_attended",
           host.host_entries > 0
               ? static_cast<double>(host.attended) / static_cast<double>(host.host_entries)
               : 0.0},
          {"weight_bytes_per_step", step_bytes},
          {"weight_bytes_per_token", step_bytes / static_cast<double>(batch)},
          {"weight_read_gbs", step_bytes / (ms_step * 1e-3) / 1e9},
          {"measured_read_bw_gbs", bw},
          {"fraction_of_bw", step_bytes / (ms_step * 1e-3) / 1e9 / bw},
          {"load_avg_1m", load}};
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}

int cmd_make_model(const std::vector<std::string>& args) {
  const Flags f(args, {"shape", "dtype", "out", "seed"}, {});
  make_random_model(f.required("shape"), parse_dtype(f.str("dtype", "bf16")), f.required("out"),
                    static_cast<uint64_t>(f.integer("seed", 1, 0, INT64_MAX)));
  return 0;
}

}  // namespace tandem
