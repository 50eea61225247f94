// Developer subcommands: `tandem bench-decode` (prefill and decode speed of the forward pass at
// several batch sizes, JSON out) and `tandem make-model` (random-weight checkpoints).
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/cpu/membw.h"
#include "models/model.h"
#include "models/random_model.h"
#include "server/cli.h"
#include "server/commands.h"

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
  const Flags f(args, {"model", "batch", "prompt-len", "gen", "threads", "bw-bytes"}, {});
  const ThreadLimit limit(f.integer("threads", 0, 0, 4096));
  auto backend = make_cpu_backend();
  auto model = Model::load(f.required("model"), *backend);
  const ModelConfig& c = model->config();
  const int32_t prompt_len =
      static_cast<int32_t>(f.integer("prompt-len", 128, 1, c.max_context - 1));
  const int32_t gen = static_cast<int32_t>(f.integer("gen", 32, 1, c.max_context - prompt_len));
  const double bw = measure_read_bandwidth_gbs(
      static_cast<size_t>(f.integer("bw-bytes", 1 << 30, 1 << 20, int64_t{1} << 36)),
      limit.threads());
  const double step_bytes = static_cast<double>(model->matmul_weight_bytes());

  for (int64_t batch : parse_list(f.str("batch", "1,8"))) {
    std::vector<std::unique_ptr<SequenceKv>> kvs;
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(batch));
    uint64_t x = 12345;
    for (auto& p : prompts)
      for (int32_t i = 0; i < prompt_len; ++i) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        p.push_back(static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(c.vocab_size)));
      }
    for (int64_t b = 0; b < batch; ++b) kvs.push_back(model->new_dense_kv(prompt_len + gen + 1));

    // Prefill: all prompts in one step (batched matrix products over batch * prompt_len rows).
    std::vector<StepSequence> step;
    for (int64_t b = 0; b < batch; ++b)
      step.push_back({kvs[static_cast<size_t>(b)].get(), prompts[static_cast<size_t>(b)], false});
    const auto t0 = Clock::now();
    model->forward(step);
    const double prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();

    // Decode: gen steps of one token per sequence (token ids fixed: speed does not depend on them).
    std::vector<int32_t> next(static_cast<size_t>(batch), 1);
    for (int64_t b = 0; b < batch; ++b)
      step[static_cast<size_t>(b)].tokens =
          std::span<const int32_t>(&next[static_cast<size_t>(b)], 1);
    model->forward(step);  // warm-up step, not timed
    const auto t1 = Clock::now();
    for (int32_t g = 1; g < gen; ++g) model->forward(step);
    const double decode_s = std::chrono::duration<double>(Clock::now() - t1).count();
    const double steps = gen - 1;
    const double ms_step = decode_s / std::max(steps, 1.0) * 1e3;
    const nlohmann::json j = {{"model", model->dir().filename().string()},
                              {"weights_dtype", std::string(dtype_name(model->weight_dtype()))},
                              {"params", c.n_params()},
                              {"threads", limit.threads()},
                              {"batch", batch},
                              {"prompt_len", prompt_len},
                              {"prefill_tokens_per_s", batch * prompt_len / prefill_s},
                              {"decode_steps", steps},
                              {"decode_tokens_per_s", batch * steps / decode_s},
                              {"ms_per_step", ms_step},
                              {"weight_bytes_per_step", step_bytes},
                              {"weight_bytes_per_token", step_bytes / static_cast<double>(batch)},
                              {"weight_read_gbs", step_bytes / (ms_step * 1e-3) / 1e9},
                              {"measured_read_bw_gbs", bw},
                              {"fraction_of_bw", step_bytes / (ms_step * 1e-3) / 1e9 / bw}};
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
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
