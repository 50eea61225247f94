// Unit tests of the CPU reference backend: every op against a straightforward float64 reference
// on random inputs (fixed seeds, no zeros), for each weight/KV dtype and odd sizes.
//
// Error measure: err = max_i |got_i - ref_i| / max_i |ref_i| (the normalised error of
// llama.cpp's test-backend-ops). Tolerance 1e-5 on every path: f16/bf16 inputs are rounded once
// when the test builds them and the float64 reference is computed from the same rounded values,
// so only the kernel's float32 arithmetic is measured.
#include <tbb/global_control.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/buffer.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/dtype.h"
#include "kernels/tensor.h"

using namespace tandem;

namespace {

constexpr double kTol = 1e-5;
constexpr float kInf = std::numeric_limits<float>::infinity();
const DType kFloatTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

// A buffer of some float dtype plus its values as float after rounding to that dtype.
struct Tensor {
  Buffer buf;
  std::vector<float> val;
  const TensorView& view() const { return buf.view(); }
  float* f32() const { return buf.as<float>(); }
};

// Rounds v to dtype t, returns the value it stores, writes the bits to dst[i].
float store_as(DType t, void* dst, int64_t i, float v) {
  switch (t) {
    case DType::kF32:
      static_cast<float*>(dst)[i] = v;
      return v;
    case DType::kF16: {
      const uint16_t h = f32_to_f16(v);
      static_cast<uint16_t*>(dst)[i] = h;
      return f16_to_f32(h);
    }
    case DType::kBF16: {
      const uint16_t h = f32_to_bf16(v);
      static_cast<uint16_t*>(dst)[i] = h;
      return bf16_to_f32(h);
    }
    default:
      FAIL("not a float dtype");
  }
  return 0.0f;
}

// Uniform magnitudes in [0.1, 1) * scale with random sign plus offset: never zero.
Tensor random_tensor(DType t, std::initializer_list<int64_t> dims, uint32_t seed,
                     float scale = 1.0f, float offset = 0.0f) {
  Tensor x{Buffer(t, dims), {}};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mag(0.1f, 1.0f);
  const int64_t n = x.buf.view().numel();
  x.val.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float v = (rng() & 1u ? 1.0f : -1.0f) * mag(rng) * scale + offset;
    x.val[static_cast<size_t>(i)] = store_as(t, x.buf.view().data, i, v);
  }
  return x;
}

Buffer i32_buffer(const std::vector<int32_t>& v) {
  Buffer b(DType::kI32, {static_cast<int64_t>(v.size())});
  std::memcpy(b.as<int32_t>(), v.data(), v.size() * sizeof(int32_t));
  return b;
}

double norm_err(const float* got, const std::vector<double>& ref) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num = std::max(num, std::abs(static_cast<double>(got[i]) - ref[i]));
    den = std::max(den, std::abs(ref[i]));
  }
  return den > 0.0 ? num / den : num;
}

std::unique_ptr<Backend> cpu() { return make_cpu_backend(); }

// ---- float64 references -----------------------------------------------------------------------

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

struct RefAttn {
  std::vector<double> o, lse;
};

// Dense attention with causal visibility by position, in float64.
RefAttn ref_attention(const std::vector<float>& q, const std::vector<float>& k,
                      const std::vector<float>& v, const std::vector<int32_t>& q_pos,
                      int64_t k_pos0, double scale, int64_t n, int64_t hq, int64_t hkv,
                      int64_t t_keys, int64_t d) {
  RefAttn r{std::vector<double>(static_cast<size_t>(n * hq * d), 0.0),
            std::vector<double>(static_cast<size_t>(n * hq), -INFINITY)};
  const int64_t rep = hq / hkv;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t g = h / rep;
      std::vector<double> s;
      for (int64_t j = 0; j < t_keys && k_pos0 + j <= q_pos[static_cast<size_t>(i)]; ++j) {
        double dot = 0.0;
        for (int64_t c = 0; c < d; ++c)
          dot += static_cast<double>(q[static_cast<size_t>((i * hq + h) * d + c)]) *
                 k[static_cast<size_t>((j * hkv + g) * d + c)];
        s.push_back(scale * dot);
      }
      if (s.empty()) continue;
      const double mx = *std::max_element(s.begin(), s.end());
      double sum = 0.0;
      for (double& e : s) sum += (e = std::exp(e - mx));
      for (size_t j = 0; j < s.size(); ++j)
        for (int64_t c = 0; c < d; ++c)
          r.o[static_cast<size_t>((i * hq + h) * d + c)] +=
              s[j] / sum * v[static_cast<size_t>((static_cast<int64_t>(j) * hkv + g) * d + c)];
      r.lse[static_cast<size_t>(i * hq + h)] = mx + std::log(sum);
    }
  return r;
}

// lse: -inf must match exactly, finite values within kTol * max(1, |ref|).
void check_lse(const float* got, const std::vector<double>& ref) {
  for (size_t i = 0; i < ref.size(); ++i) {
    INFO("lse row " << i);
    if (std::isinf(ref[i])) {
      CHECK(got[i] == static_cast<float>(ref[i]));
    } else {
      CHECK(std::abs(got[i] - ref[i]) <= kTol * std::max(1.0, std::abs(ref[i])));
    }
  }
}

}  // namespace

// ---- matmul -------------------------------------------------------------------------------------

TEST_CASE("matmul matches float64 for every weight dtype and odd sizes", "[cpu][matmul]") {
  auto be = cpu();
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
          CHECK(norm_err(y.as<float>(), ref) < kTol);
        }
}

TEST_CASE("matmul reads and writes strided rows", "[cpu][matmul]") {
  auto be = cpu();
  const int64_t n = 5, m = 21, k = 45;
  const Tensor xs = random_tensor(DType::kF32, {n, k + 3}, 11);
  const Tensor w = random_tensor(DType::kBF16, {m, k}, 12);
  TensorView x = xs.view();
  x.shape[1] = k;  // rows of k floats, stride k + 3
  Buffer ys = Buffer::zeros(DType::kF32, {n, m + 2});
  TensorView y = ys.view();
  y.shape[1] = m;
  be->matmul(x, w.view(), TensorView(), y);
  std::vector<float> xc;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < k; ++p) xc.push_back(xs.val[static_cast<size_t>(i * (k + 3) + p)]);
  const auto ref = ref_matmul(xc, w.val, nullptr, n, m, k);
  std::vector<float> got;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) got.push_back(ys.as<float>()[i * (m + 2) + j]);
  CHECK(norm_err(got.data(), ref) < kTol);
  for (int64_t i = 0; i < n; ++i) CHECK(ys.as<float>()[i * (m + 2) + m] == 0.0f);
}

TEST_CASE("matmul is bit-identical with 1 and 2 threads", "[cpu][matmul]") {
  auto be = cpu();
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
  auto be = cpu();
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
  auto be = cpu();
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

// ---- rope
// -----------------------------------------------------------------------------------------

TEST_CASE("rope matches float64 for neox, interleaved, partial rotary, large positions",
          "[cpu][rope]") {
  auto be = cpu();
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
  auto be = cpu();
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
  auto be = cpu();
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
  auto be = cpu();
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

// ---- attention and merge ------------------------------------------------------------------------

namespace {

struct AttnCase {
  int64_t n, hq, hkv, t_keys, d, k_pos0;
  std::vector<int32_t> q_pos;
};

struct AttnOut {
  Buffer o, lse;
  AttnPartial partial() const { return {o.view(), lse.view()}; }
};

AttnOut run_attention(Backend& be, const Tensor& q, const TensorView& k, const TensorView& v,
                      const std::vector<int32_t>& q_pos, int64_t k_pos0, float scale, int64_t n,
                      int64_t hq, int64_t d) {
  AttnOut out{Buffer(DType::kF32, {n, hq, d}), Buffer(DType::kF32, {n, hq})};
  // Poison the outputs: the op must write every element.
  std::fill(out.o.as<float>(), out.o.as<float>() + n * hq * d, std::nanf(""));
  std::fill(out.lse.as<float>(), out.lse.as<float>() + n * hq, std::nanf(""));
  Buffer pb = i32_buffer(q_pos);
  be.attention(q.view(), k, v, pb.view(), k_pos0, scale, out.partial());
  return out;
}

}  // namespace

TEST_CASE("attention matches float64: KV dtypes, GQA, causal, invisible queries",
          "[cpu][attention]") {
  auto be = cpu();
  std::vector<AttnCase> cases;
  for (int64_t rep : {1, 2, 4}) {
    // Prefill chunk: queries at the end of the span, causal.
    cases.push_back({17, 2 * rep, 2, 150, 64, 1000, {}});
    for (int64_t i = 0; i < 17; ++i)
      cases.back().q_pos.push_back(static_cast<int32_t>(1000 + 150 - 17 + i));
    // Partly visible and fully invisible queries (positions before k_pos0), d not a multiple of 8.
    cases.push_back({3, 4 * rep, 4, 37, 36, 500, {499, 510, 100000}});
    // Decode over a long span: exercises the key split and its merge.
    cases.push_back({1, rep, 1, 3001, 64, 0, {3000}});
  }
  cases.push_back({130, 4, 2, 130, 32, 0, {}});  // a full causal prompt
  for (int64_t i = 0; i < 130; ++i) cases.back().q_pos.push_back(static_cast<int32_t>(i));
  uint32_t seed = 100;
  for (DType kv : kFloatTypes)
    for (const AttnCase& c : cases) {
      INFO("kv " << dtype_name(kv) << " n=" << c.n << " hq=" << c.hq << " hkv=" << c.hkv
                 << " T=" << c.t_keys << " d=" << c.d);
      const Tensor q = random_tensor(DType::kF32, {c.n, c.hq, c.d}, seed++);
      const Tensor k = random_tensor(kv, {c.t_keys, c.hkv, c.d}, seed++, 2.0f);
      const Tensor v = random_tensor(kv, {c.t_keys, c.hkv, c.d}, seed++);
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
      AttnOut out =
          run_attention(*be, q, k.view(), v.view(), c.q_pos, c.k_pos0, scale, c.n, c.hq, c.d);
      const RefAttn ref = ref_attention(q.val, k.val, v.val, c.q_pos, c.k_pos0, scale, c.n, c.hq,
                                        c.hkv, c.t_keys, c.d);
      CHECK(norm_err(out.o.as<float>(), ref.o) < kTol);
      check_lse(out.lse.as<float>(), ref.lse);
      // Invisible queries: o exactly 0.
      for (int64_t i = 0; i < c.n; ++i)
        if (c.q_pos[static_cast<size_t>(i)] < c.k_pos0)
          for (int64_t e = 0; e < c.hq * c.d; ++e)
            CHECK(out.o.as<float>()[i * c.hq * c.d + e] == 0.0f);
    }
}

TEST_CASE("attention_paged equals attention over the gathered keys", "[cpu][attention][paged]") {
  auto be = cpu();
  struct PagedCase {
    int64_t n, hq, hkv, d, rows, pad, last;  // pages of `rows` keys, `pad` rows between pages
    std::vector<int32_t> ids;
    int64_t k_pos0;
  };
  const std::vector<PagedCase> cases = {
      {1, 8, 2, 64, 16, 3, 16, {5, 2, 7, 0}, 0},  // decode, pages smaller than a key block
      {1,
       4,
       4,
       128,
       64,
       0,
       10,
       {1, 0, 3, 2, 4, 9, 8, 7, 6, 5, 11, 10, 12, 13, 14, 15, 16, 17, 19, 18},
       0},                                        // decode over 1226 keys: the key split
      {5, 8, 2, 32, 100, 7, 33, {3, 1, 2}, 200},  // prefill chunk, causal, partly visible
      {2, 4, 1, 48, 40, 0, 40, {0}, 0},           // one page
  };
  uint32_t seed = 900;
  for (DType kv : kFloatTypes)
    for (const PagedCase& c : cases) {
      const int64_t count = static_cast<int64_t>(c.ids.size());
      const int64_t t_keys = (count - 1) * c.rows + c.last;
      const int64_t pool_pages = *std::max_element(c.ids.begin(), c.ids.end()) + 2;
      const int64_t page = c.rows + c.pad, row = c.hkv * c.d;
      INFO("kv " << dtype_name(kv) << " n=" << c.n << " T=" << t_keys << " rows=" << c.rows);
      const Tensor q = random_tensor(DType::kF32, {c.n, c.hq, c.d}, seed++);
      const Tensor kp = random_tensor(kv, {pool_pages * page, c.hkv, c.d}, seed++, 2.0f);
      const Tensor vp = random_tensor(kv, {pool_pages * page, c.hkv, c.d}, seed++);
      // The span gathered into contiguous keys (values and, for the CPU op, the stored bits).
      Buffer kg(kv, {t_keys, c.hkv, c.d}), vg(kv, {t_keys, c.hkv, c.d});
      std::vector<float> kval, vval;
      const int64_t es = dtype_size(kv);
      for (int64_t j = 0; j < t_keys; ++j) {
        const int64_t src = c.ids[static_cast<size_t>(j / c.rows)] * page + j % c.rows;
        std::memcpy(static_cast<char*>(kg.view().data) + j * row * es,
                    static_cast<const char*>(kp.view().data) + src * row * es,
                    static_cast<size_t>(row * es));
        std::memcpy(static_cast<char*>(vg.view().data) + j * row * es,
                    static_cast<const char*>(vp.view().data) + src * row * es,
                    static_cast<size_t>(row * es));
        kval.insert(kval.end(), kp.val.begin() + src * row, kp.val.begin() + (src + 1) * row);
        vval.insert(vval.end(), vp.val.begin() + src * row, vp.val.begin() + (src + 1) * row);
      }
      std::vector<int32_t> q_pos;
      for (int64_t i = 0; i < c.n; ++i)
        q_pos.push_back(static_cast<int32_t>(c.k_pos0 + t_keys - c.n + i));
      if (c.n > 2) q_pos[0] = static_cast<int32_t>(c.k_pos0 + 5);  // sees 6 keys only
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
      std::vector<int64_t> offsets;
      for (int32_t id : c.ids) offsets.push_back(id * page * row);
      const KvPages pages{offsets.data(), count, static_cast<int32_t>(c.rows)};
      AttnOut got{Buffer(DType::kF32, {c.n, c.hq, c.d}), Buffer(DType::kF32, {c.n, c.hq})};
      std::fill(got.o.as<float>(), got.o.as<float>() + c.n * c.hq * c.d, std::nanf(""));
      const Buffer pb = i32_buffer(q_pos);
      const TensorView kview(kp.view().data, kv, {t_keys, c.hkv, c.d});
      const TensorView vview(vp.view().data, kv, {t_keys, c.hkv, c.d});
      be->attention_paged(q.view(), kview, vview, pages, pb.view(), c.k_pos0, scale, got.partial());
      const RefAttn ref =
          ref_attention(q.val, kval, vval, q_pos, c.k_pos0, scale, c.n, c.hq, c.hkv, t_keys, c.d);
      CHECK(norm_err(got.o.as<float>(), ref.o) < kTol);
      check_lse(got.lse.as<float>(), ref.lse);
      // The origin at the first page (offsets relative to it, negative for pages below it, as
      // for host blocks): the same keys, the same bits.
      {
        std::vector<int64_t> rel;
        for (int64_t o : offsets) rel.push_back(o - offsets[0]);
        const KvPages from_first{rel.data(), count, static_cast<int32_t>(c.rows)};
        const int64_t es0 = dtype_size(kv);
        TensorView kf = kview, vf = vview;
        kf.data = static_cast<char*>(kview.data) + offsets[0] * es0;
        vf.data = static_cast<char*>(vview.data) + offsets[0] * es0;
        AttnOut again{Buffer(DType::kF32, {c.n, c.hq, c.d}), Buffer(DType::kF32, {c.n, c.hq})};
        be->attention_paged(q.view(), kf, vf, from_first, pb.view(), c.k_pos0, scale,
                            again.partial());
        CHECK(std::memcmp(again.o.as<float>(), got.o.as<float>(),
                          static_cast<size_t>(c.n * c.hq * c.d) * sizeof(float)) == 0);
      }
      // One page: the keys are cut into blocks as in the contiguous span, so the same bits.
      if (count == 1) {
        const AttnOut want =
            run_attention(*be, q, kg.view(), vg.view(), q_pos, c.k_pos0, scale, c.n, c.hq, c.d);
        CHECK(std::memcmp(got.o.as<float>(), want.o.as<float>(),
                          static_cast<size_t>(c.n * c.hq * c.d) * sizeof(float)) == 0);
      }
      // A page list that does not cover the span is refused.
      const KvPages short_pages{offsets.data(), count - 1, static_cast<int32_t>(c.rows)};
      CHECK_THROWS_AS(be->attention_paged(q.view(), kview, vview, short_pages, pb.view(), c.k_pos0,
                                          scale, got.partial()),
                      Error);
    }
}

TEST_CASE("attention over two halves merged equals attention over all keys", "[cpu][merge]") {
  auto be = cpu();
  for (DType kv : kFloatTypes)
    for (int64_t split : {1, 40, 77, 99}) {
      INFO("kv " << dtype_name(kv) << " split at " << split);
      const int64_t n = 5, hq = 8, hkv = 2, t_keys = 100, d = 64, k_pos0 = 200;
      // Query 0 sees nothing, query 1 only part of the first half, the rest everything or a part.
      const std::vector<int32_t> q_pos = {150, 230, 260, 290, 299};
      const Tensor q = random_tensor(DType::kF32, {n, hq, d}, 201);
      const Tensor k = random_tensor(kv, {t_keys, hkv, d}, 202, 2.0f);
      const Tensor v = random_tensor(kv, {t_keys, hkv, d}, 203);
      const float scale = 0.125f;
      AttnOut a = run_attention(*be, q, k.view().slice(0, split), v.view().slice(0, split), q_pos,
                                k_pos0, scale, n, hq, d);
      AttnOut b =
          run_attention(*be, q, k.view().slice(split, t_keys), v.view().slice(split, t_keys), q_pos,
                        k_pos0 + split, scale, n, hq, d);
      be->merge(a.partial(), b.partial());
      AttnOut full = run_attention(*be, q, k.view(), v.view(), q_pos, k_pos0, scale, n, hq, d);
      const RefAttn ref =
          ref_attention(q.val, k.val, v.val, q_pos, k_pos0, scale, n, hq, hkv, t_keys, d);
      CHECK(norm_err(a.o.as<float>(), ref.o) < kTol);
      check_lse(a.lse.as<float>(), ref.lse);
      std::vector<double> full_o(full.o.as<float>(), full.o.as<float>() + n * hq * d);
      CHECK(norm_err(a.o.as<float>(), full_o) < kTol);
    }
}

TEST_CASE("merge with empty partials and infinite lse", "[cpu][merge]") {
  auto be = cpu();
  const int64_t n = 3, heads = 2, d = 5;
  const Tensor oa = random_tensor(DType::kF32, {n, heads, d}, 301);
  const Tensor ob = random_tensor(DType::kF32, {n, heads, d}, 302);
  const float lse_a[n * heads] = {0.5f, -kInf, -kInf, kInf, kInf, 2.0f};
  const float lse_b[n * heads] = {1.5f, 0.25f, -kInf, 3.0f, kInf, -kInf};
  Buffer la(DType::kF32, {n, heads}), lb(DType::kF32, {n, heads});
  std::memcpy(la.as<float>(), lse_a, sizeof(lse_a));
  std::memcpy(lb.as<float>(), lse_b, sizeof(lse_b));
  // Empty partials hold o = 0 by contract; row 2 head 0 keeps it so.
  for (int64_t c = 0; c < d; ++c) oa.f32()[(1 * heads + 0) * d + c] = 0.0f;
  be->merge({oa.view(), la.view()}, {ob.view(), lb.view()});
  for (int64_t r = 0; r < n * heads; ++r) {
    INFO("row " << r);
    const double a = lse_a[r], b = lse_b[r];
    const float* got = oa.f32() + r * d;
    const float* xa = oa.val.data() + r * d;
    const float* xb = ob.val.data() + r * d;
    std::vector<double> want(static_cast<size_t>(d));
    double want_lse;
    if (b == -INFINITY) {  // b empty: a unchanged
      want_lse = a;
      for (int64_t c = 0; c < d; ++c) want[static_cast<size_t>(c)] = r == 2 ? 0.0 : xa[c];
    } else if (a == -INFINITY) {  // a empty: b
      want_lse = b;
      for (int64_t c = 0; c < d; ++c) want[static_cast<size_t>(c)] = xb[c];
    } else if (std::isinf(a) && std::isinf(b)) {  // both +inf: equal weights
      want_lse = INFINITY;
      for (int64_t c = 0; c < d; ++c) want[static_cast<size_t>(c)] = 0.5 * (xa[c] + xb[c]);
    } else if (std::isinf(a)) {  // +inf dominates
      want_lse = INFINITY;
      for (int64_t c = 0; c < d; ++c) want[static_cast<size_t>(c)] = xa[c];
    } else {
      const double m = std::max(a, b), wa = std::exp(a - m), wb = std::exp(b - m);
      want_lse = m + std::log(wa + wb);
      for (int64_t c = 0; c < d; ++c)
        want[static_cast<size_t>(c)] = (wa * xa[c] + wb * xb[c]) / (wa + wb);
    }
    if (r == 2) {
      CHECK(la.as<float>()[r] == -kInf);
      for (int64_t c = 0; c < d; ++c) CHECK(got[c] == 0.0f);
      continue;
    }
    CHECK(norm_err(got, want) < kTol);
    if (std::isinf(want_lse)) {
      CHECK(la.as<float>()[r] == static_cast<float>(want_lse));
    } else {
      CHECK(std::abs(la.as<float>()[r] - want_lse) < kTol);
    }
  }
}

TEST_CASE("attention is deterministic and independent of the thread count", "[cpu][attention]") {
  auto be = cpu();
  const int64_t n = 1, hq = 8, hkv = 2, t_keys = 5000, d = 64;
  const Tensor q = random_tensor(DType::kF32, {n, hq, d}, 401);
  const Tensor k = random_tensor(DType::kBF16, {t_keys, hkv, d}, 402);
  const Tensor v = random_tensor(DType::kBF16, {t_keys, hkv, d}, 403);
  AttnOut a = run_attention(*be, q, k.view(), v.view(), {4999}, 0, 0.125f, n, hq, d);
  AttnOut b = [&] {
    tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
    return run_attention(*be, q, k.view(), v.view(), {4999}, 0, 0.125f, n, hq, d);
  }();
  CHECK(std::memcmp(a.o.as<float>(), b.o.as<float>(), n * hq * d * sizeof(float)) == 0);
  CHECK(std::memcmp(a.lse.as<float>(), b.lse.as<float>(), n * hq * sizeof(float)) == 0);
}
