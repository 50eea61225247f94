// Parity tests of the CUDA backend against the CPU reference backend: every op on random inputs
// (fixed seeds, never zeros), the same inputs on both backends, outputs poisoned with NaN before
// each GPU op so an unwritten element fails. Error measure as in test_cpu_ops.cpp:
// max |gpu - cpu| / max |cpu|, below 1e-5 on f32 paths and 1e-2 where the GPU rounds an operand
// to f16/bf16 that the CPU keeps in f32 (cuBLAS with 16-bit weights). GPU sampling is checked
// against a CPU reference of the same rule, draw by draw.
//
// Without a CUDA device (or in a build without CUDA) the executable prints
// "no CUDA device: N GPU tests skipped" and exits 4, ctest's SKIP_RETURN_CODE (label "gpu").
// The listener base classes of Catch2 v2 (used below to skip the whole run without a GPU).
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "engine/sampler.h"
#include "kernels/backend.h"
#include "kernels/buffer.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_memory.h"
#include "kernels/dtype.h"
#include "kernels/tensor.h"
#include "tests/gpu_skip.h"
#include "tests/sampling_rule.h"

using namespace tandem;
using tandem::test::SkipWithoutGpu;

namespace {

constexpr double kTol32 = 1e-5;
constexpr double kTol16 = 1e-2;
constexpr float kInf = std::numeric_limits<float>::infinity();
const DType kFloatTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

Backend& gpu() {
  static const std::unique_ptr<Backend> b = make_cuda_backend();
  return *b;
}

Backend& cpu() {
  static const std::unique_ptr<Backend> b = make_cpu_backend();
  return *b;
}

float to_float(DType t, const void* p, int64_t i) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(p)[i];
    case DType::kF16:
      return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::kBF16:
      return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default:
      FAIL("not a float dtype");
  }
  return 0.0f;
}

void store(DType t, void* p, int64_t i, float v) {
  switch (t) {
    case DType::kF32:
      static_cast<float*>(p)[i] = v;
      return;
    case DType::kF16:
      static_cast<uint16_t*>(p)[i] = f32_to_f16(v);
      return;
    case DType::kBF16:
      static_cast<uint16_t*>(p)[i] = f32_to_bf16(v);
      return;
    default:
      FAIL("not a float dtype");
  }
}

// Uniform magnitudes in [0.1, 1) * scale with random sign, plus offset: never zero.
Buffer random_buffer(DType t, std::initializer_list<int64_t> dims, uint32_t seed,
                     float scale = 1.0f, float offset = 0.0f) {
  Buffer b(t, dims);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mag(0.1f, 1.0f);
  const int64_t n = b.view().numel();
  for (int64_t i = 0; i < n; ++i)
    store(t, b.view().data, i, (rng() & 1u ? 1.0f : -1.0f) * mag(rng) * scale + offset);
  return b;
}

Buffer i32_buffer(const std::vector<int32_t>& v) {
  Buffer b(DType::kI32, {static_cast<int64_t>(v.size())});
  std::memcpy(b.as<int32_t>(), v.data(), v.size() * sizeof(int32_t));
  return b;
}

// A host copy of a contiguous host buffer (the CPU backend works in place on it).
Buffer clone(const Buffer& src) {
  Buffer b = Buffer::like(host_heap(), src.view());
  std::memcpy(b.view().data, src.view().data, static_cast<size_t>(src.view().nbytes()));
  return b;
}

Buffer up(const Buffer& b) { return upload_to_device(b.view()); }

// A device buffer shaped like the host one, poisoned with NaN (0xff bytes).
Buffer poisoned_like(const Buffer& b) {
  Buffer d = Buffer::like(cuda_device_memory(), b.view());
  fill_device_bytes(d.view(), 0xff);
  return d;
}

// The device buffer's values as floats (after every queued op has finished).
std::vector<float> down(const TensorView& dev) {
  gpu().synchronize();
  std::vector<uint8_t> raw(static_cast<size_t>(dev.nbytes()));
  TensorView host = dev;
  host.data = raw.data();
  host.memory = MemoryKind::kHost;
  copy_to_host(dev, host);
  std::vector<float> out(static_cast<size_t>(dev.numel()));
  for (int64_t i = 0; i < dev.numel(); ++i)
    out[static_cast<size_t>(i)] = to_float(dev.dtype, raw.data(), i);
  return out;
}

std::vector<float> values(const Buffer& b) {
  std::vector<float> out(static_cast<size_t>(b.view().numel()));
  for (int64_t i = 0; i < b.view().numel(); ++i)
    out[static_cast<size_t>(i)] = to_float(b.view().dtype, b.view().data, i);
  return out;
}

// max |got - ref| / max |ref| over finite reference entries; a NaN in got, or an infinity
// where ref has another value, is an infinite error.
double rel_err(const std::vector<float>& got, const std::vector<float>& ref) {
  REQUIRE(got.size() == ref.size());
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(ref[i])) return kInf;
    if (std::isinf(ref[i]) || std::isinf(got[i])) {
      if (got[i] != ref[i]) return kInf;
      continue;
    }
    num = std::max(num, std::abs(static_cast<double>(got[i]) - ref[i]));
    den = std::max(den, std::abs(static_cast<double>(ref[i])));
  }
  return den > 0.0 ? num / den : num;
}

// lse rows: infinities must match exactly, finite values within tol * max(1, |ref|).
void check_lse(const std::vector<float>& got, const std::vector<float>& ref, double tol) {
  REQUIRE(got.size() == ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    INFO("lse row " << i << " gpu " << got[i] << " cpu " << ref[i]);
    if (std::isinf(ref[i])) {
      CHECK(got[i] == ref[i]);
    } else {
      CHECK(std::abs(static_cast<double>(got[i]) - ref[i]) <=
            tol * std::max(1.0, std::abs(static_cast<double>(ref[i]))));
    }
  }
}

}  // namespace

CATCH_REGISTER_LISTENER(SkipWithoutGpu)

TEST_CASE("cuda: memory helpers round-trip device and mapped pinned buffers", "[gpu][memory]") {
  const Buffer h = random_buffer(DType::kF32, {3, 17}, 1);
  Buffer d = up(h);
  CHECK(d.view().memory == MemoryKind::kDevice);
  CHECK(rel_err(down(d.view()), values(h)) == 0.0);
  Buffer m(cuda_mapped_memory(), DType::kF32, {3, 17});
  std::memcpy(m.as<float>(), h.as<float>(), static_cast<size_t>(h.view().nbytes()));
  CHECK(m.view().memory == MemoryKind::kPinned);
  Buffer d2(cuda_device_memory(), DType::kF32, {3, 17});
  const TensorView md = device_alias(m.view());
  gpu().add(md, md, d2.view());  // a kernel reading mapped memory
  std::vector<float> twice = values(h);
  for (float& x : twice) x *= 2.0f;
  CHECK(rel_err(down(d2.view()), twice) == 0.0);
}

TEST_CASE("cuda: embedding gathers f32/f16/bf16 rows", "[gpu][embedding]") {
  uint32_t seed = 10;
  for (DType t : kFloatTypes) {
    INFO("table " << dtype_name(t));
    const Buffer table = random_buffer(t, {1000, 300}, seed++);
    const Buffer ids = i32_buffer({3, 999, 0, 512, 3, 77, 640});
    Buffer ref(DType::kF32, {7, 300});
    cpu().embedding(ids.view(), table.view(), ref.view());
    const Buffer dt = up(table), di = up(ids), dout = poisoned_like(ref);
    gpu().embedding(di.view(), dt.view(), dout.view());
    CHECK(rel_err(down(dout.view()), values(ref)) < kTol32);
  }
}

TEST_CASE("cuda: rms_norm and layer_norm, in place too", "[gpu][norm]") {
  for (int64_t d : {64, 1000, 4099}) {
    INFO("d=" << d);
    const Buffer x = random_buffer(DType::kF32, {5, d}, 20, 3.0f, 0.5f);
    const Buffer w = random_buffer(DType::kF32, {d}, 21);
    const Buffer b = random_buffer(DType::kF32, {d}, 22);
    Buffer ref_rms(DType::kF32, {5, d}), ref_ln(DType::kF32, {5, d});
    cpu().rms_norm(x.view(), w.view(), 1e-5f, ref_rms.view());
    cpu().layer_norm(x.view(), w.view(), b.view(), 1e-5f, ref_ln.view());
    const Buffer dx = up(x), dw = up(w), db = up(b), dout = poisoned_like(x);
    gpu().rms_norm(dx.view(), dw.view(), 1e-5f, dout.view());
    CHECK(rel_err(down(dout.view()), values(ref_rms)) < kTol32);
    gpu().layer_norm(dx.view(), dw.view(), db.view(), 1e-5f, dout.view());
    CHECK(rel_err(down(dout.view()), values(ref_ln)) < kTol32);
    const Buffer dx2 = up(x);
    gpu().rms_norm(dx2.view(), dw.view(), 1e-5f, dx2.view());  // out aliases x
    CHECK(rel_err(down(dx2.view()), values(ref_rms)) < kTol32);
    const Buffer dx3 = up(x);
    gpu().layer_norm(dx3.view(), dw.view(), db.view(), 1e-5f, dx3.view());
    CHECK(rel_err(down(dx3.view()), values(ref_ln)) < kTol32);
  }
}

TEST_CASE("cuda: rope neox, interleaved, partial rotary, mscale, large positions", "[gpu][rope]") {
  struct Case {
    int32_t head_dim, rotary_dim;
    bool neox;
    float mscale, base;
  };
  const Case cases[] = {{128, 128, true, 1.0f, 10000.0f},
                        {128, 128, false, 1.0f, 500000.0f},
                        {96, 32, true, 1.3f, 10000.0f},
                        {64, 48, false, 0.8f, 1000.0f}};
  uint32_t seed = 30;
  for (const Case& c : cases) {
    INFO("head_dim " << c.head_dim << " rotary " << c.rotary_dim << " neox " << c.neox);
    RopeTable rt;
    rt.head_dim = c.head_dim;
    rt.rotary_dim = c.rotary_dim;
    rt.neox = c.neox;
    rt.mscale = c.mscale;
    for (int32_t i = 0; i < c.rotary_dim / 2; ++i)
      rt.inv_freq.push_back(static_cast<float>(std::pow(c.base, -2.0 * i / c.rotary_dim)));
    const int64_t n = 6, heads = 5;
    const Buffer x = random_buffer(DType::kF32, {n, heads, c.head_dim}, seed++);
    const Buffer pos = i32_buffer({0, 1, 17, 4095, 100000, 131071});
    Buffer ref = clone(x);
    cpu().rope(ref.view(), pos.view(), rt);
    const Buffer dx = up(x), dp = up(pos);
    gpu().rope(dx.view(), dp.view(), rt);
    CHECK(rel_err(down(dx.view()), values(ref)) < kTol32);
    // A second call with the same table contents uses the cached upload.
    const Buffer dx2 = up(x);
    gpu().rope(dx2.view(), dp.view(), rt);
    CHECK(rel_err(down(dx2.view()), values(ref)) < kTol32);
  }
}

TEST_CASE("cuda: silu_mul, relu, add, in place too", "[gpu][elementwise]") {
  const Buffer a = random_buffer(DType::kF32, {37, 515}, 40, 8.0f);
  const Buffer b = random_buffer(DType::kF32, {37, 515}, 41, 2.0f);
  Buffer ref(DType::kF32, {37, 515});
  const Buffer da = up(a), db = up(b), dout = poisoned_like(a);

  cpu().silu_mul(a.view(), b.view(), ref.view());
  gpu().silu_mul(da.view(), db.view(), dout.view());
  CHECK(rel_err(down(dout.view()), values(ref)) < kTol32);

  cpu().add(a.view(), b.view(), ref.view());
  gpu().add(da.view(), db.view(), dout.view());
  CHECK(rel_err(down(dout.view()), values(ref)) < kTol32);
  const Buffer da2 = up(a);
  gpu().add(da2.view(), db.view(), da2.view());
  CHECK(rel_err(down(da2.view()), values(ref)) < kTol32);

  Buffer r = clone(a);
  cpu().relu(r.view());
  const Buffer da3 = up(a);
  gpu().relu(da3.view());
  CHECK(rel_err(down(da3.view()), values(r)) < kTol32);
}

TEST_CASE("cuda: strided rows (views of wider buffers) in elementwise, norm, softmax, matmul",
          "[gpu][strided]") {
  const int64_t rows = 6, cols = 300, wide = 320, m = 70;
  // x: rows of `cols` floats `wide` apart; the same values packed for the CPU.
  const Buffer xw = random_buffer(DType::kF32, {rows, wide}, 90, 2.0f);
  const Buffer yw = random_buffer(DType::kF32, {rows, wide}, 91);
  Buffer x(DType::kF32, {rows, cols}), y(DType::kF32, {rows, cols});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      x.as<float>()[r * cols + c] = xw.as<float>()[r * wide + c];
      y.as<float>()[r * cols + c] = yw.as<float>()[r * wide + c];
    }
  const Buffer dxw = up(xw), dyw = up(yw);
  TensorView dx = dxw.view(), dy = dyw.view();
  dx.shape[1] = cols;
  dy.shape[1] = cols;
  // Packed row-major results of a strided device view.
  auto packed = [&](const Buffer& wide_buf) {
    const std::vector<float> all = down(wide_buf.view());
    std::vector<float> out;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) out.push_back(all[static_cast<size_t>(r * wide + c)]);
    return out;
  };
  Buffer ref(DType::kF32, {rows, cols});
  {
    const Buffer ow = poisoned_like(xw);
    TensorView o = ow.view();
    o.shape[1] = cols;
    cpu().silu_mul(x.view(), y.view(), ref.view());
    gpu().silu_mul(dx, dy, o);
    CHECK(rel_err(packed(ow), values(ref)) < kTol32);
  }
  {
    const Buffer ow = poisoned_like(xw);
    TensorView o = ow.view();
    o.shape[1] = cols;
    const Buffer w = random_buffer(DType::kF32, {cols}, 92);
    const Buffer dw = up(w);
    cpu().rms_norm(x.view(), w.view(), 1e-6f, ref.view());
    gpu().rms_norm(dx, dw.view(), 1e-6f, o);
    CHECK(rel_err(packed(ow), values(ref)) < kTol32);
  }
  {
    const Buffer sw = up(xw);
    TensorView s = sw.view();
    s.shape[1] = cols;
    Buffer r = clone(x);
    cpu().softmax(r.view());
    gpu().softmax(s);
    CHECK(rel_err(packed(sw), values(r)) < kTol32);
  }
  for (int64_t n : {3, 6}) {  // GEMV with x rows 320 floats apart; cuBLAS below
    INFO("matmul n=" << n);
    const Buffer w = random_buffer(DType::kBF16, {m, cols}, 93);
    const Buffer dw = up(w);
    Buffer r(DType::kF32, {n, m});
    cpu().matmul(x.view().slice(0, n), w.view(), TensorView(), r.view());
    Buffer yo(cuda_device_memory(), DType::kF32, {n, m + 5});
    fill_device_bytes(yo.view(), 0xff);
    TensorView yv = yo.view();
    yv.shape[1] = m;
    gpu().matmul(dx.slice(0, n), dw.view(), TensorView(), yv);
    const std::vector<float> all = down(yo.view());
    std::vector<float> got;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) got.push_back(all[static_cast<size_t>(i * (m + 5) + j)]);
    CHECK(rel_err(got, values(r)) < kTol32);
  }
  {  // cuBLAS path: 12 strided rows of f32 weights' input.
    const Buffer xb = random_buffer(DType::kF32, {12, wide}, 94);
    const Buffer dxb = up(xb);
    TensorView xv = dxb.view();
    xv.shape[1] = cols;
    Buffer xp(DType::kF32, {12, cols});
    for (int64_t r = 0; r < 12; ++r)
      for (int64_t c = 0; c < cols; ++c)
        xp.as<float>()[r * cols + c] = xb.as<float>()[r * wide + c];
    const Buffer w = random_buffer(DType::kF32, {m, cols}, 95);
    const Buffer dw = up(w);
    Buffer r(DType::kF32, {12, m});
    cpu().matmul(xp.view(), w.view(), TensorView(), r.view());
    const Buffer yo = poisoned_like(r);
    gpu().matmul(xv, dw.view(), TensorView(), yo.view());
    CHECK(rel_err(down(yo.view()), values(r)) < kTol32);
  }
}

TEST_CASE("cuda: softmax with masked entries and a fully masked row", "[gpu][softmax]") {
  Buffer x = random_buffer(DType::kF32, {4, 1001}, 50, 10.0f);
  for (int64_t c = 0; c < 1001; c += 3) x.as<float>()[c] = -kInf;          // row 0 partly masked
  for (int64_t c = 0; c < 1001; ++c) x.as<float>()[2 * 1001 + c] = -kInf;  // row 2 fully
  Buffer ref = clone(x);
  cpu().softmax(ref.view());
  const Buffer dx = up(x);
  gpu().softmax(dx.view());
  CHECK(rel_err(down(dx.view()), values(ref)) < kTol32);
}

TEST_CASE("cuda: copy converts between f32, f16 and bf16, strided rows too", "[gpu][copy]") {
  uint32_t seed = 60;
  for (DType st : kFloatTypes)
    for (DType dt : kFloatTypes) {
      INFO(dtype_name(st) << " -> " << dtype_name(dt));
      const Buffer src = random_buffer(st, {9, 130}, seed++, 100.0f);
      Buffer ref(dt, {9, 130});
      cpu().copy(src.view(), ref.view());
      const Buffer ds = up(src), dd = poisoned_like(ref);
      gpu().copy(ds.view(), dd.view());
      CHECK(rel_err(down(dd.view()), values(ref)) == 0.0);  // both round to nearest even
    }
  // Rows of 100 out of 130: strided source and destination.
  const Buffer src = random_buffer(DType::kF32, {9, 130}, 70);
  const Buffer ds = up(src);
  Buffer dd(cuda_device_memory(), DType::kBF16, {9, 130});
  fill_device_bytes(dd.view(), 0);
  TensorView sv = ds.view(), dv = dd.view();
  sv.shape[1] = 100;
  dv.shape[1] = 100;
  gpu().copy(sv, dv);
  const std::vector<float> got = down(dd.view());
  const std::vector<float> in = values(src);
  double err = 0.0;
  for (int64_t r = 0; r < 9; ++r)
    for (int64_t c = 0; c < 130; ++c) {
      const size_t i = static_cast<size_t>(r * 130 + c);
      const float want = c < 100 ? bf16_to_f32(f32_to_bf16(in[i])) : 0.0f;
      err = std::max(err, static_cast<double>(std::abs(got[i] - want)));
    }
  CHECK(err == 0.0);
}

TEST_CASE("cuda: matmul GEMV and cuBLAS paths for every weight dtype", "[gpu][matmul]") {
  uint32_t seed = 80;
  for (DType wt : kFloatTypes)
    for (int64_t k : {256, 257, 1024})
      for (int64_t n : {1, 2, 3, 8, 9, 37})
        for (bool with_bias : {false, true}) {
          const int64_t m = 300;
          INFO("w " << dtype_name(wt) << " n=" << n << " k=" << k << " bias=" << with_bias);
          const Buffer x = random_buffer(DType::kF32, {n, k}, seed++);
          const Buffer w = random_buffer(wt, {m, k}, seed++);
          const Buffer b = random_buffer(DType::kF32, {m}, seed++);
          Buffer ref(DType::kF32, {n, m});
          cpu().matmul(x.view(), w.view(), with_bias ? b.view() : TensorView(), ref.view());
          const Buffer dx = up(x), dw = up(w), db = up(b), dy = poisoned_like(ref);
          gpu().matmul(dx.view(), dw.view(), with_bias ? db.view() : TensorView(), dy.view());
          // n > 8 with 16-bit weights: cuBLAS rounds x to the weight type.
          const double tol = n > 8 && wt != DType::kF32 ? kTol16 : kTol32;
          CHECK(rel_err(down(dy.view()), values(ref)) < tol);
        }
}

namespace {

struct AttnCase {
  int64_t n, hq, hkv, d, t_keys, k_pos0;
  std::vector<int32_t> q_pos;
  DType kt, vt;
};

void run_attention(const AttnCase& c, uint32_t seed) {
  INFO("n=" << c.n << " hq=" << c.hq << " hkv=" << c.hkv << " d=" << c.d << " T=" << c.t_keys
            << " k " << dtype_name(c.kt) << " v " << dtype_name(c.vt));
  const Buffer q = random_buffer(DType::kF32, {c.n, c.hq, c.d}, seed);
  const Buffer k = random_buffer(c.kt, {c.t_keys, c.hkv, c.d}, seed + 1);
  const Buffer v = random_buffer(c.vt, {c.t_keys, c.hkv, c.d}, seed + 2);
  const Buffer pos = i32_buffer(c.q_pos);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  Buffer ro(DType::kF32, {c.n, c.hq, c.d}), rl(DType::kF32, {c.n, c.hq});
  cpu().attention(q.view(), k.view(), v.view(), pos.view(), c.k_pos0, scale,
                  {ro.view(), rl.view()});
  const Buffer dq = up(q), dk = up(k), dv = up(v), dp = up(pos);
  const Buffer dox = poisoned_like(ro), dl = poisoned_like(rl);
  gpu().attention(dq.view(), dk.view(), dv.view(), dp.view(), c.k_pos0, scale,
                  {dox.view(), dl.view()});
  CHECK(rel_err(down(dox.view()), values(ro)) < kTol32);
  check_lse(down(dl.view()), values(rl), kTol32);
}

}  // namespace

TEST_CASE("cuda: attention decode with split-K, GQA, KV dtypes, invisible queries",
          "[gpu][attention]") {
  uint32_t seed = 100;
  for (DType t : kFloatTypes) {
    // One query over a long span: split into chunks, merged by the combine kernel.
    run_attention({1, 8, 2, 128, 3000, 0, {2999}, t, t}, seed += 3);
    // A batch of 4 queries: one sees every key, two see part of the span, one sees none.
    run_attention({4, 8, 2, 128, 2500, 1000, {3499, 1700, 999, 2000}, t, t}, seed += 3);
  }
  // Mixed KV dtypes, rep 7 (two head groups per kv head, the second partial), d not a multiple
  // of 32, a span shorter than the split threshold.
  run_attention({2, 14, 2, 80, 700, 0, {699, 350}, DType::kBF16, DType::kF16}, seed += 3);
  // d = 256, MHA, split.
  run_attention({1, 4, 4, 256, 1100, 5, {1104}, DType::kF32, DType::kBF16}, seed += 3);
  // Keys positioned after the query: nothing visible, lse = -inf and o = 0 for every head.
  run_attention({2, 4, 1, 64, 600, 100, {50, 99}, DType::kF16, DType::kF16}, seed += 3);
}

TEST_CASE("cuda: attention_paged over pages of a pool, as the hybrid window uses it",
          "[gpu][attention][paged]") {
  uint32_t seed = 7000;
  struct PagedCase {
    int64_t n, hq, hkv, d, rows, pad, last;
    std::vector<int32_t> ids;
  };
  const std::vector<PagedCase> cases = {
      {1, 32, 8, 128, 64, 0, 64, {9, 3, 4, 0, 1, 2, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15}},
      {1, 8, 2, 64, 16, 5, 7, {2, 0, 3}},
      {3, 4, 4, 128, 64, 0, 20, {1, 0}},
      {1, 28, 4, 128, 64, 3, 64, std::vector<int32_t>(40, 0)},  // 40 pages, every one page 0
  };
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16})
    for (const PagedCase& c : cases) {
      const int64_t count = static_cast<int64_t>(c.ids.size());
      const int64_t t_keys = (count - 1) * c.rows + c.last;
      const int64_t page = c.rows + c.pad, row = c.hkv * c.d;
      const int64_t pool_rows = (*std::max_element(c.ids.begin(), c.ids.end()) + 1) * page;
      INFO("kv " << dtype_name(t) << " n=" << c.n << " T=" << t_keys << " rows=" << c.rows);
      const Buffer q = random_buffer(DType::kF32, {c.n, c.hq, c.d}, seed++);
      const Buffer k = random_buffer(t, {pool_rows, c.hkv, c.d}, seed++);
      const Buffer v = random_buffer(t, {pool_rows, c.hkv, c.d}, seed++);
      std::vector<int32_t> q_pos;
      for (int64_t i = 0; i < c.n; ++i) q_pos.push_back(static_cast<int32_t>(t_keys - c.n + i));
      const Buffer pos = i32_buffer(q_pos);
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
      std::vector<int64_t> offsets;
      for (int32_t id : c.ids) offsets.push_back(id * page * row);
      const KvPages pages{offsets.data(), count, static_cast<int32_t>(c.rows)};
      Buffer ro(DType::kF32, {c.n, c.hq, c.d}), rl(DType::kF32, {c.n, c.hq});
      cpu().attention_paged(q.view(), TensorView(k.view().data, t, {t_keys, c.hkv, c.d}),
                            TensorView(v.view().data, t, {t_keys, c.hkv, c.d}), pages, pos.view(),
                            0, scale, {ro.view(), rl.view()});
      const Buffer dq = up(q), dk = up(k), dv = up(v), dp = up(pos);
      const Buffer dox = poisoned_like(ro), dl = poisoned_like(rl);
      TensorView kview = dk.view(), vview = dv.view();
      kview.shape[0] = vview.shape[0] = t_keys;
      gpu().attention_paged(dq.view(), kview, vview, pages, dp.view(), 0, scale,
                            {dox.view(), dl.view()});
      CHECK(rel_err(down(dox.view()), values(ro)) < kTol32);
      check_lse(down(dl.view()), values(rl), kTol32);
    }
}

TEST_CASE("cuda: attention prefill (n > 1, causal within the chunk)", "[gpu][attention]") {
  uint32_t seed = 200;
  for (DType t : {DType::kF32, DType::kBF16}) {
    const int64_t n = 64, past = 100, k_pos0 = 7;
    std::vector<int32_t> pos;
    for (int64_t i = 0; i < n; ++i) pos.push_back(static_cast<int32_t>(k_pos0 + past + i));
    run_attention({n, 4, 4, 64, past + n, k_pos0, pos, t, t}, seed += 3);
    run_attention({n, 8, 2, 128, past + n, k_pos0, pos, t, t}, seed += 3);
  }
}

namespace {

// lse values covering every merge case: finite, -inf on either side or both, +inf.
struct MergeInputs {
  Buffer ao, al, bo, bl;
};

MergeInputs merge_inputs(int64_t n, int64_t h, int64_t d, uint32_t seed) {
  MergeInputs in{random_buffer(DType::kF32, {n, h, d}, seed),
                 random_buffer(DType::kF32, {n, h}, seed + 1, 5.0f),
                 random_buffer(DType::kF32, {n, h, d}, seed + 2),
                 random_buffer(DType::kF32, {n, h}, seed + 3, 5.0f)};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float* al = in.al.as<float>();
  float* bl = in.bl.as<float>();
  for (int64_t r = 0; r < n * h; ++r) {
    switch (r % 6) {
      case 1:  // b empty: its o must not be read
        bl[r] = -kInf;
        for (int64_t c = 0; c < d; ++c) in.bo.as<float>()[r * d + c] = nan;
        break;
      case 2:  // a empty: b is taken as is
        al[r] = -kInf;
        for (int64_t c = 0; c < d; ++c) in.ao.as<float>()[r * d + c] = 0.0f;
        break;
      case 3:  // both empty
        al[r] = -kInf;
        bl[r] = -kInf;
        for (int64_t c = 0; c < d; ++c) in.ao.as<float>()[r * d + c] = 0.0f;
        break;
      case 4:  // +inf on one side
        al[r] = kInf;
        break;
      default:
        break;
    }
  }
  return in;
}

}  // namespace

TEST_CASE("cuda: merge with -inf and +inf partials, device and mapped pinned", "[gpu][merge]") {
  for (bool mapped : {false, true}) {
    const int64_t n = 9, h = 12, d = 128;
    INFO("b in " << (mapped ? "mapped pinned" : "device") << " memory");
    MergeInputs in = merge_inputs(n, h, d, mapped ? 300 : 310);
    Buffer ro = clone(in.ao), rl = clone(in.al);
    cpu().merge({ro.view(), rl.view()}, {in.bo.view(), in.bl.view()});
    const Buffer dao = up(in.ao), dal = up(in.al);
    if (mapped) {
      // Rows 1..n of a larger mapped allocation: the partial is a slice, as in a host pool.
      Buffer bo(cuda_mapped_memory(), DType::kF32, {n + 1, h, d}),
          bl(cuda_mapped_memory(), DType::kF32, {n + 1, h});
      std::memcpy(bo.as<float>() + h * d, in.bo.as<float>(),
                  static_cast<size_t>(in.bo.view().nbytes()));
      std::memcpy(bl.as<float>() + h, in.bl.as<float>(),
                  static_cast<size_t>(in.bl.view().nbytes()));
      gpu().merge({dao.view(), dal.view()},
                  {bo.view().slice(1, n + 1), bl.view().slice(1, n + 1)});  // read in place
      gpu().synchronize();  // before the mapped buffers go
    } else {
      const Buffer dbo = up(in.bo), dbl = up(in.bl);
      gpu().merge({dao.view(), dal.view()}, {dbo.view(), dbl.view()});
      gpu().synchronize();
    }
    CHECK(rel_err(down(dao.view()), values(ro)) < kTol32);
    check_lse(down(dal.view()), values(rl), kTol32);
  }
}

// The two partials in different layouts: b head-major ([h][n][d] in memory, lse [h][n]), as a
// strided view [n, h, d]; a row-major. Every stride of b differs from a's, so a merge that reads
// one partial with the other's strides fails here.
TEST_CASE("cuda: merge reads each partial with its own strides", "[gpu][merge]") {
  const int64_t n = 5, h = 6, d = 64;
  MergeInputs in = merge_inputs(n, h, d, 320);
  Buffer ro = clone(in.ao), rl = clone(in.al);
  cpu().merge({ro.view(), rl.view()}, {in.bo.view(), in.bl.view()});
  Buffer bt(DType::kF32, {h, n, d}), blt(DType::kF32, {h, n});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < h; ++j) {
      blt.as<float>()[j * n + i] = in.bl.as<float>()[i * h + j];
      for (int64_t c = 0; c < d; ++c)
        bt.as<float>()[(j * n + i) * d + c] = in.bo.as<float>()[(i * h + j) * d + c];
    }
  const Buffer dao = up(in.ao), dal = up(in.al), dbo = up(bt), dbl = up(blt);
  TensorView bo = dbo.view(), bl = dbl.view();
  bo.shape = {n, h, d, 1};
  bo.stride = {d, n * d, 1, 1};
  bl.shape = {n, h, 1, 1};
  bl.stride = {1, n, 1, 1};
  gpu().merge({dao.view(), dal.view()}, {bo, bl});
  CHECK(rel_err(down(dao.view()), values(ro)) < kTol32);
  check_lse(down(dal.view()), values(rl), kTol32);
}

TEST_CASE("cuda: the stream waits on a flag in mapped memory published by a CPU thread",
          "[gpu][merge][flag]") {
  const int64_t n = 4, h = 8, d = 64;
  MergeInputs in = merge_inputs(n, h, d, 320);
  Buffer ro = clone(in.ao), rl = clone(in.al);
  cpu().merge({ro.view(), rl.view()}, {in.bo.view(), in.bl.view()});
  const Buffer dao = up(in.ao), dal = up(in.al);
  Buffer flag(cuda_mapped_memory(), DType::kI32, {1}),
      bo(cuda_mapped_memory(), DType::kF32, {n, h, d}),
      bl(cuda_mapped_memory(), DType::kF32, {n, h});
  publish_host_flag(flag.view(), 0);
  // The host partial is not there yet: NaN everywhere, which the merge must never see.
  std::fill_n(bo.as<float>(), n * h * d, std::numeric_limits<float>::quiet_NaN());
  std::fill_n(bl.as<float>(), n * h, std::numeric_limits<float>::quiet_NaN());
  // The "CPU worker" produces the partial later, on its own thread (also where a sanitizer
  // makes kernel launches block the launching thread).
  std::jthread worker([&] {  // joins on the way out even if a call below throws
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::memcpy(bo.as<float>(), in.bo.as<float>(), static_cast<size_t>(in.bo.view().nbytes()));
    std::memcpy(bl.as<float>(), in.bl.as<float>(), static_cast<size_t>(in.bl.view().nbytes()));
    publish_host_flag(flag.view(), 1);
  });
  bool helped = false;
  gpu().wait_host_flag(flag.view(), 1, [&] { helped = true; });   // queued: returns at once
  gpu().merge({dao.view(), dal.view()}, {bo.view(), bl.view()});  // queued behind the wait
  CHECK_FALSE(helped);  // a device backend never runs the host-side wait
  worker.join();
  gpu().synchronize();
  CHECK(rel_err(down(dao.view()), values(ro)) < kTol32);
  check_lse(down(dal.view()), values(rl), kTol32);
}

TEST_CASE("cuda: a copy into mapped memory is read by a CPU thread behind a raised flag",
          "[gpu][copy][flag]") {
  const Buffer h = random_buffer(DType::kF32, {1, 8, 64}, 330);
  const Buffer src = up(h);
  Buffer tmp(cuda_device_memory(), DType::kF32, {1, 8, 64});
  Buffer flag(cuda_mapped_memory(), DType::kI32, {1}),
      dst(cuda_mapped_memory(), DType::kF32, {1, 8, 64});
  publish_host_flag(flag.view(), 0);
  std::vector<float> seen;
  // The CPU thread polls the flag, then reads what the device wrote in place.
  std::jthread worker([&] {
    while (!host_flag_reached(flag.view(), 7)) std::this_thread::yield();
    seen.assign(dst.as<float>(), dst.as<float>() + 8 * 64);
  });
  gpu().add(src.view(), src.view(), tmp.view());  // work before the copy, as in a layer
  gpu().copy(tmp.view(), dst.view());             // kernel writes through the device alias
  gpu().raise_host_flag(flag.view(), 7);
  gpu().synchronize();  // lets the stream run under TANDEM_EMU_DEFER; the reader goes by the flag
  worker.join();
  std::vector<float> twice = values(h);
  for (float& x : twice) x *= 2.0f;
  CHECK(rel_err(seen, twice) == 0.0);
}

TEST_CASE("cuda: attention over two spans merged equals attention over all keys",
          "[gpu][attention][merge]") {
  const int64_t n = 3, hq = 8, hkv = 2, d = 128, t_keys = 2000, cut = 1500;
  const Buffer q = random_buffer(DType::kF32, {n, hq, d}, 400);
  const Buffer k = random_buffer(DType::kBF16, {t_keys, hkv, d}, 401);
  const Buffer v = random_buffer(DType::kBF16, {t_keys, hkv, d}, 402);
  const Buffer pos = i32_buffer({1999, 1600, 1000});
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  Buffer ro(DType::kF32, {n, hq, d}), rl(DType::kF32, {n, hq});
  cpu().attention(q.view(), k.view(), v.view(), pos.view(), 0, scale, {ro.view(), rl.view()});
  const Buffer dq = up(q), dk = up(k), dv = up(v), dp = up(pos);
  const Buffer ao = poisoned_like(ro), al = poisoned_like(rl);
  const Buffer bo = poisoned_like(ro), bl = poisoned_like(rl);
  gpu().attention(dq.view(), dk.view().slice(0, cut), dv.view().slice(0, cut), dp.view(), 0, scale,
                  {ao.view(), al.view()});
  gpu().attention(dq.view(), dk.view().slice(cut, t_keys), dv.view().slice(cut, t_keys), dp.view(),
                  cut, scale, {bo.view(), bl.view()});
  gpu().merge({ao.view(), al.view()}, {bo.view(), bl.view()});
  CHECK(rel_err(down(ao.view()), values(ro)) < kTol32);
  check_lse(down(al.view()), values(rl), kTol32);
}

namespace {

// The rule of Backend::sample (engine/sampler.cpp without penalties and min-p) with a given
// uniform.
int32_t ref_sample(const float* logits, int64_t vocab, float temp, int32_t top_k, float top_p,
                   float u) {
  SamplingParams p;
  p.temperature = temp;
  p.top_k = top_k;
  p.top_p = top_p;
  return tandem::test::plain_sampling_rule(
      std::span<const float>(logits, static_cast<size_t>(vocab)), p, static_cast<double>(u));
}

}  // namespace

TEST_CASE("cuda: sampling greedy, temperature, top-k, top-p with given uniforms",
          "[gpu][sampling]") {
  struct RowParams {
    float temp;
    int32_t top_k;
    float top_p;
  };
  const RowParams params[] = {{0.0f, 0, 1.0f},  {1.0f, 1, 1.0f},   {0.7f, 50, 0.9f},
                              {1.0f, 0, 1.0f},  {1.3f, 0, 0.5f},   {1.0f, 3, 1.0f},
                              {0.5f, 0, 0.95f}, {2.0f, 1000, 0.8f}};
  const int64_t n = 8;
  for (int64_t vocab : {5000, 128256}) {
    for (bool ties : {false, true}) {
      INFO("vocab " << vocab << (ties ? " with many ties" : ""));
      Buffer logits = random_buffer(DType::kF32, {n, vocab}, ties ? 500 : 510, 6.0f);
      float* lp = logits.as<float>();
      for (int64_t i = 0; i < n * vocab; ++i) {
        if (ties) lp[i] = std::round(lp[i]);  // 13 distinct values: ties everywhere
        if (i % 97 == 5) lp[i] = -kInf;       // masked tokens
      }
      std::vector<float> temp, top_p;
      std::vector<int32_t> top_k;
      for (int64_t i = 0; i < n; ++i) {
        temp.push_back(params[i].temp);
        top_k.push_back(params[i].top_k);
        top_p.push_back(params[i].top_p);
      }
      const Buffer dl = up(logits);
      std::mt19937 rng(ties ? 520 : 530);
      std::uniform_real_distribution<float> uni(0.0f, 1.0f);
      // Fewer draws on the large vocabulary: compute-sanitizer runs this file too.
      const int rounds = vocab > 10000 ? 3 : 16;
      for (int round = 0; round < rounds; ++round) {
        std::vector<float> u;
        std::vector<SampleRow> rows;
        for (int64_t i = 0; i < n; ++i) {
          u.push_back(uni(rng));
          const size_t r = static_cast<size_t>(i);
          rows.push_back(SampleRow{temp[r], top_k[r], top_p[r], 0.0f, u.back()});
        }
        std::vector<int32_t> got(static_cast<size_t>(n), -1);
        REQUIRE(gpu().sample(dl.view(), rows.data(), got.data()));
        for (int64_t i = 0; i < n; ++i) {
          INFO("round " << round << " row " << i << " u " << u[static_cast<size_t>(i)]);
          CHECK(got[static_cast<size_t>(i)] ==
                ref_sample(lp + i * vocab, vocab, temp[static_cast<size_t>(i)],
                           top_k[static_cast<size_t>(i)], top_p[static_cast<size_t>(i)],
                           u[static_cast<size_t>(i)]));
        }
      }
    }
  }
}
