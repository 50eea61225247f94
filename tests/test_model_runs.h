// Shared helpers of the tests that run a model end to end through a KV store: the reference
// checkpoints, a small hybrid configuration, a prompt-then-decode run returning every logit row,
// and the worst row error between two runs.
#pragma once

#include <algorithm>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "kvstore/kv_store.h"
#include "models/model.h"
#include "tests/test_helpers.h"

namespace tandem::test {

// Every random-weight checkpoint with reference logits in tests/fixtures/logits: small enough
// for the tests that run each one under many store configurations (test_device_placement,
// test_cuda_model). Bit equality between backends does not depend on trained weights.
inline constexpr const char* kFixtureModels[] = {
    "llama-tiny", "llama-tiny-f16-tied", "mistral-tiny-bf16-sharded", "qwen2-tiny", "qwen3-tiny",
    "opt-tiny",   "opt-tiny-postln"};

using LogitRows = std::vector<std::vector<float>>;

// Sinks 2, blocks of 4 and 2 top-k blocks: small enough that the reference prompts reach the
// host tier.
inline KvConfig small_hybrid(int32_t window, SparsePolicy p, CpuAttnMode m,
                             DType kv = DType::kF32) {
  KvConfig c;
  c.sinks = 2;
  c.block = 4;
  c.window = window;
  c.sparse = p;
  c.cpu_attn = m;
  c.topk_blocks = 2;
  c.kv_dtype = kv;
  return c;
}

// Logits of every position of prompt + decode on one sequence: the prompt prefilled in chunks of
// `chunk`, then one decode step per token. `stats`, if set, receives the host counters.
inline LogitRows run_sequence(Model& model, const KvConfig& cfg, const std::vector<int32_t>& prompt,
                              const std::vector<int32_t>& decode, int32_t chunk,
                              HostStats* stats = nullptr) {
  KvStore store(model.backend(), model.kv_shape(), cfg, 1, 64);
  auto kv = store.new_sequence(64);
  LogitRows rows;
  const int64_t v = model.config().vocab_size;
  for (size_t at = 0; at < prompt.size(); at += static_cast<size_t>(chunk)) {
    const size_t n = std::min(prompt.size() - at, static_cast<size_t>(chunk));
    const StepSequence s{kv.get(), std::span<const int32_t>(prompt).subspan(at, n), true, false,
                         at + n == prompt.size()};
    const TensorView l = model.forward(std::span<const StepSequence>(&s, 1));
    for (int64_t r = 0; r < l.dim(0); ++r)
      rows.emplace_back(l.as<float>() + r * v, l.as<float>() + (r + 1) * v);
  }
  for (const int32_t& t : decode) {
    const StepSequence s{kv.get(), std::span<const int32_t>(&t, 1), false, true, false};
    const TensorView l = model.forward(std::span<const StepSequence>(&s, 1));
    rows.emplace_back(l.as<float>(), l.as<float>() + v);
  }
  if (stats) *stats = KvStore::stats_of(*kv);
  return rows;
}

// The prompt of ref in one chunk (the logits of its last token), then one decode step per token
// of ref.decode with before(store) and after(store) around each (what a test counts per step:
// after runs before the step's logits are copied); the sequence's host counters in *stats.
template <class Before, class After>
LogitRows run_decode_steps(Model& model, const KvConfig& cfg, const ReferenceLogits& ref,
                           Before before, After after, HostStats* stats = nullptr) {
  KvStore store(model.backend(), model.kv_shape(), cfg, 1, 64);
  auto kv = store.new_sequence(64);
  LogitRows rows;
  const int64_t v = model.config().vocab_size;
  const StepSequence p{kv.get(), ref.prompt, false, false, true};
  const TensorView pl = model.forward(std::span<const StepSequence>(&p, 1));
  rows.emplace_back(pl.as<float>(), pl.as<float>() + v);
  for (const int32_t& t : ref.decode) {
    before(store);
    const StepSequence s{kv.get(), std::span<const int32_t>(&t, 1), false, true, false};
    const TensorView l = model.forward(std::span<const StepSequence>(&s, 1));
    after(store);
    rows.emplace_back(l.as<float>(), l.as<float>() + v);
  }
  if (stats) *stats = KvStore::stats_of(*kv);
  return rows;
}

// The largest rel_error over matching rows (rows of different counts: infinity).
inline double worst_rel_error(const LogitRows& got, const LogitRows& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double w = 0;
  for (size_t i = 0; i < got.size(); ++i)
    w = std::max(w, rel_error(got[i].data(), want[i].data(), static_cast<int64_t>(got[i].size())));
  return w;
}

// n token ids in [0, vocab), deterministic for a seed (prompts for random-weight checkpoints).
inline std::vector<int32_t> random_tokens(int32_t n, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

}  // namespace tandem::test
