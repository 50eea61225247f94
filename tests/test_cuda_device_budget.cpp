// --device-budget on the CUDA backend (the SIMT emulator in CI): the resident blocks' copies are
// backend uploads from the host blocks queued on the stream (the post-prefill set after the last
// chunk, each recall before the layer's next attention), attended by the device part through the
// host layout's strides. The logits equal the CPU backend's, the recalls are the same, and a
// decode step that recalls still synchronises with the host once (for its logits).
//
// Without a CUDA device (or in a build without CUDA) the executable prints
// "no CUDA device: N GPU tests skipped" and exits 4, ctest's SKIP_RETURN_CODE (label "gpu").
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>
#include <cmath>
#include <span>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/emulator.h"
#include "models/random_model.h"
#include "tests/config_test_util.h"
#include "tests/gpu_skip.h"
#include "tests/test_model_runs.h"

using namespace tandem;
using namespace tandem::test;

namespace {

// Prefill in one chunk, then one decode step per token; the host synchronisations of every
// decode step (emulator counts) and the sequence's host counters.
LogitRows run_counted(Model& model, const KvConfig& cfg, const ReferenceLogits& ref,
                      std::vector<int64_t>* syncs, HostStats* stats) {
  CudaEmulatorCounters c0;
  return run_decode_steps(
      model, cfg, ref,
      [&](KvStore&) {
        model.backend().synchronize();
        c0 = cuda_emulator_counters();
      },
      [&](KvStore&) { syncs->push_back((cuda_emulator_counters() - c0).host_syncs); }, stats);
}

}  // namespace

CATCH_REGISTER_LISTENER(SkipWithoutGpu)

TEST_CASE("device budget on the CUDA backend: recalled blocks copied on the stream",
          "[cuda][device_budget]") {
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  const ReferenceLogits ref = ReferenceLogits::load("llama-tiny");
  auto on_cpu = Model::load(ref.model, *cpu);
  auto on_gpu = Model::load(ref.model, *gpu);
  for (int32_t topk : {2, 64})
    for (CpuAttnMode m : {CpuAttnMode::kAhead, CpuAttnMode::kParallel}) {
      DYNAMIC_SECTION("topk " << topk << " " << mode_name(m)) {
        KvConfig cfg = small_hybrid(8, SparsePolicy::kTopk, m);
        cfg.topk_blocks = topk;
        cfg.device_budget = 2 * cfg.block;
        cfg.recall_interval = 1;
        std::vector<int64_t> syncs, unused;
        HostStats on_dev, on_host;
        const LogitRows got = run_counted(*on_gpu, cfg, ref, &syncs, &on_dev);
        const LogitRows want = run_counted(*on_cpu, cfg, ref, &unused, &on_host);
        const double err = worst_rel_error(got, want);
        INFO("worst relative logit error " << err);
        CHECK(err < 1e-4);
        CHECK(on_dev.recalls > 0);
        CHECK(on_dev.recalls == on_host.recalls);
        CHECK(on_dev.recall_blocks == on_host.recall_blocks);
        CHECK(on_dev.attended == on_host.attended);
        CHECK(on_dev.cpu_compute_ratio() < 1.0);
        if (topk == 64 && m == CpuAttnMode::kParallel) {
          // Every host block, with the true query: --sparse full's result, the resident part on
          // the device (under ahead the CPU's part has the predicted query, the device's not).
          std::vector<int64_t> s2;
          HostStats st;
          const KvConfig full = small_hybrid(8, SparsePolicy::kFull, m);
          CHECK(worst_rel_error(got, run_counted(*on_cpu, full, ref, &s2, &st)) < 1e-4);
        }
        if (!cuda_is_emulated()) continue;  // the counts are the emulator's
        // The recall copies are queued: the host waits for the stream once, for the logits.
        for (int64_t s : syncs) CHECK(s == 1);
      }
    }
}

// head_dim 128: the host blocks keep V by tiles (kvstore/block_table.h), so the device's copies of
// them, resident blocks and the exact prefill's pages alike, are V converted back to rows on the
// host before the upload. The logits equal the CPU backend's.
TEST_CASE("host V by tiles on the CUDA backend: resident copies and prefill pages by rows",
          "[cuda][device_budget]") {
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  ScratchDir d;
  make_random_model("tiny-d128", DType::kF32, d.dir, 11);
  auto on_cpu = Model::load(d.dir, *cpu);
  auto on_gpu = Model::load(d.dir, *gpu);
  REQUIRE(on_gpu->kv_shape().head_dim == 128);
  const std::vector<int32_t> prompt = random_tokens(23, 512, 5), decode = random_tokens(3, 512, 6);
  KvConfig resident = small_hybrid(8, SparsePolicy::kTopk, CpuAttnMode::kParallel);
  resident.topk_blocks = 64;
  resident.device_budget = 2 * resident.block;
  resident.recall_interval = 1;
  const KvConfig all_host = small_hybrid(0, SparsePolicy::kFull, CpuAttnMode::kParallel);
  for (const KvConfig& cfg : {resident, all_host}) {
    DYNAMIC_SECTION("window " << cfg.window << " budget " << cfg.device_budget) {
      HostStats on_dev, on_host;
      const LogitRows got = run_sequence(*on_gpu, cfg, prompt, decode, 7, &on_dev);
      const LogitRows want = run_sequence(*on_cpu, cfg, prompt, decode, 7, &on_host);
      const double err = worst_rel_error(got, want);
      INFO("worst relative logit error " << err);
      CHECK(err < 1e-4);
      CHECK(on_dev.host_entries > 0);
      CHECK(on_dev.recall_blocks == on_host.recall_blocks);
      if (cfg.device_budget > 0) CHECK(on_dev.recall_blocks > 0);
    }
  }
}
