// HostAttention splits each item by its own size and the thread count only: an item's partial is
// the same bits whether it is submitted alone or with many others (the hybrid store submits one
// batch per layer for all its sequences, so a sequence's result must not depend on the others).
#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <vector>

#include "cpu_attn/host_attention.h"

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
  }
}
