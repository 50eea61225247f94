// Parity of the CUDA backend's attention with the CPU reference backend (tests/cuda_parity.h):
// decode with split-K and GQA over every KV dtype, over the pages of a pool (the hybrid window),
// prefill causal within the chunk, and two spans merged against all keys at once.
//
// Without a CUDA device (or in a build without CUDA) the executable prints
// "no CUDA device: N GPU tests skipped" and exits 4, ctest's SKIP_RETURN_CODE (label "gpu").
// The listener base classes of Catch2 v2 (used below to skip the whole run without a GPU).
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tests/cuda_parity.h"
#include "tests/gpu_skip.h"

using namespace tandem;
using namespace tandem::test;

CATCH_REGISTER_LISTENER(SkipWithoutGpu)

namespace {

struct AttnCase {
  int64_t n, hq, hkv, d, t_keys, k_pos0;
  std::vector<int32_t> q_pos;
  DType kt, vt;
};

void run_attention(const AttnCase& c, uint32_t seed) {
  INFO("n=" << c.n << " hq=" << c.hq << " hkv=" << c.hkv << " d=" << c.d << " T=" << c.t_keys
            << " k " << dtype_name(c.kt) << " v " << dtype_name(c.vt));
  const Buffer q = random_buffer(DType::kF32, {c.n, c.hq, c.d}, seed);
  const Buffer k = random_buffer(c.kt, {c.t_keys, c.hkv, c.d}, seed + 1);
  const Buffer v = random_buffer(c.vt, {c.t_keys, c.hkv, c.d}, seed + 2);
  const Buffer pos = i32_buffer(c.q_pos);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  Buffer ro(DType::kF32, {c.n, c.hq, c.d}), rl(DType::kF32, {c.n, c.hq});
  cpu().attention(q.view(), k.view(), v.view(), pos.view(), c.k_pos0, scale,
                  {ro.view(), rl.view()});
  const Buffer dq = up(q), dk = up(k), dv = up(v), dp = up(pos);
  const Buffer dox = poisoned_like(ro), dl = poisoned_like(rl);
  gpu().attention(dq.view(), dk.view(), dv.view(), dp.view(), c.k_pos0, scale,
                  {dox.view(), dl.view()});
  CHECK(rel_err(down(dox.view()), values(ro)) < kTol32);
  check_lse(down(dl.view()), values(rl), kTol32);
}

}  // namespace

TEST_CASE("cuda: attention decode with split-K, GQA, KV dtypes, invisible queries",
          "[gpu][attention]") {
  uint32_t seed = 100;
  for (DType t : kFloatTypes) {
    // One query over a long span: split into chunks, merged by the combine kernel.
    run_attention({1, 8, 2, 128, 3000, 0, {2999}, t, t}, seed += 3);
    // A batch of 4 queries: one sees every key, two see part of the span, one sees none.
    run_attention({4, 8, 2, 128, 2500, 1000, {3499, 1700, 999, 2000}, t, t}, seed += 3);
  }
  // Mixed KV dtypes, rep 7 (two head groups per kv head, the second partial), d not a multiple
  // of 32, a span shorter than the split threshold.
  run_attention({2, 14, 2, 80, 700, 0, {699, 350}, DType::kBF16, DType::kF16}, seed += 3);
  // d = 256, MHA, split.
  run_attention({1, 4, 4, 256, 1100, 5, {1104}, DType::kF32, DType::kBF16}, seed += 3);
  // Keys positioned after the query: nothing visible, lse = -inf and o = 0 for every head.
  run_attention({2, 4, 1, 64, 600, 100, {50, 99}, DType::kF16, DType::kF16}, seed += 3);
}

TEST_CASE("cuda: attention_paged over pages of a pool, as the hybrid window uses it",
          "[gpu][attention][paged]") {
  uint32_t seed = 7000;
  struct PagedCase {
    int64_t n, hq, hkv, d, rows, pad, last;
    std::vector<int32_t> ids;
  };
  const std::vector<PagedCase> cases = {
      {1, 32, 8, 128, 64, 0, 64, {9, 3, 4, 0, 1, 2, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15}},
      {1, 8, 2, 64, 16, 5, 7, {2, 0, 3}},
      {3, 4, 4, 128, 64, 0, 20, {1, 0}},
      {1, 28, 4, 128, 64, 3, 64, std::vector<int32_t>(40, 0)},  // 40 pages, every one page 0
  };
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16})
    for (const PagedCase& c : cases) {
      const int64_t count = static_cast<int64_t>(c.ids.size());
      const int64_t t_keys = (count - 1) * c.rows + c.last;
      const int64_t page = c.rows + c.pad, row = c.hkv * c.d;
      const int64_t pool_rows = (*std::max_element(c.ids.begin(), c.ids.end()) + 1) * page;
      INFO("kv " << dtype_name(t) << " n=" << c.n << " T=" << t_keys << " rows=" << c.rows);
      const Buffer q = random_buffer(DType::kF32, {c.n, c.hq, c.d}, seed++);
      const Buffer k = random_buffer(t, {pool_rows, c.hkv, c.d}, seed++);
      const Buffer v = random_buffer(t, {pool_rows, c.hkv, c.d}, seed++);
      std::vector<int32_t> q_pos;
      for (int64_t i = 0; i < c.n; ++i) q_pos.push_back(static_cast<int32_t>(t_keys - c.n + i));
      const Buffer pos = i32_buffer(q_pos);
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
      std::vector<int64_t> offsets;
      for (int32_t id : c.ids) offsets.push_back(id * page * row);
      const KvPages pages{offsets.data(), count, static_cast<int32_t>(c.rows)};
      Buffer ro(DType::kF32, {c.n, c.hq, c.d}), rl(DType::kF32, {c.n, c.hq});
      cpu().attention_paged(q.view(), TensorView(k.view().data, t, {t_keys, c.hkv, c.d}),
                            TensorView(v.view().data, t, {t_keys, c.hkv, c.d}), pages, pos.view(),
                            0, scale, {ro.view(), rl.view()});
      const Buffer dq = up(q), dk = up(k), dv = up(v), dp = up(pos);
      const Buffer dox = poisoned_like(ro), dl = poisoned_like(rl);
      TensorView kview = dk.view(), vview = dv.view();
      kview.shape[0] = vview.shape[0] = t_keys;
      gpu().attention_paged(dq.view(), kview, vview, pages, dp.view(), 0, scale,
                            {dox.view(), dl.view()});
      CHECK(rel_err(down(dox.view()), values(ro)) < kTol32);
      check_lse(down(dl.view()), values(rl), kTol32);
    }
}

TEST_CASE("cuda: attention prefill (n > 1, causal within the chunk)", "[gpu][attention]") {
  uint32_t seed = 200;
  for (DType t : {DType::kF32, DType::kBF16}) {
    const int64_t n = 64, past = 100, k_pos0 = 7;
    std::vector<int32_t> pos;
    for (int64_t i = 0; i < n; ++i) pos.push_back(static_cast<int32_t>(k_pos0 + past + i));
    run_attention({n, 4, 4, 64, past + n, k_pos0, pos, t, t}, seed += 3);
    run_attention({n, 8, 2, 128, past + n, k_pos0, pos, t, t}, seed += 3);
  }
}

TEST_CASE("cuda: attention over two spans merged equals attention over all keys",
          "[gpu][attention][merge]") {
  const int64_t n = 3, hq = 8, hkv = 2, d = 128, t_keys = 2000, cut = 1500;
  const Buffer q = random_buffer(DType::kF32, {n, hq, d}, 400);
  const Buffer k = random_buffer(DType::kBF16, {t_keys, hkv, d}, 401);
  const Buffer v = random_buffer(DType::kBF16, {t_keys, hkv, d}, 402);
  const Buffer pos = i32_buffer({1999, 1600, 1000});
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  Buffer ro(DType::kF32, {n, hq, d}), rl(DType::kF32, {n, hq});
  cpu().attention(q.view(), k.view(), v.view(), pos.view(), 0, scale, {ro.view(), rl.view()});
  const Buffer dq = up(q), dk = up(k), dv = up(v), dp = up(pos);
  const Buffer ao = poisoned_like(ro), al = poisoned_like(rl);
  const Buffer bo = poisoned_like(ro), bl = poisoned_like(rl);
  gpu().attention(dq.view(), dk.view().slice(0, cut), dv.view().slice(0, cut), dp.view(), 0, scale,
                  {ao.view(), al.view()});
  gpu().attention(dq.view(), dk.view().slice(cut, t_keys), dv.view().slice(cut, t_keys), dp.view(),
                  cut, scale, {bo.view(), bl.view()});
  gpu().merge({ao.view(), al.view()}, {bo.view(), bl.view()});
  CHECK(rel_err(down(ao.view()), values(ro)) < kTol32);
  check_lse(down(al.view()), values(rl), kTol32);
}
