// Parity of the CUDA backend's dense ops with the CPU reference backend (tests/cuda_parity.h):
// the memory helpers, embedding, the norms, rope, the elementwise ops, softmax, dtype-converting
// copies, matmul (GEMV kernel and cuBLAS), and all of them on strided rows.
//
// Without a CUDA device (or in a build without CUDA) the executable prints
// "no CUDA device: N GPU tests skipped" and exits 4, ctest's SKIP_RETURN_CODE (label "gpu").
// The listener base classes of Catch2 v2 (used below to skip the whole run without a GPU).
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/dtype.h"
#include "tests/cuda_parity.h"
#include "tests/gpu_skip.h"

using namespace tandem;
using namespace tandem::test;

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
