// Unit tests of the CPU reference backend's attention and merge against a float64 reference on
// random inputs (tests/cpu_ops_reference.h), for each KV dtype: GQA, causal visibility,
// invisible queries, paged keys, two halves merged, empty partials and infinite lse, and
// independence of the thread count.
#include <tbb/global_control.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tests/cpu_ops_reference.h"

using namespace tandem;
using namespace tandem::test;

namespace {

// ---- float64 reference --------------------------------------------------------------------------

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

// The dense cache keeps each KV head's rows together ([hkv, T, d] in memory) and passes the
// strided [T, hkv, d] view: the same bits as the same keys stored token-major.
TEST_CASE("attention over head-major K and V views equals token-major", "[cpu][attention]") {
  auto be = cpu();
  const std::vector<AttnCase> cases = {
      {1, 8, 2, 3001, 64, 0, {3000}},  // decode: the key split and its merge
      {17,
       8,
       2,
       700,
       64,
       0,
       {683, 684, 685, 686, 687, 688, 689, 690, 691, 692, 693, 694, 695, 696, 697, 698,
        699}},                                      // prefill: the shared-prefix pass
      {3, 4, 4, 37, 36, 500, {499, 510, 100000}}};  // d not a multiple of 8, invisible queries
  uint32_t seed = 900;
  for (DType kv : kFloatTypes)
    for (const AttnCase& c : cases) {
      INFO("kv " << dtype_name(kv) << " n=" << c.n << " T=" << c.t_keys << " d=" << c.d);
      const Tensor q = random_tensor(DType::kF32, {c.n, c.hq, c.d}, seed++);
      const Tensor k = random_tensor(kv, {c.t_keys, c.hkv, c.d}, seed++, 2.0f);
      const Tensor v = random_tensor(kv, {c.t_keys, c.hkv, c.d}, seed++);
      auto head_major = [&](const Tensor& x) {
        Buffer b(kv, {c.hkv, c.t_keys, c.d});
        const int64_t row = c.d * dtype_size(kv);
        for (int64_t j = 0; j < c.t_keys; ++j)
          for (int64_t g = 0; g < c.hkv; ++g)
            std::memcpy(b.view().at(g, j), x.view().at(j, g), static_cast<size_t>(row));
        return b;
      };
      const Buffer kh = head_major(k), vh = head_major(v);
      auto strided = [](TensorView t) {
        std::swap(t.shape[0], t.shape[1]);
        std::swap(t.stride[0], t.stride[1]);
        return t;
      };
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
      AttnOut want =
          run_attention(*be, q, k.view(), v.view(), c.q_pos, c.k_pos0, scale, c.n, c.hq, c.d);
      AttnOut got = run_attention(*be, q, strided(kh.view()), strided(vh.view()), c.q_pos, c.k_pos0,
                                  scale, c.n, c.hq, c.d);
      CHECK(std::memcmp(got.o.as<float>(), want.o.as<float>(),
                        static_cast<size_t>(c.n * c.hq * c.d) * 4) == 0);
      CHECK(std::memcmp(got.lse.as<float>(), want.lse.as<float>(),
                        static_cast<size_t>(c.n * c.hq) * 4) == 0);
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
