// End-to-end parity of the forward pass on the CUDA backend against the CPU backend, for the test
// models (tests/fixtures/logits) in dense and hybrid (full, hgca, topk; parallel and ahead): the
// logits of every prompt position (prefill in chunks) and every decode step. Error measure as in
// test_hybrid_kv.cpp: max |gpu - cpu| / max |cpu| per row, the worst row reported.
//
// Tolerances: 1e-4 for f32 checkpoints (every GPU op is within 1e-5 of the CPU in
// test_cuda_kernels_*; a few layers and the lm_head compound it). 5e-2 for f16/bf16 checkpoints:
// for more than 8 rows the GPU matmul is cuBLAS with the activations rounded to the weight type,
// which the CPU keeps in f32 (test_cuda_kernels_dense allows 1e-2 for one such matmul), and the
// prefill chunks below have 12 rows. Under hgca and topk a selection that flips (an entry's MAW or
// a block's Quest bound within rounding of the threshold) moves the logits more than rounding does;
// that is a real difference from the CPU run, and the failure names the case.
//
// Without a CUDA device (or in a build without CUDA) the executable prints
// "no CUDA device: N GPU tests skipped" and exits 4, ctest's SKIP_RETURN_CODE (label "gpu").
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/emulator.h"
#include "tests/gpu_skip.h"
#include "tests/test_model_runs.h"

using namespace tandem;
using namespace tandem::test;

namespace {

constexpr double kTolF32 = 1e-4;
constexpr double kTol16 = 5e-2;

// Logits of the reference prompt and decode tokens (see run_sequence), every value finite.
LogitRows run(Model& model, const KvConfig& cfg, const ReferenceLogits& ref, int32_t chunk) {
  LogitRows rows = run_sequence(model, cfg, ref.prompt, ref.decode, chunk);
  for (const auto& row : rows)
    for (float x : row) REQUIRE(std::isfinite(x));
  return rows;
}

}  // namespace

CATCH_REGISTER_LISTENER(SkipWithoutGpu)

TEST_CASE("forward on the CUDA backend matches the CPU backend", "[cuda][model]") {
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  for (const char* name : kFixtureModels) {
    const ReferenceLogits ref = ReferenceLogits::load(name);
    auto on_cpu = Model::load(ref.model, *cpu);
    auto on_gpu = Model::load(ref.model, *gpu);
    const double tol = on_cpu->weight_dtype() == DType::kF32 ? kTolF32 : kTol16;
    struct Case {
      std::string label;
      KvConfig cfg;
    };
    KvConfig dense;
    dense.dense = true;
    KvConfig dense_f16 = dense;
    dense_f16.kv_dtype = DType::kF16;
    std::vector<Case> cases = {
        {"dense", dense},
        {"dense f16", dense_f16},
        {"full window 0", small_hybrid(0, SparsePolicy::kFull, CpuAttnMode::kParallel)},
        {"full window 6", small_hybrid(6, SparsePolicy::kFull, CpuAttnMode::kParallel)},
    };
    for (SparsePolicy p : {SparsePolicy::kFull, SparsePolicy::kHgca, SparsePolicy::kTopk})
      for (CpuAttnMode m : {CpuAttnMode::kParallel, CpuAttnMode::kAhead})
        cases.push_back(
            {std::string(policy_name(p)) + " " + std::string(mode_name(m)), small_hybrid(8, p, m)});
    for (const Case& c : cases) {
      DYNAMIC_SECTION(name << " " << c.label) {
        const double err =
            worst_rel_error(run(*on_gpu, c.cfg, ref, 12), run(*on_cpu, c.cfg, ref, 12));
        INFO(name << " " << c.label << ": worst relative logit error " << err << " (tolerance "
                  << tol << ")");
        CHECK(err < tol);
      }
    }
  }
}

TEST_CASE("an exact prefill of 5-row chunks keeps 16-bit checkpoints on the GEMV path",
          "[cuda][model]") {
  // n <= 8 rows: the GPU matmul keeps x in f32 like the CPU, so 16-bit weights meet 1e-3.
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  for (const char* name : {"llama-tiny-f16-tied", "mistral-tiny-bf16-sharded", "opt-tiny-postln"}) {
    const ReferenceLogits ref = ReferenceLogits::load(name);
    auto on_cpu = Model::load(ref.model, *cpu);
    auto on_gpu = Model::load(ref.model, *gpu);
    KvConfig dense;
    dense.dense = true;
    const double err = worst_rel_error(run(*on_gpu, dense, ref, 5), run(*on_cpu, dense, ref, 5));
    INFO(name << ": worst relative logit error " << err);
    CHECK(err < 1e-3);
  }
}

namespace {

// What one decode step cost on the emulator.
struct StepCounts {
  int64_t host_syncs = 0, waits = 0, raises = 0, evicted = 0;
};

int64_t launches_of(const CudaEmulatorCounters& c, const std::string& kernel) {
  const auto it = c.kernels.find(kernel);
  return it == c.kernels.end() ? 0 : it->second.launches;
}

// run_sequence (prefill in one chunk, then one decode step per token) with the emulator's counts
// of every decode step: host synchronisations, flag waits and raises queued, host blocks added
// (evictions, each of which reads a device block back).
LogitRows run_counted(Model& model, const KvConfig& cfg, const ReferenceLogits& ref,
                      std::vector<StepCounts>* counts) {
  CudaEmulatorCounters c0;
  int64_t host_blocks = 0;
  return run_decode_steps(
      model, cfg, ref,
      [&](KvStore& store) {
        model.backend().synchronize();
        c0 = cuda_emulator_counters();
        host_blocks = store.host_blocks_used();
      },
      [&](KvStore& store) {
        const CudaEmulatorCounters c = cuda_emulator_counters() - c0;
        counts->push_back({c.host_syncs, launches_of(c, "wait_flag_kernel"),
                           launches_of(c, "raise_flag_kernel"),
                           store.host_blocks_used() - host_blocks});
      });
}

}  // namespace

TEST_CASE("hybrid decode on the CUDA backend: the GPU waits for the host partials on a flag",
          "[cuda][model][flag]") {
  // The merge of each layer's host partial is queued behind a wait for the flag the CPU workers
  // raise, so the host thread queues the whole step without waiting for them; the GPU writes
  // the queries into mapped memory and raises the flag the workers start on, and the host side
  // of the stores (evictions, hgca's MAW update) runs in host jobs behind flags too, so the host
  // does not wait for the GPU either. The logits equal the CPU backend's.
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  const ReferenceLogits ref = ReferenceLogits::load("llama-tiny");
  auto on_cpu = Model::load(ref.model, *cpu);
  auto on_gpu = Model::load(ref.model, *gpu);
  const int64_t n_layer = on_gpu->config().n_layer;
  for (SparsePolicy p :
       {SparsePolicy::kFull, SparsePolicy::kHgca, SparsePolicy::kTopk, SparsePolicy::kTau})
    for (CpuAttnMode m : {CpuAttnMode::kAhead, CpuAttnMode::kParallel}) {
      const KvConfig cfg = small_hybrid(8, p, m);
      DYNAMIC_SECTION(policy_name(p) << " " << mode_name(m)) {
        std::vector<StepCounts> counts;
        const LogitRows got = run_counted(*on_gpu, cfg, ref, &counts);
        std::vector<StepCounts> unused;
        const LogitRows want = run_counted(*on_cpu, cfg, ref, &unused);
        const double err = worst_rel_error(got, want);
        INFO("worst relative logit error " << err);
        CHECK(err < kTolF32);
        if (!cuda_is_emulated()) continue;  // the counts below are the emulator's
        // Every decode step is decode-only: the host reads nothing of the device but the logits
        // within it. The device hands each layer's query to the workers (one flag raise per
        // layer) and, for the layer's host job, what it reads: hgca's rows every step (one more
        // raise per layer), or an evicted block under full and topk (one per evicting layer).
        for (size_t i = 0; i < counts.size(); ++i) {
          const StepCounts& c = counts[i];
          INFO("decode step " << i << ": " << c.host_syncs << " host syncs, " << c.waits
                              << " flag waits, " << c.raises << " flag raises, " << c.evicted
                              << " blocks evicted");
          CHECK(c.waits == n_layer);  // every layer has host tokens: one wait each
          const int64_t jobs = p == SparsePolicy::kHgca ? n_layer : c.evicted;
          CHECK(c.raises == n_layer + jobs);
          // The logits are read back into pinned memory: one wait for the stream.
          CHECK(c.host_syncs == 1);
        }
      }
    }
}
