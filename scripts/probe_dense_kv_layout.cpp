// probe_dense_kv_layout: decode steps of a model over four dense caches in one process, f32 and
// f16, each with K and V token-major ([T, n_head_kv, head_dim] in memory: DenseKv until
// 2026-12-07) and head-major ([n_head_kv, T, head_dim]: since), every cache filled by import_kv
// with the same random rows to `depth` tokens; the steps go round the four caches, so each pair
// meets the same minutes of a VM whose memory speed flips every few seconds. Prints the median
// step of each and, per pair of neighbouring steps, how often head-major was faster and the
// median ratio; then f16 against f32 (head-major). Needs the switch of
// docs/dense-kv-layout-ab.patch (git apply it, build, then revert with git apply -R):
//   g++ -O2 -std=c++20 -mavx2 -mfma -mf16c -I. scripts/probe_dense_kv_layout.cpp
//       build/libtandem_core.a -ltbb -lspdlog -lfmt -o /tmp/probe_dense_kv_layout
//   /tmp/probe_dense_kv_layout STEPS DEPTH MODEL_DIR
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kvstore/kv_store.h"
#include "models/model.h"
namespace tandem {
extern int tandem_exp_token_major;
}
using namespace tandem;
int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 40;
  const int depth = argc > 2 ? std::atoi(argv[2]) : 4096;
  auto be = make_cpu_backend();
  auto model = Model::load(argv[3], *be);
  const KvShape sh = model->kv_shape();
  struct Seq {
    const char* name;
    std::unique_ptr<KvStore> store;
    std::unique_ptr<SequenceKv> kv;
    std::vector<double> ms;
  };
  std::vector<Seq> seqs;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> k(size_t(depth) * sh.n_head_kv * sh.head_dim), v(k.size());
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  const char* names[4] = {"f32 token-major", "f32 head-major", "f16 token-major", "f16 head-major"};
  for (int c = 0; c < 4; ++c) {
    KvConfig cfg;
    cfg.dense = true;
    cfg.kv_dtype = c < 2 ? DType::kF32 : DType::kF16;
    tandem_exp_token_major = c % 2 == 0;
    Seq s{names[c], std::make_unique<KvStore>(*be, sh, cfg, 1, depth + steps + 8), nullptr, {}};
    s.kv = s.store->new_sequence(depth + steps + 8);
    for (int l = 0; l < sh.n_layer; ++l) s.kv->import_kv(*be, l, k.data(), v.data(), depth);
    s.kv->advance(depth);
    seqs.push_back(std::move(s));
  }
  const int32_t tok = 1234;
  for (int r = 0; r < steps; ++r)
    for (int j = 0; j < 4; ++j) {
      Seq& s = seqs[(r + j) % 4];
      const StepSequence st{s.kv.get(), std::span<const int32_t>(&tok, 1), false, true, false};
      const auto t0 = std::chrono::steady_clock::now();
      model->forward(std::span<const StepSequence>(&st, 1));
      s.ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  auto med = [](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
  };
  for (int p = 0; p < 4; p += 2) {
    std::vector<double> ratio;
    int wins = 0;
    for (int r = 0; r < steps; ++r) {
      ratio.push_back(seqs[p].ms[r] / seqs[p + 1].ms[r]);
      wins += seqs[p + 1].ms[r] < seqs[p].ms[r];
    }
    std::printf("%s %.1f ms, %s %.1f ms: head-major faster in %d/%d rounds, median ratio %.3f\n",
                seqs[p].name, med(seqs[p].ms), seqs[p + 1].name, med(seqs[p + 1].ms), wins, steps,
                med(ratio));
  }
  std::vector<double> r16;
  int w16 = 0;
  for (int r = 0; r < steps; ++r) {
    r16.push_back(seqs[1].ms[r] / seqs[3].ms[r]);
    w16 += seqs[3].ms[r] < seqs[1].ms[r];
  }
  std::printf("head-major f16 vs f32: faster in %d/%d, median ratio %.3f\n", w16, steps, med(r16));
}
