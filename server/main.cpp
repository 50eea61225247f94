// The tandem binary: subcommand dispatch. Every error reaches here as a tandem::Error (or a
// std::exception) and becomes one line on stderr and a non-zero exit code.
#include <oneapi/tbb/info.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "kernels/common.h"
#include "server/commands.h"

namespace tandem {

ThreadLimit::ThreadLimit(int64_t threads) {
  const int cores = tbb::info::default_concurrency();
  threads_ = threads <= 0 ? cores : static_cast<int>(threads);
  control_ = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                                   static_cast<size_t>(threads_));
}

namespace {

void usage(FILE* to = stderr) {
  std::fputs(
      "usage: tandem <command> [flags]\n"
      "  run           --model DIR --prompt TEXT [--max-tokens N] [--temperature T] [--top-p P]\n"
      "                [--top-k K] [--min-p P] [--repetition-penalty R] [--seed S] [--threads N]\n"
      "  serve         --model DIR [--host H] [--port P] [--config FILE] [--api-key K] [kv flags]\n"
      "  perplexity    --model DIR --file TEXT [--ctx N] [--prefill N] [kv flags]\n"
      "  bench-decode  --model DIR [--batch 1,8,max] [--depth N,N|--prompt-len N] [--gen N]\n"
      "                [--fill prefill|import] [--window-frac F] [--reserve-gib G] [--threads N]\n"
      "                [kv flags]  decode tokens/s by batch and depth (JSON)\n"
      "  make-model    --shape NAME --dtype f32|bf16|f16 --out DIR (random weights, for "
      "benchmarks)\n"
      "  bench-sampler [--vocab N] [--iters N]  time per draw of the sampler per setting (JSON)\n"
      "  bench         --base-url URL [--endpoint /v1/completions] [--num-prompts N]\n"
      "                [--max-concurrency C] [--request-rate R|inf] [--random-input-len I]\n"
      "                [--random-output-len O] [--save-result FILE] ... (vllm bench serve flags)\n"
      "  bench-cpu-attn [flags]  host attention bytes/s against memory bandwidth (JSON)\n"
      "  bench-kernels [--iters N] [--reps N]  CUDA merge/attention GB/s vs copy bandwidth (JSON)\n"
      "kv flags: --dense | --sinks N --window N --block N --sparse full|hgca|topk --hgca-beta B\n"
      "          --topk-blocks K --cpu-attn parallel|ahead --cpu-threads N --kv-dtype "
      "f32|bf16|f16\n"
      "          --device cpu|cuda|auto (auto: cuda when a GPU is visible and built in)\n"
      "          --device-check auto|on|off (auto: with --device auto, a GPU forward pass that\n"
      "          disagrees with the CPU on a short check falls back to the CPU)\n",
      to);
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  using namespace tandem;
  spdlog::set_pattern("[%H:%M:%S.%e] [%n] [%^%l%$] %v");
  if (argc < 2) {
    usage();
    return 2;
  }
  const std::string cmd = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  // `tandem CMD --help` (or -h anywhere after the command) prints the usage, like `tandem --help`.
  if (std::find_if(args.begin(), args.end(),
                   [](const std::string& a) { return a == "--help" || a == "-h"; }) != args.end()) {
    usage(stdout);
    return 0;
  }
  try {
    if (cmd == "run") return cmd_run(args);
    if (cmd == "serve") return cmd_serve(args);
    if (cmd == "bench-decode") return cmd_bench_decode(args);
    if (cmd == "make-model") return cmd_make_model(args);
    if (cmd == "bench-sampler") return cmd_bench_sampler(args);
    if (cmd == "perplexity") return cmd_perplexity(args);
    if (cmd == "bench-cpu-attn") return cmd_bench_cpu_attn(args);
    if (cmd == "bench-kernels") return cmd_bench_kernels(args);
    if (cmd == "bench") return cmd_bench(args);
    if (cmd == "-h" || cmd == "--help" || cmd == "help") {
      usage(stdout);
      return 0;
    }
    std::fprintf(stderr, "tandem: unknown command \"%s\"\n", cmd.c_str());
    usage();
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "tandem: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem: internal error: %s\n", e.what());
    return 1;
  }
}
