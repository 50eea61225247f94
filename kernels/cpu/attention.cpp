// CpuBackend::attention: n queries over one contiguous span of T keys, returning the partial
// (o, lse) of kernels/attn_partial.h; attention_paged: the same over keys held in pages of a pool
// (key j at row j % rows of page ids[j / rows]), key blocks cut at page boundaries.
//   q f32 [n, Hq, d]; k, v f32/f16/bf16 [T, Hkv, d]; key j (position k_pos0 + j) is visible to
//   query i iff k_pos0 + j <= q_pos[i]. GQA: query head h reads kv head h / (Hq / Hkv).
// One task per (query row, kv head) computes the Hq/Hkv query heads that share the kv head, so
// each key row is read once for all of them; keys are processed in blocks of kKeyBlock with a
// running max and sum (online softmax, float32). When there are few (row, kv head) tasks (decode),
// the keys are also split into chunks whose partials are merged with merge_partial_row. The split
// depends only on the problem size, never on the thread count, so results are reproducible.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/host_kernel.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"

namespace tandem {
namespace {

constexpr int64_t kKeyBlock = 64;       // keys scored per block of the online softmax
constexpr int64_t kMinTasks = 32;       // split keys while (rows x kv heads) is below this
constexpr int64_t kMinSplitKeys = 512;  // but never into chunks smaller than this

// Prefetch of the row_bytes at p into L1. A head's key rows are Hkv * d elements apart, a
// pattern the hardware prefetchers follow poorly, so each row is requested well before use.
inline void prefetch_row(const void* p, int64_t row_bytes) {
  for (int64_t b = 0; b < row_bytes; b += 64)
    _mm_prefetch(static_cast<const char*>(p) + b, _MM_HINT_T0);
}

// o[g, :] += sum_{jj < nb} p[g * kKeyBlock + jj] * v[jj * v_s0, :] for G rows of o (o_hs apart):
// for each 8-column slice the G sums stay in registers over the nb value rows (L1-resident).
template <typename EV, int G>
inline void accumulate_v(const typename EV::T* v, int64_t v_s0, int64_t nb, const float* p,
                         float* o, int64_t o_hs, int64_t d) {
  int64_t c = 0;
  for (; c + 8 <= d; c += 8) {
    __m256 acc[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) acc[g] = _mm256_setzero_ps();
    for (int64_t jj = 0; jj < nb; ++jj) {
      const __m256 vv = EV::load8(v + jj * v_s0 + c);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g)
        acc[g] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + g * kKeyBlock + jj), vv, acc[g]);
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      float* oc = o + g * o_hs + c;
      _mm256_storeu_ps(oc, _mm256_add_ps(_mm256_loadu_ps(oc), acc[g]));
    }
  }
  for (; c < d; ++c) {
    for (int g = 0; g < G; ++g) {
      float acc = 0.0f;
      for (int64_t jj = 0; jj < nb; ++jj) acc += p[g * kKeyBlock + jj] * EV::get(v + jj * v_s0 + c);
      o[g * o_hs + c] += acc;
    }
  }
}

struct AttnArgs {
  const float* q;
  int64_t q_s0, q_s1;  // strides in elements
  const char* k;
  const char* v;
  int64_t k_s0, k_s1, v_s0, v_s1;  // strides in elements
  int64_t d, rep;
  float scale;
  // Paged keys (nullptr: one contiguous span): key j is row j % page_rows of the page starting
  // pages[j / page_rows] elements from the span's base.
  const int64_t* pages = nullptr;
  int64_t page_rows = 0;
  // Set when the host attention kernel can run the tasks (see attend_group).
  bool group_kernel = false;
  DType kv_dtype = DType::kF32;

  // Element offset of key j's row from the span's base (before the head offset).
  int64_t k_off(int64_t j) const { return row_off(j, k_s0); }
  int64_t v_off(int64_t j) const { return row_off(j, v_s0); }
  int64_t row_off(int64_t j, int64_t s0) const {
    if (pages == nullptr) return j * s0;
    return pages[j / page_rows] + (j % page_rows) * s0;
  }
  // Keys from j on that are contiguous rows (to the end of j's page).
  int64_t run(int64_t j) const {
    return pages == nullptr ? std::numeric_limits<int64_t>::max() : page_rows - j % page_rows;
  }
};

// Partial attention of query row i, query heads [g * rep, (g + 1) * rep), over keys [j0, j1) of
// kv head g. Writes rep rows of o (row r at o + r * o_hs) and lse[r * lse_hs]. An empty key
// range gives o = 0 and lse = -inf.
template <typename EK, typename EV>
void attend(const AttnArgs& a, int64_t i, int64_t g, int64_t j0, int64_t j1, float* o, int64_t o_hs,
            float* lse, int64_t lse_hs) {
  using TK = typename EK::T;
  using TV = typename EV::T;
  const int64_t d = a.d, rep = a.rep;
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(rep * kKeyBlock + d + 2 * rep));
  float* sc = scratch.data();        // [rep, kKeyBlock] scores, then probabilities
  float* kf = sc + rep * kKeyBlock;  // [d] one key row as f32
  float* mx = kf + d;                // [rep] running max
  float* sum = mx + rep;             // [rep] running sum of exp(score - max)
  const float* q0 = a.q + i * a.q_s0 + g * rep * a.q_s1;
  for (int64_t r = 0; r < rep; ++r) {
    mx[r] = kNegInf;
    sum[r] = 0.0f;
    std::memset(o + r * o_hs, 0, static_cast<size_t>(d) * sizeof(float));
  }
  const TK* kbase = reinterpret_cast<const TK*>(a.k) + g * a.k_s1;
  const TV* vbase = reinterpret_cast<const TV*>(a.v) + g * a.v_s1;
  const int64_t k_row_bytes = d * static_cast<int64_t>(sizeof(TK));
  const int64_t v_row_bytes = d * static_cast<int64_t>(sizeof(TV));
  for (int64_t j = j0; j < std::min(j1, j0 + 4); ++j) prefetch_row(kbase + a.k_off(j), k_row_bytes);
  for (int64_t jb = j0, nb = 0; jb < j1; jb += nb) {
    nb = std::min({kKeyBlock, j1 - jb, a.run(jb)});  // rows jb .. jb + nb are contiguous
    const TK* kblk = kbase + a.k_off(jb);
    const TV* vblk = vbase + a.v_off(jb);
    for (int64_t jj = 0; jj < nb; ++jj) {
      // Key rows 4 ahead; this block's value rows, used after its softmax.
      if (jb + jj + 4 < j1) prefetch_row(kbase + a.k_off(jb + jj + 4), k_row_bytes);
      prefetch_row(vblk + jj * a.v_s0, v_row_bytes);
      cpu::convert_to_f32<EK>(kblk + jj * a.k_s0, kf, d);
      for (int64_t r = 0; r < rep; ++r)
        sc[r * kKeyBlock + jj] = a.scale * cpu::dot_f32(q0 + r * a.q_s1, kf, d);
    }
    for (int64_t r = 0; r < rep; ++r) {
      float* s = sc + r * kKeyBlock;
      float bm = kNegInf;
      for (int64_t jj = 0; jj < nb; ++jj) bm = std::max(bm, s[jj]);
      if (bm > mx[r]) {
        // Rescale what was accumulated under the old max (nothing yet when it was -inf).
        if (mx[r] != kNegInf) {
          const float alpha = std::exp(mx[r] - bm);
          sum[r] *= alpha;
          float* orow = o + r * o_hs;
          for (int64_t c = 0; c < d; ++c) orow[c] *= alpha;
        }
        mx[r] = bm;
      }
      const __m256 mb = _mm256_set1_ps(mx[r]);
      __m256 acc = _mm256_setzero_ps();
      int64_t jj = 0;
      for (; jj + 8 <= nb; jj += 8) {
        const __m256 p = cpu::exp8(_mm256_sub_ps(_mm256_loadu_ps(s + jj), mb));
        _mm256_storeu_ps(s + jj, p);
        acc = _mm256_add_ps(acc, p);
      }
      float part = cpu::hsum(acc);
      for (; jj < nb; ++jj) {
        s[jj] = cpu::exp1(s[jj] - mx[r]);
        part += s[jj];
      }
      sum[r] += part;
    }
    // o[r] += sum_jj p[r][jj] * v[jj], G query heads at a time so the sums stay in registers.
    int64_t r = 0;
    for (; r + 4 <= rep; r += 4)
      accumulate_v<EV, 4>(vblk, a.v_s0, nb, sc + r * kKeyBlock, o + r * o_hs, o_hs, d);
    for (; r < rep; ++r)
      accumulate_v<EV, 1>(vblk, a.v_s0, nb, sc + r * kKeyBlock, o + r * o_hs, o_hs, d);
  }
  for (int64_t r = 0; r < rep; ++r) {
    if (sum[r] == 0.0f) {  // no visible key: the empty partial (o is still 0)
      lse[r * lse_hs] = kNegInf;
      continue;
    }
    const float inv = 1.0f / sum[r];
    float* orow = o + r * o_hs;
    for (int64_t c = 0; c < d; ++c) orow[c] *= inv;
    lse[r * lse_hs] = mx[r] + std::log(sum[r]);
  }
}

// Keys [j0, j1) of KV head g as the host attention kernel's blocks (one per run of contiguous
// rows: the whole span, or each page).
void group_refs(const AttnArgs& a, int64_t g, int64_t j0, int64_t j1,
                std::vector<HostBlockRef>& refs) {
  refs.clear();
  const int64_t es = dtype_size(a.kv_dtype);
  for (int64_t jb = j0, nb = 0; jb < j1; jb += nb) {
    nb = std::min<int64_t>({j1 - jb, a.run(jb), int64_t{1} << 30});  // contiguous rows
    HostBlockRef r;
    r.k = a.k + (g * a.k_s1 + a.k_off(jb)) * es;
    r.v = a.v + (g * a.v_s1 + a.v_off(jb)) * es;
    r.n = static_cast<int32_t>(nb);
    r.stride = a.k_s0;
    refs.push_back(r);
  }
}

// The partial of attend() by the host attention kernel (kernels/cpu/host_kernel.h: rows chunked,
// register-blocked scores and values, software prefetch), several times faster than attend()
// on long spans. Needs equal K and V dtypes and row strides, d a multiple of 8, and the rep query
// heads of q, o and lse contiguous (AttnArgs::group_kernel).
void attend_group(const AttnArgs& a, int64_t i, int64_t g, int64_t j0, int64_t j1, float* o,
                  float* lse) {
  thread_local std::vector<HostBlockRef> refs;
  group_refs(a, g, j0, j1, refs);
  host_attend_group(a.q + i * a.q_s0 + g * a.rep * a.q_s1, static_cast<int32_t>(a.rep),
                    static_cast<int32_t>(a.d), a.scale, a.kv_dtype, refs, o, lse);
}

constexpr int64_t kTileRows = 16;        // query rows per task of the shared-prefix pass
constexpr int64_t kMinCommonKeys = 128;  // keys every row must see for that pass to pay

// Prefill (n >= 4 rows, every row seeing at least kMinCommonKeys keys): the keys all rows see,
// [0, common), are attended once per tile of kTileRows rows and KV head, the tile's rows x rep
// query heads as one group of the host kernel, so each key row is read once per tile instead of
// once per query row; each row's remaining (causal) keys [common, vis) go through attend_group
// and are merged in. out gets the result; returns false (nothing done) when the pass does not
// apply.
bool attend_shared_prefix(const AttnArgs& a, int64_t n, int64_t hkv,
                          const std::vector<int64_t>& vis, const AttnPartial& out) {
  const int64_t d = a.d, rep = a.rep, hq = hkv * rep;
  const int64_t common = *std::min_element(vis.begin(), vis.end());
  const int64_t max_vis = *std::max_element(vis.begin(), vis.end());
  float* out_o = out.o.as<float>();
  float* out_l = out.lse.as<float>();
  const int64_t oo0 = out.o.stride[0], oo1 = out.o.stride[1];
  const int64_t ol0 = out.lse.stride[0], ol1 = out.lse.stride[1];
  if (!a.group_kernel || oo1 != d || ol1 != 1 || n < 4 || common < kMinCommonKeys ||
      (rep > 1 && a.q_s1 != d))
    return false;
  const int64_t tiles = (n + kTileRows - 1) / kTileRows;
  tandem::parallel_for(int64_t{0}, tiles * hkv, [&](int64_t t) {
    const int64_t g = t % hkv, r0 = (t / hkv) * kTileRows, r1 = std::min(n, r0 + kTileRows);
    const int64_t heads = (r1 - r0) * rep;
    thread_local std::vector<float> qbuf, obuf, lbuf;
    thread_local std::vector<HostBlockRef> refs;
    qbuf.resize(static_cast<size_t>(heads * d));
    obuf.resize(qbuf.size());
    lbuf.resize(static_cast<size_t>(heads));
    for (int64_t i = r0; i < r1; ++i)  // the rep heads of a row are contiguous (q_s1 == d)
      std::copy_n(a.q + i * a.q_s0 + g * rep * a.q_s1, rep * d, qbuf.data() + (i - r0) * rep * d);
    group_refs(a, g, 0, common, refs);
    host_attend_group(qbuf.data(), static_cast<int32_t>(heads), static_cast<int32_t>(d), a.scale,
                      a.kv_dtype, refs, obuf.data(), lbuf.data());
    for (int64_t i = r0; i < r1; ++i) {
      std::copy_n(obuf.data() + (i - r0) * rep * d, rep * d, out_o + i * oo0 + g * rep * oo1);
      std::copy_n(lbuf.data() + (i - r0) * rep, rep, out_l + i * ol0 + g * rep);
    }
  });
  if (max_vis == common) return true;
  std::vector<float> part_o(static_cast<size_t>(n * hq * d)), part_l(static_cast<size_t>(n * hq));
  tandem::parallel_for(int64_t{0}, n * hkv, [&](int64_t t) {
    const int64_t g = t % hkv, i = t / hkv;
    const int64_t v = vis[static_cast<size_t>(i)];
    if (v == common) return;
    const int64_t base = i * hq + g * rep;
    attend_group(a, i, g, common, v, part_o.data() + base * d, part_l.data() + base);
    for (int64_t r = 0; r < rep; ++r)
      merge_partial_row(out_o + i * oo0 + (g * rep + r) * oo1, out_l + i * ol0 + g * rep + r,
                        part_o.data() + (base + r) * d, part_l[static_cast<size_t>(base + r)],
                        static_cast<int>(d));
  });
  return true;
}

template <typename EK, typename EV>
void attention_typed(const AttnArgs& a, int64_t n, int64_t hkv, const std::vector<int64_t>& vis,
                     const AttnPartial& out) {
  const int64_t d = a.d, rep = a.rep, hq = hkv * rep;
  const int64_t max_vis = *std::max_element(vis.begin(), vis.end());
  int64_t nsplit = 1;
  if (n * hkv < kMinTasks && max_vis >= 2 * kMinSplitKeys) {
    nsplit = std::min((kMinTasks + n * hkv - 1) / (n * hkv), max_vis / kMinSplitKeys);
  }
  if (nsplit == 1 && attend_shared_prefix(a, n, hkv, vis, out)) return;
  const int64_t chunk = (max_vis + nsplit - 1) / std::max<int64_t>(1, nsplit);
  float* out_o = out.o.as<float>();
  float* out_l = out.lse.as<float>();
  const int64_t oo0 = out.o.stride[0], oo1 = out.o.stride[1];
  const int64_t ol0 = out.lse.stride[0], ol1 = out.lse.stride[1];
  // Split s > 0 writes its partial to scratch [nsplit - 1, n, hq, d] / [nsplit - 1, n, hq].
  std::vector<float> part_o, part_l;
  if (nsplit > 1) {
    part_o.resize(static_cast<size_t>((nsplit - 1) * n * hq * d));
    part_l.resize(static_cast<size_t>((nsplit - 1) * n * hq));
  }
  tandem::parallel_for(int64_t{0}, nsplit * n * hkv, [&](int64_t t) {
    const int64_t s = t % nsplit, g = (t / nsplit) % hkv, i = t / (nsplit * hkv);
    const int64_t j0 = std::min(s * chunk, vis[static_cast<size_t>(i)]);
    const int64_t j1 = std::min((s + 1) * chunk, vis[static_cast<size_t>(i)]);
    const bool group = a.group_kernel && oo1 == d && ol1 == 1;
    if (s == 0) {
      float* o = out_o + i * oo0 + g * rep * oo1;
      float* l = out_l + i * ol0 + g * rep * ol1;
      if (group)
        attend_group(a, i, g, j0, j1, o, l);
      else
        attend<EK, EV>(a, i, g, j0, j1, o, oo1, l, ol1);
    } else {
      const int64_t base = ((s - 1) * n + i) * hq + g * rep;
      if (group)
        attend_group(a, i, g, j0, j1, part_o.data() + base * d, part_l.data() + base);
      else
        attend<EK, EV>(a, i, g, j0, j1, part_o.data() + base * d, d, part_l.data() + base, 1);
    }
  });
  if (nsplit == 1) return;
  tandem::parallel_for(int64_t{0}, n * hq, [&](int64_t t) {
    const int64_t i = t / hq, h = t % hq;
    for (int64_t s = 1; s < nsplit; ++s) {
      const int64_t base = ((s - 1) * n + i) * hq + h;
      merge_partial_row(out_o + i * oo0 + h * oo1, out_l + i * ol0 + h * ol1,
                        part_o.data() + base * d, part_l[static_cast<size_t>(base)],
                        static_cast<int>(d));
    }
  });
}

template <typename EK>
void dispatch_v(DType vt, const AttnArgs& a, int64_t n, int64_t hkv,
                const std::vector<int64_t>& vis, const AttnPartial& out) {
  switch (vt) {
    case DType::kF32:
      return attention_typed<EK, cpu::F32>(a, n, hkv, vis, out);
    case DType::kF16:
      return attention_typed<EK, cpu::F16>(a, n, hkv, vis, out);
    case DType::kBF16:
      return attention_typed<EK, cpu::BF16>(a, n, hkv, vis, out);
    default:
      break;
  }
  TANDEM_CHECK(false, "attention v dtype ", dtype_name(vt));
}

}  // namespace

namespace {

void attention_impl(const TensorView& q, const TensorView& k, const TensorView& v,
                    const KvPages* pages, const TensorView& q_pos, int64_t k_pos0, float scale,
                    const AttnPartial& out) {
  TANDEM_CHECK(q.dtype == DType::kF32 && q.ndim == 3 && cpu::last_dim_contiguous(q), "attention q ",
               q.describe());
  const int64_t n = q.dim(0), hq = q.dim(1), d = q.dim(2);
  TANDEM_CHECK(k.ndim == 3 && cpu::same_shape(k, v) && cpu::is_float_dtype(k.dtype) &&
                   cpu::is_float_dtype(v.dtype) && cpu::last_dim_contiguous(k) &&
                   cpu::last_dim_contiguous(v) && k.dim(2) == d,
               "attention k ", k.describe(), " v ", v.describe(), " for q ", q.describe());
  const int64_t t_keys = k.dim(0), hkv = k.dim(1);
  TANDEM_CHECK(hkv > 0 && hq % hkv == 0, "attention heads: Hq=", hq, " Hkv=", hkv);
  TANDEM_CHECK(q_pos.dtype == DType::kI32 && q_pos.numel() == n && q_pos.contiguous(),
               "attention q_pos ", q_pos.describe());
  TANDEM_CHECK(out.o.dtype == DType::kF32 && cpu::same_shape(out.o, q) &&
                   cpu::last_dim_contiguous(out.o) && out.lse.dtype == DType::kF32 &&
                   out.lse.ndim == 2 && out.lse.dim(0) == n && out.lse.dim(1) == hq,
               "attention out o ", out.o.describe(), " lse ", out.lse.describe());
  if (pages != nullptr) {
    TANDEM_CHECK(pages->rows > 0 && pages->count == (t_keys + pages->rows - 1) / pages->rows &&
                     (pages->offsets != nullptr || pages->count == 0),
                 "attention pages: ", pages->count, " pages of ", pages->rows, " rows for ", t_keys,
                 " keys");
  }
  if (n == 0 || hq == 0) return;
  std::vector<int64_t> vis(static_cast<size_t>(n));
  const int32_t* pp = q_pos.as<const int32_t>();
  for (int64_t i = 0; i < n; ++i)
    vis[static_cast<size_t>(i)] = std::clamp<int64_t>(int64_t{pp[i]} - k_pos0 + 1, 0, t_keys);
  AttnArgs a{q.as<const float>(),
             q.stride[0],
             q.stride[1],
             static_cast<const char*>(k.data),
             static_cast<const char*>(v.data),
             k.stride[0],
             k.stride[1],
             v.stride[0],
             v.stride[1],
             d,
             hq / hkv,
             scale};
  a.kv_dtype = k.dtype;
  a.group_kernel = k.dtype == v.dtype && k.stride[0] == v.stride[0] && d % 8 == 0 &&
                   (hq / hkv == 1 || q.stride[1] == d);
  if (pages != nullptr) {
    a.pages = pages->offsets;
    a.page_rows = pages->rows;
  }
  switch (k.dtype) {
    case DType::kF32:
      return dispatch_v<cpu::F32>(v.dtype, a, n, hkv, vis, out);
    case DType::kF16:
      return dispatch_v<cpu::F16>(v.dtype, a, n, hkv, vis, out);
    case DType::kBF16:
      return dispatch_v<cpu::BF16>(v.dtype, a, n, hkv, vis, out);
    default:
      break;
  }
  TANDEM_CHECK(false, "attention k dtype ", dtype_name(k.dtype));
}

}  // namespace

void CpuBackend::attention(const TensorView& q, const TensorView& k, const TensorView& v,
                           const TensorView& q_pos, int64_t k_pos0, float scale,
                           const AttnPartial& out) {
  attention_impl(q, k, v, nullptr, q_pos, k_pos0, scale, out);
}

void CpuBackend::attention_paged(const TensorView& q, const TensorView& k, const TensorView& v,
                                 const KvPages& pages, const TensorView& q_pos, int64_t k_pos0,
                                 float scale, const AttnPartial& out) {
  attention_impl(q, k, v, &pages, q_pos, k_pos0, scale, out);
}

}  // namespace tandem
