// The prefix cache of the host tier (kvstore/prefix_cache.h): its chained, verified lookups and
// LRU eviction; exactness in the engine (at temperature 0 under --sparse full every output is
// the one without the cache: repeated prompts, concurrent requests sharing prefixes of several
// lengths, n = 4, preemption, prefixes longer than the device window); the bounded host tier.
// The store's property test is in test_prefix_property.cpp.
#include "kvstore/prefix_cache.h"
#include "tests/engine_fixture.h"

using namespace tandem;
using namespace tandem::test;

namespace {

// A pool and a cache of 2 layers, sinks 4, blocks of 8 tokens.
struct CacheFixture {
  BlockPool host{64, 16, true, MemoryKind::kHost};
  PrefixCache cache{host, 2, 4, 8, 42};
  std::vector<int32_t> ids() { return {host.alloc(), host.alloc()}; }
  // Caches the chunks of `tokens` not cached yet (as a releasing sequence does); returns its chain.
  std::vector<PrefixCache::Entry*> put(const std::vector<int32_t>& tokens) {
    std::vector<PrefixCache::Entry*> chain;
    uint64_t parent = 0;
    for (int32_t j = 0; j < cache.chunks_of(std::ssize(tokens)); ++j) {
      const uint64_t h = cache.chunk_hash(tokens, j, parent);
      PrefixCache::Entry* e = cache.find(h, parent, tokens, j);
      if (e == nullptr) e = cache.insert(h, parent, tokens, j, ids(), {});
      chain.push_back(e);
      parent = h;
    }
    return chain;
  }
};

std::vector<int32_t> iota_tokens(int32_t n, int32_t first = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = first + i;
  return t;
}

}  // namespace

TEST_CASE("prefix cache: chunks, chained hashes, longest match", "[prefix]") {
  CacheFixture f;
  CHECK(f.cache.chunks_of(11) == 0);  // chunk 0 is the sinks and one block: 12 tokens
  CHECK(f.cache.chunks_of(12) == 1);
  CHECK(f.cache.chunks_of(27) == 2);
  const auto a = iota_tokens(30);
  f.put(a);
  CHECK(f.cache.entries() == 3);
  CHECK(f.cache.cached_blocks() == 6);
  // The longest match stops at the first chunk that differs, and never counts a later chunk
  // that happens to be equal (its parent differs).
  auto b = a;
  b[15] = 999;  // in chunk 1
  CHECK(f.cache.match(b, 10, std::ssize(b)).size() == 1);
  CHECK(f.cache.match(a, 10, std::ssize(a)).size() == 3);
  CHECK(f.cache.match(a, 2, std::ssize(a)).size() == 2);  // bounded by the caller
  auto c = a;
  c[0] = 7;  // chunk 0 differs: nothing, though chunks 1 and 2 hold the same tokens
  CHECK(f.cache.match(c, 10, std::ssize(c)).empty());
  CHECK(f.cache.stats().hit_tokens == 12 + 28 + 20);
  CHECK(f.cache.stats().queried_tokens == 4 * 30);
  // The hash names the position in the chain: the same tokens as chunk 2 of another prefix
  // hash differently.
  const uint64_t h0 = f.cache.chunk_hash(a, 0, 0);
  CHECK(f.cache.chunk_hash(a, 1, h0) != f.cache.chunk_hash(a, 1, h0 + 1));
}

TEST_CASE("prefix cache: a hash match with other tokens is not a hit", "[prefix]") {
  CacheFixture f;
  const auto a = iota_tokens(12);
  const uint64_t h = f.cache.chunk_hash(a, 0, 0);
  f.cache.insert(h, 0, a, 0, f.ids(), {});
  auto b = iota_tokens(12, 100);
  CHECK(f.cache.find(h, 0, b, 0) == nullptr);  // as if b collided with a
  CHECK(f.cache.find(h, 0, a, 0) != nullptr);
  CHECK(f.cache.find(h, 5, a, 0) == nullptr);  // another parent
}

TEST_CASE("prefix cache: referenced entries stay, the rest go least recently used", "[prefix]") {
  CacheFixture f;
  const auto a = iota_tokens(28), b = iota_tokens(28, 1000);  // 3 chunks each
  auto ca = f.put(a);
  f.cache.ref(ca[0]);  // a running sequence shares a's root
  auto cb = f.put(b);
  // b's chain was touched last (tail first, root last); a's tail is the oldest.
  for (auto it = cb.rbegin(); it != cb.rend(); ++it) f.cache.touch(*it);
  f.host.set_limit(10);        // 5 entries of 2 layers
  CHECK(f.host.used() == 12);  // the limit bounds allocation, not what was already taken
  CHECK(f.cache.evictable_blocks() == 10);
  f.cache.make_room(2);  // to 8 used: 2 entries go, a's tail first
  CHECK(f.host.used() == 8);
  CHECK(f.cache.match(a, 10, 0).size() == 1);  // a[0] referenced, a[1] evicted
  CHECK(f.cache.match(b, 10, 0).size() == 3);
  CHECK(f.cache.stats().evicted_blocks == 4);
  while (f.cache.evict_one()) {
  }
  CHECK(f.cache.entries() == 1);  // only the referenced root is left
  CHECK(f.host.used() == 2);
  f.cache.unref(ca[0]);
  f.cache.clear();
  CHECK(f.host.used() == 0);
  CHECK(f.cache.cached_blocks() == 0);
}

namespace {

// A prompt of n tokens from the story text (prefixes of it share their first tokens; another
// variant shares none), then `tail`.
std::vector<int32_t> text_prompt(int32_t n, const char* tail = "", int variant = 0) {
  std::string text = variant == 0 ? "" : "Story " + std::to_string(variant) + ". ";
  for (int i = 0; i < 40; ++i)
    text += "The little dog ran to the park. It saw a big red ball and a cat. " + std::to_string(i);
  std::vector<int32_t> t = demo_tokenizer().encode(text);
  REQUIRE(static_cast<int32_t>(t.size()) >= n);
  t.resize(static_cast<size_t>(n));
  const std::vector<int32_t> more = demo_tokenizer().encode(tail);
  t.insert(t.end(), more.begin(), more.end());
  return t;
}

struct Run {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<int32_t> cached;  // per request: TokenEvent::cached of its last event
  EngineMetrics metrics;
};

// Submits `waves` of prompts (each wave concurrently, waves one after the other) to one engine.
Run serve(Setup& s, const KvConfig& cfg,
          const std::vector<std::vector<std::vector<int32_t>>>& waves, int32_t max_tokens,
          int32_t max_batch = 8, int32_t chunk = 32) {
  KvStore store(s.model->backend(), s.model->kv_shape(), cfg, max_batch, 1024);
  EngineOptions opt;
  opt.max_batch = max_batch;
  opt.prefill_chunk = chunk;
  opt.step_token_budget = 96;
  Engine engine(*s.model, demo_tokenizer(), store, opt);
  Run run;
  int64_t done = 0;
  for (const auto& wave : waves) {
    std::vector<std::shared_ptr<TokenStream>> streams;
    for (const auto& p : wave) streams.push_back(engine.submit(greedy(p, max_tokens)));
    for (auto& st : streams) {
      TokenEvent ev;
      std::vector<int32_t> out;
      int32_t cached = -1;
      do {
        REQUIRE(st->next(ev, kPatience));
        out.insert(out.end(), ev.tokens.begin(), ev.tokens.end());
        cached = ev.cached;
      } while (ev.finish == FinishReason::kNone);
      CHECK(ev.finish == FinishReason::kLength);
      run.tokens.push_back(out);
      run.cached.push_back(cached);
    }
    done += static_cast<int64_t>(wave.size());
    run.metrics = wait_metrics(engine, [&](const EngineMetrics& x) {
      return x.running == 0 && x.finished_length == done;
    });
  }
  return run;
}

KvConfig with_cache(KvConfig c, bool on) {
  c.prefix_cache = on;
  return c;
}

}  // namespace

TEST_CASE("prefix cache: outputs equal those without it, with far less prefill",
          "[prefix][engine]") {
  Setup s;
  const int32_t max_tokens = 12;
  // Prefixes of several lengths, block-aligned (4 + 16k) and not, one longer than the device
  // window (64 tokens: its cached blocks are shared on the host), each with its own tail.
  std::vector<std::vector<int32_t>> wave;
  for (int32_t n : {150, 20, 52, 100, 36})
    for (const char* tail : {" Then the dog", " The cat said"})
      wave.push_back(text_prompt(n, tail));
  const auto waves = std::vector<std::vector<std::vector<int32_t>>>{wave, wave};
  const Run off = serve(s, with_cache(hybrid_config(), false), waves, max_tokens);
  const Run on = serve(s, with_cache(hybrid_config(), true), waves, max_tokens);
  REQUIRE(on.tokens.size() == off.tokens.size());
  for (size_t i = 0; i < on.tokens.size(); ++i) {
    INFO("request " << i);
    CHECK(on.tokens[i] == off.tokens[i]);
  }
  // The second wave repeats the first: all but the last partial chunk comes from the cache.
  const size_t n = wave.size();
  for (size_t i = 0; i < n; ++i) {
    const auto len = static_cast<int32_t>(wave[i].size());
    CHECK(off.cached[n + i] == 0);
    CHECK(on.cached[n + i] >= len - 16);
    CHECK(on.cached[n + i] < len);
  }
  CHECK(on.metrics.prompt_tokens < off.metrics.prompt_tokens * 3 / 4);
  CHECK(on.metrics.prefix_hit_tokens > 0);
  CHECK(on.metrics.kv_device_blocks_used == 0);
  CHECK(off.metrics.kv_host_blocks_used == 0);
  CHECK(on.metrics.kv_host_blocks_used == on.metrics.prefix_cached_blocks);  // only cached ones
}

TEST_CASE("prefix cache: n = 4 choices prefill the prompt once and equal the solo run",
          "[prefix][engine]") {
  Setup s;
  const auto prompt = text_prompt(140, " Then");
  const std::vector<int32_t> want = reference(*s.model, prompt, 10);
  const auto waves =
      std::vector<std::vector<std::vector<int32_t>>>{{prompt, prompt, prompt, prompt}};
  const Run on = serve(s, hybrid_config(), waves, 10);
  for (const auto& t : on.tokens) CHECK(t == want);
  // The choices wait for the first one's prefill and adopt it.
  int32_t adopted = 0;
  for (int32_t c : on.cached) adopted += c > 0;
  CHECK(adopted == 3);
  CHECK(on.metrics.prompt_tokens < 2 * static_cast<int64_t>(prompt.size()));
}

TEST_CASE("prefix cache: preempted sequences resume from their cached blocks", "[prefix][engine]") {
  Setup s;
  const int64_t layers = s.model->config().n_layer;
  std::vector<std::vector<int32_t>> wave;
  for (int i = 0; i < 5; ++i) wave.push_back(text_prompt(30 + 25 * i, " and", i + 1));
  const auto waves = std::vector<std::vector<std::vector<int32_t>>>{wave};
  // Room for 12 device blocks per layer: two or three sequences at a time, so they preempt.
  const Run off = serve(s, with_cache(hybrid_config(12 * layers), false), waves, 70, 8, 16);
  const Run on = serve(s, with_cache(hybrid_config(12 * layers), true), waves, 70, 8, 16);
  CHECK(on.tokens == off.tokens);
  CHECK(off.metrics.preemptions > 0);
  CHECK(on.metrics.preemptions > 0);
  CHECK(on.metrics.prompt_tokens < off.metrics.prompt_tokens);  // resumed, not recomputed
  CHECK(on.metrics.kv_device_blocks_used == 0);
}

TEST_CASE("prefix cache: a bounded host tier evicts and refuses what never fits",
          "[prefix][engine]") {
  Setup s;
  KvConfig cfg = hybrid_config();
  const KvShape sh = s.model->kv_shape();
  const BlockLayout layout{cfg.block, sh.n_head_kv, sh.head_dim, cfg.kv_dtype};
  // Room for 40 host blocks per layer: one long sequence, not many cached ones.
  cfg.host_gib = double(40 * sh.n_layer * ((layout.host_bytes() + 63) / 64 * 64)) / (1 << 30);
  std::vector<std::vector<std::vector<int32_t>>> waves;
  for (int i = 0; i < 6; ++i) waves.push_back({text_prompt(300 + 30 * i, " x", i + 1)});
  const Run off = serve(s, with_cache(cfg, false), waves, 8);
  const Run on = serve(s, cfg, waves, 8);
  CHECK(on.tokens == off.tokens);
  CHECK(on.metrics.prefix_evicted_blocks > 0);
  CHECK(on.metrics.kv_host_bytes_used <= on.metrics.kv_host_bytes_budget);
  CHECK(on.metrics.kv_host_blocks_used <= 40 * sh.n_layer);
  // A request longer than the host tier can ever hold is refused with the limit's name.
  KvStore store(s.model->backend(), sh, cfg, 4, 1024);
  Engine engine(*s.model, demo_tokenizer(), store, EngineOptions{});
  std::string what;
  try {
    engine.submit(greedy(text_prompt(900), 100));
  } catch (const Error& e) {
    what = e.what();
  }
  CHECK(what.find("--kv-host-gib") != std::string::npos);
}
