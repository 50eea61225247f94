// --similarity-reuse (kvstore/similarity_reuse.h, CLO §3.1-3.2) against float64 references: the
// thresholds (Eq. 7-9), the group aggregation (Eq. 10), the cosine similarity, the importance
// proxy (host attention mass); a random sequence of lookups against a brute-force replay of the
// decisions (a hit reuses exactly the kept selection, a miss equals a fresh one); through a model:
// reuse that never hits is bit-identical to no reuse, the layer-ahead oracle equals parallel with
// reuse on; the state is the sequence's own (cleared by release, absent after prefix adoption).
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <numbers>
#include <random>

#include "kvstore/hybrid_kv.h"
#include "kvstore/kv_store.h"
#include "kvstore/similarity_reuse.h"
#include "models/model.h"
#include "tests/engine_fixture.h"
#include "tests/test_model_runs.h"

using namespace tandem;
using namespace tandem::test;

namespace {

// Host blocks of random keys (f32, digests as the store keeps them), as in test_selection.
struct HostBlocks {
  static constexpr int32_t kBlock = 8, kHkv = 2, kD = 16, kG = 3;
  BlockLayout layout{kBlock, kHkv, kD, DType::kF32};
  BlockPool device{layout.dev_bytes(), 4, false, MemoryKind::kHost};
  BlockPool host{layout.host_bytes(), 16, true, MemoryKind::kHost};
  BlockAccess blocks{device, host, layout};
  std::vector<int32_t> ids;
  int32_t tokens = 0;
  std::mt19937 rng{11};

  explicit HostBlocks(int32_t n) {
    std::normal_distribution<float> nd;
    for (int32_t t = 0; t < n; ++t) {
      if (t % kBlock == 0) {
        const int32_t id = host.alloc();
        std::fill_n(blocks.host_kmin(id), kHkv * kD, std::numeric_limits<float>::infinity());
        std::fill_n(blocks.host_kmax(id), kHkv * kD, -std::numeric_limits<float>::infinity());
        ids.push_back(id);
      }
      for (int32_t g = 0; g < kHkv; ++g) {
        std::array<float, kD> k;
        for (int32_t c = 0; c < kD; ++c) k[c] = nd(rng);
        const int32_t id = ids.back();
        blocks.write_host_k_row(id, g, t % kBlock, k.data());
        digest_add(blocks.host_kmin(id) + g * kD, blocks.host_kmax(id) + g * kD, k.data(), kD);
      }
      ++tokens;
    }
  }
  // The stored key of host token t, head g.
  std::array<float, kD> key(int32_t t, int32_t g) const {
    std::array<float, kD> k;
    blocks.read_host_k_row(ids[static_cast<size_t>(t / kBlock)], g, t % kBlock, k.data());
    return k;
  }
  HostHead head(int32_t g, int32_t n_blocks = -1) const {
    const size_t nb = n_blocks < 0 ? ids.size() : static_cast<size_t>(n_blocks);
    return HostHead{std::span<const int32_t>(ids).first(nb),
                    std::min(tokens, static_cast<int32_t>(nb) * kBlock), blocks, g};
  }
};

double cos64(const float* a, const float* b, int32_t d) {
  double ab = 0, aa = 0, bb = 0;
  for (int32_t c = 0; c < d; ++c) ab += double(a[c]) * b[c], aa += double(a[c]) * a[c];
  for (int32_t c = 0; c < d; ++c) bb += double(b[c]) * b[c];
  return ab / (std::sqrt(aa) * std::sqrt(bb));
}

// The refs' blocks and rows, comparable.
std::vector<std::pair<const void*, std::vector<int32_t>>> rows_of(
    const std::vector<HostBlockRef>& refs) {
  std::vector<std::pair<const void*, std::vector<int32_t>>> out;
  for (const HostBlockRef& r : refs) {
    std::vector<int32_t> rows;
    for (int32_t i = 0; i < r.rows(); ++i) rows.push_back(r.idx != nullptr ? r.idx[i] : i);
    out.emplace_back(r.k, rows);
  }
  return out;
}

}  // namespace

TEST_CASE("Eq. 7-9 thresholds against the float64 formula", "[reuse]") {
  for (double eta : {1.0, 0.99, 0.95, 0.8, 0.0, -0.5})
    for (double p : {0.0, 1.0, 2.0, 3.0})
      for (double s : {0.0, 0.1, 0.5, 0.9, 0.99, 1.0}) {
        // cos(l * acos(eta) + (1 - l) * pi) = -cos(l * (pi - acos(eta))).
        const double l = std::pow(s, p);
        const double want = -std::cos(l * (std::numbers::pi - std::acos(eta)));
        CHECK(reuse_threshold(eta, s, p) == Approx(want).margin(1e-12));
      }
  CHECK(reuse_threshold(0.95, 1.0, 2.0) == Approx(0.95).margin(1e-12));  // important: eta
  CHECK(reuse_threshold(0.95, 0.0, 2.0) == Approx(-1.0).margin(1e-12));  // unimportant: -1
  CHECK(reuse_threshold(1.0, 1.0, 2.0) == 1.0);                          // only parallel queries
  double last = -2;
  for (double s = 0; s <= 1.0; s += 0.01) {  // more important, stricter
    CHECK(reuse_threshold(0.9, s, 2) >= last);
    last = reuse_threshold(0.9, s, 2);
  }
}

TEST_CASE("Eq. 10 aggregation and the cosine similarity against float64", "[reuse]") {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0.05, 1.0);
  std::uniform_real_distribution<float> w(0.0f, 1.0f);
  for (int trial = 0; trial < 200; ++trial) {
    const int m = 1 + trial % 6;
    std::vector<double> sim(static_cast<size_t>(m));
    std::vector<float> s(static_cast<size_t>(m));
    double num = 0, den = 0, lo = 1, hi = 0;
    for (int i = 0; i < m; ++i) {
      sim[static_cast<size_t>(i)] = u(rng);
      s[static_cast<size_t>(i)] = w(rng);
      num += s[static_cast<size_t>(i)];
      den += s[static_cast<size_t>(i)] / sim[static_cast<size_t>(i)];
      lo = std::min(lo, sim[static_cast<size_t>(i)]);
      hi = std::max(hi, sim[static_cast<size_t>(i)]);
    }
    const double got = aggregate_similarity(sim, s);
    CHECK(got == Approx(num / den).epsilon(1e-12));
    CHECK(got >= lo - 1e-12);
    CHECK(got <= hi + 1e-12);
    std::fill(sim.begin(), sim.end(), 0.7);  // equal similarities: that value
    CHECK(aggregate_similarity(sim, s) == Approx(0.7).epsilon(1e-12));
  }
  // Unweighted heads do not count; all unweighted: every head weighs 1.
  CHECK(aggregate_similarity(std::vector<double>{0.9, 0.1}, std::vector<float>{1, 0}) ==
        Approx(0.9));
  CHECK(aggregate_similarity(std::vector<double>{0.5, 0.25}, std::vector<float>{0, 0}) ==
        Approx(2 / (1 / 0.5 + 1 / 0.25)));
  // A counted head at or below 0: the smallest such similarity.
  CHECK(aggregate_similarity(std::vector<double>{0.9, -0.3, -0.1}, std::vector<float>{1, 1, 1}) ==
        -0.3);
  CHECK(aggregate_similarity(std::vector<double>{0.9, 0.0}, std::vector<float>{1, 1}) == 0.0);

  std::normal_distribution<float> nd;
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> a(64), b(64);
    for (float& x : a) x = nd(rng);
    for (float& x : b) x = nd(rng);
    CHECK(cosine_similarity(a.data(), b.data(), 64) == Approx(cos64(a.data(), b.data(), 64)));
    std::vector<float> a3(a);
    for (float& x : a3) x *= 3;  // the length does not count
    CHECK(cosine_similarity(a3.data(), b.data(), 64) ==
          Approx(cosine_similarity(a.data(), b.data(), 64)).epsilon(1e-6));
    CHECK(cosine_similarity(a.data(), a.data(), 64) == Approx(1.0).epsilon(1e-12));
  }
  const std::vector<float> zero(8, 0.0f), one(8, 1.0f);
  CHECK(cosine_similarity(zero.data(), one.data(), 8) == 0.0);
}

TEST_CASE("the importance proxy is the host attention mass, normalised by the layer's maximum",
          "[reuse]") {
  HostBlocks f(37);  // host entries at positions 2 .. 38
  const int32_t Hq = f.kHkv * f.kG, d = f.kD, n = 5, q_pos0 = 30, first = 2;
  const float scale = 0.25f;
  std::normal_distribution<float> nd;
  std::vector<float> q(static_cast<size_t>(n * Hq * d)), lse(static_cast<size_t>(n * Hq));
  for (float& x : q) x = nd(f.rng);
  // lse: the host entries the query sees plus some mass elsewhere (the device part).
  std::vector<double> want(static_cast<size_t>(Hq), 0.0);
  const int64_t m = 3;
  for (int32_t i = 0; i < n; ++i)
    for (int32_t h = 0; h < Hq; ++h) {
      std::vector<double> z;
      for (int32_t t = 0; t < f.tokens; ++t) {
        if (first + t > q_pos0 + i) continue;
        const auto k = f.key(t, h / f.kG);
        double dot = 0;
        for (int32_t c = 0; c < d; ++c) dot += double(q[(size_t(i) * Hq + h) * d + c]) * k[c];
        z.push_back(scale * dot);
      }
      double total = 0.5 + 2.0 * h;  // device mass, e^lse units
      for (double x : z) total += std::exp(x);
      lse[size_t(i) * Hq + h] = static_cast<float>(std::log(total));
      if (i >= n - m)
        for (double x : z) want[size_t(h)] += std::exp(x - lse[size_t(i) * Hq + h]) / double(m);
    }
  const std::vector<double> got = host_mass_share(f.blocks, f.ids, f.tokens, first, q.data(),
                                                  lse.data(), n, m, q_pos0, Hq, f.kG, scale);
  REQUIRE(got.size() == want.size());
  for (size_t h = 0; h < got.size(); ++h) CHECK(got[h] == Approx(want[h]).epsilon(1e-4));
  const std::vector<float> s = importance_of(got);
  const double top = *std::max_element(want.begin(), want.end());
  for (size_t h = 0; h < s.size(); ++h) CHECK(s[h] == Approx(want[h] / top).epsilon(1e-4));
  CHECK(*std::max_element(s.begin(), s.end()) == 1.0f);
  CHECK(importance_of(std::vector<double>{0, 0}) == std::vector<float>{0, 0});
}

TEST_CASE("a sequence of lookups: hits reuse the kept selection, misses select afresh", "[reuse]") {
  HostBlocks f(61);  // 8 blocks, the last partial
  const int32_t G = f.kG, d = f.kD, Hq = f.kHkv * G;
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> ud(0, 1);
  for (bool tau : {false, true})
    for (double eta : {0.9, 0.99}) {
      DYNAMIC_SECTION((tau ? "tau" : "topk") << " eta " << eta) {
        const double p = 2;
        ReuseLayer rl(f.kHkv, Hq, eta, p);
        std::vector<float> s(static_cast<size_t>(Hq));
        for (float& x : s) x = 0.5f + 0.5f * ud(f.rng);
        rl.set_importance(s, eta, p);
        auto fresh = [&](const HostHead& h, const float* qg, std::vector<HostBlockRef>& refs,
                         std::vector<int32_t>& idx) -> int64_t {
          return tau ? select_tau(h, qg, G, 0.25f, 0.8f, refs, idx)
                     : select_topk(h, qg, G, 3, refs);
        };
        for (int32_t g = 0; g < f.kHkv; ++g) {
          std::vector<float> q(static_cast<size_t>(G * d)), label;
          for (float& x : q) x = nd(f.rng);
          int32_t kept_blocks = -1, hits = 0, misses = 0;
          for (int step = 0; step < 60; ++step) {
            // A random walk of the query, now and then a jump; now and then a host block arrives.
            const float sigma = step % 11 == 10 ? 3.0f : 0.15f * ud(f.rng);
            for (float& x : q) x += sigma * nd(f.rng);
            const int32_t nb = std::min<int32_t>(8, 6 + step / 25);
            const HostHead h = f.head(g, nb);
            // The brute-force decision: a label over the same host entries, similar enough.
            bool want_hit = false;
            if (kept_blocks == nb) {
              std::vector<double> sim;
              float top = 0;
              for (int32_t i = 0; i < G; ++i) {
                sim.push_back(cos64(&q[size_t(i * d)], &label[size_t(i * d)], d));
                top = std::max(top, s[size_t(g * G + i)]);
              }
              double num = 0, den = 0;
              for (int32_t i = 0; i < G; ++i) num += s[size_t(g * G + i)];
              for (int32_t i = 0; i < G; ++i) den += s[size_t(g * G + i)] / sim[size_t(i)];
              const double lo = *std::min_element(sim.begin(), sim.end());
              const double agg = lo <= 0 ? lo : num / den;
              want_hit = agg >= reuse_threshold(eta, top, p);
            }
            std::vector<HostBlockRef> refs, want_refs;
            std::vector<int32_t> idx, want_idx;
            int64_t picked = 0;
            const bool hit = rl.pick(h, q.data(), G, refs, idx, picked,
                                     [&] { return fresh(h, q.data(), refs, idx); });
            INFO("step " << step);
            CHECK(hit == want_hit);
            // A hit: the selection made for the label; a miss: the one for this query.
            if (!hit) label = q;
            const int64_t want_picked = fresh(h, label.data(), want_refs, want_idx);
            CHECK(rows_of(refs) == rows_of(want_refs));
            CHECK(picked == want_picked);
            kept_blocks = nb;
            hits += hit;
            misses += !hit;
          }
          CHECK(hits > 0);
          CHECK(misses > 0);
        }
      }
    }
}

TEST_CASE("similarity reuse through a model: no hit is bit-identical, ahead-oracle is parallel",
          "[reuse][model]") {
  auto backend = make_cpu_backend();
  const ReferenceLogits ref = ReferenceLogits::load("tandem-demo");
  auto model = Model::load(ref.model, *backend);
  const KvShape sh = model->kv_shape();
  for (SparsePolicy p : {SparsePolicy::kTopk, SparsePolicy::kTau}) {
    DYNAMIC_SECTION(policy_name(p)) {
      const KvConfig off = small_hybrid(8, p, CpuAttnMode::kParallel);
      HostStats st_off, st_never, st_always;
      const auto want = run_sequence(*model, off, ref.prompt, ref.decode, 5, &st_off);
      // eta 1 with every lambda 1 (p = 0): only a query parallel to its label would reuse.
      KvConfig never = off;
      never.similarity_reuse = true;
      never.reuse_eta = 1;
      never.reuse_power = 0;
      const auto got = run_sequence(*model, never, ref.prompt, ref.decode, 5, &st_never);
      CHECK(worst_rel_error(got, want) == 0.0);
      CHECK(st_never.attended == st_off.attended);
      CHECK(st_never.reuse_lookups == st_off.decode_layers * sh.n_head_kv);
      CHECK(st_never.reuse_hits == 0);
      CHECK(st_off.reuse_lookups == 0);
      // eta -1: every lookup over unchanged host entries reuses (arrivals still miss).
      KvConfig always = never;
      always.reuse_eta = -1;
      const auto loose = run_sequence(*model, always, ref.prompt, ref.decode, 5, &st_always);
      CHECK(std::isfinite(worst_rel_error(loose, want)));
      CHECK(st_always.reuse_hits > 0);
      CHECK(st_always.reuse_hits < st_always.reuse_lookups);
      // The default thresholds, the layer-ahead path fed the true query: parallel bit for bit.
      KvConfig def = off;
      def.similarity_reuse = true;
      HostStats a, b;
      const auto par = run_sequence(*model, def, ref.prompt, ref.decode, 5, &a);
      def.cpu_attn = CpuAttnMode::kAheadOracle;
      const auto oracle = run_sequence(*model, def, ref.prompt, ref.decode, 5, &b);
      CHECK(worst_rel_error(oracle, par) == 0.0);
      CHECK(a.reuse_hits == b.reuse_hits);
      WARN(policy_name(p) << ": default eta hit ratio " << a.reuse_hit_ratio() << " over "
                          << a.reuse_lookups << " lookups; worst logit difference to no reuse "
                          << worst_rel_error(par, want));
    }
  }
}

TEST_CASE("similarity reuse only with topk and tau", "[reuse]") {
  KvConfig c;
  c.similarity_reuse = true;
  for (SparsePolicy p : {SparsePolicy::kFull, SparsePolicy::kHgca}) {
    c.sparse = p;
    CHECK_THROWS_AS(c.validate(), Error);
  }
  c.dense = true;  // the dense store reads no policy
  CHECK_NOTHROW(c.validate());
  c.dense = false;
  for (SparsePolicy p : {SparsePolicy::kTopk, SparsePolicy::kTau}) {
    c.sparse = p;
    CHECK_NOTHROW(c.validate());
  }
  c.reuse_eta = 1.5f;
  CHECK_THROWS_AS(c.validate(), Error);
  c.reuse_eta = 0.9f;
  c.reuse_power = -1;
  CHECK_THROWS_AS(c.validate(), Error);
}

namespace {

// Feeds tokens [from, to) of `tokens` to kv: one prefill chunk (the prompt's last) or decode steps.
void feed(Model& model, SequenceKv& kv, const std::vector<int32_t>& tokens, size_t from, size_t to,
          bool decode) {
  if (!decode) {
    const StepSequence s{&kv, std::span<const int32_t>(tokens).subspan(from, to - from), false,
                         false, true};
    model.forward(std::span<const StepSequence>(&s, 1));
    return;
  }
  for (size_t i = from; i < to; ++i) {
    const StepSequence s{&kv, std::span<const int32_t>(&tokens[i], 1), false, true, false};
    model.forward(std::span<const StepSequence>(&s, 1));
  }
}

bool any_kept(HybridKv& kv, int32_t n_layer) {
  bool any = false;
  for (int32_t l = 0; l < n_layer; ++l)
    for (const ReuseHead& h : kv.reuse(l).heads) any |= h.valid;
  return any;
}

}  // namespace

TEST_CASE("reuse state is the sequence's own: release clears it, an adopter starts without",
          "[reuse][prefix]") {
  auto backend = make_cpu_backend();
  const ReferenceLogits ref = ReferenceLogits::load("tandem-demo");
  auto model = Model::load(ref.model, *backend);
  const int32_t layers = model->config().n_layer;
  KvConfig cfg = small_hybrid(8, SparsePolicy::kTopk, CpuAttnMode::kParallel);
  cfg.similarity_reuse = true;
  cfg.reuse_eta = -1;  // reuse wherever the host entries did not change
  cfg.reuse_power = 0;
  KvStore store(model->backend(), model->kv_shape(), cfg, 2, 64);
  std::vector<int32_t> tokens = ref.prompt;
  tokens.insert(tokens.end(), ref.decode.begin(), ref.decode.end());
  const size_t np = ref.prompt.size();
  auto kv = store.new_sequence(64, tokens);
  REQUIRE(kv->length() == 0);
  feed(*model, *kv, tokens, 0, np, false);
  feed(*model, *kv, tokens, np, tokens.size(), true);
  auto& hk = static_cast<HybridKv&>(*kv);
  CHECK(any_kept(hk, layers));
  CHECK(hk.reuse(layers - 1).measured);  // the prompt left entries on the host
  CHECK(KvStore::stats_of(*kv).reuse_hits > 0);
  // Released (its chunks published to the prefix cache): nothing kept, importance forgotten.
  hk.release(tokens);
  CHECK(kv->length() == 0);
  CHECK_FALSE(any_kept(hk, layers));
  for (int32_t l = 0; l < layers; ++l) CHECK_FALSE(hk.reuse(l).measured);
  kv.reset();
  // Another sequence adopts those chunks (shared host blocks) and keeps no selection of them:
  // its first decode step looks up every head and reuses none.
  auto kv2 = store.new_sequence(64, tokens);
  const auto adopted = static_cast<size_t>(kv2->length());
  REQUIRE(adopted > 0);
  REQUIRE(adopted + 1 < tokens.size());
  auto& hk2 = static_cast<HybridKv&>(*kv2);
  CHECK_FALSE(any_kept(hk2, layers));
  feed(*model, *kv2, tokens, adopted, tokens.size() - 1, false);
  CHECK_FALSE(any_kept(hk2, layers));
  feed(*model, *kv2, tokens, tokens.size() - 1, tokens.size(), true);
  const HostStats st = KvStore::stats_of(*kv2);
  CHECK(st.reuse_lookups == st.decode_layers * model->kv_shape().n_head_kv);
  CHECK(st.reuse_lookups > 0);
  CHECK(st.reuse_hits == 0);
  CHECK(any_kept(hk2, layers));
}

TEST_CASE("similarity reuse in the engine: preemption, metrics, no hit equals no reuse",
          "[reuse][engine]") {
  Setup s;
  const int64_t layers = s.model->config().n_layer;
  auto serve = [&](const KvConfig& cfg, EngineMetrics& m) {
    std::vector<std::vector<int32_t>> out;
    for (const Result& r : serve_stories(*s.model, cfg, 60, &m)) out.push_back(r.tokens);
    return out;
  };
  // Without preemption (batches do not change a sequence's bits): a reuse that never hits gives
  // the outputs of no reuse. (A preempted sequence recomputes its generated tokens by an exact
  // prefill, so under a sparse policy its outputs depend on when it was preempted.)
  KvConfig off = hybrid_config();
  off.sparse = SparsePolicy::kTopk;
  off.topk_blocks = 2;
  KvConfig never = off;
  never.similarity_reuse = true;
  never.reuse_eta = 1;
  never.reuse_power = 0;
  EngineMetrics m_off, m_never, m_on;
  const auto want = serve(off, m_off);
  const auto got = serve(never, m_never);
  CHECK(got == want);
  CHECK(m_never.similarity_reuse_lookups > 0);
  CHECK(m_never.similarity_reuse_hits == 0);
  CHECK(m_off.similarity_reuse_lookups == 0);
  // Room for 10 device blocks per layer: sequences preempt one another, and are recomputed into
  // new sequences with nothing kept.
  KvConfig on = hybrid_config(10 * layers);
  on.sparse = SparsePolicy::kTopk;
  on.topk_blocks = 2;
  on.similarity_reuse = true;
  const auto out = serve(on, m_on);
  CHECK(out.size() == story_prompts().size());
  CHECK(m_on.preemptions > 0);
  CHECK(m_on.similarity_reuse_hits > 0);
  CHECK(m_on.similarity_reuse_hits < m_on.similarity_reuse_lookups);
}
