// CpuBackend elementwise and row ops: embedding, silu_mul, relu, add, softmax, copy, merge.
// Views must have a contiguous last dim; leading dims may be strided (handled row by row),
// fully contiguous views are processed as one flat range in parallel chunks.

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"

namespace tandem {
namespace {

constexpr int64_t kChunk = 1 << 15;  // elements per parallel task for flat ranges

// Calls f(offset_a, offset_b, offset_out, len) over spans covering the common shape of views
// with the same shape: one flat range cut in chunks if all are contiguous, else row by row.
template <typename F>
void for_spans(const TensorView& a, const TensorView& b, const TensorView& out, F f) {
  const int64_t total = a.numel();
  if (total == 0) return;
  if (a.contiguous() && b.contiguous() && out.contiguous()) {
    const int64_t chunks = (total + kChunk - 1) / kChunk;
    tandem::parallel_for(int64_t{0}, chunks, [&](int64_t c) {
      const int64_t o = c * kChunk;
      f(o, o, o, std::min(kChunk, total - o));
    });
    return;
  }
  const int64_t rows = cpu::n_rows(a), cols = cpu::n_cols(a);
  const size_t grain =
      static_cast<size_t>(std::max<int64_t>(1, kChunk / std::max<int64_t>(1, cols)));
  tandem::parallel_for_range(
      tbb::blocked_range<int64_t>(0, rows, grain), [&](const tbb::blocked_range<int64_t>& br) {
        for (int64_t r = br.begin(); r < br.end(); ++r)
          f(cpu::row_offset(a, r), cpu::row_offset(b, r), cpu::row_offset(out, r), cols);
      });
}

void check_f32_same(const char* op, const TensorView& a, const TensorView& b) {
  TANDEM_CHECK(a.dtype == DType::kF32 && b.dtype == DType::kF32 && cpu::same_shape(a, b) &&
                   cpu::last_dim_contiguous(a) && cpu::last_dim_contiguous(b),
               op, ": ", a.describe(), " vs ", b.describe());
}

// silu(g) * u = g / (1 + e^-g) * u. Large negative g gives e^-g = inf and a result of -0.
void silu_mul_span(const float* g, const float* u, float* o, int64_t len) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= len; i += 8) {
    const __m256 gv = _mm256_loadu_ps(g + i);
    const __m256 e = cpu::exp8(_mm256_sub_ps(_mm256_setzero_ps(), gv));
    const __m256 s = _mm256_div_ps(gv, _mm256_add_ps(one, e));
    _mm256_storeu_ps(o + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
  }
  for (; i < len; ++i) o[i] = g[i] / (1.0f + cpu::exp1(-g[i])) * u[i];
}

void softmax_row(float* x, int64_t d) {
  __m256 mv = _mm256_set1_ps(kNegInf);
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
  float m = cpu::hmax(mv);
  for (; i < d; ++i) m = std::max(m, x[i]);
  if (m == kNegInf) {  // numeric guard: every entry masked; give zeros instead of NaN
    std::memset(x, 0, static_cast<size_t>(d) * sizeof(float));
    return;
  }
  const __m256 mb = _mm256_set1_ps(m);
  __m256 sv = _mm256_setzero_ps();
  for (i = 0; i + 8 <= d; i += 8) {
    const __m256 e = cpu::exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mb));
    _mm256_storeu_ps(x + i, e);
    sv = _mm256_add_ps(sv, e);
  }
  float s = cpu::hsum(sv);
  for (; i < d; ++i) {
    x[i] = cpu::exp1(x[i] - m);
    s += x[i];
  }
  const float inv = 1.0f / s;
  const __m256 iv = _mm256_set1_ps(inv);
  for (i = 0; i + 8 <= d; i += 8)
    _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), iv));
  for (; i < d; ++i) x[i] *= inv;
}

// dst[0, len) = src[0, len) converted between any two float dtypes (through f32: exact widening,
// one rounding when narrowing).
void convert_span(const char* src, DType st, char* dst, DType dt, int64_t len) {
  if (st == dt) {
    std::memcpy(dst, src, static_cast<size_t>(len * dtype_size(st)));
    return;
  }
  if (st == DType::kF32) {
    cpu::row_from_f32(reinterpret_cast<const float*>(src), dst, dt, len);
    return;
  }
  if (dt == DType::kF32) {
    cpu::row_to_f32(src, st, reinterpret_cast<float*>(dst), len);
    return;
  }
  float buf[256];
  for (int64_t i = 0; i < len; i += 256) {
    const int64_t l = std::min<int64_t>(256, len - i);
    cpu::row_to_f32(src + i * 2, st, buf, l);
    cpu::row_from_f32(buf, dst + i * 2, dt, l);
  }
}

}  // namespace

void CpuBackend::embedding(const TensorView& ids, const TensorView& table, const TensorView& out) {
  TANDEM_CHECK(ids.dtype == DType::kI32 && ids.contiguous(), "embedding ids ", ids.describe());
  TANDEM_CHECK(table.ndim == 2 && cpu::is_float_dtype(table.dtype) && table.contiguous(),
               "embedding table ", table.describe());
  const int64_t n = ids.numel(), vocab = table.dim(0), d = table.dim(1);
  TANDEM_CHECK(out.dtype == DType::kF32 && out.ndim == 2 && out.dim(0) == n && out.dim(1) == d &&
                   cpu::last_dim_contiguous(out),
               "embedding out ", out.describe(), " for ", n, " ids of ", table.describe());
  const int32_t* ip = ids.as<const int32_t>();
  for (int64_t i = 0; i < n; ++i)
    TANDEM_REQUIRE(ip[i] >= 0 && ip[i] < vocab, kInvalidArgument, "token id ", ip[i],
                   " outside the vocabulary [0, ", vocab, ")");
  const int64_t es = dtype_size(table.dtype);
  tandem::parallel_for(int64_t{0}, n, [&](int64_t i) {
    cpu::row_to_f32(static_cast<const char*>(table.data) + ip[i] * d * es, table.dtype,
                    cpu::row_f32(out, i), d);
  });
}

void CpuBackend::silu_mul(const TensorView& gate, const TensorView& up, const TensorView& out) {
  check_f32_same("silu_mul", gate, up);
  check_f32_same("silu_mul", gate, out);
  const float* g = gate.as<const float>();
  const float* u = up.as<const float>();
  float* o = out.as<float>();
  for_spans(gate, up, out, [&](int64_t og, int64_t ou, int64_t oo, int64_t len) {
    silu_mul_span(g + og, u + ou, o + oo, len);
  });
}

void CpuBackend::relu(const TensorView& x) {
  check_f32_same("relu", x, x);
  float* p = x.as<float>();
  for_spans(x, x, x, [&](int64_t o, int64_t, int64_t, int64_t len) {
    const __m256 z = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= len; i += 8)
      _mm256_storeu_ps(p + o + i, _mm256_max_ps(_mm256_loadu_ps(p + o + i), z));
    for (; i < len; ++i) p[o + i] = std::max(p[o + i], 0.0f);
  });
}

void CpuBackend::add(const TensorView& a, const TensorView& b, const TensorView& out) {
  check_f32_same("add", a, b);
  check_f32_same("add", a, out);
  const float* ap = a.as<const float>();
  const float* bp = b.as<const float>();
  float* op = out.as<float>();
  for_spans(a, b, out, [&](int64_t oa, int64_t ob, int64_t oo, int64_t len) {
    int64_t i = 0;
    for (; i + 8 <= len; i += 8)
      _mm256_storeu_ps(op + oo + i,
                       _mm256_add_ps(_mm256_loadu_ps(ap + oa + i), _mm256_loadu_ps(bp + ob + i)));
    for (; i < len; ++i) op[oo + i] = ap[oa + i] + bp[ob + i];
  });
}

void CpuBackend::softmax(const TensorView& x) {
  check_f32_same("softmax", x, x);
  const int64_t rows = cpu::n_rows(x), d = cpu::n_cols(x);
  if (rows == 0 || d == 0) return;
  const size_t grain = static_cast<size_t>(std::max<int64_t>(1, kChunk / d));
  tandem::parallel_for_range(tbb::blocked_range<int64_t>(0, rows, grain),
                             [&](const tbb::blocked_range<int64_t>& br) {
                               for (int64_t r = br.begin(); r < br.end(); ++r)
                                 softmax_row(cpu::row_f32(x, r), d);
                             });
}

void CpuBackend::copy(const TensorView& src, const TensorView& dst) {
  TANDEM_CHECK(cpu::same_shape(src, dst) && cpu::is_float_dtype(src.dtype) &&
                   cpu::is_float_dtype(dst.dtype) && cpu::last_dim_contiguous(src) &&
                   cpu::last_dim_contiguous(dst),
               "copy ", src.describe(), " -> ", dst.describe());
  const char* s = static_cast<const char*>(src.data);
  char* d = static_cast<char*>(dst.data);
  const int64_t ss = dtype_size(src.dtype), ds = dtype_size(dst.dtype);
  for_spans(src, src, dst, [&](int64_t os, int64_t, int64_t od, int64_t len) {
    convert_span(s + os * ss, src.dtype, d + od * ds, dst.dtype, len);
  });
}

void CpuBackend::merge(const AttnPartial& a, const AttnPartial& b) {
  TANDEM_CHECK(a.o.ndim == 3 && cpu::same_shape(a.o, b.o) && a.o.dtype == DType::kF32 &&
                   b.o.dtype == DType::kF32 && cpu::last_dim_contiguous(a.o) &&
                   cpu::last_dim_contiguous(b.o),
               "merge o ", a.o.describe(), " with ", b.o.describe());
  const int64_t n = a.o.dim(0), heads = a.o.dim(1), d = a.o.dim(2);
  for (const TensorView* l : {&a.lse, &b.lse})
    TANDEM_CHECK(l->dtype == DType::kF32 && l->ndim == 2 && l->dim(0) == n && l->dim(1) == heads,
                 "merge lse ", l->describe(), " for o ", a.o.describe());
  const size_t grain =
      static_cast<size_t>(std::max<int64_t>(1, kChunk / std::max<int64_t>(1, heads * d)));
  tandem::parallel_for_range(
      tbb::blocked_range<int64_t>(0, n, grain), [&](const tbb::blocked_range<int64_t>& br) {
        for (int64_t i = br.begin(); i < br.end(); ++i) {
          for (int64_t h = 0; h < heads; ++h) {
            float* oa = a.o.as<float>() + i * a.o.stride[0] + h * a.o.stride[1];
            const float* ob = b.o.as<const float>() + i * b.o.stride[0] + h * b.o.stride[1];
            float* la = a.lse.as<float>() + i * a.lse.stride[0] + h * a.lse.stride[1];
            const float lb = b.lse.as<const float>()[i * b.lse.stride[0] + h * b.lse.stride[1]];
            merge_partial_row(oa, la, ob, lb, static_cast<int>(d));
          }
        }
      });
}

}  // namespace tandem
