// Tests of cpu_attn/: host_attend_group and HostAttention against a float64 reference.
//
// KV values are rounded to the KV dtype once when a test builds them, and the reference is
// computed in float64 from the same rounded values, so only the kernel's float32 arithmetic is
// measured: o rows by max|got - ref| / max|ref|, lse by |got - ref| / max(1, |ref|), both < 1e-5.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "cpu_attn/host_attention.h"
#include "kernels/attn_partial.h"
#include "kernels/common.h"
#include "kernels/cpu/host_kernel.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/line_stream.h"
#include "kernels/dtype.h"

using namespace tandem;

namespace {

constexpr double kTol = 1e-5;
const DType kKvTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

// Rounds v to dtype t, writes its bits to dst[i], returns the value stored.
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
    default: {
      const uint16_t h = f32_to_bf16(v);
      static_cast<uint16_t*>(dst)[i] = h;
      return bf16_to_f32(h);
    }
  }
}

// The host blocks of one KV head: raw bytes in the KV dtype, the rounded values, selections.
struct HeadKv {
  DType t;
  int32_t d;
  std::vector<std::vector<char>> kb, vb;   // per block [n, d] in dtype t
  std::vector<std::vector<float>> kf, vf;  // per block [n, d] rounded values
  std::vector<std::vector<int32_t>> idx;   // per block selection
  std::vector<int64_t> ld;                 // per block: K by columns [d, ld] (0: by rows [n, d])
  std::vector<int64_t> vt;                 // per block: V by tiles kVTile rows apart (0: rows)
  std::vector<HostBlockRef> refs;

  // How the K of the blocks is stored: by rows, by columns (as the host store keeps it; the
  // column stride is the block's rows rounded up to a multiple of 7, so it is larger than the
  // rows in most blocks, as in a partial host block), or alternately; the Tiles forms store V by
  // tiles of kVTile channels (HostBlockRef::v_tile, the same capacity) where d is a multiple of
  // kVTile, as the host store keeps it for head_dim 128: every block, or every other one (the
  // blocks with K by columns), so that one call mixes V by rows and by tiles.
  enum class KLayout { kRows, kColumns, kMixed, kColumnsTiles, kMixedTiles };

  // lens: rows per block; select: keep each row with probability keep (sorted idx), else all.
  // growth > 0 makes later keys larger, so the running max keeps growing (rescaling path).
  HeadKv(DType type, int32_t dim, const std::vector<int32_t>& lens, std::mt19937& rng, bool select,
         double keep = 0.3, float growth = 0.0f, KLayout layout = KLayout::kRows)
      : t(type), d(dim) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::uniform_real_distribution<double> coin(0.0, 1.0);
    const size_t es = static_cast<size_t>(dtype_size(t));
    int64_t row = 0;
    for (int32_t n : lens) {
      const size_t nd = static_cast<size_t>(n) * static_cast<size_t>(d);
      const bool mixed = layout == KLayout::kMixed || layout == KLayout::kMixedTiles;
      const bool cols = layout == KLayout::kColumns || layout == KLayout::kColumnsTiles ||
                        (mixed && kb.size() % 2);
      const bool tiles = d % kVTile == 0 && cols &&
                         (layout == KLayout::kColumnsTiles || layout == KLayout::kMixedTiles);
      ld.push_back(cols ? (n + 6) / 7 * 7 : 0);
      vt.push_back(tiles ? ld.back() * kVTile : 0);
      kb.emplace_back(cols ? static_cast<size_t>(ld.back() * d) * es : nd * es);
      vb.emplace_back(tiles ? static_cast<size_t>(ld.back() * d) * es : nd * es);
      kf.emplace_back(nd);
      vf.emplace_back(nd);
      idx.emplace_back();
      for (int32_t r = 0; r < n; ++r, ++row) {
        const float gain = 1.0f + growth * static_cast<float>(row);
        for (int32_t c = 0; c < d; ++c) {
          const int64_t i = int64_t{r} * d + c;
          const int64_t ki = ld.back() != 0 ? c * ld.back() + r : i;
          const int64_t vi =
              vt.back() != 0 ? (c / kVTile) * vt.back() + int64_t{r} * kVTile + c % kVTile : i;
          kf.back()[static_cast<size_t>(i)] = store_as(t, kb.back().data(), ki, gain * u(rng));
          vf.back()[static_cast<size_t>(i)] = store_as(t, vb.back().data(), vi, u(rng));
        }
        if (select && coin(rng) < keep) idx.back().push_back(r);
      }
    }
    for (size_t b = 0; b < lens.size(); ++b) {
      HostBlockRef ref{kb[b].data(), vb[b].data(), lens[b]};
      ref.k_ld = ld[b];
      ref.v_tile = vt[b];
      if (select) {
        // An empty vector's data() may be null, and a null idx means "all rows".
        static const int32_t kNone = 0;
        ref.idx = idx[b].empty() ? &kNone : idx[b].data();
        ref.n_idx = static_cast<int32_t>(idx[b].size());
      }
      refs.push_back(ref);
    }
  }

  // Float64 attention of q [G, d] over the rows selected by refs (which may point into any of
  // this head's blocks, with or without idx): o [G, d], lse [G].
  void reference(const std::vector<float>& q, int32_t G, float scale,
                 std::span<const HostBlockRef> use, std::vector<double>* o,
                 std::vector<double>* lse) const {
    std::vector<const float*> krows, vrows;
    for (const HostBlockRef& r : use) {
      // Find the block (and row offset) this ref points into.
      for (size_t b = 0; b < kb.size(); ++b) {
        const char* k0 = kb[b].data();
        const char* kr = static_cast<const char*>(r.k);
        const ptrdiff_t off = kr - k0;
        if (off < 0 || off >= static_cast<ptrdiff_t>(kb[b].size())) continue;  // strictly inside
        const int64_t r0 = off / (ld[b] != 0 ? dtype_size(t) : d * dtype_size(t));
        for (int32_t i = 0; i < r.rows(); ++i) {
          const int64_t row = r0 + (r.idx != nullptr ? r.idx[i] : i);
          krows.push_back(kf[b].data() + row * d);
          vrows.push_back(vf[b].data() + row * d);
        }
        break;
      }
    }
    o->assign(static_cast<size_t>(G) * d, 0.0);
    lse->assign(static_cast<size_t>(G), -std::numeric_limits<double>::infinity());
    if (krows.empty()) return;
    std::vector<double> s(krows.size());
    for (int32_t g = 0; g < G; ++g) {
      double m = -std::numeric_limits<double>::infinity();
      for (size_t j = 0; j < krows.size(); ++j) {
        double acc = 0;
        for (int32_t c = 0; c < d; ++c)
          acc += static_cast<double>(q[static_cast<size_t>(g * d + c)]) * krows[j][c];
        s[j] = acc * scale;
        m = std::max(m, s[j]);
      }
      double sum = 0;
      for (size_t j = 0; j < krows.size(); ++j) {
        const double p = std::exp(s[j] - m);
        sum += p;
        for (int32_t c = 0; c < d; ++c) (*o)[static_cast<size_t>(g * d + c)] += p * vrows[j][c];
      }
      for (int32_t c = 0; c < d; ++c) (*o)[static_cast<size_t>(g * d + c)] /= sum;
      (*lse)[static_cast<size_t>(g)] = m + std::log(sum);
    }
  }
};

std::vector<float> random_q(int32_t G, int32_t d, std::mt19937& rng, float amp = 2.0f) {
  std::normal_distribution<float> n(0.0f, amp);
  std::vector<float> q(static_cast<size_t>(G) * d);
  for (float& x : q) x = n(rng);
  return q;
}

// Worst o-row error and lse error of (o, lse) against the reference.
struct Errors {
  double o = 0, lse = 0;
};
Errors compare(const float* o, const float* lse, const std::vector<double>& ro,
               const std::vector<double>& rl, int32_t G, int32_t d) {
  Errors e;
  for (int32_t g = 0; g < G; ++g) {
    double diff = 0, scale = 0;
    for (int32_t c = 0; c < d; ++c) {
      const double r = ro[static_cast<size_t>(g * d + c)];
      diff = std::max(diff, std::abs(o[g * d + c] - r));
      scale = std::max(scale, std::abs(r));
    }
    e.o = std::max(e.o, diff / std::max(scale, 1e-30));
    const double r = rl[static_cast<size_t>(g)];
    if (std::isinf(r)) {
      e.lse = std::max(e.lse, lse[g] == r ? 0.0 : 1.0);
    } else {
      e.lse = std::max(e.lse, std::abs(lse[g] - r) / std::max(1.0, std::abs(r)));
    }
  }
  return e;
}

// Runs host_attend_group over head.refs and checks it against the reference.
void check_kernel(const HeadKv& head, int32_t G, std::mt19937& rng, float q_amp = 2.0f) {
  const int32_t d = head.d;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const auto q = random_q(G, d, rng, q_amp);
  std::vector<float> o(static_cast<size_t>(G) * d, 123.0f), lse(static_cast<size_t>(G), 7.0f);
  host_attend_group(q.data(), G, d, scale, head.t, head.refs, o.data(), lse.data());
  std::vector<double> ro, rl;
  head.reference(q, G, scale, head.refs, &ro, &rl);
  const Errors e = compare(o.data(), lse.data(), ro, rl, G, d);
  INFO("dtype " << dtype_name(head.t) << " G=" << G << " d=" << d << " o err " << e.o << " lse err "
                << e.lse);
  CHECK(e.o < kTol);
  CHECK(e.lse < kTol);
}

}  // namespace

// The prefetch stream of the host kernel's passes: which lines, in which order, how many per tick.
TEST_CASE("LineStream: its rows' lines in order, every line or the first of every `every`") {
  alignas(64) static char buf[64 * 64];
  // Rows of 200 bytes: lines 0-3, 16-19 and 31-34 of buf (the last one starts mid-line).
  const void* rows[3] = {buf + 10, buf + 1024, buf + 2040};
  const auto lines_of = [&](int32_t every) {
    cpu::LineStream ls(rows, 3, 200, every);
    std::vector<int64_t> got;
    for (uintptr_t a; (a = ls.next_line()) != 0;)
      got.push_back(static_cast<int64_t>(a - reinterpret_cast<uintptr_t>(buf)) / 64);
    INFO("every " << every);
    CHECK(ls.lines() == 0);  // what is left
    return got;
  };
  CHECK(lines_of(1) == std::vector<int64_t>{0, 1, 2, 3, 16, 17, 18, 19, 31, 32, 33, 34});
  CHECK(lines_of(2) == std::vector<int64_t>{0, 2, 16, 18, 31, 33});
  CHECK(lines_of(3) == std::vector<int64_t>{0, 3, 16, 19, 31, 34});
  CHECK(lines_of(4) == std::vector<int64_t>{0, 16, 31});
  for (const int32_t every : {1, 2, 3, 4}) {
    cpu::LineStream ls(rows, 3, 200, every);
    CHECK(ls.lines() == 3 * ((4 + every - 1) / every));
  }
  // Paced: the lines spread evenly over the ticks, all of them issued by the last.
  cpu::LineStream ls(rows, 3, 200);
  ls.pace(4);  // 12 lines over 4 ticks: 3 per tick
  ls.tick_many();
  ls.tick_many();
  CHECK(ls.next_line() - reinterpret_cast<uintptr_t>(buf) == 16 * 64 + 64 * 2);
  // After i of n ticks, floor(i * lines / n) lines are issued (tick_many counts with the
  // quotient and remainder of lines / n and issues a row's run at a time), whatever the ratio.
  for (const int32_t every : {1, 2, 3, 4}) {
    const std::vector<int64_t> all = lines_of(every);
    const auto n_lines = static_cast<int64_t>(all.size());
    for (int64_t n = 1; n <= 2 * n_lines + 1; ++n)
      for (int64_t i = 0; i <= n; ++i) {
        cpu::LineStream t(rows, 3, 200, every);
        t.pace(n);
        for (int64_t k = 0; k < i; ++k) t.tick_many();
        const int64_t issued = i * n_lines / n;
        INFO("every " << every << ", " << n << " ticks, after " << i);
        const uintptr_t next = t.next_line();
        if (issued == n_lines)
          CHECK(next == 0);
        else
          CHECK(static_cast<int64_t>(next - reinterpret_cast<uintptr_t>(buf)) / 64 == all[issued]);
      }
  }
  cpu::LineStream sparse(rows, 3, 200, 2);
  sparse.pace(6);  // 6 prefetches over 6 ticks: one per tick
  for (int i = 0; i < 5; ++i) sparse.tick();
  CHECK(sparse.next_line() - reinterpret_cast<uintptr_t>(buf) == 33 * 64);
  CHECK(sparse.next_line() == 0);
  cpu::LineStream rest(rows, 3, 200, 4);
  rest.pace(100);
  rest.rest();
  CHECK(rest.next_line() == 0);
}

// Every ISA path the CPU supports (kernels/cpu/isa.h): avx2 always, AVX-512 passes where present.
TEST_CASE("host_attend_group matches float64 over dtypes, group sizes, head dims, selections") {
  const std::vector<std::vector<int32_t>> layouts = {
      {64, 64, 37},    // full blocks and a partial last block
      {5},             // less than one chunk
      {1, 16, 17, 3},  // chunks that straddle blocks
      {128, 100},      // blocks longer than one cols pass (64 rows)
  };
  using KLayout = HeadKv::KLayout;
  for (cpu::Isa isa : cpu::supported_isas()) {
    const cpu::ScopedIsa scoped(isa);
    INFO("isa " << cpu::isa_name(isa));
    std::mt19937 rng(1234);
    // 8, 24, 40 and 72: odd multiples of 8 (a masked half vector on the AVX-512 path).
    for (DType t : kKvTypes)
      for (int32_t d : {8, 16, 24, 32, 40, 64, 72, 128})
        for (int32_t G : {1, 2, 3, 4, 8})
          for (const auto& lens : layouts)
            for (bool select : {false, true})
              for (KLayout k : {KLayout::kRows, KLayout::kColumns, KLayout::kMixed,
                                KLayout::kColumnsTiles, KLayout::kMixedTiles}) {
                if (d % kVTile != 0 && (k == KLayout::kColumnsTiles || k == KLayout::kMixedTiles))
                  continue;  // the same as kColumns / kMixed
                INFO("K layout " << static_cast<int>(k) << " select " << select);
                const HeadKv head(t, d, lens, rng, select, 0.3, 0.0f, k);
                check_kernel(head, G, rng);
              }
  }
}

TEST_CASE("host_attend_group: more than 8 heads take several passes") {
  for (cpu::Isa isa : cpu::supported_isas()) {
    const cpu::ScopedIsa scoped(isa);
    INFO("isa " << cpu::isa_name(isa));
    std::mt19937 rng(99);
    for (int32_t G : {9, 12, 16})
      for (auto k :
           {HeadKv::KLayout::kRows, HeadKv::KLayout::kColumns, HeadKv::KLayout::kColumnsTiles}) {
        const HeadKv head(DType::kBF16, 64, {64, 40}, rng, false, 0.3, 0.0f, k);
        check_kernel(head, G, rng);
      }
  }
}

TEST_CASE("host_attend_group: a growing max rescales, large scores do not overflow") {
  for (cpu::Isa isa : cpu::supported_isas()) {
    const cpu::ScopedIsa scoped(isa);
    INFO("isa " << cpu::isa_name(isa));
    std::mt19937 rng(7);
    for (DType t : kKvTypes)
      for (auto k :
           {HeadKv::KLayout::kRows, HeadKv::KLayout::kColumns, HeadKv::KLayout::kColumnsTiles}) {
        const HeadKv growing(t, 64, {64, 64, 64, 64}, rng, false, 0.3, 0.02f, k);
        check_kernel(growing, 4, rng);
        const HeadKv plain(t, 128, {64, 64, 50}, rng, true, 0.5, 0.0f, k);
        check_kernel(plain, 2, rng, 40.0f);  // scores of several hundred
      }
  }
}

TEST_CASE("host_attend_group: no block, empty blocks, empty selection give the empty partial") {
  std::mt19937 rng(5);
  const int32_t G = 4, d = 64;
  const auto q = random_q(G, d, rng);
  HeadKv head(DType::kF16, d, {64, 10}, rng, true, 0.0);  // selection keeps nothing
  REQUIRE(head.refs[0].n_idx == 0);
  std::vector<HostBlockRef> zero_rows = {HostBlockRef{head.kb[0].data(), head.vb[0].data(), 0}};
  for (std::span<const HostBlockRef> blocks :
       {std::span<const HostBlockRef>(), std::span<const HostBlockRef>(head.refs),
        std::span<const HostBlockRef>(zero_rows)}) {
    std::vector<float> o(static_cast<size_t>(G) * d, 5.0f), lse(G, 1.0f);
    host_attend_group(q.data(), G, d, 0.125f, DType::kF16, blocks, o.data(), lse.data());
    for (float l : lse) CHECK(l == kNegInf);
    for (float x : o) CHECK(x == 0.0f);
  }
}

TEST_CASE("host_attend_group rejects bad arguments") {
  std::mt19937 rng(3);
  HeadKv head(DType::kF32, 64, {8}, rng, false);
  std::vector<float> q(64, 1.0f), o(64), lse(1);
  CHECK_THROWS_AS(
      host_attend_group(q.data(), 1, 60, 1.0f, DType::kF32, head.refs, o.data(), lse.data()),
      Error);
  CHECK_THROWS_AS(
      host_attend_group(q.data(), 1, 64, 1.0f, DType::kI32, head.refs, o.data(), lse.data()),
      Error);
  const int32_t bad_idx[] = {3, 8};
  HostBlockRef bad = head.refs[0];
  bad.idx = bad_idx;
  bad.n_idx = 2;
  CHECK_THROWS_AS(host_attend_group(q.data(), 1, 64, 1.0f, DType::kF32,
                                    std::span<const HostBlockRef>(&bad, 1), o.data(), lse.data()),
                  Error);
}

TEST_CASE("split and merge equals unsplit") {
  std::mt19937 rng(11);
  const int32_t G = 4, d = 64;
  const float scale = 0.125f;
  for (bool select : {false, true}) {
    const HeadKv head(DType::kBF16, d, {64, 64, 64, 64, 23}, rng, select, 0.5);
    const auto q = random_q(G, d, rng);
    std::vector<float> o(G * d), lse(G);
    host_attend_group(q.data(), G, d, scale, head.t, head.refs, o.data(), lse.data());
    // Blocks [0, 2) and [2, 5) separately, then merged; and an empty part merged in.
    std::vector<float> oa(G * d), la(G), ob(G * d), lb(G), oe(G * d), le(G);
    const std::span<const HostBlockRef> all(head.refs);
    host_attend_group(q.data(), G, d, scale, head.t, all.subspan(0, 2), oa.data(), la.data());
    host_attend_group(q.data(), G, d, scale, head.t, all.subspan(2), ob.data(), lb.data());
    host_attend_group(q.data(), G, d, scale, head.t, {}, oe.data(), le.data());
    for (int32_t g = 0; g < G; ++g) {
      merge_partial_row(oa.data() + g * d, &la[g], ob.data() + g * d, lb[g], d);
      merge_partial_row(oa.data() + g * d, &la[g], oe.data() + g * d, le[g], d);
    }
    for (int32_t g = 0; g < G; ++g) {
      CHECK(std::abs(la[g] - lse[g]) < 1e-5f * std::max(1.0f, std::abs(lse[g])));
      for (int32_t c = 0; c < d; ++c) CHECK(std::abs(oa[g * d + c] - o[g * d + c]) < 1e-5f);
    }
  }
}

// host_attend_groups only changes the order the blocks are read in: every call's o and lse are
// host_attend_group's bits, on every ISA path, with calls of different lengths, layouts, group
// sizes and selections, an empty call among them.
TEST_CASE("host_attend_groups: each call gives host_attend_group's bits") {
  using KLayout = HeadKv::KLayout;
  for (cpu::Isa isa : cpu::supported_isas()) {
    const cpu::ScopedIsa scoped(isa);
    INFO("isa " << cpu::isa_name(isa));
    std::mt19937 rng(77);
    const int32_t d = 64;
    const float scale = 0.125f;
    for (DType t : kKvTypes) {
      const std::vector<std::vector<int32_t>> lens = {{64, 64, 64}, {64, 64, 64},        {64, 20},
                                                      {},           {64, 64, 64, 64, 9}, {7}};
      const int32_t gs[] = {4, 4, 2, 4, 1, 8};
      const KLayout ks[] = {KLayout::kColumns, KLayout::kColumnsTiles, KLayout::kRows,
                            KLayout::kColumns, KLayout::kMixedTiles,   KLayout::kColumns};
      std::vector<HeadKv> heads;
      std::vector<std::vector<float>> qs, o1, l1, o2, l2;
      std::vector<HostGroupCall> calls;
      for (size_t i = 0; i < lens.size(); ++i) {
        heads.emplace_back(t, d, lens[i], rng, i == 2, 0.5, 0.0f, ks[i]);
        qs.push_back(random_q(gs[i], d, rng));
        o1.emplace_back(static_cast<size_t>(gs[i] * d), 1.0f);
        l1.emplace_back(static_cast<size_t>(gs[i]), 1.0f);
        o2.emplace_back(static_cast<size_t>(gs[i] * d), 2.0f);
        l2.emplace_back(static_cast<size_t>(gs[i]), 2.0f);
      }
      for (size_t i = 0; i < lens.size(); ++i) {
        calls.push_back({qs[i].data(), gs[i], heads[i].refs, o2[i].data(), l2[i].data()});
        host_attend_group(qs[i].data(), gs[i], d, scale, t, heads[i].refs, o1[i].data(),
                          l1[i].data());
      }
      host_attend_groups(d, scale, t, calls);
      for (size_t i = 0; i < lens.size(); ++i) {
        INFO("dtype " << dtype_name(t) << " call " << i);
        CHECK(std::memcmp(o1[i].data(), o2[i].data(), o1[i].size() * sizeof(float)) == 0);
        CHECK(std::memcmp(l1[i].data(), l2[i].data(), l1[i].size() * sizeof(float)) == 0);
        std::vector<double> ro, rl;
        heads[i].reference(qs[i], gs[i], scale, heads[i].refs, &ro, &rl);
        const Errors e = compare(o2[i].data(), l2[i].data(), ro, rl, gs[i], d);
        CHECK(e.o < kTol);
        CHECK(e.lse < kTol);
      }
    }
  }
}

// The KV heads of a sequence (HostAttnItem::seq) run as gangs: the same bits as each item alone.
TEST_CASE("HostAttention: a sequence's KV heads run together, each item's bits as alone") {
  std::mt19937 rng(41);
  const int32_t G = 4, d = 64, hkv = 4;
  const float scale = 0.125f;
  for (DType t : {DType::kF32, DType::kBF16}) {
    // 3 sequences of hkv heads, 2560 rows each: several parts per item on 2 threads.
    std::vector<HeadKv> heads;
    std::vector<std::vector<float>> qs;
    for (int i = 0; i < 3 * hkv; ++i) {
      heads.emplace_back(t, d, std::vector<int32_t>(40, 64), rng, i == 5, 0.6, 0.0f,
                         HeadKv::KLayout::kColumns);
      qs.push_back(random_q(G, d, rng));
    }
    const size_t n = heads.size(), gd = static_cast<size_t>(G) * d;
    for (int threads : {1, 2, 3}) {
      HostAttention ha(threads, d, scale, t);
      std::vector<float> o(n * gd, 5.0f), lse(n * G, 5.0f), oa(n * gd, 6.0f), la(n * G, 6.0f);
      std::vector<HostAttnItem> items;
      for (size_t i = 0; i < n; ++i)
        items.push_back({qs[i].data(), G, o.data() + i * gd, lse.data() + i * G, heads[i].refs,
                         static_cast<int64_t>(i / hkv)});
      ha.wait(ha.submit(std::move(items)));
      for (size_t i = 0; i < n; ++i)
        ha.wait(ha.submit(
            {HostAttnItem{qs[i].data(), G, oa.data() + i * gd, la.data() + i * G, heads[i].refs}}));
      INFO("dtype " << dtype_name(t) << " threads " << threads);
      CHECK(std::memcmp(o.data(), oa.data(), o.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(lse.data(), la.data(), lse.size() * sizeof(float)) == 0);
      for (size_t i = 0; i < n; ++i) {
        std::vector<double> ro, rl;
        heads[i].reference(qs[i], G, scale, heads[i].refs, &ro, &rl);
        const Errors e = compare(o.data() + i * gd, lse.data() + i * G, ro, rl, G, d);
        CHECK(e.o < kTol);
        CHECK(e.lse < kTol);
      }
    }
  }
}

TEST_CASE("HostAttention splits one long item across the cores and merges it exactly") {
  std::mt19937 rng(21);
  const int32_t G = 4;
  const float scale = 0.125f;
  for (DType t : kKvTypes)
    for (bool select : {false, true})
      for (auto k :
           {HeadKv::KLayout::kRows, HeadKv::KLayout::kColumns, HeadKv::KLayout::kColumnsTiles}) {
        // V by tiles: two tiles per row, so a cut inside a block moves into each tile.
        const int32_t d = k == HeadKv::KLayout::kColumnsTiles ? 128 : 64;
        // 8320 rows: several parts on 2+ threads, cut inside blocks (columns: at an element offset)
        const std::vector<int32_t> lens(130, 64);
        const HeadKv head(t, d, lens, rng, select, 0.7, 0.0f, k);
        const auto q = random_q(G, d, rng);
        for (int threads : {1, 2, 8}) {
          HostAttention ha(threads, d, scale, t);
          std::vector<float> o(G * d), lse(G);
          const auto ticket =
              ha.submit({HostAttnItem{q.data(), G, o.data(), lse.data(), head.refs}});
          ha.wait(ticket);
          std::vector<double> ro, rl;
          head.reference(q, G, scale, head.refs, &ro, &rl);
          const Errors e = compare(o.data(), lse.data(), ro, rl, G, d);
          INFO("dtype " << dtype_name(t) << " select " << select << " threads " << threads
                        << " K layout " << static_cast<int>(k));
          CHECK(e.o < kTol);
          CHECK(e.lse < kTol);
        }
      }
}

TEST_CASE("HostAttention: many items, many tickets in flight, waited out of order") {
  std::mt19937 rng(31);
  const int32_t d = 32;
  const float scale = 0.2f;
  const DType t = DType::kF16;
  // 300 (sequence, head) items of varied length, G and selection, in 6 batches.
  struct Work {
    HeadKv head;
    int32_t G;
    std::vector<float> q, o, lse;
  };
  std::vector<Work> work;
  std::uniform_int_distribution<int32_t> len(0, 200), gsel(0, 3);
  const int32_t gs[] = {1, 2, 4, 8};
  for (int i = 0; i < 300; ++i) {
    std::vector<int32_t> lens;
    for (int32_t left = len(rng); left > 0; left -= 64) lens.push_back(std::min(64, left));
    const int32_t G = gs[gsel(rng)];
    work.push_back({HeadKv(t, d, lens, rng, i % 3 == 0, 0.4), G, random_q(G, d, rng),
                    std::vector<float>(static_cast<size_t>(G) * d, 9.0f),
                    std::vector<float>(static_cast<size_t>(G), 9.0f)});
  }
  HostAttention ha(0, d, scale, t);
  std::atomic<int> callbacks{0};
  std::vector<HostAttention::Ticket> tickets;
  for (int b = 0; b < 6; ++b) {
    std::vector<HostAttnItem> items;
    for (int i = b * 50; i < (b + 1) * 50; ++i) {
      Work& w = work[static_cast<size_t>(i)];
      items.push_back({w.q.data(), w.G, w.o.data(), w.lse.data(), w.head.refs});
    }
    tickets.push_back(ha.submit(std::move(items), [&] { callbacks.fetch_add(1); }));
  }
  for (int b : {3, 0, 5, 1, 4, 2}) ha.wait(tickets[static_cast<size_t>(b)]);
  CHECK(callbacks.load() == 6);
  CHECK(ha.busy_seconds() > 0.0);
  CHECK_THROWS_AS(ha.wait(tickets[0]), Error);  // already waited
  double worst_o = 0, worst_l = 0;
  for (const Work& w : work) {
    std::vector<double> ro, rl;
    w.head.reference(w.q, w.G, scale, w.head.refs, &ro, &rl);
    const Errors e = compare(w.o.data(), w.lse.data(), ro, rl, w.G, d);
    worst_o = std::max(worst_o, e.o);
    worst_l = std::max(worst_l, e.lse);
  }
  INFO("worst o err " << worst_o << " lse err " << worst_l);
  CHECK(worst_o < kTol);
  CHECK(worst_l < kTol);
}

TEST_CASE("HostAttention: an error in a task is rethrown at wait, other batches are unharmed") {
  std::mt19937 rng(41);
  const int32_t G = 2, d = 16;
  const HeadKv head(DType::kF32, d, {64, 64}, rng, false);
  const auto q = random_q(G, d, rng);
  const int32_t bad_idx[] = {0, 70};  // 70 is outside the block
  HostBlockRef bad = head.refs[0];
  bad.idx = bad_idx;
  bad.n_idx = 2;
  HostAttention ha(2, d, 0.25f, DType::kF32);
  std::vector<float> o1(G * d), l1(G), o2(G * d), l2(G);
  const auto t_bad = ha.submit(
      {HostAttnItem{q.data(), G, o1.data(), l1.data(), std::span<const HostBlockRef>(&bad, 1)}});
  const auto t_good = ha.submit({HostAttnItem{q.data(), G, o2.data(), l2.data(), head.refs}});
  CHECK_THROWS_AS(ha.wait(t_bad), Error);
  ha.wait(t_good);
  std::vector<double> ro, rl;
  head.reference(q, G, 0.25f, head.refs, &ro, &rl);
  const Errors e = compare(o2.data(), l2.data(), ro, rl, G, d);
  CHECK(e.o < kTol);
  // Still usable after a failure; malformed items are refused at submit.
  const auto t_again = ha.submit({HostAttnItem{q.data(), G, o2.data(), l2.data(), head.refs}});
  ha.wait(t_again);
  CHECK_THROWS_AS(ha.submit({HostAttnItem{nullptr, G, o2.data(), l2.data(), head.refs}}), Error);
}

TEST_CASE("HostAttention: ready, empty batches, destruction with batches in flight") {
  std::mt19937 rng(51);
  const int32_t G = 8, d = 128;
  const HeadKv head(DType::kBF16, d, std::vector<int32_t>(64, 64), rng, false);
  const auto q = random_q(G, d, rng);
  std::vector<float> o(G * d), lse(G);
  {
    HostAttention ha(2, d, 0.088f, DType::kBF16);
    const auto empty = ha.submit({});
    ha.wait(empty);
    const auto t = ha.submit({HostAttnItem{q.data(), G, o.data(), lse.data(), head.refs}});
    ha.wait(t);
    const auto t2 = ha.submit({HostAttnItem{q.data(), G, o.data(), lse.data(), head.refs}});
    while (!ha.ready(t2)) std::this_thread::yield();
    ha.wait(t2);
    // Left in flight: the destructor waits for it.
    ha.submit({HostAttnItem{q.data(), G, o.data(), lse.data(), head.refs}});
  }
  std::vector<double> ro, rl;
  head.reference(q, G, 0.088f, head.refs, &ro, &rl);
  const Errors e = compare(o.data(), lse.data(), ro, rl, G, d);
  CHECK(e.o < kTol);
  CHECK(e.lse < kTol);
}

TEST_CASE("HostAttention: a start flag holds a batch back, on_done signals its end, cancel") {
  std::mt19937 rng(61);
  const int32_t G = 4, d = 32;
  const HeadKv head(DType::kF32, d, {64, 64, 17}, rng, false);
  const auto q = random_q(G, d, rng);
  std::vector<double> ro, rl;
  head.reference(q, G, 0.2f, head.refs, &ro, &rl);
  HostAttention ha(2, d, 0.2f, DType::kF32);
  // The query is written after the submit, then the flag raised, as a device does.
  std::vector<float> qbuf(q.size(), std::numeric_limits<float>::quiet_NaN()), o(G * d), lse(G);
  uint32_t start = 0, done = 0;
  const auto t = ha.submit(
      {HostAttnItem{qbuf.data(), G, o.data(), lse.data(), head.refs}},
      [&] { __atomic_store_n(&done, 1u, __ATOMIC_RELEASE); }, HostAttnStart{&start, 1});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK_FALSE(ha.ready(t));  // not started without its flag
  std::jthread device([&] {
    std::copy(q.begin(), q.end(), qbuf.begin());
    __atomic_store_n(&start, 1u, __ATOMIC_RELEASE);
  });
  while (__atomic_load_n(&done, __ATOMIC_ACQUIRE) == 0) std::this_thread::yield();  // on_done
  ha.wait(t);
  Errors e = compare(o.data(), lse.data(), ro, rl, G, d);
  CHECK(e.o < kTol);
  CHECK(e.lse < kTol);

  // Cancelled before its flag came: never run, its outputs NaN, on_done still runs.
  uint32_t never = 0;
  int callbacks = 0;
  const auto c = ha.submit(
      {HostAttnItem{q.data(), G, o.data(), lse.data(), head.refs}}, [&] { ++callbacks; },
      HostAttnStart{&never, 1});
  ha.cancel(c);
  CHECK(ha.ready(c));
  ha.wait(c);
  CHECK(callbacks == 1);
  CHECK(std::isnan(o[0]));
  CHECK(std::isnan(lse[G - 1]));

  // A failed batch's outputs are NaN too, before on_done runs.
  const int32_t bad_idx[] = {0, 70};  // 70 is outside the block
  HostBlockRef bad = head.refs[0];
  bad.idx = bad_idx;
  bad.n_idx = 2;
  std::vector<float> o2(G * d, 0.0f), l2(G, 0.0f);
  bool nan_at_done = false;
  const auto f = ha.submit(
      {HostAttnItem{q.data(), G, o2.data(), l2.data(), std::span<const HostBlockRef>(&bad, 1)}},
      [&] { nan_at_done = std::isnan(o2[0]) && std::isnan(l2[0]); });
  CHECK_THROWS_AS(ha.wait(f), Error);
  CHECK(nan_at_done);

  // Left waiting for a flag that never comes: the destructor finishes it without running it.
  {
    HostAttention h2(1, d, 0.2f, DType::kF32);
    callbacks = 0;
    h2.submit(
        {HostAttnItem{q.data(), G, o.data(), lse.data(), head.refs}}, [&] { ++callbacks; },
        HostAttnStart{&never, 1});
  }
  CHECK(callbacks == 1);
}
