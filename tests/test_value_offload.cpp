// Value offload (--value-offload, HCAttention §3.1-3.2, Eq. 2-5) against brute-force float64
// references: the key codes (|k - dequantised| <= step / 2 at 8 and 4 bits, constant channels
// exact), the approximate scores of a block, the selection over them (Eq. 4 with approximate
// scores, or every entry), and the weighted-value kernel (o = softmax(s) V, lse = logsumexp(s))
// on every ISA path the CPU supports, directly and through HostAttention's split items.
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "cpu_attn/host_attention.h"
#include "kernels/cpu/host_kernel.h"
#include "kernels/cpu/isa.h"
#include "kvstore/block_access.h"
#include "kvstore/key_quant.h"
#include "kvstore/selection.h"

using namespace tandem;

namespace {

// Host blocks with key codes, filled as the store fills them: rows written, digests widened, then
// each block's rows coded over its final digest.
struct CodedBlocks {
  static constexpr int32_t kBlock = 8, kHkv = 2, kD = 16, kG = 3;
  BlockLayout layout;
  BlockPool device, host;
  BlockAccess blocks;
  LayerTable table;
  std::mt19937 rng{5};

  CodedBlocks(int32_t tokens, int32_t bits)
      : layout{kBlock, kHkv, kD, DType::kF32, bits},
        device(layout.dev_bytes(), 4, false, MemoryKind::kHost),
        host(layout.host_bytes(), 4, true, MemoryKind::kHost),
        blocks{device, host, layout} {
    std::normal_distribution<float> nd;
    for (int32_t t = 0; t < tokens; ++t) {
      if (t % kBlock == 0) {
        const int32_t id = host.alloc();
        std::fill_n(blocks.host_kmin(id), kHkv * kD, std::numeric_limits<float>::infinity());
        std::fill_n(blocks.host_kmax(id), kHkv * kD, -std::numeric_limits<float>::infinity());
        table.host.push_back(id);
      }
      const int32_t id = table.host.back(), slot = t % kBlock;
      for (int32_t g = 0; g < kHkv; ++g) {
        std::array<float, kD> k;
        float* v = value(id, g, slot);
        for (int32_t c = 0; c < kD; ++c) k[c] = nd(rng), v[c] = nd(rng);
        k[3] = 0.25f;  // a constant channel: step 0, every code 0, exact
        blocks.write_host_k_row(id, g, slot, k.data());
        digest_add(blocks.host_kmin(id) + g * kD, blocks.host_kmax(id) + g * kD, k.data(), kD);
      }
      ++table.host_tokens;
    }
    for (size_t j = 0; j < table.host.size(); ++j) {
      const int32_t id = table.host[j];
      const int32_t rows = std::min(kBlock, tokens - static_cast<int32_t>(j) * kBlock);
      for (int32_t g = 0; g < kHkv; ++g)
        for (int32_t t = 0; t < rows; ++t)
          quantize_row(key(id, g, t).data(), blocks.host_kmin(id) + g * kD,
                       blocks.host_kmax(id) + g * kD, kD, bits,
                       blocks.host_codes(id, g) + t * layout.code_row_bytes());
    }
  }
  // The stored key of a row.
  std::array<float, kD> key(int32_t id, int32_t g, int32_t slot) const {
    std::array<float, kD> k;
    blocks.read_host_k_row(id, g, slot, k.data());
    return k;
  }
  float* value(int32_t id, int32_t g, int32_t slot) const {
    return reinterpret_cast<float*>(blocks.host_v(id)) + (int64_t{g} * kBlock + slot) * kD;
  }
  HostHead head(int32_t g) const { return HostHead{table.host, table.host_tokens, blocks, g}; }
  // The dequantised key of host position p, head g, in float64 from the codes.
  std::vector<double> deq(int32_t g, int32_t p) const {
    const int32_t id = table.host[static_cast<size_t>(p / kBlock)];
    const float* kmin = blocks.host_kmin(id) + g * kD;
    const float* kmax = blocks.host_kmax(id) + g * kD;
    const uint8_t* code = blocks.host_codes(id, g) + (p % kBlock) * layout.code_row_bytes();
    std::vector<double> out(kD);
    const double levels = double((1 << layout.key_bits) - 1);
    for (int32_t c = 0; c < kD; ++c)
      out[c] = double(kmin[c]) +
               code_of(code, c, layout.key_bits) * (double(kmax[c]) - double(kmin[c])) / levels;
    return out;
  }
};

std::vector<float> random_q(int32_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(n));
  for (float& x : q) x = nd(rng);
  return q;
}

}  // namespace

TEST_CASE("key codes: |k - dequantised| <= step / 2 at 8 and 4 bits, constant channels exact",
          "[value-offload]") {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (int32_t bits : {8, 4}) {
    const int32_t d = 32;
    for (int trial = 0; trial < 50; ++trial) {
      // A block of 16 rows: its per-channel range, as the digest holds it.
      std::vector<float> rows(16 * d), kmin(d, 1e30f), kmax(d, -1e30f);
      for (int32_t r = 0; r < 16; ++r)
        for (int32_t c = 0; c < d; ++c) {
          const float x = c == 5 ? -1.5f : c == 6 ? 0.0f : u(rng);  // two constant channels
          rows[r * d + c] = x;
          kmin[c] = std::min(kmin[c], x);
          kmax[c] = std::max(kmax[c], x);
        }
      std::vector<uint8_t> code(static_cast<size_t>(code_row_bytes(d, bits)));
      std::vector<float> back(d);
      for (int32_t r = 0; r < 16; ++r) {
        quantize_row(rows.data() + r * d, kmin.data(), kmax.data(), d, bits, code.data());
        dequantize_row(code.data(), kmin.data(), kmax.data(), d, bits, back.data());
        for (int32_t c = 0; c < d; ++c) {
          const double step = (double(kmax[c]) - kmin[c]) / ((1 << bits) - 1);
          const double err = std::abs(double(back[c]) - rows[r * d + c]);
          INFO("bits " << bits << " channel " << c << " step " << step);
          CHECK(code_of(code.data(), c, bits) < (1u << bits));
          // Half a step, plus the float32 rounding of kmin + code * step.
          CHECK(err <= step / 2 + 4e-7 * std::max(1.0, std::abs(double(rows[r * d + c]))));
          if (c == 5 || c == 6) CHECK(back[c] == rows[r * d + c]);
        }
      }
      // The range's ends are levels 0 and 2^bits - 1.
      CHECK(quant_step(kmin[0], kmax[0], bits) > 0);
      CHECK(quant_step(1.0f, 1.0f, bits) == 0);
    }
  }
}

TEST_CASE("approximate scores equal q . dequantised keys (float64 reference)", "[value-offload]") {
  for (int32_t bits : {8, 4}) {
    CodedBlocks f(29, bits);  // 3 full blocks and a partial one
    const float scale = 0.7f;
    for (int trial = 0; trial < 5; ++trial)
      for (int32_t g = 0; g < f.kHkv; ++g) {
        const auto q = random_q(f.kG * f.kD, f.rng);
        std::vector<float> z(static_cast<size_t>(29 * f.kG));
        approx_head_scores(f.head(g), q.data(), f.kG, scale, z.data());
        double worst_exact = 0;
        for (int32_t p = 0; p < 29; ++p) {
          const auto k = f.deq(g, p);
          const auto kx = f.key(f.table.host[p / 8], g, p % 8);
          for (int32_t h = 0; h < f.kG; ++h) {
            double ref = 0, exact = 0, bound = 0;
            for (int32_t c = 0; c < f.kD; ++c) {
              ref += double(q[h * f.kD + c]) * k[c];
              exact += double(q[h * f.kD + c]) * kx[c];
              const int32_t id = f.table.host[p / 8];
              const double step = (double(f.blocks.host_kmax(id)[g * f.kD + c]) -
                                   f.blocks.host_kmin(id)[g * f.kD + c]) /
                                  ((1 << bits) - 1);
              bound += std::abs(double(q[h * f.kD + c])) * step / 2;
            }
            const double got = z[static_cast<size_t>(p) * f.kG + h];
            INFO("bits " << bits << " position " << p << " head " << h);
            CHECK(std::abs(got - scale * ref) <= 1e-5 * (1 + std::abs(scale * ref)));
            // And the scores' error against the true keys is within the codes' bound.
            CHECK(std::abs(got - scale * exact) <= scale * bound + 1e-5);
            worst_exact = std::max(worst_exact, std::abs(got - scale * exact));
          }
        }
        CHECK(worst_exact > 0);  // the scores are approximate (random keys are never on levels)
      }
  }
}

TEST_CASE("approximate scores: vector and scalar paths, 8 and 4 bits", "[value-offload]") {
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (int32_t bits : {8, 4})
    for (int32_t d : {6, 8, 24, 40}) {  // 6: the scalar path (not a multiple of 8)
      const int32_t n = 7, G = 3;
      std::vector<float> kmin(d), kmax(d), q(static_cast<size_t>(G) * d);
      for (int32_t c = 0; c < d; ++c) {
        kmin[c] = u(rng);
        kmax[c] = c == 1 ? kmin[c] : kmin[c] + std::abs(u(rng));
      }
      for (float& x : q) x = u(rng);
      std::vector<uint8_t> codes(static_cast<size_t>(n * code_row_bytes(d, bits)));
      std::uniform_int_distribution<int> byte(0, 255);
      for (uint8_t& b : codes) b = static_cast<uint8_t>(byte(rng));
      std::vector<float> z(static_cast<size_t>(n) * G), k(d);
      approx_scores(codes.data(), n, kmin.data(), kmax.data(), d, bits, q.data(), G, 0.3f,
                    z.data());
      for (int32_t i = 0; i < n; ++i) {
        dequantize_row(codes.data() + i * code_row_bytes(d, bits), kmin.data(), kmax.data(), d,
                       bits, k.data());
        for (int32_t g = 0; g < G; ++g) {
          double ref = 0;
          for (int32_t c = 0; c < d; ++c) ref += double(q[g * d + c]) * k[c];
          INFO("bits " << bits << " d " << d << " row " << i << " head " << g);
          CHECK(std::abs(z[i * G + g] - 0.3 * ref) <= 1e-5 * (1 + std::abs(0.3 * ref)));
        }
      }
    }
}

TEST_CASE("value-offload selection: Eq. 4 over the approximate mass, or every entry",
          "[value-offload][selection]") {
  for (int32_t bits : {8, 4}) {
    CodedBlocks f(45, bits);  // 5 full blocks and a partial one
    const float scale = 0.6f;
    for (int trial = 0; trial < 3; ++trial)
      for (float tau : {0.3f, 0.5f, 0.9f, 0.99f, 1.0f})
        for (int32_t g = 0; g < f.kHkv; ++g) {
          const auto q = random_q(f.kG * f.kD, f.rng);
          // Reference: float64 approximate scores from the codes, each query head's softmax,
          // averaged; the largest first (ties by position) until the sum reaches tau.
          std::vector<double> z(45 * f.kG), m(45, 0.0);
          for (int32_t p = 0; p < 45; ++p) {
            const auto k = f.deq(g, p);
            for (int32_t h = 0; h < f.kG; ++h) {
              double dot = 0;
              for (int32_t c = 0; c < f.kD; ++c) dot += double(q[h * f.kD + c]) * k[c];
              z[p * f.kG + h] = scale * dot;
            }
          }
          for (int32_t h = 0; h < f.kG; ++h) {
            double top = -1e300, sum = 0;
            for (int32_t p = 0; p < 45; ++p) top = std::max(top, z[p * f.kG + h]);
            for (int32_t p = 0; p < 45; ++p) sum += std::exp(z[p * f.kG + h] - top);
            for (int32_t p = 0; p < 45; ++p) m[p] += std::exp(z[p * f.kG + h] - top) / sum / f.kG;
          }
          std::vector<int32_t> order(45);
          for (int32_t p = 0; p < 45; ++p) order[p] = p;
          std::stable_sort(order.begin(), order.end(),
                           [&](int32_t a, int32_t b) { return m[a] > m[b]; });
          std::vector<int32_t> want;
          double acc = 0;
          for (int32_t p : order) {
            if (acc >= tau) break;
            acc += m[p];
            want.push_back(p);
          }
          std::sort(want.begin(), want.end());
          for (bool all : {false, true}) {
            std::vector<HostBlockRef> refs;
            std::vector<int32_t> idx;
            std::vector<float> scores;
            QuantError err;
            const int64_t rows = select_quantized(f.head(g), q.data(), f.kG, scale, tau, all, refs,
                                                  idx, scores, &err);
            // The selected positions, and their scores as the kernel will read them.
            std::vector<int32_t> got;
            for (const HostBlockRef& r : refs) {
              REQUIRE(r.s != nullptr);
              for (size_t j = 0; j < f.table.host.size(); ++j) {
                if (r.v != f.value(f.table.host[j], g, 0)) continue;
                for (int32_t i = 0; i < r.rows(); ++i) {
                  const int32_t p = static_cast<int32_t>(j) * 8 + (r.idx ? r.idx[i] : i);
                  got.push_back(p);
                  for (int32_t h = 0; h < f.kG; ++h)
                    CHECK(std::abs(r.s[i * f.kG + h] - z[p * f.kG + h]) <=
                          1e-5 * (1 + std::abs(z[p * f.kG + h])));
                }
              }
            }
            INFO("bits " << bits << " tau " << tau << " head " << g << " all " << all);
            CHECK(rows == static_cast<int64_t>(got.size()));
            if (all) {
              CHECK(got.size() == 45);
              CHECK(std::is_sorted(got.begin(), got.end()));
            } else {
              // Masses equal to float rounding may order differently: compare by mass reached.
              if (got != want) {
                double mg = 0, mw = 0;
                for (int32_t p : got) mg += m[p];
                for (int32_t p : want) mw += m[p];
                CHECK(got.size() == want.size());
                CHECK(std::abs(mg - mw) < 1e-9);
              }
            }
            CHECK(err.n == 45 * f.kG);  // every logit measured against the exact keys
            CHECK(err.max > 0);
            CHECK(err.sum / double(err.n) <= err.max);
          }
        }
  }
}

namespace {

// Rows of one KV head with given scores: V [n, d] f32 per block, or with tiles (d a multiple of
// kVTile) by tiles of kVTile channels as the host store keeps it (HostBlockRef::v_tile, a
// capacity of n + 3 rows); scores [rows, G].
struct ScoredHead {
  int32_t d, G;
  std::vector<std::vector<float>> v, s;
  std::vector<std::vector<int32_t>> idx;
  std::vector<int64_t> vt;  // per block: V by tiles kVTile rows apart (0: by rows)
  std::vector<HostBlockRef> refs;

  ScoredHead(int32_t dim, int32_t groups, const std::vector<int32_t>& lens, bool select, float amp,
             std::mt19937& rng, bool tiles = false)
      : d(dim), G(groups) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::normal_distribution<float> nd(0.0f, amp);
    std::uniform_real_distribution<double> coin(0.0, 1.0);
    for (int32_t n : lens) {
      vt.push_back(tiles ? int64_t{n + 3} * kVTile : 0);
      v.emplace_back(static_cast<size_t>(tiles ? n + 3 : n) * d);
      for (float& x : v.back()) x = u(rng);
      idx.emplace_back();
      if (select)
        for (int32_t r = 0; r < n; ++r)
          if (coin(rng) < 0.4) idx.back().push_back(r);
      const int32_t rows = select ? static_cast<int32_t>(idx.back().size()) : n;
      s.emplace_back(static_cast<size_t>(rows) * G);
      for (float& x : s.back()) x = nd(rng);
    }
    for (size_t b = 0; b < lens.size(); ++b) {
      HostBlockRef r;
      r.v = v[b].data();
      r.v_tile = vt[b];
      r.n = lens[b];
      r.s = s[b].data();
      if (select) {
        static const int32_t kNone = 0;
        r.idx = idx[b].empty() ? &kNone : idx[b].data();
        r.n_idx = static_cast<int32_t>(idx[b].size());
      }
      refs.push_back(r);
    }
  }

  // Row r, channel c of block b's V.
  double value(size_t b, int64_t r, int32_t c) const {
    const int64_t i = vt[b] != 0 ? (c / kVTile) * vt[b] + r * kVTile + c % kVTile : r * d + c;
    return v[b][static_cast<size_t>(i)];
  }

  // Float64: per head o = softmax(s) V over every selected row, lse = logsumexp(s).
  void reference(std::vector<double>& o, std::vector<double>& lse) const {
    o.assign(static_cast<size_t>(G) * d, 0.0);
    lse.assign(static_cast<size_t>(G), -std::numeric_limits<double>::infinity());
    for (int32_t g = 0; g < G; ++g) {
      double m = -std::numeric_limits<double>::infinity(), sum = 0;
      for (size_t b = 0; b < refs.size(); ++b)
        for (int32_t i = 0; i < refs[b].rows(); ++i) m = std::max(m, double(s[b][i * G + g]));
      if (m == -std::numeric_limits<double>::infinity()) continue;
      for (size_t b = 0; b < refs.size(); ++b)
        for (int32_t i = 0; i < refs[b].rows(); ++i) {
          const int32_t r = refs[b].idx ? refs[b].idx[i] : i;
          const double p = std::exp(double(s[b][i * G + g]) - m);
          sum += p;
          for (int32_t c = 0; c < d; ++c) o[g * d + c] += p * value(b, r, c);
        }
      for (int32_t c = 0; c < d; ++c) o[g * d + c] /= sum;
      lse[g] = m + std::log(sum);
    }
  }
};

void check_weighted(const ScoredHead& h, const float* o, const float* lse) {
  std::vector<double> ro, rl;
  h.reference(ro, rl);
  for (int32_t g = 0; g < h.G; ++g) {
    double diff = 0, scale = 1e-30;
    for (int32_t c = 0; c < h.d; ++c) {
      diff = std::max(diff, std::abs(o[g * h.d + c] - ro[g * h.d + c]));
      scale = std::max(scale, std::abs(ro[g * h.d + c]));
    }
    INFO("G " << h.G << " d " << h.d << " head " << g);
    if (std::isinf(rl[g])) {
      CHECK(lse[g] == rl[g]);
      for (int32_t c = 0; c < h.d; ++c) CHECK(o[g * h.d + c] == 0.0f);
      continue;
    }
    CHECK(diff / scale < 1e-5);
    CHECK(std::abs(lse[g] - rl[g]) / std::max(1.0, std::abs(rl[g])) < 1e-5);
  }
}

}  // namespace

TEST_CASE("weighted-value kernel matches float64 on every ISA path", "[value-offload][kernel]") {
  const std::vector<std::vector<int32_t>> layouts = {{64, 64, 37}, {5}, {1, 16, 17, 3}};
  for (cpu::Isa isa : cpu::supported_isas()) {
    const cpu::ScopedIsa scoped(isa);
    INFO("isa " << cpu::isa_name(isa));
    std::mt19937 rng(2024);
    for (int32_t d : {8, 24, 64, 128})
      for (int32_t G : {1, 2, 3, 4, 8, 12})
        for (const auto& lens : layouts)
          for (bool select : {false, true})
            for (bool tiles : {false, true}) {
              if (tiles && d % kVTile != 0) continue;
              INFO("tiles " << tiles << " select " << select);
              const ScoredHead h(d, G, lens, select, 3.0f, rng, tiles);
              std::vector<float> o(static_cast<size_t>(G) * d, 9.0f), lse(G, 9.0f);
              host_weighted_values(G, d, DType::kF32, h.refs, o.data(), lse.data());
              check_weighted(h, o.data(), lse.data());
              // host_attend_group takes the same path when its blocks carry scores.
              std::vector<float> q(static_cast<size_t>(G) * d, 1.0f);
              std::vector<float> o2(o.size()), lse2(lse.size());
              host_attend_group(q.data(), G, d, 0.5f, DType::kF32, h.refs, o2.data(), lse2.data());
              CHECK(o2 == o);
              CHECK(lse2 == lse);
            }
    // Large scores: the running max grows across chunks without overflow.
    const ScoredHead big(64, 4, {64, 64, 64}, false, 60.0f, rng);
    std::vector<float> o(4 * 64), lse(4);
    host_weighted_values(4, 64, DType::kF32, big.refs, o.data(), lse.data());
    check_weighted(big, o.data(), lse.data());
  }
}

TEST_CASE("weighted-value kernel: no rows is the empty partial; scores all or none",
          "[value-offload][kernel]") {
  std::vector<float> o(16, 5.0f), lse(2, 5.0f);
  host_weighted_values(2, 8, DType::kF32, {}, o.data(), lse.data());
  CHECK(lse[0] == -std::numeric_limits<float>::infinity());
  CHECK(o[3] == 0.0f);
  std::mt19937 rng(1);
  ScoredHead h(8, 2, {4, 4}, false, 1.0f, rng);
  std::vector<float> k(32, 0.0f);
  h.refs[1].s = nullptr;  // a block without scores among scored ones
  h.refs[1].k = k.data();
  CHECK_THROWS_AS(host_weighted_values(2, 8, DType::kF32, h.refs, o.data(), lse.data()), Error);
  const std::vector<float> q(16, 1.0f);
  CHECK_THROWS_AS(
      host_attend_group(q.data(), 2, 8, 1.0f, DType::kF32, h.refs, o.data(), lse.data()), Error);
  // Values only: host_kv_bytes counts V of scored blocks, K and V of the others.
  CHECK(host_kv_bytes(h.refs, 8, DType::kF32) == 4 * 8 * 4 + 2 * 4 * 8 * 4);
}

TEST_CASE("HostAttention splits scored items into parts and merges them as the kernel would",
          "[value-offload][kernel]") {
  std::mt19937 rng(77);
  const int32_t d = 64, G = 4;
  // 4096 rows of 256 B of V: long enough that two threads split the item into parts.
  const ScoredHead h(d, G, std::vector<int32_t>(64, 64), true, 2.0f, rng);
  HostAttention ha(2, d, 0.125f, DType::kF32);
  std::vector<float> q(static_cast<size_t>(G) * d, 0.0f), o(q.size()), lse(G);
  std::vector<HostAttnItem> items{HostAttnItem{q.data(), G, o.data(), lse.data(), h.refs}};
  ha.wait(ha.submit(std::move(items)));
  check_weighted(h, o.data(), lse.data());
}
