// The selection policies of the hybrid store (kvstore/selection.h) against brute-force
// references over the same host blocks: full takes every entry, topk the k blocks of largest
// Quest bound (which bounds every q.k of its block), hgca every entry above the threshold. First,
// the host K layout they read (by channel) through BlockAccess and HostHead::ref.
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "kernels/cpu/host_kernel.h"
#include "kvstore/block_access.h"
#include "kvstore/selection.h"

using namespace tandem;

namespace {

struct HostBlocksFixture {
  static constexpr int32_t kBlock = 8, kHkv = 2, kD = 16, kG = 3;
  BlockLayout layout{kBlock, kHkv, kD, DType::kF32};
  BlockPool device{layout.dev_bytes(), 4, false, MemoryKind::kHost};
  BlockPool host{layout.host_bytes(), 4, true, MemoryKind::kHost};
  BlockAccess blocks{device, host, layout};
  LayerTable table;
  std::vector<const float*> maw;  // per host block: its MAW values (table.maw)
  std::mt19937 rng{3};

  // `tokens` host tokens in blocks of kBlock, random keys, values and MAW, digests as the store
  // keeps them.
  explicit HostBlocksFixture(int32_t tokens) {
    std::normal_distribution<float> nd;
    std::uniform_real_distribution<float> ud(0, 0.2f);
    for (int32_t t = 0; t < tokens; ++t) {
      if (t % kBlock == 0) {
        const int32_t id = host.alloc();
        std::fill_n(blocks.host_kmin(id), kHkv * kD, std::numeric_limits<float>::infinity());
        std::fill_n(blocks.host_kmax(id), kHkv * kD, -std::numeric_limits<float>::infinity());
        table.host.push_back(id);
        table.maw.push_back(std::make_unique<float[]>(kHkv * kBlock));
        maw.push_back(table.maw.back().get());
      }
      const int32_t id = table.host.back(), slot = t % kBlock;
      for (int32_t g = 0; g < kHkv; ++g) {
        std::array<float, kD> k;
        for (int32_t c = 0; c < kD; ++c) k[c] = nd(rng);
        blocks.write_host_k_row(id, g, slot, k.data());
        digest_add(blocks.host_kmin(id) + g * kD, blocks.host_kmax(id) + g * kD, k.data(), kD);
        table.maw.back()[g * kBlock + slot] = ud(rng);
      }
      ++table.host_tokens;
    }
  }
  // The stored key of a row.
  std::array<float, kD> key(int32_t id, int32_t g, int32_t slot) const {
    std::array<float, kD> k;
    blocks.read_host_k_row(id, g, slot, k.data());
    return k;
  }
  // Where a block's refs for head g point K (its columns).
  const void* head_k(int32_t id, int32_t g) const { return blocks.host_k_head(id, g); }
};

// Element i of a KV array of dtype t, as f32.
float kv_elem(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::kF16:
      return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::kBF16:
      return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

// x as a KV array of dtype t stores it.
float as_stored(float x, DType t) {
  switch (t) {
    case DType::kF16:
      return f16_to_f32(f32_to_f16(x));
    case DType::kBF16:
      return bf16_to_f32(f32_to_bf16(x));
    default:
      return x;
  }
}

// Random rows written to blocks ids[1], ids[0] of a layout, last to first (so each scattered
// write must leave its neighbours alone), rows(j) rows of block j, by write(id, g, t, row f32);
// want(j, g, t, c) is the value stored.
struct WrittenRows {
  int32_t hkv, b, d;
  std::vector<float> values;
  template <class Rows, class Write>
  WrittenRows(const BlockLayout& layout, const std::vector<int32_t>& ids, std::mt19937& rng,
              Rows rows, Write write)
      : hkv(layout.n_head_kv),
        b(layout.tokens),
        d(layout.head_dim),
        values(static_cast<size_t>(2 * hkv * b * d), 0.0f) {
    std::normal_distribution<float> nd;
    std::vector<float> row(static_cast<size_t>(d));
    for (int32_t j = 1; j >= 0; --j)
      for (int32_t t = rows(j) - 1; t >= 0; --t)
        for (int32_t g = hkv - 1; g >= 0; --g) {
          for (int32_t c = 0; c < d; ++c) {
            row[static_cast<size_t>(c)] = nd(rng);
            want(j, g, t, c) = as_stored(row[static_cast<size_t>(c)], layout.dtype);
          }
          write(ids[static_cast<size_t>(j)], g, t, row.data());
        }
  }
  float& want(int32_t j, int32_t g, int32_t t, int32_t c) {
    return values[static_cast<size_t>(((j * hkv + g) * b + t) * d + c)];
  }
};

}  // namespace

// Host V is stored by tiles of kVTile channels per head ([Hkv, d / kVTile, tokens, kVTile]) where
// head_dim is a larger multiple of kVTile, else by rows (kvstore/block_table.h); its accessors
// convert rows both ways and give the row layout back, and the refs address the tiles
// (HostBlockRef::v_tile) with the host kernel attending them as it attends V by rows.
TEST_CASE("host V by tiles: row writes and reads, the row layout, the refs", "[selection]") {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (int32_t d : {128, 192, 72, 64}) {
      const bool tiled = d % kVTile == 0 && d > kVTile;
      constexpr int32_t b = 5, hkv = 3;
      const BlockLayout layout{b, hkv, d, dt};
      REQUIRE(layout.host_v_tiled() == tiled);
      BlockPool device{layout.dev_bytes(), 1, false, MemoryKind::kHost};
      BlockPool host{layout.host_bytes(), 2, true, MemoryKind::kHost};
      const BlockAccess blocks{device, host, layout};
      const std::vector<int32_t> ids = {host.alloc(), host.alloc()};
      const int32_t host_tokens = b + 2;
      const int64_t kv_bytes = layout.dev_kv_bytes();
      for (int32_t id : ids) std::memset(blocks.host_k(id), 0xcd, static_cast<size_t>(kv_bytes));
      std::mt19937 rng(11);
      std::normal_distribution<float> nd;
      WrittenRows written(
          layout, ids, rng, [&](int32_t) { return b; },
          [&](int32_t id, int32_t g, int32_t t, const float* r) {
            blocks.write_host_v_row(id, g, t, r);
          });
      auto wanted = [&](int32_t j, int32_t g, int32_t t, int32_t c) {
        return written.want(j, g, t, c);
      };
      std::vector<float> row(static_cast<size_t>(d)), krow(row.size());
      std::vector<uint8_t> rows_layout(static_cast<size_t>(kv_bytes));
      for (int32_t j = 0; j < 2; ++j) {
        const int32_t id = ids[static_cast<size_t>(j)];
        blocks.host_v_as_rows(id, rows_layout.data());
        for (int32_t g = 0; g < hkv; ++g)
          for (int32_t t = 0; t < b; ++t) {
            blocks.read_host_v_row(id, g, t, row.data());
            for (int32_t c = 0; c < d; ++c) {
              INFO(dtype_name(dt) << " d " << d << " block " << j << " head " << g << " row " << t
                                  << " ch " << c);
              const float w = wanted(j, g, t, c);
              REQUIRE(row[static_cast<size_t>(c)] == w);
              const int64_t at = tiled ? (int64_t{g} * (d / kVTile) + c / kVTile) * b * kVTile +
                                             int64_t{t} * kVTile + c % kVTile
                                       : (int64_t{g} * b + t) * d + c;
              REQUIRE(blocks.host_v_elem(g, t, c) == at);
              REQUIRE(kv_elem(blocks.host_v(id), dt, at) == w);
              REQUIRE(kv_elem(rows_layout.data(), dt, (int64_t{g} * b + t) * d + c) == w);
            }
          }
        // K is left alone by the V writes.
        const uint8_t* k = blocks.host_k(id);
        CHECK(std::all_of(k, k + kv_bytes, [](uint8_t x) { return x == 0xcd; }));
      }
      // The refs, and the host kernel over them against float64 attention of the stored rows.
      for (int32_t j = 0; j < 2; ++j)
        for (int32_t g = 0; g < hkv; ++g)
          for (int32_t t = 0; t < b; ++t) {
            for (int32_t c = 0; c < d; ++c) krow[static_cast<size_t>(c)] = nd(rng);
            blocks.write_host_k_row(ids[static_cast<size_t>(j)], g, t, krow.data());
          }
      constexpr int32_t G = 2;
      std::vector<float> q(static_cast<size_t>(G * d));
      for (float& x : q) x = nd(rng);
      const float scale = 0.125f;
      for (int32_t g = 0; g < hkv; ++g) {
        const HostHead h{ids, host_tokens, blocks, g};
        std::vector<HostBlockRef> refs;
        select_full(h, refs);
        REQUIRE(refs.size() == 2);
        CHECK(refs[0].v_tile == (tiled ? int64_t{b} * kVTile : 0));
        CHECK(refs[0].v == blocks.host_v(ids[0]) + blocks.host_v_elem(g, 0, 0) * dtype_size(dt));
        std::vector<float> o(static_cast<size_t>(G * d)), lse(G);
        host_attend_group(q.data(), G, d, scale, dt, refs, o.data(), lse.data());
        for (int32_t qg = 0; qg < G; ++qg) {
          std::vector<double> sc;
          double m = -std::numeric_limits<double>::infinity();
          for (int32_t p = 0; p < host_tokens; ++p) {
            blocks.read_host_k_row(ids[static_cast<size_t>(p / b)], g, p % b, krow.data());
            double a = 0;
            for (int32_t c = 0; c < d; ++c)
              a += double{q[static_cast<size_t>(qg * d + c)]} * krow[static_cast<size_t>(c)];
            sc.push_back(a * scale);
            m = std::max(m, sc.back());
          }
          double sum = 0;
          std::vector<double> acc(static_cast<size_t>(d), 0.0);
          for (int32_t p = 0; p < host_tokens; ++p) {
            const double w = std::exp(sc[static_cast<size_t>(p)] - m);
            sum += w;
            for (int32_t c = 0; c < d; ++c)
              acc[static_cast<size_t>(c)] += w * wanted(p / b, g, p % b, c);
          }
          INFO(dtype_name(dt) << " d " << d << " head " << g << " q " << qg);
          CHECK(std::abs(lse[static_cast<size_t>(qg)] - (m + std::log(sum))) < 1e-5);
          for (int32_t c = 0; c < d; ++c)
            CHECK(std::abs(o[static_cast<size_t>(qg * d + c)] - acc[static_cast<size_t>(c)] / sum) <
                  1e-5);
        }
      }
    }
}

// Host K is stored by channel per head ([Hkv, d, tokens], kvstore/block_table.h); its accessors
// convert rows both ways, give the row layout [Hkv, tokens, d] back, and the policies' refs
// address the columns (element (i, c) at k[c * k_ld + i]).
TEST_CASE("host K by channel: row writes and reads, the row layout, the refs", "[selection]") {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    // An odd block, and more channels than the accessors convert at a time (64).
    constexpr int32_t b = 5, hkv = 3, d = 70;
    const BlockLayout layout{b, hkv, d, dt};
    BlockPool device{layout.dev_bytes(), 1, false, MemoryKind::kHost};
    BlockPool host{layout.host_bytes(), 2, true, MemoryKind::kHost};
    const BlockAccess blocks{device, host, layout};
    const std::vector<int32_t> ids = {host.alloc(), host.alloc()};
    const int32_t host_tokens = b + 3;  // the second block holds 3 rows
    const int64_t es = dtype_size(dt), kv_bytes = layout.dev_kv_bytes();
    CHECK(layout.host_bytes() == 2 * kv_bytes + 2 * int64_t{hkv} * d * 4);  // as before
    for (int32_t id : ids) std::memset(blocks.host_v(id), 0xab, static_cast<size_t>(kv_bytes));
    std::mt19937 rng(7);
    WrittenRows written(
        layout, ids, rng, [&](int32_t j) { return std::min(b, host_tokens - j * b); },
        [&](int32_t id, int32_t g, int32_t t, const float* r) {
          blocks.write_host_k_row(id, g, t, r);
        });
    auto wanted = [&](int32_t j, int32_t g, int32_t t, int32_t c) {
      return written.want(j, g, t, c);
    };
    std::vector<float> row(d);
    std::vector<uint8_t> rows_layout(static_cast<size_t>(kv_bytes));
    for (int32_t j = 0; j < 2; ++j) {
      const int32_t id = ids[static_cast<size_t>(j)], n = std::min(b, host_tokens - j * b);
      blocks.host_k_as_rows(id, rows_layout.data());
      for (int32_t g = 0; g < hkv; ++g)
        for (int32_t t = 0; t < n; ++t) {
          blocks.read_host_k_row(id, g, t, row.data());
          for (int32_t c = 0; c < d; ++c) {
            INFO(dtype_name(dt) << " block " << j << " head " << g << " row " << t << " ch " << c);
            const float w = wanted(j, g, t, c);
            REQUIRE(row[static_cast<size_t>(c)] == w);
            REQUIRE(blocks.host_k_elem(g, t, c) == (int64_t{g} * d + c) * b + t);
            REQUIRE(kv_elem(blocks.host_k(id), dt, blocks.host_k_elem(g, t, c)) == w);
            REQUIRE(kv_elem(rows_layout.data(), dt, (int64_t{g} * b + t) * d + c) == w);
          }
        }
      // V is left alone by the K writes.
      const uint8_t* v = blocks.host_v(id);
      CHECK(std::all_of(v, v + kv_bytes, [](uint8_t x) { return x == 0xab; }));
    }
    for (int32_t g = 0; g < hkv; ++g) {
      const HostHead h{ids, host_tokens, blocks, g};
      for (int32_t j = 0; j < 2; ++j) {
        const int32_t id = ids[static_cast<size_t>(j)];
        const HostBlockRef r = h.ref(j);
        CHECK(r.k_ld == b);
        CHECK(r.n == std::min(b, host_tokens - j * b));
        CHECK(r.v == blocks.host_v(id) + int64_t{g} * b * d * es);  // head g's V
        CHECK(r.v_tile == 0);                                       // d 70: by rows
        for (int32_t i = 0; i < r.n; ++i)
          for (int32_t c = 0; c < d; ++c) {
            INFO(dtype_name(dt) << " block " << j << " head " << g << " row " << i << " ch " << c);
            REQUIRE(kv_elem(r.k, dt, c * r.k_ld + i) == wanted(j, g, i, c));
          }
      }
    }
  }
}

TEST_CASE("full selects every host entry in order", "[selection]") {
  HostBlocksFixture f(29);  // 3 full blocks and a partial one
  for (int32_t g = 0; g < f.kHkv; ++g) {
    std::vector<HostBlockRef> refs;
    CHECK(select_full(HostHead{f.table.host, f.table.host_tokens, f.blocks, g}, refs) == 29);
    REQUIRE(refs.size() == 4);
    for (size_t j = 0; j < refs.size(); ++j) {
      CHECK(refs[j].k == f.head_k(f.table.host[j], g));
      CHECK(refs[j].k_ld == f.kBlock);
      CHECK(refs[j].n == (j < 3 ? 8 : 5));
      CHECK(refs[j].idx == nullptr);
    }
  }
}

TEST_CASE("topk selects the blocks of largest Quest bound, which bounds every score",
          "[selection]") {
  HostBlocksFixture f(61);
  std::normal_distribution<float> nd;
  for (int trial = 0; trial < 20; ++trial)
    for (int32_t g = 0; g < f.kHkv; ++g)
      for (int32_t k : {0, 1, 3, 8, 20}) {
        std::vector<float> q(f.kG * f.kD);
        for (float& x : q) x = nd(f.rng);
        // Brute force: the bound from the raw keys, and the bound property.
        std::vector<std::pair<float, int32_t>> bounds;
        for (size_t j = 0; j < f.table.host.size(); ++j) {
          const int32_t id = f.table.host[j];
          const int32_t rows = std::min(8, f.table.host_tokens - static_cast<int32_t>(j) * 8);
          float bound = 0, best = -std::numeric_limits<float>::infinity();
          for (int32_t h = 0; h < f.kG; ++h)
            for (int32_t c = 0; c < f.kD; ++c) {
              float lo = std::numeric_limits<float>::infinity(), hi = -lo;
              for (int32_t t = 0; t < rows; ++t) {
                lo = std::min(lo, f.key(id, g, t)[c]);
                hi = std::max(hi, f.key(id, g, t)[c]);
              }
              bound += std::max(q[h * f.kD + c] * lo, q[h * f.kD + c] * hi);
            }
          for (int32_t t = 0; t < rows; ++t) {
            float s = 0;  // summed over the group, as the bound is
            for (int32_t h = 0; h < f.kG; ++h)
              for (int32_t c = 0; c < f.kD; ++c) s += q[h * f.kD + c] * f.key(id, g, t)[c];
            best = std::max(best, s);
          }
          CHECK(best <= bound + 1e-4f);
          bounds.emplace_back(bound, static_cast<int32_t>(j));
        }
        std::sort(bounds.begin(), bounds.end(), [](const auto& a, const auto& b) {
          return a.first > b.first || (a.first == b.first && a.second < b.second);
        });
        std::vector<int32_t> want;
        for (size_t j = 0; j < std::min<size_t>(static_cast<size_t>(k), bounds.size()); ++j)
          want.push_back(bounds[j].second);
        std::sort(want.begin(), want.end());
        std::vector<HostBlockRef> refs;
        const int64_t rows = select_topk(HostHead{f.table.host, f.table.host_tokens, f.blocks, g},
                                         q.data(), f.kG, k, refs);
        std::vector<int32_t> got;
        int64_t want_rows = 0;
        for (const HostBlockRef& r : refs)
          for (size_t j = 0; j < f.table.host.size(); ++j)
            if (r.k == f.head_k(f.table.host[j], g)) got.push_back(static_cast<int32_t>(j));
        for (int32_t j : want) want_rows += std::min(8, 61 - j * 8);
        CHECK(got == want);
        CHECK(rows == want_rows);
      }
}

TEST_CASE("hgca selects exactly the entries above the threshold", "[selection]") {
  HostBlocksFixture f(45);
  for (float threshold : {-1.0f, 0.0f, 0.05f, 0.1f, 0.19f, 1.0f})
    for (int32_t g = 0; g < f.kHkv; ++g) {
      std::vector<std::pair<int32_t, int32_t>> want;  // (block, row)
      for (size_t j = 0; j < f.table.host.size(); ++j)
        for (int32_t t = 0; t < std::min(8, 45 - static_cast<int32_t>(j) * 8); ++t)
          if (f.table.maw[j][g * 8 + t] > threshold) want.emplace_back(static_cast<int32_t>(j), t);
      std::vector<HostBlockRef> refs;
      std::vector<int32_t> idx;
      const int64_t rows = select_hgca(
          HostHead{f.table.host, f.table.host_tokens, f.blocks, g, f.maw}, threshold, refs, idx);
      std::vector<std::pair<int32_t, int32_t>> got;
      for (const HostBlockRef& r : refs) {
        REQUIRE(r.idx != nullptr);
        CHECK(r.n_idx > 0);  // blocks with nothing selected are left out
        for (size_t j = 0; j < f.table.host.size(); ++j)
          if (r.k == f.head_k(f.table.host[j], g))
            for (int32_t i = 0; i < r.n_idx; ++i)
              got.emplace_back(static_cast<int32_t>(j), r.idx[i]);
      }
      CHECK(got == want);
      CHECK(rows == static_cast<int64_t>(want.size()));
    }
}

TEST_CASE("tau selects the fewest entries whose attention mass reaches tau (float64 reference)",
          "[selection][tau]") {
  HostBlocksFixture f(45);  // 5 full blocks and a partial one
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const float scale = 0.6f;
  for (int trial = 0; trial < 4; ++trial)
    for (float tau : {0.3f, 0.5f, 0.9f, 0.99f, 1.0f})
      for (int32_t g = 0; g < f.kHkv; ++g) {
        std::vector<float> q(static_cast<size_t>(f.kG * f.kD));
        for (float& x : q) x = nd(f.rng);
        // The reference: float64 softmax of each query head over every host entry, averaged.
        std::vector<std::pair<double, int32_t>> mass;  // (mass, position)
        std::vector<double> m(45, 0.0);
        for (int32_t h = 0; h < f.kG; ++h) {
          std::vector<double> z(45);
          double top = -1e300, sum = 0;
          for (int32_t p = 0; p < 45; ++p) {
            const auto k = f.key(f.table.host[static_cast<size_t>(p / 8)], g, p % 8);
            double dot = 0;
            for (int32_t c = 0; c < f.kD; ++c) dot += double(q[h * f.kD + c]) * k[c];
            z[p] = scale * dot;
            top = std::max(top, z[p]);
          }
          for (double v : z) sum += std::exp(v - top);
          for (int32_t p = 0; p < 45; ++p) m[p] += std::exp(z[p] - top) / sum / f.kG;
        }
        for (int32_t p = 0; p < 45; ++p) mass.emplace_back(m[p], p);
        std::sort(mass.begin(), mass.end(),
                  [](const auto& a, const auto& b) { return a.first > b.first; });
        std::vector<int32_t> want;
        double acc = 0;
        for (const auto& [w, p] : mass) {
          if (acc >= tau) break;
          acc += w;
          want.push_back(p);
        }
        std::sort(want.begin(), want.end());
        std::vector<HostBlockRef> refs;
        std::vector<int32_t> idx;
        idx.reserve(64);
        const int64_t rows = select_tau(HostHead{f.table.host, f.table.host_tokens, f.blocks, g},
                                        q.data(), f.kG, scale, tau, refs, idx);
        std::vector<int32_t> got;
        for (const HostBlockRef& r : refs) {
          REQUIRE(r.idx != nullptr);
          for (size_t j = 0; j < f.table.host.size(); ++j)
            if (r.k == f.head_k(f.table.host[j], g))
              for (int32_t i = 0; i < r.n_idx; ++i)
                got.push_back(static_cast<int32_t>(j) * 8 + r.idx[i]);
        }
        INFO("tau " << tau << " head " << g);
        CHECK(got == want);
        CHECK(rows == static_cast<int64_t>(want.size()));
        if (tau == 1.0f) CHECK(rows >= 44);  // all, but for rounding of the last sliver
      }
}
