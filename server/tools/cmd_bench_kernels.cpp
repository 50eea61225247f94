// `tandem bench-kernels`: bytes per second of the CUDA merge and decode-attention kernels next
// to the device's measured device-to-device copy bandwidth. Prints one JSON object per line.
// Not a test: every configuration is first checked against the CPU backend, then timed (warm-up,
// then the median over --reps rounds of --iters calls between stream synchronisations). Needs a
// CUDA device; fails with a one-line error without one.
//
// Bytes counted are the fewest each kernel must move: merge reads o_a, o_b and both lse and
// writes o_a and lse_a; attention reads q, K and V of the span and writes o and lse.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/buffer.h"
#include "kernels/common.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_memory.h"
#include "kernels/dtype.h"
#include "server/tools/commands.h"

namespace tandem {
namespace {

using json = nlohmann::json;

// Random values in ±[0.1, 1) * scale, stored as dtype t (host buffer).
Buffer random_host(DType t, std::initializer_list<int64_t> dims, uint32_t seed,
                   float scale = 1.0f) {
  Buffer b(t, dims);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mag(0.1f, 1.0f);
  const int64_t n = b.view().numel();
  for (int64_t i = 0; i < n; ++i) {
    const float v = (rng() & 1u ? 1.0f : -1.0f) * mag(rng) * scale;
    if (t == DType::kF32) {
      b.as<float>()[i] = v;
    } else {
      b.as<uint16_t>()[i] = t == DType::kF16 ? f32_to_f16(v) : f32_to_bf16(v);
    }
  }
  return b;
}

std::vector<float> download(const TensorView& dev) {
  std::vector<float> out(static_cast<size_t>(dev.numel()));
  TensorView host = dev;
  host.data = out.data();
  host.memory = MemoryKind::kHost;
  copy_to_host(dev, host);
  return out;
}

// max |got - ref| / max |ref| over finite entries; infinities must agree.
double rel_err(const std::vector<float>& got, const float* ref) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(ref[i]) || std::isinf(got[i]) || std::isnan(got[i])) {
      if (got[i] != ref[i]) return INFINITY;
      continue;
    }
    num = std::max(num, std::abs(static_cast<double>(got[i]) - ref[i]));
    den = std::max(den, std::abs(static_cast<double>(ref[i])));
  }
  return den > 0.0 ? num / den : num;
}

void require_close(const char* what, double err, double tol) {
  TANDEM_REQUIRE(err < tol, kInternal, "bench-kernels: ", what, " differs from the CPU backend (",
                 err, " >= ", tol, "); not timing a wrong kernel");
}

// Median seconds per call of f over reps rounds of iters calls.
template <typename F>
double time_per_call(Backend& gpu, int64_t iters, int64_t reps, F f) {
  for (int i = 0; i < 3; ++i) f();  // warm-up: module load, workspace growth
  gpu.synchronize();
  std::vector<double> t;
  for (int64_t r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < iters; ++i) f();
    gpu.synchronize();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                static_cast<double>(iters));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void bench_merge(Backend& gpu, Backend& cpu, int64_t n, int64_t heads, int64_t d, bool mapped,
                 double copy_gbs, int64_t iters, int64_t reps) {
  Buffer ao = random_host(DType::kF32, {n, heads, d}, 1),
         al = random_host(DType::kF32, {n, heads}, 2, 5);
  const Buffer bo = random_host(DType::kF32, {n, heads, d}, 3);
  const Buffer bl = random_host(DType::kF32, {n, heads}, 4, 5);
  const Buffer dao = upload_to_device(ao.view()), dal = upload_to_device(al.view());
  Buffer dbo, dbl;  // b in device memory, or in mapped pinned memory
  if (mapped) {
    dbo = Buffer(cuda_mapped_memory(), DType::kF32, {n, heads, d});
    dbl = Buffer(cuda_mapped_memory(), DType::kF32, {n, heads});
    std::copy_n(bo.as<float>(), bo.view().numel(), dbo.as<float>());
    std::copy_n(bl.as<float>(), bl.view().numel(), dbl.as<float>());
  } else {
    dbo = upload_to_device(bo.view());
    dbl = upload_to_device(bl.view());
  }
  const AttnPartial b{dbo.view(), dbl.view()};
  const AttnPartial a{dao.view(), dal.view()};
  gpu.merge(a, b);
  cpu.merge({ao.view(), al.view()}, {bo.view(), bl.view()});
  require_close("merge o", rel_err(download(dao.view()), ao.as<float>()), 1e-5);
  require_close("merge lse", rel_err(download(dal.view()), al.as<float>()), 1e-5);
  // Repeated merges move the same bytes; the values drift, which does not change the cost.
  const double s = time_per_call(gpu, iters, reps, [&] { gpu.merge(a, b); });
  const double bytes = static_cast<double>(n * heads) * (3.0 * static_cast<double>(d) + 3.0) * 4.0;
  const double gbs = bytes / s / 1e9;
  std::printf("%s\n", json{{"bench", "merge"},
                           {"b_memory", mapped ? "mapped_pinned" : "device"},
                           {"n", n},
                           {"heads", heads},
                           {"head_dim", d},
                           {"bytes", bytes},
                           {"us", s * 1e6},
                           {"gbs", gbs},
                           {"of_copy", gbs / copy_gbs}}
                          .dump()
                          .c_str());
  std::fflush(stdout);
}

void bench_attention(Backend& gpu, Backend& cpu, int64_t n, int64_t hq, int64_t hkv, int64_t d,
                     int64_t t_keys, DType kv, double copy_gbs, int64_t iters, int64_t reps) {
  const Buffer q = random_host(DType::kF32, {n, hq, d}, 11);
  const Buffer k = random_host(kv, {t_keys, hkv, d}, 12);
  const Buffer v = random_host(kv, {t_keys, hkv, d}, 13);
  Buffer pos(DType::kI32, {n});
  for (int64_t i = 0; i < n; ++i) pos.as<int32_t>()[i] = static_cast<int32_t>(t_keys - n + i);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  Buffer ro(DType::kF32, {n, hq, d}), rl(DType::kF32, {n, hq});
  cpu.attention(q.view(), k.view(), v.view(), pos.view(), 0, scale, {ro.view(), rl.view()});
  const Buffer dq = upload_to_device(q.view()), dk = upload_to_device(k.view()),
               dv = upload_to_device(v.view()), dp = upload_to_device(pos.view());
  const Buffer dox(cuda_device_memory(), DType::kF32, {n, hq, d}),
      dl(cuda_device_memory(), DType::kF32, {n, hq});
  const AttnPartial out{dox.view(), dl.view()};
  auto run = [&] { gpu.attention(dq.view(), dk.view(), dv.view(), dp.view(), 0, scale, out); };
  run();
  // A sanity bound (the parity test holds the kernel to 1e-5).
  require_close("attention o", rel_err(download(dox.view()), ro.as<float>()), 1e-4);
  require_close("attention lse", rel_err(download(dl.view()), rl.as<float>()), 1e-4);
  const double s = time_per_call(gpu, iters, reps, run);
  const double bytes = 2.0 * static_cast<double>(k.view().nbytes()) +
                       static_cast<double>(n * hq) * (2.0 * static_cast<double>(d) + 1.0) * 4.0;
  const double gbs = bytes / s / 1e9;
  std::printf("%s\n", json{{"bench", "attention"},
                           {"kv", std::string(dtype_name(kv))},
                           {"n", n},
                           {"n_head_q", hq},
                           {"n_head_kv", hkv},
                           {"head_dim", d},
                           {"keys", t_keys},
                           {"bytes", bytes},
                           {"us", s * 1e6},
                           {"gbs", gbs},
                           {"of_copy", gbs / copy_gbs}}
                          .dump()
                          .c_str());
  std::fflush(stdout);
}

}  // namespace

int cmd_bench_kernels(const Options& o) {
  const int64_t iters = o.integer("iters");
  const int64_t reps = o.integer("reps");
  const int64_t copy_mb = o.integer("copy-mb");
  const CudaDeviceInfo info = cuda_device_info();
  TANDEM_REQUIRE(info.count > 0, kUnsupported,
                 "bench-kernels needs a CUDA device; none is visible");
  auto gpu = make_cuda_backend();
  auto cpu = make_cpu_backend();
  const double copy_gbs = measure_d2d_bandwidth_gbs(static_cast<size_t>(copy_mb) << 20);
  std::printf("%s\n",
              json{{"bench", "d2d_copy"},
                   {"device", info.name},
                   {"sm", std::to_string(info.sm_major) + "." + std::to_string(info.sm_minor)},
                   {"memory_gib", static_cast<double>(info.memory_bytes) / (1 << 30)},
                   {"bytes", copy_mb << 20},
                   {"gbs", copy_gbs}}
                  .dump()
                  .c_str());
  std::fflush(stdout);
  // Merge: a decode batch (64 sequences x 32 heads, in L2) and a footprint far above L2.
  for (bool mapped : {false, true}) {
    bench_merge(*gpu, *cpu, 64, 32, 128, mapped, copy_gbs, iters, reps);
    bench_merge(*gpu, *cpu, 8192, 32, 128, mapped, copy_gbs, iters, reps);
  }
  // Decode attention, Llama-3-8B head shape (32 q heads, 8 kv heads, d 128), one query.
  for (int64_t t : {1024, 4096, 32768, 131072})
    bench_attention(*gpu, *cpu, 1, 32, 8, 128, t, DType::kBF16, copy_gbs, iters, reps);
  for (int64_t t : {4096, 32768})
    bench_attention(*gpu, *cpu, 1, 32, 8, 128, t, DType::kF32, copy_gbs, iters, reps);
  // A batch of 8 queries over one span (the kernel reads the span once per query).
  bench_attention(*gpu, *cpu, 8, 32, 8, 128, 32768, DType::kBF16, copy_gbs, iters, reps);
  return 0;
}

}  // namespace tandem
