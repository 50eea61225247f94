// Property test of the hybrid store with its prefix cache: random sequences of admit (adopting
// cached prefixes), grow, publish, finish, cancel, fail, preempt and re-admit, and eviction, on a
// small store with a bounded host tier. After every operation: no block is owned twice (by two
// sequences, or by a sequence and the cache), the pools count exactly the blocks held, the host
// tier stays within its bound, and every stored token's K and V are those its prefix dictates
// (a block written by two sequences, or adopted from the wrong prefix, would show). At the end
// every block is free or cached, and free once the cache is cleared.
#include <catch2/catch.hpp>
#include <map>
#include <random>
#include <set>

#include "kvstore/kv_store.h"
#include "tests/test_helpers.h"

using namespace tandem;

namespace {

constexpr int32_t kLayers = 2, kHkv = 2, kD = 8;

// The K (v = false) or V row of the token at position p of a sequence whose tokens are `t`: a
// function of the whole prefix t[0..p], as a model's KV is.
void expected_row(const std::vector<int32_t>& t, int32_t p, int32_t layer, bool v, float* out) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t i = 0; i <= p; ++i)
    h = (h ^ static_cast<uint64_t>(t[static_cast<size_t>(i)])) * 1099511628211ull;
  for (int32_t c = 0; c < kHkv * kD; ++c)
    out[c] =
        static_cast<float>((h >> ((c * 5) % 56)) & 0xff) + 0.25f * layer + (v ? 1000.0f : 0.0f);
}

struct Live {
  std::vector<int32_t> tokens;  // all it will hold
  std::unique_ptr<SequenceKv> kv;
  HybridKv& hkv() const { return static_cast<HybridKv&>(*kv); }
};

struct Harness {
  std::unique_ptr<Backend> backend = make_cpu_backend();
  KvConfig cfg;
  std::unique_ptr<KvStore> store;
  std::vector<Live> live;
  std::vector<std::vector<int32_t>> preempted;  // to re-admit
  std::mt19937 rng;
  int64_t adopted_tokens = 0;

  explicit Harness(uint32_t seed) : rng(seed) {
    cfg.sinks = 2;
    cfg.window = 8;
    cfg.block = 4;
    cfg.sparse = SparsePolicy::kFull;
    cfg.cpu_attn = CpuAttnMode::kParallel;
    cfg.cpu_threads = 1;
    const BlockLayout layout{cfg.block, kHkv, kD, cfg.kv_dtype};
    cfg.host_gib = double(60 * ((layout.host_bytes() + 63) / 64 * 64)) / double(1 << 30);
    const KvShape shape{kLayers, kHkv, kHkv, kD, 0.5f};
    store = std::make_unique<KvStore>(*backend, shape, cfg, 6, 64);
  }

  int32_t pick(int32_t n) { return std::uniform_int_distribution<int32_t>(0, n - 1)(rng); }

  std::vector<int32_t> new_tokens() {
    std::vector<int32_t> t;
    // Often a prefix of another sequence's tokens (shared prefixes), sometimes fresh.
    if (!live.empty() && pick(3) > 0) {
      const auto& o = live[static_cast<size_t>(pick(static_cast<int32_t>(live.size())))].tokens;
      t.assign(o.begin(), o.begin() + pick(static_cast<int32_t>(o.size())) + 1);
    }
    const int32_t extra = 1 + pick(30);
    for (int32_t i = 0; i < extra && t.size() < 60; ++i) t.push_back(pick(3));
    return t;
  }

  bool fits(const SequenceKv* kv, int32_t n) {
    const PlanRequest r{kv, n, false, false};
    return store->plan(std::span<const PlanRequest>(&r, 1)).fits();
  }

  void admit(std::vector<int32_t> tokens) {
    if (live.size() >= 6 || !fits(nullptr, static_cast<int32_t>(tokens.size()))) {
      preempted.push_back(std::move(tokens));
      return;
    }
    Live s;
    s.kv = store->new_sequence(static_cast<int32_t>(tokens.size()), tokens);
    REQUIRE(s.kv->length() < static_cast<int32_t>(std::max<size_t>(tokens.size(), 1)));
    adopted_tokens += s.kv->length();
    s.tokens = std::move(tokens);
    live.push_back(std::move(s));
  }

  void grow(Live& s) {
    const int32_t left = static_cast<int32_t>(s.tokens.size()) - s.kv->length();
    if (left == 0) return;
    const int32_t n = 1 + pick(std::min(left, 9));
    if (!fits(s.kv.get(), n)) return;
    std::vector<float> k(static_cast<size_t>(n * kHkv * kD)), v(k.size());
    for (int32_t layer = 0; layer < kLayers; ++layer) {
      for (int32_t i = 0; i < n; ++i) {
        expected_row(s.tokens, s.kv->length() + i, layer, false, k.data() + i * kHkv * kD);
        expected_row(s.tokens, s.kv->length() + i, layer, true, v.data() + i * kHkv * kD);
      }
      s.kv->import_kv(*backend, layer, k.data(), v.data(), n);
    }
    s.kv->advance(n);
  }

  void end(size_t i, int how) {
    Live s = std::move(live[i]);
    live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    const std::span<const int32_t> all(s.tokens);
    switch (how) {
      case 0:  // finished or cancelled: its blocks stay cached
        store->release(std::move(s.kv), all);
        break;
      case 1:  // failed: nothing kept
        store->release(std::move(s.kv), {});
        break;
      default:  // preempted: cached, re-admitted later
        store->release(std::move(s.kv), all);
        preempted.push_back(std::move(s.tokens));
    }
  }

  void check() {
    const PrefixCache& cache = *store->prefix_cache();
    std::set<int32_t> host_owned, device_owned;
    std::set<const PrefixCache::Entry*> entries;
    cache.for_each([&](const PrefixCache::Entry& e) {
      entries.insert(&e);
      for (int32_t id : e.host) REQUIRE(host_owned.insert(id).second);
    });
    int64_t private_host = 0, device = 0;
    for (const Live& s : live) {
      const HybridKv& h = s.hkv();
      for (int32_t layer = 0; layer < kLayers; ++layer) {
        const LayerTable& l = h.table(layer);
        if (l.sink >= 0) {
          REQUIRE(device_owned.insert(l.sink).second);
          ++device;
        }
        for (int32_t id : l.window) {
          REQUIRE(device_owned.insert(id).second);
          ++device;
        }
        for (size_t j = 0; j < l.host.size(); ++j) {
          const bool shared = j < h.entries().size() && h.entries()[j] != nullptr;
          if (shared) {
            REQUIRE(entries.count(h.entries()[j]) == 1);
            REQUIRE(h.entries()[j]->host[static_cast<size_t>(layer)] == l.host[j]);
          } else {
            REQUIRE(host_owned.insert(l.host[j]).second);
            ++private_host;
          }
        }
      }
      check_content(s);
    }
    REQUIRE(store->host_blocks_used() == private_host + cache.cached_blocks());
    REQUIRE(store->device_blocks_used() == device);
    REQUIRE(store->host_blocks_used() <= store->host_blocks_limit());
  }

  // Every stored token's K and V rows, read where the table says they are.
  void check_content(const Live& s) {
    const HybridKv& h = s.hkv();
    const BlockAccess& bk = h.shared().blocks;
    const int32_t b = cfg.block, sinks = cfg.sinks;
    float want_k[kHkv * kD], want_v[kHkv * kD], host_k[kD];
    for (int32_t layer = 0; layer < kLayers; ++layer) {
      const LayerTable& l = h.table(layer);
      for (int32_t p = 0; p < h.length(); ++p) {
        expected_row(s.tokens, p, layer, false, want_k);
        expected_row(s.tokens, p, layer, true, want_v);
        for (int32_t g = 0; g < kHkv; ++g)
          for (int32_t c = 0; c < kD; ++c) {
            float k = 0, v = 0;
            const int32_t hp = p - sinks;
            if (p < sinks) {
              k = reinterpret_cast<const float*>(bk.mirror_k(l.sink))[(p * kHkv + g) * kD + c];
              v = reinterpret_cast<const float*>(bk.mirror_v(l.sink))[(p * kHkv + g) * kD + c];
            } else if (hp < l.host_tokens) {
              const int32_t id = l.host[static_cast<size_t>(hp / b)];
              bk.read_host_k_row(id, g, hp % b, host_k);
              k = host_k[c];
              v = reinterpret_cast<const float*>(bk.host_v(id))[bk.host_v_elem(g, hp % b, c)];
            } else {
              const int32_t w = hp - l.host_tokens;
              const int32_t id = l.window[static_cast<size_t>(w / b)];
              k = reinterpret_cast<const float*>(bk.mirror_k(id))[((w % b) * kHkv + g) * kD + c];
              v = reinterpret_cast<const float*>(bk.mirror_v(id))[((w % b) * kHkv + g) * kD + c];
            }
            INFO("layer " << layer << " pos " << p << " head " << g << " channel " << c);
            REQUIRE(k == want_k[g * kD + c]);
            REQUIRE(v == want_v[g * kD + c]);
          }
      }
    }
  }
};

}  // namespace

TEST_CASE("prefix cache property: random admit/grow/finish/cancel/preempt/evict", "[prefix]") {
  int64_t adopted = 0, evicted = 0;
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    INFO("seed " << seed);
    Harness h(seed);
    for (int op = 0; op < 400; ++op) {
      const int32_t what = h.pick(100);
      if (what < 20 || h.live.empty()) {
        if (!h.preempted.empty() && h.pick(2) == 0) {
          auto t = std::move(h.preempted.back());
          h.preempted.pop_back();
          h.admit(std::move(t));
        } else {
          h.admit(h.new_tokens());
        }
      } else if (what < 70) {
        h.grow(h.live[static_cast<size_t>(h.pick(static_cast<int32_t>(h.live.size())))]);
      } else if (what < 76) {
        Live& s = h.live[static_cast<size_t>(h.pick(static_cast<int32_t>(h.live.size())))];
        h.store->publish(*s.kv, s.tokens);
      } else if (what < 90) {
        h.end(static_cast<size_t>(h.pick(static_cast<int32_t>(h.live.size()))), 0);
      } else if (what < 93) {
        h.end(static_cast<size_t>(h.pick(static_cast<int32_t>(h.live.size()))), 1);
      } else if (what < 97) {
        h.end(static_cast<size_t>(h.pick(static_cast<int32_t>(h.live.size()))), 2);
      } else {
        h.store->prefix_cache()->evict_one();
      }
      h.check();
    }
    while (!h.live.empty()) h.end(h.live.size() - 1, 0);
    h.check();
    const PrefixCache& cache = *h.store->prefix_cache();
    CHECK(h.store->device_blocks_used() == 0);
    CHECK(h.store->host_blocks_used() == cache.cached_blocks());  // free or cached: no leak
    adopted += h.adopted_tokens;
    evicted += cache.stats().evicted_blocks;
    h.store->prefix_cache()->clear();
    CHECK(h.store->host_blocks_used() == 0);
  }
  CHECK(adopted > 0);  // the runs did exercise adoption and eviction
  CHECK(evicted > 0);
}
