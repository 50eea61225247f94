// Backend::attention_batch. On every backend at hand (CPU always; CUDA on a GPU or the
// emulator): the batch equals, bit for bit, the loop of attention / attention_paged / merge
// calls it replaces, rows no group covers keep their bytes, and groups that see no key are empty
// partials. CUDA equals CPU within test_cuda_kernels' attention tolerance. On the emulator, one
// call's kernel launches plus copies do not grow with the groups.
//
// Unlike the other test_cuda_* programs this one does not exit 4 without a CUDA device: its CPU
// checks run in every build (the CPU-only build too); the CUDA ones then pass with a warning.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/emulator.h"
#include "kernels/tensor.h"
#include "tests/batch_ops.h"

using namespace tandem;
using namespace tandem::test;

namespace {

constexpr double kTol32 = 1e-5;  // test_cuda_kernels' attention parity tolerance
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kSentinelO = 7.0f, kSentinelL = -3.0f;  // what rows no group covers keep

Buffer filled(std::initializer_list<int64_t> dims, float v) {
  Buffer b(DType::kF32, dims);
  std::fill_n(b.as<float>(), b.view().numel(), v);
  return b;
}

// ---- attention_batch ---------------------------------------------------------------------

// One segment on the host: its K/V (a span [t, Hkv, d], a pool of pages, or none: the step's
// own rows) and where it sits.
struct HostSeg {
  int64_t row0 = 0, rows = 0, t = 0, k_pos0 = 0;
  bool own = false;  // keys: rows [row0, row0 + rows) of the scenario's own k/v (f32)
  Buffer k, v;
  std::vector<int64_t> offsets;  // paged: element offsets of the pages in the pool
  int32_t page_rows = 0;
};

struct Scenario {
  int64_t n = 0, hq = 0, hkv = 0, d = 0;
  Buffer q, pos, own_k, own_v;
  std::vector<HostSeg> segs;
  std::vector<int64_t> empty_rows;  // rows whose groups see no key: lse -inf, o 0
  std::vector<int64_t> gap_rows;    // rows no group covers
};

// A group of `rows` query rows after `len` cached positions; kinds, one letter per segment in
// order: s sink (4 keys at 0), w window (3 pages of 16, the last ragged, at 4), W long window
// (40 pages of 64, the last of 20: splits), L long span (1200 keys ending 600 after the first
// query: splits, partly masked), x span with k bf16 and v f16, z no key, m keys after every
// query, o the step's own rows (causal).
struct GroupSpec {
  int64_t row0, rows;
  std::string kinds;
};

Scenario make_scenario(int64_t hq, int64_t hkv, int64_t d, DType kv, int64_t n,
                       const std::vector<GroupSpec>& groups, uint32_t seed) {
  Scenario sc;
  sc.n = n;
  sc.hq = hq;
  sc.hkv = hkv;
  sc.d = d;
  sc.q = random_buffer(DType::kF32, {n, hq, d}, seed++);
  sc.own_k = random_buffer(DType::kF32, {n, hkv, d}, seed++);
  sc.own_v = random_buffer(DType::kF32, {n, hkv, d}, seed++);
  sc.pos = Buffer::zeros(DType::kI32, {n});  // rows no group covers: position 0
  std::vector<bool> covered(static_cast<size_t>(n), false);
  std::mt19937 rng(seed);
  for (const GroupSpec& g : groups) {
    const int64_t len = g.kinds.find('W') != std::string::npos ? 2600 : 60;
    for (int64_t i = 0; i < g.rows; ++i) {
      sc.pos.as<int32_t>()[g.row0 + i] = static_cast<int32_t>(len + i);
      covered[static_cast<size_t>(g.row0 + i)] = true;
    }
    if (g.kinds.find_first_not_of("zm") == std::string::npos)
      for (int64_t i = 0; i < g.rows; ++i) sc.empty_rows.push_back(g.row0 + i);
    for (char kind : g.kinds) {
      HostSeg s;
      s.row0 = g.row0;
      s.rows = g.rows;
      auto span = [&](int64_t t, int64_t k_pos0, DType kt, DType vt) {
        s.t = t;
        s.k_pos0 = k_pos0;
        s.k = random_buffer(kt, {t, hkv, d}, seed++);
        s.v = random_buffer(vt, {t, hkv, d}, seed++);
      };
      auto paged = [&](int64_t pages, int32_t page_rows, int64_t last) {
        const int64_t pad = 3, page = page_rows + pad;  // pages of a pool, not packed
        s.t = (pages - 1) * page_rows + last;
        s.k_pos0 = 4;
        s.page_rows = page_rows;
        s.k = random_buffer(kv, {(pages + 2) * page, hkv, d}, seed++);
        s.v = random_buffer(kv, {(pages + 2) * page, hkv, d}, seed++);
        std::vector<int64_t> ids(static_cast<size_t>(pages + 2));
        for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
        std::shuffle(ids.begin(), ids.end(), rng);
        for (int64_t i = 0; i < pages; ++i)
          s.offsets.push_back(ids[static_cast<size_t>(i)] * page * hkv * d);
      };
      switch (kind) {
        case 's':
          span(4, 0, kv, kv);
          break;
        case 'w':
          paged(3, 16, 7);
          break;
        case 'W':
          paged(40, 64, 20);
          break;
        case 'L':
          span(1200, len - 600, kv, kv);
          break;
        case 'x':
          span(50, 0, DType::kBF16, DType::kF16);
          break;
        case 'z':
          span(0, 0, kv, kv);
          break;
        case 'm':
          span(30, len + g.rows + 10, kv, kv);
          break;
        case 'o':
          s.own = true;
          s.t = g.rows;
          s.k_pos0 = len;
          break;
        default:
          FAIL("unknown segment kind");
      }
      sc.segs.push_back(std::move(s));
    }
  }
  for (int64_t i = 0; i < n; ++i)
    if (!covered[static_cast<size_t>(i)]) sc.gap_rows.push_back(i);
  return sc;
}

// A scenario in one backend's memory, its segments viewing it.
struct OnBackend {
  Buffer q, pos, own_k, own_v;
  std::vector<Buffer> k, v;
  std::vector<AttnSegment> segs;
  std::vector<std::vector<int64_t>> offsets;  // what segs' pages point at
};

OnBackend place(Backend& be, const Scenario& sc) {
  OnBackend ob;
  ob.q = Buffer::upload(be, sc.q.view());
  ob.pos = Buffer::upload(be, sc.pos.view());
  ob.own_k = Buffer::upload(be, sc.own_k.view());
  ob.own_v = Buffer::upload(be, sc.own_v.view());
  for (const HostSeg& s : sc.segs) {
    ob.k.push_back(s.own ? Buffer() : Buffer::upload(be, s.k.view()));
    ob.v.push_back(s.own ? Buffer() : Buffer::upload(be, s.v.view()));
    ob.offsets.push_back(s.offsets);
  }
  for (size_t i = 0; i < sc.segs.size(); ++i) {
    const HostSeg& s = sc.segs[i];
    AttnSegment a;
    a.q_row0 = s.row0;
    a.q_rows = s.rows;
    a.k_pos0 = s.k_pos0;
    if (s.own) {
      a.k = ob.own_k.view().slice(s.row0, s.row0 + s.rows);
      a.v = ob.own_v.view().slice(s.row0, s.row0 + s.rows);
    } else {
      a.k = ob.k[i].view();
      a.v = ob.v[i].view();
      a.k.shape[0] = a.v.shape[0] = s.t;  // a pool: the span's T keys, as attention_paged takes
    }
    if (!s.offsets.empty())
      a.pages = KvPages{ob.offsets[i].data(), static_cast<int64_t>(s.offsets.size()), s.page_rows};
    ob.segs.push_back(a);
  }
  return ob;
}

struct Result {
  std::vector<uint8_t> o, lse;
};

struct Out {
  Buffer o, lse;
  Out(Backend& be, const Scenario& sc)
      : o(Buffer::upload(be, filled({sc.n, sc.hq, sc.d}, kSentinelO).view())),
        lse(Buffer::upload(be, filled({sc.n, sc.hq}, kSentinelL).view())) {}
  AttnPartial partial() const { return {o.view(), lse.view()}; }
  Result read(Backend& be) const { return {bytes_of(be, o.view()), bytes_of(be, lse.view())}; }
};

float scale_of(const Scenario& sc) { return 1.0f / std::sqrt(static_cast<float>(sc.d)); }

// attention_batch from copies of the segment and page arrays, scribbled over once it returns:
// the backend must not read them later.
Result run_batch(Backend& be, const OnBackend& ob, const Scenario& sc) {
  const Out out(be, sc);
  std::vector<AttnSegment> segs = ob.segs;
  std::vector<std::vector<int64_t>> offsets = ob.offsets;
  for (size_t i = 0; i < segs.size(); ++i)
    if (segs[i].pages.count > 0) segs[i].pages.offsets = offsets[i].data();
  be.attention_batch(ob.q.view(), ob.pos.view(), segs.data(), static_cast<int64_t>(segs.size()),
                     scale_of(sc), out.partial());
  for (AttnSegment& s : segs) s.k_pos0 = 1 << 30;
  for (std::vector<int64_t>& o : offsets) std::fill(o.begin(), o.end(), int64_t{-1} << 40);
  return out.read(be);
}

// The same segments as the single calls attention_batch replaces, later ones of a group
// computed into `scratch` ([n, Hq, d] / [n, Hq]).
void loop_calls(Backend& be, const OnBackend& ob, const Scenario& sc, const AttnPartial& out,
                const AttnPartial& scratch) {
  for (size_t i = 0; i < ob.segs.size(); ++i) {
    const AttnSegment& s = ob.segs[i];
    const bool first =
        i == 0 || ob.segs[i - 1].q_row0 != s.q_row0 || ob.segs[i - 1].q_rows != s.q_rows;
    if (s.q_rows == 0) continue;
    const int64_t r0 = s.q_row0, r1 = r0 + s.q_rows;
    const AttnPartial rows{out.o.slice(r0, r1), out.lse.slice(r0, r1)};
    const AttnPartial dst =
        first ? rows : AttnPartial{scratch.o.slice(0, s.q_rows), scratch.lse.slice(0, s.q_rows)};
    const TensorView q = ob.q.view().slice(r0, r1), pos = ob.pos.view().slice(r0, r1);
    if (s.pages.count == 0)
      be.attention(q, s.k, s.v, pos, s.k_pos0, scale_of(sc), dst);
    else
      be.attention_paged(q, s.k, s.v, s.pages, pos, s.k_pos0, scale_of(sc), dst);
    if (!first) be.merge(rows, dst);
  }
}

Buffer scratch_o(Backend& be, const Scenario& sc) {
  return Buffer(be, DType::kF32, {sc.n, sc.hq, sc.d});
}
Buffer scratch_lse(Backend& be, const Scenario& sc) {
  return Buffer(be, DType::kF32, {sc.n, sc.hq});
}

Result run_loop(Backend& be, const OnBackend& ob, const Scenario& sc) {
  const Out out(be, sc);
  const Buffer so = scratch_o(be, sc), sl = scratch_lse(be, sc);
  loop_calls(be, ob, sc, out.partial(), {so.view(), sl.view()});
  return out.read(be);
}

std::vector<float> as_floats(const std::vector<uint8_t>& raw) {
  std::vector<float> f(raw.size() / sizeof(float));
  std::memcpy(f.data(), raw.data(), raw.size());
  return f;
}

// The batch equals the loop bit for bit; gap rows keep the sentinel; rows that see no key are
// empty partials.
Result check_batch_equals_loop(Backend& be, const Scenario& sc) {
  INFO("backend " << be.name());
  const OnBackend ob = place(be, sc);
  const Result batch = run_batch(be, ob, sc), loop = run_loop(be, ob, sc);
  CHECK(first_diff(batch.o, loop.o) == -1);
  CHECK(first_diff(batch.lse, loop.lse) == -1);
  const std::vector<float> o = as_floats(batch.o), lse = as_floats(batch.lse);
  const size_t hd = static_cast<size_t>(sc.hq * sc.d), h = static_cast<size_t>(sc.hq);
  for (int64_t r : sc.gap_rows) {
    INFO("gap row " << r);
    const size_t i = static_cast<size_t>(r);
    CHECK(std::all_of(o.begin() + i * hd, o.begin() + (i + 1) * hd,
                      [](float x) { return x == kSentinelO; }));
    CHECK(std::all_of(lse.begin() + i * h, lse.begin() + (i + 1) * h,
                      [](float x) { return x == kSentinelL; }));
  }
  for (int64_t r : sc.empty_rows) {
    INFO("empty row " << r);
    const size_t i = static_cast<size_t>(r);
    CHECK(std::all_of(o.begin() + i * hd, o.begin() + (i + 1) * hd,
                      [](float x) { return x == 0.0f; }));
    CHECK(std::all_of(lse.begin() + i * h, lse.begin() + (i + 1) * h,
                      [](float x) { return x == -kInf; }));
  }
  return batch;
}

// max |got - ref| / max |ref| over finite entries; a NaN, or an infinity that differs, fails.
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

// Every kind of group: 1, 2 and 3 segments (sink, ragged paged window, causal own rows), long
// spans that split (alone and merged), a multi-row prefill group, empty and masked segments,
// a group of no rows, mixed k/v dtypes, and rows no group covers (4 and the last).
std::vector<GroupSpec> mixed_groups() {
  return {{0, 1, "swo"},   {1, 1, "sWo"},  {3, 1, "L"},     {2, 1, "o"},   {5, 0, "s"},
          {5, 16, "swLo"}, {21, 1, "zso"}, {22, 1, "sxzo"}, {23, 1, "mz"}, {24, 2, "mo"}};
}

void check_mixed(int64_t hq, int64_t hkv, int64_t d, DType kv, uint32_t seed) {
  INFO("Hq=" << hq << " Hkv=" << hkv << " d=" << d << " kv " << dtype_name(kv));
  const Scenario sc = make_scenario(hq, hkv, d, kv, 27, mixed_groups(), seed);
  const Result ref = check_batch_equals_loop(cpu(), sc);
  Backend* g = gpu();
  if (g == nullptr) {
    WARN("no CUDA device: the CUDA checks are skipped");
    return;
  }
  const Result got = check_batch_equals_loop(*g, sc);
  CHECK(rel_err(as_floats(got.o), as_floats(ref.o)) < kTol32);
  const std::vector<float> gl = as_floats(got.lse), cl = as_floats(ref.lse);
  for (size_t i = 0; i < cl.size(); ++i) {
    INFO("lse " << i << " cuda " << gl[i] << " cpu " << cl[i]);
    if (std::isinf(cl[i]))
      CHECK(gl[i] == cl[i]);
    else
      CHECK(std::abs(static_cast<double>(gl[i]) - cl[i]) <=
            kTol32 * std::max(1.0, std::abs(static_cast<double>(cl[i]))));
  }
}

}  // namespace

TEST_CASE("attention_batch equals the single calls, f32/f16/bf16 KV, GQA", "[attention_batch]") {
  uint32_t seed = 1000;
  for (DType kv : {DType::kF32, DType::kF16, DType::kBF16}) check_mixed(8, 2, 64, kv, seed += 100);
  // Two head groups per kv head (rep 7), d not a multiple of 32.
  check_mixed(14, 2, 80, DType::kBF16, seed += 100);
}

TEST_CASE("attention_batch: no segment, or only groups of no rows, writes nothing",
          "[attention_batch]") {
  for (Backend* be : {&cpu(), gpu()}) {
    if (be == nullptr) continue;
    const Scenario sc = make_scenario(4, 2, 32, DType::kF32, 3, {{1, 0, "s"}, {2, 0, "so"}}, 5);
    const OnBackend ob = place(*be, sc);
    const Result none = run_batch(*be, ob, sc);
    CHECK(as_floats(none.o) == std::vector<float>(static_cast<size_t>(3 * 4 * 32), kSentinelO));
    CHECK(as_floats(none.lse) == std::vector<float>(12, kSentinelL));
  }
}

TEST_CASE("attention_batch rejects overlapping groups and rows outside q", "[attention_batch]") {
  for (Backend* be : {&cpu(), gpu()}) {
    if (be == nullptr) continue;
    // Rows [0, 2) then [1, 2): two groups over row 1.
    const Scenario sc = make_scenario(4, 2, 32, DType::kF32, 2, {{0, 2, "s"}, {1, 1, "s"}}, 9);
    const OnBackend ob = place(*be, sc);
    const Out out(*be, sc);
    CHECK_THROWS(be->attention_batch(ob.q.view(), ob.pos.view(), ob.segs.data(), 2, scale_of(sc),
                                     out.partial()));
    std::vector<AttnSegment> past = {ob.segs[0]};
    past[0].q_row0 = 1;  // rows [1, 3) of 2
    CHECK_THROWS(be->attention_batch(ob.q.view(), ob.pos.view(), past.data(), 1, scale_of(sc),
                                     out.partial()));
  }
}

namespace {

int64_t launches_and_copies(const CudaEmulatorCounters& c) { return c.launches + c.copies; }

}  // namespace

TEST_CASE("attention_batch: launches and copies per call do not grow with the groups",
          "[attention_batch][emulated]") {
  Backend* g = gpu();
  if (g == nullptr || !cuda_is_emulated()) {
    WARN("not on the emulator: launch counts are not checked");
    return;
  }
  std::vector<int64_t> batch_counts, loop_counts;
  for (int64_t groups : {1, 8, 32}) {
    std::vector<GroupSpec> specs;
    for (int64_t i = 0; i < groups; ++i) specs.push_back({i, 1, "swo"});
    const Scenario sc = make_scenario(8, 2, 64, DType::kBF16, groups, specs, 77);
    const OnBackend ob = place(*g, sc);
    const Out out(*g, sc);
    const int64_t count = static_cast<int64_t>(ob.segs.size());
    g->synchronize();
    // Twice: the first call may grow the tables; the second is the steady state.
    for (int pass = 0; pass < 2; ++pass) {
      const CudaEmulatorCounters before = cuda_emulator_counters();
      g->attention_batch(ob.q.view(), ob.pos.view(), ob.segs.data(), count, scale_of(sc),
                         out.partial());
      g->synchronize();
      if (pass == 1) batch_counts.push_back(launches_and_copies(cuda_emulator_counters() - before));
    }
    const Buffer so = scratch_o(*g, sc), sl = scratch_lse(*g, sc);
    g->synchronize();
    const CudaEmulatorCounters before = cuda_emulator_counters();
    loop_calls(*g, ob, sc, out.partial(), {so.view(), sl.view()});
    g->synchronize();
    loop_counts.push_back(launches_and_copies(cuda_emulator_counters() - before));
    std::printf(
        "attention_batch, %lld groups of sink+window+own: %lld launches+copies per call "
        "(the single calls: %lld)\n",
        static_cast<long long>(groups), static_cast<long long>(batch_counts.back()),
        static_cast<long long>(loop_counts.back()));
  }
  CHECK(batch_counts[0] == 3);  // the table upload, the attention, the combine
  CHECK(batch_counts[1] == batch_counts[0]);
  CHECK(batch_counts[2] == batch_counts[0]);
  CHECK(loop_counts[2] > loop_counts[1]);
}
