// Unit tests of the CPU reference backend's dense ops against straightforward float64 references
// on random inputs (tests/cpu_ops_reference.h), for each weight dtype and odd sizes: matmul
// (strided rows, thread-count independence), embedding, the norms, rope, the elementwise ops,
// softmax and dtype-converting copies.
#include <tbb/global_control.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/isa.h"
#include "tests/cpu_ops_reference.h"

using namespace tandem;
using namespace tandem::test;

namespace {

// ---- float64 reference ------------------------------------------------------------------------

std::vector<double> ref_matmul(const std::vector<float>& x, const std::vector<float>& w,
                               const float* bias, int64_t n, int64_t m, int64_t k) {
  std::vector<double> y(static_cast<size_t>(n * m));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double s = bias != nullptr ? bias[j] : 0.0;
      for (int64_t p = 0; p < k; ++p)
        s += static_cast<double>(x[static_cast<size_t>(i * k + p)]) *
             w[static_cast<size_t>(j * k + p)];
      y[static_cast<size_t>(i * m + j)] = s;
    }
  return y;
}

}  // namespace

// ---- matmul -------------------------------------------------------------------------------------

TEST_CASE("matmul matches float64 for every weight dtype and odd sizes", "[cpu][matmul]") {
  auto be = test::cpu();
  struct Shape {
    int64_t m, k;
  };
  const Shape shapes[] = {
      {37, 67}, {64, 256}, {19, 1003}, {5, 3}, {7, 4501}};  // 4501: prefetching path
  uint32_t seed = 1;
  for (DType wt : kFloatTypes)
    for (const Shape& s : shapes)
      for (int64_t n : {1, 2, 3, 4, 16, 17, 130})
        for (bool with_bias : {false, true}) {
          INFO("w " << dtype_name(wt) << " m=" << s.m << " k=" << s.k << " n=" << n
                    << " bias=" << with_bias);
          const Tensor x = random_tensor(DType::kF32, {n, s.k}, seed++);
          const Tensor w = random_tensor(wt, {s.m, s.k}, seed++);
          const Tensor b = random_tensor(DType::kF32, {s.m}, seed++);
          Buffer y(DType::kF32, {n, s.m});
          be->matmul(x.view(), w.view(), with_bias ? b.view() : TensorView(), y.view());
          const auto ref =
              ref_matmul(x.val, w.val, with_bias ? b.val.data() : nullptr, n, s.m, s.k);
          // bf16 weights on avx512bf16 round x to bf16: the bound of
          // tests/test_cpu_ops_gemm.cpp, which tests every path.
          const bool bf16x = wt == DType::kBF16 && cpu::active_isa() == cpu::Isa::kAvx512Bf16;
          CHECK(norm_err(y.as<float>(), ref) < (bf16x ? 4e-3 : kTol));
        }
}

TEST_CASE("matmul reads and writes strided rows", "[cpu][matmul]") {
  auto be = test::cpu();
  const int64_t n = 5, m = 21, k = 45;
  const Tensor xs = random_tensor(DType::kF32, {n, k + 3}, 11);
  const Tensor w = random_tensor(DType::kBF16, {m, k}, 12);
  TensorView x = xs.view();
  x.shape[1] = k;  // rows of k floats, stride k + 3
  Buffer ys = Buffer::zeros(DType::kF32, {n, m + 2});
  TensorView y = ys.view();
  y.shape[1] = m;
  std::vector<float> xc;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < k; ++p) xc.push_back(xs.val[static_cast<size_t>(i * (k + 3) + p)]);
  const auto ref = ref_matmul(xc, w.val, nullptr, n, m, k);
  for (cpu::Isa isa : cpu::supported_isas()) {  // avx512bf16 has its own bf16 decode product
    INFO("path " << cpu::isa_name(isa));
    cpu::ScopedIsa scope(isa);
    be->matmul(x, w.view(), TensorView(), y);
    std::vector<float> got;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) got.push_back(ys.as<float>()[i * (m + 2) + j]);
    CHECK(norm_err(got.data(), ref) < (isa == cpu::Isa::kAvx512Bf16 ? 4e-3 : kTol));
    for (int64_t i = 0; i < n; ++i) CHECK(ys.as<float>()[i * (m + 2) + m] == 0.0f);
  }
}

TEST_CASE("matmul is bit-identical with 1 and 2 threads", "[cpu][matmul]") {
  auto be = test::cpu();
  for (int64_t n : {1, 7, 40}) {
    const Tensor x = random_tensor(DType::kF32, {n, 300}, 21);
    const Tensor w = random_tensor(DType::kBF16, {517, 300}, 22);
    Buffer y1(DType::kF32, {n, 517}), y2(DType::kF32, {n, 517});
    {
      tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
      be->matmul(x.view(), w.view(), TensorView(), y1.view());
    }
    be->matmul(x.view(), w.view(), TensorView(), y2.view());
    CHECK(std::memcmp(y1.as<float>(), y2.as<float>(), static_cast<size_t>(n * 517 * 4)) == 0);
  }
}

// ---- embedding, norms -------------------------------------------------------------------------

TEST_CASE("embedding gathers and converts rows", "[cpu][embedding]") {
  auto be = test::cpu();
  for (DType t : kFloatTypes) {
    INFO(dtype_name(t));
    const Tensor table = random_tensor(t, {50, 37}, 31);
    const std::vector<int32_t> ids = {3, 0, 49, 3, 17};
    Buffer idb = i32_buffer(ids);
    Buffer out(DType::kF32, {5, 37});
    be->embedding(idb.view(), table.view(), out.view());
    for (size_t i = 0; i < ids.size(); ++i)
      for (int64_t c = 0; c < 37; ++c)
        CHECK(out.as<float>()[static_cast<int64_t>(i) * 37 + c] ==
              table.val[static_cast<size_t>(ids[i] * 37 + c)]);
    Buffer bad = i32_buffer({50});
    Buffer out1(DType::kF32, {1, 37});
    CHECK_THROWS_AS(be->embedding(bad.view(), table.view(), out1.view()), tandem::Error);
  }
}

TEST_CASE("rms_norm and layer_norm match float64, in place too", "[cpu][norm]") {
  auto be = test::cpu();
  for (int64_t d : {67, 2048})
    for (int64_t rows : {1, 3, 17}) {
      INFO("rows=" << rows << " d=" << d);
      // An offset of 5 makes layer_norm's variance prone to cancellation.
      const Tensor x = random_tensor(DType::kF32, {rows, d}, 41, 1.0f, 5.0f);
      const Tensor w = random_tensor(DType::kF32, {d}, 42);
      const Tensor b = random_tensor(DType::kF32, {d}, 43);
      const float eps = 1e-5f;
      std::vector<double> ref_rms(static_cast<size_t>(rows * d)), ref_ln(ref_rms.size());
      for (int64_t r = 0; r < rows; ++r) {
        double ss = 0.0, mean = 0.0, var = 0.0;
        for (int64_t c = 0; c < d; ++c) {
          const double v = x.val[static_cast<size_t>(r * d + c)];
          ss += v * v;
          mean += v;
        }
        mean /= static_cast<double>(d);
        for (int64_t c = 0; c < d; ++c)
          var += std::pow(x.val[static_cast<size_t>(r * d + c)] - mean, 2);
        var /= static_cast<double>(d);
        const double rs = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
        const double ls = 1.0 / std::sqrt(var + eps);
        for (int64_t c = 0; c < d; ++c) {
          const size_t i = static_cast<size_t>(r * d + c);
          ref_rms[i] = x.val[i] * rs * w.val[static_cast<size_t>(c)];
          ref_ln[i] = (x.val[i] - mean) * ls * w.val[static_cast<size_t>(c)] +
                      b.val[static_cast<size_t>(c)];
        }
      }
      Buffer out(DType::kF32, {rows, d});
      be->rms_norm(x.view(), w.view(), eps, out.view());
      CHECK(norm_err(out.as<float>(), ref_rms) < kTol);
      be->layer_norm(x.view(), w.view(), b.view(), eps, out.view());
      CHECK(norm_err(out.as<float>(), ref_ln) < kTol);
      // Aliasing: out is x.
      const Tensor xa = random_tensor(DType::kF32, {rows, d}, 41, 1.0f, 5.0f);
      be->layer_norm(xa.view(), w.view(), b.view(), eps, xa.view());
      CHECK(norm_err(xa.f32(), ref_ln) < kTol);
      const Tensor xr = random_tensor(DType::kF32, {rows, d}, 41, 1.0f, 5.0f);
      be->rms_norm(xr.view(), w.view(), eps, xr.view());
      CHECK(norm_err(xr.f32(), ref_rms) < kTol);
    }
}

// ---- rope ---------------------------------------------------------------------------------------

TEST_CASE("rope matches float64 for neox, interleaved, partial rotary, large positions",
          "[cpu][rope]") {
  auto be = test::cpu();
  struct Case {
    int32_t head_dim, rotary_dim;
    bool neox;
    float mscale;
  };
  const Case cases[] = {{64, 64, true, 1.0f},
                        {64, 64, false, 1.0f},
                        {80, 32, true, 1.25f},
                        {48, 24, false, 0.9f},
                        {128, 128, true, 1.0f}};
  const std::vector<int32_t> pos = {0, 1, 7, 4095, 100000, 131071};
  const int64_t n = static_cast<int64_t>(pos.size()), heads = 3;
  for (const Case& cs : cases) {
    INFO("head_dim=" << cs.head_dim << " rotary_dim=" << cs.rotary_dim << " neox=" << cs.neox);
    RopeTable rt;
    rt.head_dim = cs.head_dim;
    rt.rotary_dim = cs.rotary_dim;
    rt.neox = cs.neox;
    rt.mscale = cs.mscale;
    for (int32_t i = 0; i < cs.rotary_dim / 2; ++i)
      rt.inv_freq.push_back(static_cast<float>(std::pow(500000.0, -2.0 * i / cs.rotary_dim)));
    const Tensor x = random_tensor(DType::kF32, {n, heads, cs.head_dim}, 51);
    Buffer pb = i32_buffer(pos);
    be->rope(x.view(), pb.view(), rt);
    const int64_t hd = cs.head_dim, half = cs.rotary_dim / 2;
    std::vector<double> ref(x.val.begin(), x.val.end());
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < heads; ++h) {
        const size_t base = static_cast<size_t>((t * heads + h) * hd);
        for (int64_t i = 0; i < half; ++i) {
          const double ang = static_cast<double>(pos[static_cast<size_t>(t)]) *
                             rt.inv_freq[static_cast<size_t>(i)];
          const double c = std::cos(ang) * cs.mscale, s = std::sin(ang) * cs.mscale;
          const size_t ia = base + static_cast<size_t>(cs.neox ? i : 2 * i);
          const size_t ib = base + static_cast<size_t>(cs.neox ? i + half : 2 * i + 1);
          const double a = x.val[ia], b = x.val[ib];
          ref[ia] = a * c - b * s;
          ref[ib] = b * c + a * s;
        }
      }
    CHECK(norm_err(x.f32(), ref) < kTol);
    // Dims past rotary_dim are untouched, bit for bit.
    for (int64_t r = 0; r < n * heads; ++r)
      for (int64_t c = cs.rotary_dim; c < hd; ++c)
        CHECK(x.f32()[r * hd + c] == x.val[static_cast<size_t>(r * hd + c)]);
  }
}

// ---- elementwise --------------------------------------------------------------------------------

TEST_CASE("silu_mul, relu, add match float64, in place too", "[cpu][elementwise]") {
  auto be = test::cpu();
  for (int64_t cols : {1, 13, 1000, 70001}) {
    INFO("cols=" << cols);
    const int64_t rows = 3;
    const Tensor g = random_tensor(DType::kF32, {rows, cols}, 61, 12.0f);
    const Tensor u = random_tensor(DType::kF32, {rows, cols}, 62);
    std::vector<double> ref_silu(g.val.size()), ref_add(g.val.size()), ref_relu(g.val.size());
    for (size_t i = 0; i < g.val.size(); ++i) {
      const double gv = g.val[i];
      ref_silu[i] = gv / (1.0 + std::exp(-gv)) * u.val[i];
      ref_add[i] = gv + u.val[i];
      ref_relu[i] = std::max(gv, 0.0);
    }
    Buffer out(DType::kF32, {rows, cols});
    be->silu_mul(g.view(), u.view(), out.view());
    CHECK(norm_err(out.as<float>(), ref_silu) < kTol);
    be->add(g.view(), u.view(), out.view());
    CHECK(norm_err(out.as<float>(), ref_add) < kTol);
    be->silu_mul(g.view(), u.view(), g.view());  // out aliases gate
    CHECK(norm_err(g.f32(), ref_silu) < kTol);
    const Tensor r = random_tensor(DType::kF32, {rows, cols}, 61, 12.0f);
    be->relu(r.view());
    CHECK(norm_err(r.f32(), ref_relu) < kTol);
    be->add(r.view(), u.view(), u.view());  // out aliases b
    for (size_t i = 0; i < g.val.size(); ++i) ref_relu[i] += u.val[i];
    CHECK(norm_err(u.f32(), ref_relu) < kTol);
  }
}

TEST_CASE("softmax matches float64, masked entries and fully masked rows", "[cpu][softmax]") {
  auto be = test::cpu();
  for (int64_t d : {1, 7, 8, 100, 4099}) {
    INFO("d=" << d);
    const int64_t rows = 4;
    Tensor x = random_tensor(DType::kF32, {rows, d}, 71, 20.0f);
    // Row 1: every third entry masked (but not all); row 3: all masked.
    for (int64_t c = 1; c < d; c += 3) x.f32()[d + c] = -kInf;
    for (int64_t c = 0; c < d; ++c) x.f32()[3 * d + c] = -kInf;
    std::vector<double> ref(static_cast<size_t>(rows * d), 0.0);
    for (int64_t r = 0; r < 3; ++r) {
      const float* row = x.f32() + r * d;
      const double mx = *std::max_element(row, row + d);
      double s = 0.0;
      for (int64_t c = 0; c < d; ++c) s += std::exp(row[c] - mx);
      for (int64_t c = 0; c < d; ++c)
        ref[static_cast<size_t>(r * d + c)] = std::exp(row[c] - mx) / s;
    }
    be->softmax(x.view());
    CHECK(norm_err(x.f32(), ref) < kTol);
    for (int64_t c = 1; c < d; c += 3) CHECK(x.f32()[d + c] == 0.0f);
    for (int64_t c = 0; c < d; ++c) CHECK(x.f32()[3 * d + c] == 0.0f);  // guard: zeros, not NaN
  }
}

TEST_CASE("copy converts between f32, f16 and bf16 like the scalar conversions", "[cpu][copy]") {
  auto be = test::cpu();
  const int64_t n = 1003;
  // Values that stress rounding: subnormal and overflowing in f16, ties, inf, NaN.
  Tensor src = random_tensor(DType::kF32, {n}, 81, 3.0f);
  float* s = src.f32();
  const float special[] = {
      1e-6f,       -3e-8f,     65519.0f, 65520.0f,
      1e6f,        -kInf,      kInf,     std::numeric_limits<float>::quiet_NaN(),
      1.00390625f, 1.01171875f};
  for (size_t i = 0; i < std::size(special); ++i) s[i * 97] = special[i];
  for (DType st : kFloatTypes)
    for (DType dt : kFloatTypes) {
      INFO(dtype_name(st) << " -> " << dtype_name(dt));
      Buffer a(st, {n}), b(dt, {n});
      std::vector<float> sv(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i)
        sv[static_cast<size_t>(i)] = store_as(st, a.view().data, i, s[i]);
      be->copy(a.view(), b.view());
      Buffer want(dt, {n});
      for (int64_t i = 0; i < n; ++i) store_as(dt, want.view().data, i, sv[static_cast<size_t>(i)]);
      int mismatches = 0;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t es = dtype_size(dt);
        const auto* gb = static_cast<const unsigned char*>(b.view().data) + i * es;
        const auto* wb = static_cast<const unsigned char*>(want.view().data) + i * es;
        if (std::memcmp(gb, wb, static_cast<size_t>(es)) == 0) continue;
        // NaN payloads may differ (F16C vs the scalar rule); NaN must stay NaN.
        const float gv = dt == DType::kF32   ? *reinterpret_cast<const float*>(gb)
                         : dt == DType::kF16 ? f16_to_f32(*reinterpret_cast<const uint16_t*>(gb))
                                             : bf16_to_f32(*reinterpret_cast<const uint16_t*>(gb));
        if (std::isnan(gv) && std::isnan(sv[static_cast<size_t>(i)])) continue;
        ++mismatches;
      }
      CHECK(mismatches == 0);
    }
}
