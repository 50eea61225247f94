// --device-budget (kvstore/resident.h, ScoutAttention §3.4): the choices against brute force
// (the post-prefill set by the prompt's last query, each recall by the step's top-k bounds, the
// blocks the CPU then attends, which never include a resident one), the recall timing (every N
// steps per layer, never with 0, auto on a synthetic drift), exactness through models (top-k over
// every block with any resident set equals --sparse full), the device pool accounting and the
// option errors; the engine (reserves given back, preemption) and the metrics.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "kvstore/hybrid_kv.h"
#include "kvstore/kv_store.h"
#include "kvstore/resident.h"
#include "models/model.h"
#include "server/metrics.h"
#include "server/tools/kv_options.h"
#include "tests/engine_fixture.h"
#include "tests/kv_test_step.h"
#include "tests/test_model_runs.h"

using namespace tandem;
using namespace tandem::test;

namespace {

constexpr int32_t kLayers = 2, kHq = 4, kHkv = 2, kD = 16, kG = kHq / kHkv;
constexpr int32_t kSinks = 2, kBlock = 4, kWindow = 8;

KvConfig budget_config(int32_t topk, int32_t budget_blocks, int32_t interval) {
  KvConfig c = small_hybrid(kWindow, SparsePolicy::kTopk, CpuAttnMode::kParallel);
  c.topk_blocks = topk;
  c.device_budget = budget_blocks * kBlock;
  c.recall_interval = interval;
  return c;
}

// A store driven without a model: every layer stores the same keys; the test keeps them all, by
// position, to compute digests and bounds from scratch.
struct Driver {
  std::unique_ptr<Backend> be = make_cpu_backend();
  KvShape shape{kLayers, kHq, kHkv, kD, 1.0f / std::sqrt(float(kD))};
  KvStore store;
  std::unique_ptr<SequenceKv> kv;
  std::vector<float> keys;  // [position, Hkv, d]
  std::mt19937 rng{5};

  explicit Driver(const KvConfig& cfg) : store(*be, shape, cfg, 1, 512) {
    kv = store.new_sequence(512);
  }
  HybridKv& hkv() { return static_cast<HybridKv&>(*kv); }

  // One step of n rows: q [n, Hq, d] (the same for every layer), k random or given.
  void step(const std::vector<float>& q, int32_t n, bool decode, bool observe,
            const std::vector<float>* k_given = nullptr) {
    std::normal_distribution<float> nd;
    Buffer qb(DType::kF32, {n, kHq, kD}), kb(DType::kF32, {n, kHkv, kD}),
        vb(DType::kF32, {n, kHkv, kD}), pos(DType::kI32, {n});
    std::copy(q.begin(), q.end(), qb.as<float>());
    for (int64_t i = 0; i < int64_t{n} * kHkv * kD; ++i) {
      kb.as<float>()[i] = k_given ? (*k_given)[static_cast<size_t>(i)] : nd(rng);
      vb.as<float>()[i] = nd(rng);
    }
    keys.insert(keys.end(), kb.as<float>(), kb.as<float>() + int64_t{n} * kHkv * kD);
    for (int32_t i = 0; i < n; ++i) pos.as<int32_t>()[i] = kv->length() + i;
    Buffer o(DType::kF32, {n, kHq, kD}), lse(DType::kF32, {n, kHq});
    run_kv_step(*kv, n, decode, observe, [&](KvStep& s) {
      for (int32_t l = 0; l < kLayers; ++l)
        s.attend(*be, l, qb.view(), kb.view(), vb.view(), pos.view(), {o.view(), lse.view()});
    });
  }
  int32_t host_blocks() const { return static_cast<int32_t>(hkv_c().table(0).host.size()); }
  const HybridKv& hkv_c() const { return static_cast<const HybridKv&>(*kv); }

  // Quest bound of host block j for KV head g and its group's queries q [Hq, d], from the keys
  // (host block j holds positions sinks + j * block ...), summed as the store sums.
  float bound(const float* q, int32_t j, int32_t g) const {
    float total = 0.0f;
    for (int32_t h = 0; h < kG; ++h)
      for (int32_t c = 0; c < kD; ++c) {
        float lo = INFINITY, hi = -INFINITY;
        for (int32_t i = 0; i < kBlock; ++i) {
          const float x = keys[((size_t(kSinks + j * kBlock + i)) * kHkv + size_t(g)) * kD + c];
          lo = std::min(lo, x);
          hi = std::max(hi, x);
        }
        const float qc = q[(g * kG + h) * kD + c];
        total += std::max(qc * lo, qc * hi);
      }
    return total;
  }
  std::set<int32_t> resident(int32_t layer) {
    std::set<int32_t> s;
    for (int32_t j : hkv().resident(layer).host)
      if (j >= 0) s.insert(j);
    return s;
  }
};

// The r indices of largest key (ties: smaller index), by a full sort.
std::set<int32_t> top_by(int32_t n, int32_t r, const std::function<bool(int32_t, int32_t)>& less) {
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), less);
  return {idx.begin(), idx.begin() + std::min<int32_t>(r, n)};
}

std::vector<float> random_q(std::mt19937& rng, int32_t rows) {
  std::normal_distribution<float> nd;
  std::vector<float> q(static_cast<size_t>(rows) * kHq * kD);
  for (float& x : q) x = nd(rng);
  return q;
}

}  // namespace

TEST_CASE("resident choices: ranking, slots and due", "[device_budget]") {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> small(0, 5), coin(0, 1);
  for (int trial = 0; trial < 200; ++trial) {
    const int32_t n = 1 + small(rng) * 3, r = small(rng);
    std::vector<float> score(static_cast<size_t>(n));
    std::vector<uint8_t> in_union(score.size()), res(score.size());
    for (size_t j = 0; j < score.size(); ++j) {
      score[j] = static_cast<float>(small(rng));  // ties on purpose
      in_union[j] = static_cast<uint8_t>(coin(rng));
      res[j] = static_cast<uint8_t>(coin(rng));
    }
    auto by_score = [&](int32_t a, int32_t b) {
      return score[size_t(a)] > score[size_t(b)] || (score[size_t(a)] == score[size_t(b)] && a < b);
    };
    const std::vector<int32_t> init = choose_initial(score, r);
    CHECK(std::set<int32_t>(init.begin(), init.end()) == top_by(n, r, by_score));
    CHECK(std::is_sorted(init.begin(), init.end()));
    auto tier = [&](int32_t j) { return in_union[size_t(j)] ? 0 : res[size_t(j)] ? 1 : 2; };
    const std::vector<int32_t> rec = choose_recall(score, in_union, res, r);
    CHECK(std::set<int32_t>(rec.begin(), rec.end()) == top_by(n, r, [&](int32_t a, int32_t b) {
            return tier(a) < tier(b) || (tier(a) == tier(b) && by_score(a, b));
          }));
    // Slots: kept blocks stay put, the new ones take the freed slots, and only they are copied.
    std::vector<int32_t> slots(static_cast<size_t>(r), -1);
    for (size_t s = 0; s < slots.size(); ++s)
      if (coin(rng) && s < size_t(n)) slots[s] = static_cast<int32_t>(s);
    const std::vector<int32_t> before = slots;
    const std::vector<int32_t> copies = assign_slots(slots, rec);
    std::set<int32_t> now;
    for (int32_t j : slots)
      if (j >= 0) now.insert(j);
    CHECK(now == std::set<int32_t>(rec.begin(), rec.end()));
    for (size_t s = 0; s < slots.size(); ++s) {
      const bool copied = std::count(copies.begin(), copies.end(), int32_t(s)) > 0;
      CHECK(copied == (slots[s] >= 0 && slots[s] != before[s]));
    }
  }
  KvConfig cfg = budget_config(2, 2, 3);
  ResidentLayer r;
  CHECK_FALSE(recall_due(cfg, r));  // nothing reserved
  r.dev = {1, 2};
  CHECK(recall_due(cfg, r));  // not chosen yet
  r.chosen = true;
  r.steps = 2;
  CHECK_FALSE(recall_due(cfg, r));
  r.steps = 3;
  CHECK(recall_due(cfg, r));
  cfg.recall_interval = 0;
  CHECK_FALSE(recall_due(cfg, r));
  cfg.recall_interval = KvConfig::kRecallAuto;
  r.ratio_sum = 0.09 * 3;  // mean 0.09; one more step at 0.15: 0.105
  r.ratio_last = 0.15;
  CHECK_FALSE(recall_due(cfg, r));
  r.ratio_last = 0.25;  // one more step at 0.25: 0.13125
  CHECK(recall_due(cfg, r));
}

TEST_CASE("the post-prefill set, each recall and the CPU's blocks against brute force",
          "[device_budget]") {
  constexpr int32_t kTopk = 2, kB = 3;
  Driver d(budget_config(kTopk, kB, 1));
  const int32_t n = kSinks + 12 * kBlock + kWindow;
  const std::vector<float> q = random_q(d.rng, n);
  d.step(q, n, false, true);
  const int32_t nb = d.host_blocks();
  REQUIRE(nb == 12);
  CHECK(d.hkv().device_blocks() ==
        kLayers * (1 + kWindow / kBlock + kB));  // sinks, window, the reserve
  // Post-prefill: the blocks of largest bound for the prompt's last query, summed over KV heads.
  const float* q_last = q.data() + size_t(n - 1) * kHq * kD;
  std::vector<float> score(static_cast<size_t>(nb));
  for (int32_t j = 0; j < nb; ++j)
    for (int32_t g = 0; g < kHkv; ++g) score[size_t(j)] += d.bound(q_last, j, g);
  const std::set<int32_t> want = top_by(nb, kB, [&](int32_t a, int32_t b) {
    return score[size_t(a)] > score[size_t(b)] || (score[size_t(a)] == score[size_t(b)] && a < b);
  });
  for (int32_t l = 0; l < kLayers; ++l) CHECK(d.resident(l) == want);
  HostStats st = d.kv->host_stats();
  CHECK(st.recall_blocks == kLayers * kB);
  CHECK(st.recalls == 0);

  for (int step = 0; step < 12; ++step) {
    CAPTURE(step);
    const std::vector<float> qd = random_q(d.rng, 1);
    const int32_t nb0 = d.host_blocks();
    const std::set<int32_t> before = d.resident(0);
    // Per KV head: its top-k; the CPU attends those not resident.
    std::vector<std::vector<float>> b(kHkv, std::vector<float>(size_t(nb0)));
    std::set<int32_t> uni;
    int64_t cpu_rows = 0;
    for (int32_t g = 0; g < kHkv; ++g) {
      for (int32_t j = 0; j < nb0; ++j) b[size_t(g)][size_t(j)] = d.bound(qd.data(), j, g);
      const auto& bg = b[size_t(g)];
      for (int32_t j : top_by(nb0, kTopk, [&](int32_t x, int32_t y) {
             return bg[size_t(x)] > bg[size_t(y)] || (bg[size_t(x)] == bg[size_t(y)] && x < y);
           })) {
        uni.insert(j);
        if (!before.count(j)) cpu_rows += kBlock;
      }
    }
    std::vector<float> sc(size_t(nb0), 0.0f);
    for (int32_t j = 0; j < nb0; ++j)
      for (int32_t g = 0; g < kHkv; ++g) sc[size_t(j)] += b[size_t(g)][size_t(j)];
    auto tier = [&](int32_t j) { return uni.count(j) ? 0 : before.count(j) ? 1 : 2; };
    const std::set<int32_t> next = top_by(nb0, kB, [&](int32_t x, int32_t y) {
      return tier(x) < tier(y) ||
             (tier(x) == tier(y) &&
              (sc[size_t(x)] > sc[size_t(y)] || (sc[size_t(x)] == sc[size_t(y)] && x < y)));
    });
    const HostStats s0 = d.kv->host_stats();
    d.step(qd, 1, true, false);
    const HostStats s1 = d.kv->host_stats();
    CHECK(s1.attended - s0.attended == kLayers * cpu_rows);  // never a resident block
    CHECK(s1.recalls - s0.recalls == kLayers);               // interval 1: every step
    for (int32_t l = 0; l < kLayers; ++l) CHECK(d.resident(l) == next);
    std::set<int32_t> fresh;
    std::set_difference(next.begin(), next.end(), before.begin(), before.end(),
                        std::inserter(fresh, fresh.begin()));
    CHECK(s1.recall_blocks - s0.recall_blocks == kLayers * int64_t(fresh.size()));
    CHECK(s1.recall_bytes - s0.recall_bytes ==
          kLayers * int64_t(fresh.size()) * 2 * kHkv * kBlock * kD * 4);
  }
}

TEST_CASE("recall interval N recalls every N decode steps per layer; 0 never", "[device_budget]") {
  for (int32_t interval : {0, 1, 3, 4}) {
    CAPTURE(interval);
    Driver d(budget_config(2, 2, interval));
    const int32_t n = kSinks + 6 * kBlock + kWindow;
    d.step(random_q(d.rng, n), n, false, true);
    constexpr int32_t kSteps = 10;
    for (int s = 0; s < kSteps; ++s) d.step(random_q(d.rng, 1), 1, true, false);
    const HostStats st = d.kv->host_stats();
    const int64_t per_layer = interval == 0 ? 0 : kSteps / interval;
    CHECK(st.recalls == kLayers * per_layer);
    CHECK(st.recall_steps == st.recalls * interval);
    CHECK(st.ratio_count == kLayers * kSteps);
    if (interval > 0) CHECK(st.mean_recall_interval() == Approx(interval));
  }
}

TEST_CASE("auto recall keeps the CPU compute ratio under its threshold on a drift",
          "[device_budget]") {
  // Host block j's keys lie around a direction mu_j; the query of step t points at K blocks that
  // slide along the context by one every four steps: the top-k drifts away from any fixed set.
  constexpr int32_t kTopk = 8, kB = 12, kHostBlocks = 40;
  const int32_t n = kSinks + kHostBlocks * kBlock + kWindow;
  std::mt19937 rng(17);
  std::normal_distribution<float> nd;
  std::vector<std::vector<float>> mu(kHostBlocks, std::vector<float>(kD));
  for (auto& m : mu)
    for (float& x : m) x = nd(rng);
  std::vector<float> keys(size_t(n) * kHkv * kD);
  for (int32_t p = 0; p < n; ++p)
    for (int32_t g = 0; g < kHkv; ++g)
      for (int32_t c = 0; c < kD; ++c) {
        const int32_t j = (p - kSinks) / kBlock;
        const float base = p >= kSinks && j < kHostBlocks ? mu[size_t(j)][size_t(c)] : 0.0f;
        keys[(size_t(p) * kHkv + size_t(g)) * kD + size_t(c)] = base + 0.05f * nd(rng);
      }
  auto query = [&](int32_t t) {
    std::vector<float> q(size_t(kHq) * kD, 0.0f);
    for (int32_t i = 0; i < kTopk; ++i) {
      const auto& m = mu[size_t((t / 4 + i) % kHostBlocks)];
      for (int32_t h = 0; h < kHq; ++h)
        for (int32_t c = 0; c < kD; ++c) q[size_t(h * kD + c)] += m[size_t(c)];
    }
    return q;
  };
  auto run = [&](int32_t interval) {
    KvConfig cfg = budget_config(kTopk, kB, interval);
    cfg.recall_threshold = 0.12f;
    Driver d(cfg);
    std::vector<float> q(size_t(n) * kHq * kD, 0.0f);
    const std::vector<float> q0 = query(0);
    std::copy(q0.begin(), q0.end(), q.end() - kHq * kD);
    d.step(q, n, false, true, &keys);
    // The decode tokens' keys are far from every direction (near 0): they never win the top-k.
    std::vector<float> k_small(size_t(kHkv) * kD, 0.0f);
    for (int32_t t = 1; t <= 120; ++t) d.step(query(t), 1, true, false, &k_small);
    return d.kv->host_stats();
  };
  const HostStats never = run(0), every = run(1), autos = run(KvConfig::kRecallAuto);
  WARN("CPU compute ratio: never "
       << never.cpu_compute_ratio() << ", every step " << every.cpu_compute_ratio() << ", auto "
       << autos.cpu_compute_ratio() << " (" << autos.recalls << " recalls, mean interval "
       << autos.mean_recall_interval() << ")");
  CHECK(never.cpu_compute_ratio() > 0.5);  // the post-prefill set goes stale
  CHECK(never.recalls == 0);
  CHECK(autos.cpu_compute_ratio() <= 0.12 + 1e-9);
  CHECK(autos.recalls > 0);
  CHECK(autos.recalls < every.recalls);
  CHECK(autos.recall_blocks < every.recall_blocks + kLayers * kB);
}

TEST_CASE("top-k over every block with a resident set equals --sparse full", "[device_budget]") {
  auto backend = make_cpu_backend();
  for (const char* name : {"llama-tiny", "qwen3-tiny", "opt-tiny"}) {
    const ReferenceLogits ref = ReferenceLogits::load(name);
    auto model = Model::load(ref.model, *backend);
    const auto full =
        run_sequence(*model, small_hybrid(8, SparsePolicy::kFull, CpuAttnMode::kParallel),
                     ref.prompt, ref.decode, 5);
    // With the true query on the host (parallel, or the ahead path fed it). In ahead mode the
    // host part uses the predicted query and the resident part the true one: not --sparse full's
    // result under ahead, which uses the predicted one for every host entry.
    for (CpuAttnMode m : {CpuAttnMode::kParallel, CpuAttnMode::kAheadOracle})
      for (int32_t interval : {0, 1, 2, KvConfig::kRecallAuto})
        for (int32_t blocks : {1, 3, 64}) {
          DYNAMIC_SECTION(name << " " << mode_name(m) << " interval " << interval << " blocks "
                               << blocks) {
            KvConfig cfg = small_hybrid(8, SparsePolicy::kTopk, m);
            cfg.topk_blocks = 64;  // every host block
            cfg.device_budget = blocks * cfg.block;
            cfg.recall_interval = interval;
            HostStats st;
            const auto got = run_sequence(*model, cfg, ref.prompt, ref.decode, 5, &st);
            CHECK(worst_rel_error(got, full) < 1e-5);
            CHECK(st.host_entries > 0);
            CHECK(st.attended < st.host_entries);  // the resident part is the device's
            CHECK(st.cpu_compute_ratio() < 1.0);
          }
        }
  }
}

TEST_CASE("the resident reserve in the device pool and the plan", "[device_budget]") {
  auto be = make_cpu_backend();
  const KvShape shape{kLayers, kHq, kHkv, kD, 0.25f};
  KvConfig cfg = budget_config(2, 3, 1);
  CHECK(resident_reserve(cfg, 0) == 0);
  CHECK(resident_reserve(cfg, kSinks + kWindow + 2 * kBlock) == 2);  // fewer host blocks than B
  CHECK(resident_reserve(cfg, 1000) == 3);
  cfg.device_budget = 3 * kBlock + 3;  // rounded down to whole blocks
  CHECK(resident_blocks(cfg) == 3);
  {
    KvStore store(*be, shape, cfg, 1, 256);
    // Sized for its sequences' reserves: sinks + window + 1 spare + the reserve, per layer.
    CHECK(store.device_blocks_total() == kLayers * (1 + kWindow / kBlock + 1 + 3));
    CHECK(store.device_blocks_for(100) == HybridKv::device_blocks_for(cfg, kLayers, 100));
    CHECK(store.device_blocks_for(100) == kLayers * (1 + kWindow / kBlock + 3));
  }
  // A pool without room for the reserve: the step that needs it fails before changing anything,
  // saying how much of the need is the budget's.
  cfg.device_blocks = kLayers * (1 + kWindow / kBlock + 1);
  KvStore store(*be, shape, cfg, 1, 256);
  auto kv = store.new_sequence(256);
  const int32_t n = kSinks + 4 * kBlock + kWindow;
  Buffer q(DType::kF32, {n, kHq, kD}), k(DType::kF32, {n, kHkv, kD}), pos(DType::kI32, {n});
  std::fill_n(q.as<float>(), n * kHq * kD, 0.5f);
  std::fill_n(k.as<float>(), n * kHkv * kD, 0.5f);
  for (int32_t i = 0; i < n; ++i) pos.as<int32_t>()[i] = i;
  Buffer o(DType::kF32, {n, kHq, kD}), lse(DType::kF32, {n, kHq});
  try {
    run_kv_step(*kv, n, false, true, [&](KvStep& s) {
      for (int32_t l = 0; l < kLayers; ++l)
        s.attend(*be, l, q.view(), k.view(), k.view(), pos.view(), {o.view(), lse.view()});
    });
    FAIL("the step fit");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kOutOfMemory);
    CHECK_THAT(e.what(), Catch::Contains("--device-budget"));
  }
  CHECK(kv->length() == 0);
  CHECK(static_cast<HybridKv&>(*kv).device_blocks() == 0);
}

TEST_CASE("--device-budget option errors", "[device_budget][options]") {
  auto invalid = [](const KvConfig& c, const char* text) {
    try {
      c.validate();
      FAIL("accepted: " << text);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kInvalidArgument);
      CHECK_THAT(e.what(), Catch::Contains(text));
    }
  };
  KvConfig c = budget_config(2, 2, 1);
  CHECK_NOTHROW(c.validate());
  for (SparsePolicy p : {SparsePolicy::kFull, SparsePolicy::kHgca, SparsePolicy::kTau}) {
    KvConfig x = c;
    x.sparse = p;
    invalid(x, "--device-budget needs --sparse topk");
  }
  KvConfig dense = c;
  dense.dense = true;
  invalid(dense, "--dense");
  KvConfig reuse = c;
  reuse.similarity_reuse = true;
  invalid(reuse, "--similarity-reuse");
  KvConfig w0 = c;
  w0.window = 0;
  invalid(w0, "--window > 0");
  KvConfig neg = c;
  neg.device_budget = -1;
  invalid(neg, "--device-budget must be >= 0");
  KvConfig thr = c;
  thr.recall_threshold = 0;
  invalid(thr, "--recall-threshold");
  KvConfig iv = c;
  iv.recall_interval = -2;
  invalid(iv, "--recall-interval");
  CHECK(recall_interval_of("auto") == KvConfig::kRecallAuto);
  CHECK(recall_interval_of("0") == 0);
  CHECK(recall_interval_of("8") == 8);
  for (const char* bad : {"", "-1", "8x", "often", "99999999999"})
    CHECK_THROWS_WITH(recall_interval_of(bad), Catch::Contains("--recall-interval must be auto"));
  // Off by default, and then nothing changes for the other policies.
  KvConfig def;
  CHECK(def.device_budget == 0);
  def.sparse = SparsePolicy::kHgca;
  CHECK_NOTHROW(def.validate());
  CHECK(budget_config(2, 2, KvConfig::kRecallAuto).describe().find("device-budget=8 recall=auto") !=
        std::string::npos);
}

TEST_CASE("--device-budget in the engine: reserves, preemption, metrics",
          "[device_budget][engine]") {
  Setup s;
  const int64_t layers = s.model->config().n_layer;
  auto serve = [&](const KvConfig& cfg) {
    EngineMetrics m;
    for (const Result& r : serve_stories(*s.model, cfg, 60, &m)) {
      CHECK(r.error == "");
      CHECK(r.tokens.size() == 60);
    }
    return m;
  };
  for (int64_t pool : {int64_t{0}, 14 * layers}) {  // ample; room for two sequences' blocks
    CAPTURE(pool);
    KvConfig cfg = hybrid_config(pool);
    cfg.sparse = SparsePolicy::kTopk;
    cfg.topk_blocks = 2;
    cfg.device_budget = 2 * cfg.block;
    cfg.recall_interval = KvConfig::kRecallAuto;
    const EngineMetrics m = serve(cfg);
    if (pool > 0) CHECK(m.preemptions > 0);
    CHECK(m.cpu_compute_ratio > 0);
    CHECK(m.cpu_compute_ratio < 1);
    CHECK(m.recalls > 0);
    CHECK(m.recall_blocks > 0);
    CHECK(m.recall_bytes > 0);
    CHECK(m.mean_recall_interval >= 1);
    CHECK(m.kv_device_blocks_used == 0);  // every reserve given back
  }
  EngineGauges g;
  g.cpu_compute_ratio = 0.25;
  g.recalls = 3;
  g.recall_blocks = 7;
  g.recall_bytes = 7 * 1024;
  g.mean_recall_interval = 4.5;
  const std::string text = ServerMetrics().render(g);
  for (const char* line : {"tandem_cpu_compute_ratio 0.25\n", "tandem_recalls_total 3\n",
                           "tandem_recall_blocks_total 7\n", "tandem_recall_bytes_total 7168\n",
                           "tandem_recall_interval_mean 4.5\n"})
    CHECK_THAT(text, Catch::Contains(line));
}
