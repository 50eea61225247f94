// The engine on the CUDA backend against the CPU backend: the same requests (greedy, seeded
// samples with temperature, top-k and top-p, and the requests the GPU sampler leaves to the host:
// a repetition penalty, min-p, logprobs) give the same tokens, token for token, with a dense and
// a hybrid KV store. On the CUDA backend the plain requests are sampled on the GPU (only their
// ids come back), which the emulator's counters confirm.
//
// Without a CUDA device (or in a build without CUDA) the executable prints
// "no CUDA device: N GPU tests skipped" and exits 4, ctest's SKIP_RETURN_CODE.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/emulator.h"
#include "tests/gpu_skip.h"
#include "tests/test_helpers.h"

using namespace tandem;
using namespace tandem::test;

namespace {

constexpr std::chrono::seconds kPatience{600};  // the emulator is slow

struct Generated {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  FinishReason finish = FinishReason::kNone;
  std::string error;
};

Generated collect(TokenStream& s) {
  Generated g;
  TokenEvent ev;
  while (g.finish == FinishReason::kNone) {
    REQUIRE(s.next(ev, kPatience));
    g.tokens.insert(g.tokens.end(), ev.tokens.begin(), ev.tokens.end());
    for (const TokenLogprob& lp : ev.logprobs) g.logprobs.push_back(lp.logprob);
    g.finish = ev.finish;
    g.error = ev.error;
  }
  return g;
}

std::vector<GenerationRequest> requests(const Tokenizer& tok) {
  const std::vector<std::string> prompts = {
      "def fibonacci(n):\n    ",
      "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):",
      "import os\nimport sys\n\n\ndef main(argv):\n    parser = ",
      "for i in range(10):\n    if i % 2 == 0:\n        print(",
      "def read_lines(path):\n    with open(path) as f:\n        return ",
      "# Sort a list of numbers in place.\ndef sort_numbers(values):\n    ",
  };
  std::vector<GenerationRequest> out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r;
    // Long enough that the hybrid store's window (32 tokens) spills to the host.
    std::string text;
    for (int rep = 0; rep < 3; ++rep) text += prompts[(i + static_cast<size_t>(rep)) % 6] + "\n";
    r.prompt = tok.encode(text);
    r.max_tokens = 12;
    r.ignore_eos = true;
    SamplingParams& p = r.sampling;
    switch (i) {
      case 0:  // greedy
        p.temperature = 0.0f;
        break;
      case 1:  // the full pipeline on the GPU
        p.temperature = 0.8f;
        p.top_k = 40;
        p.top_p = 0.9f;
        p.seed = 11;
        break;
      case 2:  // plain temperature
        p.temperature = 1.2f;
        p.seed = 3;
        break;
      case 3:  // left to the host: a penalty
        p.temperature = 0.9f;
        p.top_p = 0.95f;
        p.repetition_penalty = 1.2f;
        p.seed = 5;
        break;
      case 4:  // left to the host: logprobs
        p.temperature = 0.7f;
        p.seed = 9;
        r.top_logprobs = 2;
        break;
      default:  // left to the host: min-p
        p.temperature = 1.0f;
        p.min_p = 0.05f;
        p.seed = 21;
        break;
    }
    out.push_back(std::move(r));
  }
  return out;
}

// Every request submitted at once to one engine (one batch per step), their generations; then
// all of them again, which the hybrid store's prefix cache serves (the sinks and window chunks
// copied to the device, the host chunks shared, evicted window chunks taking the cache's blocks).
std::vector<Generated> run(Backend& backend, const KvConfig& cfg, const Tokenizer& tok) {
  auto model = Model::load(repo_path("models/tandem-demo"), backend);
  KvStore store(backend, model->kv_shape(), cfg, 8, 256);
  EngineOptions opt;
  opt.max_batch = 8;
  opt.max_model_len = 256;
  Engine engine(*model, tok, store, opt);
  std::vector<Generated> out;
  for (int wave = 0; wave < 2; ++wave) {
    std::vector<std::shared_ptr<TokenStream>> streams;
    for (GenerationRequest& r : requests(tok)) streams.push_back(engine.submit(std::move(r)));
    for (auto& s : streams) out.push_back(collect(*s));
  }
  return out;
}

int64_t launches_of(const CudaEmulatorCounters& c, const std::string& kernel) {
  const auto it = c.kernels.find(kernel);
  return it == c.kernels.end() ? 0 : it->second.launches;
}

}  // namespace

CATCH_REGISTER_LISTENER(SkipWithoutGpu)

TEST_CASE("the engine on the CUDA backend generates the CPU backend's tokens", "[cuda][engine]") {
  const Tokenizer tok = Tokenizer::load(repo_path("models/tandem-demo"));
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  KvConfig dense;
  dense.dense = true;
  KvConfig hybrid;
  hybrid.sinks = 4;
  hybrid.window = 32;
  hybrid.block = 8;
  hybrid.sparse = SparsePolicy::kFull;
  hybrid.cpu_attn = CpuAttnMode::kAhead;
  hybrid.cpu_threads = 2;
  for (const auto& [label, cfg] : {std::pair<const char*, KvConfig>{"dense", dense},
                                   std::pair<const char*, KvConfig>{"hybrid full ahead", hybrid}}) {
    DYNAMIC_SECTION(label) {
      const std::vector<Generated> want = run(*cpu, cfg, tok);
      const CudaEmulatorCounters c0 = cuda_emulator_counters();
      const std::vector<Generated> got = run(*gpu, cfg, tok);
      const CudaEmulatorCounters c = cuda_emulator_counters() - c0;
      REQUIRE(got.size() == want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        INFO("request " << i << (got[i].error.empty() ? "" : ": " + got[i].error));
        CHECK(got[i].finish == FinishReason::kLength);
        CHECK(got[i].tokens == want[i].tokens);
        REQUIRE(got[i].logprobs.size() == want[i].logprobs.size());
        for (size_t j = 0; j < want[i].logprobs.size(); ++j)
          CHECK(std::abs(got[i].logprobs[j] - want[i].logprobs[j]) < 1e-3);
      }
      if (cuda_is_emulated()) {
        // Steps with a plain request sampled it on the GPU: one launch per step of the engine.
        CHECK(launches_of(c, "sample_kernel") >= 12);
        if (!cfg.dense) CHECK(launches_of(c, "wait_flag_kernel") > 0);
      }
    }
  }
}
