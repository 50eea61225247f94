// The CPU prefill matrix product (kernels/cpu/gemm_prefill.h) on every kernel path this machine
// supports (kernels/cpu/isa.h: each forced in turn; avx2 always among them), against a float64
// reference: ragged n, m, k (not multiples of any tile, k odd, k spanning several k blocks), bias,
// f32/f16/bf16 weights; and the decode paths (n <= 16: AVX2 on every path, except bf16 weights on
// avx512bf16, kernels/cpu/gemm_decode.h). Also the path selection itself, and that the results
// depend neither on the thread count nor on n (the f32 paths also agree bit for bit with each
// other; bf16 decode on avx512bf16 gives each x row the same bits whatever n <= 16).
//
// Tolerances, err = max |got - ref| / max |ref| (tests/cpu_ops_reference.h):
//  - f32 arithmetic (every path with f32 or f16 weights; bf16 weights on avx2 and avx512):
//    kTol = 1e-5, as the other op tests.
//  - bf16 weights on avx512bf16 (prefill and decode): x is rounded to bf16 (relative error <= 2^-9
//  per value) and
//    pairs are accumulated in f32, so each output is checked against its own bound
//    |got - ref| <= 2^-8 * sum_p |x_p w_p|, and err < 4e-3 overall for k >= 64.
#include <tbb/global_control.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/isa.h"
#include "tests/cpu_ops_reference.h"

using namespace tandem;
using namespace tandem::test;
using cpu::Isa;

namespace {

struct Ref {
  std::vector<double> y, abs;  // the float64 product and sum_p |x_p w_p| (+ |bias|)
};

Ref reference(const std::vector<float>& x, const std::vector<float>& w, const float* bias,
              int64_t n, int64_t m, int64_t k) {
  Ref r;
  r.y.resize(static_cast<size_t>(n * m));
  r.abs.resize(r.y.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double s = bias != nullptr ? bias[j] : 0.0, a = bias != nullptr ? std::abs(bias[j]) : 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double v = static_cast<double>(x[static_cast<size_t>(i * k + p)]) *
                         w[static_cast<size_t>(j * k + p)];
        s += v;
        a += std::abs(v);
      }
      r.y[static_cast<size_t>(i * m + j)] = s;
      r.abs[static_cast<size_t>(i * m + j)] = a;
    }
  return r;
}

std::string paths_tested() {
  std::string s;
  for (Isa i : cpu::supported_isas()) s += (s.empty() ? "" : " ") + std::string(cpu::isa_name(i));
  return s;
}

struct Case {
  int64_t n, m, k;
};
// n > 16 (the prefill path); m past one task (96 rows) and not a multiple of 6 or 12; k odd, 1,
// past one k block (256 / 512) and not a multiple of 8 or 16. n <= 16: the decode paths (k past
// 4096 with one x row, past 2730 with three: the prefetching variants; k = 1, 32 and 64: the
// bf16 decode kernel's masked-only and unmasked-only row ends).
constexpr Case kCases[] = {
    {17, 5, 3},    {33, 97, 1},   {50, 13, 257}, {64, 29, 514}, {100, 7, 1031}, {19, 200, 64},
    {300, 25, 33}, {40, 12, 600}, {1, 7, 4501},  {1, 5, 100},   {2, 9, 67},     {3, 6, 130},
    {3, 4, 2000},  {8, 11, 100},  {16, 19, 33},  {1, 3, 9000},  {2, 5, 8200},   {7, 9, 3000},
    {4, 6, 1},     {5, 9, 64},    {1, 3, 32}};

}  // namespace

TEST_CASE("CPU kernel paths: detection, TANDEM_CPU_ISA cap and forcing", "[cpu][isa]") {
  const auto paths = cpu::supported_isas();
  std::printf("CPU features: %s\nCPU kernel paths supported (all tested): %s; default: %s\n",
              cpu::describe_cpu_features().c_str(), paths_tested().c_str(),
              std::string(cpu::isa_name(cpu::active_isa())).c_str());
  REQUIRE(!paths.empty());
  CHECK(paths.front() == Isa::kAvx2);
  CHECK(cpu::isa_supported(cpu::active_isa()));
  Isa parsed = Isa::kAvx2;
  CHECK(cpu::parse_isa("avx512bf16", &parsed));
  CHECK(parsed == Isa::kAvx512Bf16);
  CHECK_FALSE(cpu::parse_isa("avx1024", &parsed));
  const Isa before = cpu::active_isa();
  for (Isa i : {Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    if (cpu::isa_supported(i)) {
      cpu::ScopedIsa scope(i);
      CHECK(cpu::active_isa() == i);
    } else {
      CHECK_THROWS(cpu::force_isa(i));  // never SIGILL: refused before any kernel runs
    }
  }
  CHECK(cpu::active_isa() == before);
}

TEST_CASE("CPU identity from CPUID, and the host attention's prefetch rule", "[cpu][isa]") {
  unsigned family = 0, model = 0;
  cpu::decode_cpu_signature(0x00A10F11u, &family, &model);  // AMD EPYC 9004 (Zen 4)
  CHECK(family == 0x19);
  CHECK(model == 0x11);
  cpu::decode_cpu_signature(0x00B00F21u, &family, &model);  // AMD EPYC 9005 (Zen 5)
  CHECK(family == 0x1a);
  CHECK(model == 0x2);
  cpu::decode_cpu_signature(0x000806F8u, &family, &model);  // Intel Xeon 4th gen (Sapphire Rapids)
  CHECK(family == 0x6);
  CHECK(model == 0x8f);
  cpu::decode_cpu_signature(0x00000543u, &family, &model);  // family 5: no extended fields
  CHECK(family == 0x5);
  CHECK(model == 0x4);
  const cpu::CpuId& id = cpu::cpu_id();
  std::printf("CPU: %s; host attention prefetch: %s\n", cpu::describe_cpu_id().c_str(),
              cpu::describe_host_prefetch_rule().c_str());
  CHECK(id.vendor.size() == 12);
  CHECK(id.family != 0);
  const cpu::HostPrefetchRule& rule = cpu::host_prefetch_rule();
  const bool amd = id.vendor == "AuthenticAMD";
  if (std::getenv("TANDEM_HOST_PREFETCH_EVERY") == nullptr)
    CHECK(rule.every_f32 == (amd && id.family == 0x19 ? 4 : 1));
  else
    CHECK((rule.every_f32 >= 1 && rule.every_f32 <= 16));
  if (std::getenv("TANDEM_HOST_PREFETCH_HINT") == nullptr)
    CHECK(rule.to_l1 == (amd && id.family == 0x1a));
}

TEST_CASE("matmul (prefill and decode) matches float64 on every supported path",
          "[cpu][matmul][prefill]") {
  auto be = test::cpu();
  uint32_t seed = 100;
  for (Isa path : cpu::supported_isas()) {
    cpu::ScopedIsa scope(path);
    std::printf("matmul: path %s\n", std::string(cpu::isa_name(path)).c_str());
    for (DType wt : kFloatTypes)
      for (const Case& c : kCases)
        for (bool with_bias : {false, true}) {
          INFO("path " << cpu::isa_name(path) << " w " << dtype_name(wt) << " n=" << c.n
                       << " m=" << c.m << " k=" << c.k << " bias=" << with_bias);
          const Tensor x = random_tensor(DType::kF32, {c.n, c.k}, seed++);
          const Tensor w = random_tensor(wt, {c.m, c.k}, seed++);
          const Tensor b = random_tensor(DType::kF32, {c.m}, seed++);
          Buffer y(DType::kF32, {c.n, c.m});
          be->matmul(x.view(), w.view(), with_bias ? b.view() : TensorView(), y.view());
          const Ref ref =
              reference(x.val, w.val, with_bias ? b.val.data() : nullptr, c.n, c.m, c.k);
          const double err = norm_err(y.as<float>(), ref.y);
          if (path == Isa::kAvx512Bf16 && wt == DType::kBF16) {
            // Overall only where enough terms average the rounding out (a 32-term dot product
            // with cancellation may lose more relative to max |ref|; the bound below still holds).
            if (c.k >= 64) CHECK(err < 4e-3);
            int64_t over = 0;
            for (size_t i = 0; i < ref.y.size(); ++i)
              if (std::abs(y.as<float>()[i] - ref.y[i]) > std::ldexp(ref.abs[i], -8)) ++over;
            CHECK(over == 0);
          } else {
            CHECK(err < kTol);
          }
        }
  }
}

TEST_CASE("prefill matmul: independent of threads and of n; f32 paths agree bit for bit",
          "[cpu][matmul][prefill]") {
  auto be = test::cpu();
  const int64_t n = 70, m = 130, k = 700;
  for (DType wt : kFloatTypes) {
    const Tensor x = random_tensor(DType::kF32, {n, k}, 7);
    const Tensor w = random_tensor(wt, {m, k}, 8);
    std::vector<float> first_f32;  // the first f32-arithmetic path's result
    for (Isa path : cpu::supported_isas()) {
      INFO("path " << cpu::isa_name(path) << " w " << dtype_name(wt));
      cpu::ScopedIsa scope(path);
      Buffer y1(DType::kF32, {n, m}), y2(DType::kF32, {n, m}), part(DType::kF32, {20, m});
      {
        tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
        be->matmul(x.view(), w.view(), TensorView(), y1.view());
      }
      {
        tbb::global_control two(tbb::global_control::max_allowed_parallelism, 2);
        be->matmul(x.view(), w.view(), TensorView(), y2.view());
      }
      CHECK(std::memcmp(y1.as<float>(), y2.as<float>(), static_cast<size_t>(n * m * 4)) == 0);
      // Rows 45..64 alone (n = 20): the same values as inside the n = 70 product.
      be->matmul(x.view().slice(45, 65), w.view(), TensorView(), part.view());
      CHECK(std::memcmp(part.as<float>(), y1.as<float>() + 45 * m,
                        static_cast<size_t>(20 * m * 4)) == 0);
      if (path == Isa::kAvx512Bf16 && wt == DType::kBF16) continue;  // bf16 arithmetic
      const std::vector<float> got(y1.as<float>(), y1.as<float>() + n * m);
      if (first_f32.empty()) {
        first_f32 = got;
      } else {
        CHECK(got == first_f32);
      }
    }
  }
}

TEST_CASE("bf16 decode on avx512bf16: each x row's result is independent of n and of threads",
          "[cpu][matmul]") {
  if (!cpu::isa_supported(Isa::kAvx512Bf16)) {
    WARN("avx512bf16 not supported by this CPU: the VDPBF16PS decode product is not run");
    return;
  }
  cpu::ScopedIsa scope(Isa::kAvx512Bf16);
  auto be = test::cpu();
  for (int64_t k : {1, 31, 64, 100, 3000, 9000}) {
    INFO("k=" << k);
    const int64_t m = 37;
    const Tensor x = random_tensor(DType::kF32, {16, k}, 11);
    const Tensor w = random_tensor(DType::kBF16, {m, k}, 12);
    Buffer all(DType::kF32, {16, m});
    {
      tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
      be->matmul(x.view(), w.view(), TensorView(), all.view());
    }
    for (int64_t n = 1; n <= 16; ++n) {
      INFO("n=" << n);
      Buffer y(DType::kF32, {n, m});
      be->matmul(x.view().slice(16 - n, 16), w.view(), TensorView(), y.view());
      CHECK(std::memcmp(y.as<float>(), all.as<float>() + (16 - n) * m,
                        static_cast<size_t>(n * m * 4)) == 0);
    }
  }
}
