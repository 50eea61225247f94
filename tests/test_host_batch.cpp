// HostAttention splits each item by its own size and the thread count only: an item's partial is
// the same bits whether it is submitted alone or with many others (the hybrid store submits one
// batch per layer for all its sequences, so a sequence's result must not depend on the others).
#include <tbb/task_arena.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "cpu_attn/host_attention.h"
#include "kernels/common.h"
#include "kvstore/block_pool.h"

using namespace tandem;

TEST_CASE("an item's host partial does not depend on the rest of the batch", "[cpu_attn][batch]") {
  const int32_t d = 64, G = 2, rows = 6000;  // about 3 MiB of K+V: split into several parts
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  auto fill = [&](std::vector<float>& x, size_t n) {
    x.resize(n);
    for (float& e : x) e = nd(rng);
  };
  std::vector<float> k, v, q;
  fill(k, size_t{rows} * d);
  fill(v, size_t{rows} * d);
  fill(q, size_t{16} * G * d);
  const std::vector<HostBlockRef> blocks = {HostBlockRef{k.data(), v.data(), rows}};
  const std::vector<HostBlockRef> small = {HostBlockRef{k.data(), v.data(), 300}};
  for (int threads : {1, 2, 3}) {
    CAPTURE(threads);
    HostAttention ha(threads, d, 0.125f, DType::kF32);
    auto run = [&](int extra) {
      std::vector<float> o(size_t{16} * G * d), lse(size_t{16} * G);
      std::vector<HostAttnItem> items;
      items.push_back(HostAttnItem{q.data(), G, o.data(), lse.data(), blocks});
      for (int i = 1; i <= extra; ++i)  // other sequences: long and short ones
        items.push_back(HostAttnItem{q.data() + i * G * d, G, o.data() + i * G * d,
                                     lse.data() + i * G, i % 2 ? blocks : small});
      ha.wait(ha.submit(std::move(items)));
      o.resize(size_t{G} * d);
      o.insert(o.end(), lse.begin(), lse.begin() + G);
      return o;
    };
    const std::vector<float> alone = run(0);
    for (int extra : {1, 4, 15}) {
      const std::vector<float> with = run(extra);
      CHECK(std::memcmp(with.data(), alone.data(), alone.size() * sizeof(float)) == 0);
    }
    // A waited batch's plan buffers are reused by the next one (HostAttention::Spare): the item
    // alone again, planned into the buffers of the 15-item batch, gives the same bits.
    const std::vector<float> again = run(0);
    CHECK(std::memcmp(again.data(), alone.data(), alone.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("a prepare picks the blocks once the start flag is up; `after` orders batches",
          "[cpu_attn][prepare]") {
  const int32_t d = 32, G = 2, rows = 500;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  std::vector<float> k(size_t{rows} * d), v(k.size()), q(size_t{G} * d);
  for (auto* x : {&k, &v, &q})
    for (float& e : *x) e = nd(rng);
  const std::vector<HostBlockRef> blocks = {
      HostBlockRef{k.data(), v.data(), 200},
      HostBlockRef{k.data() + 200 * d, v.data() + 200 * d, 300}};
  HostAttention ha(2, d, 0.2f, DType::kF32);
  std::vector<float> want_o(size_t{G} * d), want_lse(G);
  ha.wait(ha.submit({HostAttnItem{q.data(), G, want_o.data(), want_lse.data(), blocks}}));

  // The query lands after the submit (as a device writes it); the prepare reads it to pick the
  // blocks, so it must run after the flag and before the split.
  std::vector<float> qbuf(q.size(), std::numeric_limits<float>::quiet_NaN()), o(want_o.size()),
      lse(G);
  uint32_t flag = 0;
  std::vector<HostBlockRef> picked;
  bool saw_query = false;
  const auto t = ha.submit({HostAttnItem{qbuf.data(), G, o.data(), lse.data(), {}}}, {},
                           HostAttnStart{&flag, 1}, [&](std::span<HostAttnItem> items) {
                             saw_query = !std::isnan(items[0].q[0]);
                             picked = blocks;
                             items[0].blocks = picked;
                           });
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK_FALSE(ha.ready(t));
  std::copy(q.begin(), q.end(), qbuf.begin());
  __atomic_store_n(&flag, 1u, __ATOMIC_RELEASE);
  ha.wait(t);
  CHECK(saw_query);
  CHECK(std::memcmp(o.data(), want_o.data(), o.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(lse.data(), want_lse.data(), lse.size() * sizeof(float)) == 0);

  // A batch of no items is a host job behind a flag; `after` holds the next one until it is done.
  std::vector<int> order;
  std::mutex mu;
  uint32_t flag2 = 0;
  const auto first = ha.submit({}, {}, HostAttnStart{&flag2, 1}, [&](std::span<HostAttnItem>) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::lock_guard<std::mutex> l(mu);
    order.push_back(1);
  });
  const auto second =
      ha.submit({}, {}, HostAttnStart{nullptr, 0, first.id}, [&](std::span<HostAttnItem>) {
        std::lock_guard<std::mutex> l(mu);
        order.push_back(2);
      });
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK_FALSE(ha.ready(second));  // its predecessor has not started
  __atomic_store_n(&flag2, 1u, __ATOMIC_RELEASE);
  ha.wait(second);
  ha.wait(first);
  CHECK(order == std::vector<int>{1, 2});

  // A prepare that throws fails its batch: NaN outputs, the error at wait.
  std::vector<float> o3(want_o.size(), 0.0f), l3(G, 0.0f);
  const auto bad = ha.submit(
      {HostAttnItem{q.data(), G, o3.data(), l3.data(), {}}}, {}, {},
      [](std::span<HostAttnItem>) { throw Error(ErrorKind::kInternal, "no blocks today"); });
  CHECK_THROWS_WITH(ha.wait(bad), Catch::Contains("no blocks today"));
  CHECK(std::isnan(o3[0]));
  CHECK(std::isnan(l3[0]));
}

TEST_CASE("an in_wait batch runs inside wait(), the same bits as on the workers",
          "[cpu_attn][in_wait]") {
  const int32_t d = 64, G = 4, rows = 5000;  // ~2.4 MiB of K+V per item: several parts each
  std::mt19937 rng(21);
  std::normal_distribution<float> nd;
  std::vector<float> k(size_t{rows} * d), v(k.size()), q(size_t{3} * G * d);
  for (auto* x : {&k, &v, &q})
    for (float& e : *x) e = nd(rng);
  const std::vector<HostBlockRef> blocks = {
      HostBlockRef{k.data(), v.data(), 3000},
      HostBlockRef{k.data() + 3000 * d, v.data() + 3000 * d, rows - 3000}};
  const std::vector<HostBlockRef> small = {HostBlockRef{k.data(), v.data(), 700}};
  // threads 1: this thread alone. Otherwise the waiting thread's arena, or the instance's own
  // where that arena has more threads than the instance (caller 4: a wait from inside an arena
  // of 4; on a 2-core machine oneTBB warns once that it runs it with fewer workers).
  for (const auto& tc :
       {std::pair{1, 0}, std::pair{2, 0}, std::pair{0, 0}, std::pair{2, 4}, std::pair{1, 4}}) {
    const int threads = tc.first, caller = tc.second;  // clang 14 cannot capture bindings
    CAPTURE(threads, caller);
    HostAttention ha(threads, d, 0.125f, DType::kF32);
    tbb::task_arena outer(std::max(caller, 1));
    const auto wait = [&](HostAttention::Ticket t) {
      if (caller > 0)
        outer.execute([&] { ha.wait(t); });
      else
        ha.wait(t);
    };
    auto items_for = [&](std::vector<float>& o, std::vector<float>& lse) {
      o.assign(size_t{3} * G * d, 0.0f);
      lse.assign(size_t{3} * G, 0.0f);
      std::vector<HostAttnItem> items;
      for (int i = 0; i < 3; ++i)
        items.push_back(HostAttnItem{q.data() + i * G * d, G, o.data() + i * G * d,
                                     lse.data() + i * G, i == 1 ? small : blocks, 0});
      return items;
    };
    std::vector<float> want_o, want_lse, o, lse;
    ha.wait(ha.submit(items_for(want_o, want_lse)));
    int done = 0;
    HostAttnStart in_wait;
    in_wait.in_wait = true;
    const auto t = ha.submit(
        items_for(o, lse), [&] { ++done; }, in_wait);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHECK_FALSE(ha.ready(t));  // nothing runs it before the wait
    CHECK(done == 0);
    CHECK(o[0] == 0.0f);
    wait(t);
    CHECK(done == 1);
    CHECK(std::memcmp(o.data(), want_o.data(), o.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(lse.data(), want_lse.data(), lse.size() * sizeof(float)) == 0);

    // With a prepare that picks the blocks (it runs in the wait too).
    std::vector<HostBlockRef> picked;
    auto items = items_for(o, lse);
    for (auto& it : items) it.blocks = {};
    const auto p = ha.submit(std::move(items), {}, in_wait, [&](std::span<HostAttnItem> its) {
      picked = blocks;
      for (size_t i = 0; i < its.size(); ++i) its[i].blocks = i == 1 ? small : picked;
    });
    wait(p);
    CHECK(std::memcmp(o.data(), want_o.data(), o.size() * sizeof(float)) == 0);

    // Cancelled before its wait: never runs, NaN outputs, on_done once, the wait returns at once.
    const auto c = ha.submit(
        items_for(o, lse), [&] { ++done; }, in_wait);
    ha.cancel(c);
    CHECK(ha.ready(c));
    CHECK(done == 2);
    CHECK(std::isnan(o[0]));
    CHECK(std::isnan(lse[0]));
    wait(c);
    CHECK(done == 2);

    // A failing prepare fails the batch at its wait, as on the workers.
    const auto bad = ha.submit(items_for(o, lse), {}, in_wait, [](std::span<HostAttnItem>) {
      throw Error(ErrorKind::kInternal, "no blocks in wait");
    });
    CHECK_THROWS_WITH(wait(bad), Catch::Contains("no blocks in wait"));
    CHECK(std::isnan(o[0]));

    // It cannot also wait for a flag or a batch.
    uint32_t flag = 0;
    HostAttnStart both{&flag, 1};
    both.in_wait = true;
    CHECK_THROWS_WITH(ha.submit(items_for(o, lse), {}, both), Catch::Contains("run in wait()"));
  }
}

// The host attention workers pick host blocks by id (BlockPool::data / host_data) while the
// engine's thread may be growing the host pool (a decode step evicting into a new chunk): the
// addresses of blocks already handed out must read the same from another thread throughout.
// Under the thread sanitizer (scripts/sanitize.sh tsan) this is also the check that the reads do
// not race with the growth.
TEST_CASE("a growing host pool's blocks read the same from another thread", "[kvstore][pool]") {
  BlockPool pool(256, 4, true, MemoryKind::kHost);  // 4 blocks per chunk: a grow every 4 allocs
  constexpr int kBlocks = 4000;
  std::vector<void*> addr(kBlocks);
  std::atomic<int> published{0};
  std::atomic<bool> mismatch{false};
  std::thread reader([&] {
    std::mt19937 rng(5);
    for (int n = 0; n < kBlocks;) {
      n = published.load(std::memory_order_acquire);
      if (n == 0) continue;
      for (int i = 0; i < 64; ++i) {
        const int id = static_cast<int>(rng() % static_cast<unsigned>(n));
        if (pool.data(id) != addr[static_cast<size_t>(id)] ||
            pool.host_data(id) != addr[static_cast<size_t>(id)])
          mismatch = true;
      }
    }
  });
  for (int i = 0; i < kBlocks; ++i) {
    const int32_t id = pool.alloc();
    REQUIRE(id == i);  // a fresh pool hands out ids in order
    addr[static_cast<size_t>(i)] = pool.data(id);
    std::memset(addr[static_cast<size_t>(i)], i & 0xFF, 256);  // the memory is there
    published.store(i + 1, std::memory_order_release);
  }
  reader.join();
  CHECK_FALSE(mismatch.load());
  CHECK(pool.capacity() == kBlocks);
  for (int i = 0; i < kBlocks; i += 97)
    CHECK(static_cast<const uint8_t*>(pool.data(i))[255] == (i & 0xFF));
}
