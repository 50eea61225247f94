// A digest of the logits of every test model x policy x start mode x window {0, 8}, for one
// sequence and for a batch of three at different depths decoding together: one line each, to
// compare two builds bit for bit (scripts/logit_digest.sh compiles this file against a build's
// libtandem_core.a, so it also runs against builds older than it). Not a test: the two builds
// are what is compared. Usage: logit_digest [cpu|cuda] (cuda: the CUDA backend, e.g. emulated).
#include <cstdio>
#include <cstring>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kvstore/kv_store.h"
#include "models/model.h"
#include "tests/test_model_runs.h"

using namespace tandem;
using namespace tandem::test;

static uint64_t fnv(const void* p, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

int main(int argc, char** argv) {
  const bool cuda = argc > 1 && std::strcmp(argv[1], "cuda") == 0;
  auto backend = cuda ? make_cuda_backend() : make_cpu_backend();
  const char* models[] = {"tinystories-656k", "llama-tiny", "mistral-tiny-bf16-sharded",
                          "qwen2-tiny",       "qwen3-tiny", "opt-tiny",
                          "opt-tiny-postln"};
  for (const char* name : models) {
    const ReferenceLogits ref = ReferenceLogits::load(name);
    auto model = Model::load(ref.model, *backend);
    for (SparsePolicy p : {SparsePolicy::kFull, SparsePolicy::kHgca, SparsePolicy::kTopk})
      for (CpuAttnMode m : {CpuAttnMode::kParallel, CpuAttnMode::kAhead, CpuAttnMode::kAheadOracle})
        for (int32_t window : {0, 8}) {
          const auto rows =
              run_sequence(*model, small_hybrid(window, p, m), ref.prompt, ref.decode, 5);
          uint64_t h = 1469598103934665603ull;
          for (const auto& r : rows) h = fnv(r.data(), r.size() * 4, h);
          // A batch of three sequences at different depths, decoding together.
          const KvConfig cfg = small_hybrid(window, p, m);
          KvStore store(model->backend(), model->kv_shape(), cfg, 3, 64);
          std::vector<std::unique_ptr<SequenceKv>> kvs;
          for (int i = 0; i < 3; ++i) kvs.push_back(store.new_sequence(64));
          uint64_t hb = 1469598103934665603ull;
          for (int i = 0; i < 3; ++i) {
            const size_t n = ref.prompt.size() - static_cast<size_t>(i) * 3;
            const StepSequence s{kvs[i].get(), std::span<const int32_t>(ref.prompt).first(n), false,
                                 false, true};
            model->forward(std::span<const StepSequence>(&s, 1));
          }
          for (const int32_t& t : ref.decode) {
            std::vector<StepSequence> b;
            for (int i = 0; i < 3; ++i)
              b.push_back(
                  StepSequence{kvs[i].get(), std::span<const int32_t>(&t, 1), false, true, false});
            const TensorView l = model->forward(b);
            hb = fnv(l.data, static_cast<size_t>(l.numel()) * 4, hb);
          }
          std::printf("%s %s %s w%d single %016llx batch %016llx\n", name,
                      std::string(policy_name(p)).c_str(), std::string(mode_name(m)).c_str(),
                      window, (unsigned long long)h, (unsigned long long)hb);
        }
  }
}
