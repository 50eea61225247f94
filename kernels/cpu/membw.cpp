// measure_read_bandwidth_gbs: a streaming-read loop with AVX2 loads summed into accumulators (so
// the loads cannot be dropped), one slice per worker, repeated; the best run counts.
// measure_fma_gflops: per worker, 12 independent FMA chains (enough to cover the FMA latency on
// every core we target: latency 4-5 cycles x 2-3 FMA pipes), repeated; the best run counts.
#include "kernels/cpu/membw.h"

#include <immintrin.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/buffer.h"
#include "kernels/common.h"
#include "kernels/cpu/parallel.h"

namespace tandem {
namespace {

constexpr int kRuns = 5;

// Sum of the floats in [p, p + n), n a multiple of 32; 4 independent accumulators.
float read_slice(const float* p, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  for (size_t i = 0; i < n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  alignas(32) float t[8];
  _mm256_store_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  float s = 0.0f;
  for (float x : t) s += x;
  return s;
}

constexpr int kChains = 12;
constexpr int64_t kFmaIters = 1 << 22;

// kChains independent chains of kFmaIters dependent FMAs each; returns a value that depends on
// every one of them.
float fma_chains(float seed) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(seed + static_cast<float>(c));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < kFmaIters; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  __m256 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm256_add_ps(s, acc[c]);
  alignas(32) float t[8];
  _mm256_store_ps(t, s);
  return t[0] + t[7];
}

// The AVX-512 chains (compiled with target attributes: the rule of kernels/cpu/isa.h).
constexpr int kChains512 = 16;

__attribute__((target("avx512f"))) float fma_chains_avx512(float seed) {
  __m512 acc[kChains512];
  for (int c = 0; c < kChains512; ++c) acc[c] = _mm512_set1_ps(seed + static_cast<float>(c));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < kFmaIters; ++i)
    for (int c = 0; c < kChains512; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  __m512 s = acc[0];
  for (int c = 1; c < kChains512; ++c) s = _mm512_add_ps(s, acc[c]);
  alignas(64) float t[16];
  _mm512_store_ps(t, s);
  return t[0] + t[15];
}

__attribute__((target("avx512f,avx512bw,avx512bf16"))) float dpbf16_chains(float seed) {
  __m512 acc[kChains512];
  for (int c = 0; c < kChains512; ++c) acc[c] = _mm512_set1_ps(seed + static_cast<float>(c));
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3a83);  // about 1e-3 in bf16
  for (int64_t i = 0; i < kFmaIters; ++i)
    for (int c = 0; c < kChains512; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, a);
  __m512 s = acc[0];
  for (int c = 1; c < kChains512; ++c) s = _mm512_add_ps(s, acc[c]);
  alignas(64) float t[16];
  _mm512_store_ps(t, s);
  return t[0] + t[15];
}

// Best-of-kRuns rate of `chains` on nt workers, in units of `per_call` per second.
template <typename F>
double best_rate(int nt, double per_call, F chains) {
  tbb::task_arena arena(nt);
  std::vector<float> sums(static_cast<size_t>(nt));
  double best = 0.0;
  for (int run = 0; run < kRuns; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    arena.execute([&] {
      tandem::parallel_for(
          0, nt, [&](int t) { sums[static_cast<size_t>(t)] = chains(static_cast<float>(t)); },
          tbb::static_partitioner());
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(nt) * per_call / s);
  }
  volatile float sink = 0.0f;
  for (float s : sums) sink = sink + s;
  return best;
}

}  // namespace

double measure_peak_gflops(int threads, cpu::Isa isa) {
  TANDEM_CHECK(cpu::isa_supported(isa), "measure_peak_gflops: ", cpu::isa_name(isa),
               " is not supported here");
  const int nt = threads > 0 ? threads : tbb::this_task_arena::max_concurrency();
  const double iters = static_cast<double>(kFmaIters);
  switch (isa) {
    case cpu::Isa::kAvx2:
      return best_rate(nt, kChains * 8.0 * 2.0 * iters, fma_chains) / 1e9;
    case cpu::Isa::kAvx512:
      return best_rate(nt, kChains512 * 16.0 * 2.0 * iters, fma_chains_avx512) / 1e9;
    case cpu::Isa::kAvx512Bf16:
      return best_rate(nt, kChains512 * 64.0 * iters, dpbf16_chains) / 1e9;
  }
  return 0.0;
}

double measure_fma_gflops(int threads) {
  const int nt = threads > 0 ? threads : tbb::this_task_arena::max_concurrency();
  // Fused multiply-adds (8 lanes each) per second, in G.
  return best_rate(nt, kChains * 8.0 * static_cast<double>(kFmaIters), fma_chains) / 1e9;
}

double measure_read_bandwidth_gbs(size_t bytes, int threads, bool huge_pages) {
  const int nt = threads > 0 ? threads : tbb::this_task_arena::max_concurrency();
  // Each slice a multiple of 32 floats (128 bytes).
  const size_t slice = std::max<size_t>(1, bytes / 128 / static_cast<size_t>(nt)) * 32;
  const size_t total = slice * static_cast<size_t>(nt);
  const Buffer owned(huge_pages ? host_heap_huge() : host_heap(), DType::kF32,
                     {static_cast<int64_t>(total)});
  float* const buf = owned.as<float>();
  tbb::task_arena arena(nt);
  std::vector<float> sums(static_cast<size_t>(nt));
  // Touch every page from the worker that will read it (first-touch placement), non-zero data.
  arena.execute([&] {
    tandem::parallel_for(
        0, nt,
        [&](int t) {
          float* p = buf + static_cast<size_t>(t) * slice;
          for (size_t i = 0; i < slice; ++i) p[i] = 1.0f;
        },
        tbb::static_partitioner());
  });
  double best = 0.0;
  for (int run = 0; run < kRuns; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    arena.execute([&] {
      tandem::parallel_for(
          0, nt,
          [&](int t) {
            sums[static_cast<size_t>(t)] = read_slice(buf + static_cast<size_t>(t) * slice, slice);
          },
          tbb::static_partitioner());
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(total * sizeof(float)) / s / 1e9);
  }
  // The sums feed a visible side effect so the reads cannot be optimised away.
  volatile float sink = 0.0f;
  for (float s : sums) sink = sink + s;
  return best;
}

}  // namespace tandem
