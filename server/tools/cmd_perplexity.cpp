// `tandem perplexity`: teacher-forced evaluation through the decode path. The first --prefill
// tokens of each segment are prefilled; every later token is fed one at a time, so the hybrid
// attention (window, host tier, sparse policy, start mode) is what the figure measures.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/sampler.h"
#include "engine/tokenizer/tokenizer.h"
#include "kvstore/kv_store.h"
#include "models/model.h"
#include "server/options.h"
#include "server/tools/commands.h"
#include "server/tools/device_check.h"
#include "server/tools/kv_options.h"

namespace tandem {

int cmd_perplexity(const Options& f) {
  const ThreadLimit limit(f.integer("threads"));
  const std::string dir = f.str("model");
  const KvConfig kv_cfg = kv_config_of(f);
  LoadedModel loaded = load_model(f, dir, [](const std::string& w) {
    std::fprintf(stderr, "tandem: warning: %s\n", w.c_str());
  });
  auto& model = loaded.model;
  const Tokenizer tok = Tokenizer::load(dir);
  const ModelConfig& c = model->config();
  const int32_t ctx = static_cast<int32_t>(f.integer_in("ctx", c.max_context, 2, c.max_context));
  const int32_t prefill = static_cast<int32_t>(f.integer_in("prefill", 1, 1, ctx - 1));
  const int64_t max_segments = f.integer("max-segments", 1 << 30);

  std::ifstream in(f.str("file"), std::ios::binary);
  TANDEM_REQUIRE(in, kNotFound, f.str("file"), ": file not found");
  std::stringstream ss;
  ss << in.rdbuf();
  std::vector<int32_t> text = tok.encode(ss.str(), false, false);
  const bool bos = c.bos_id >= 0;
  const int32_t body = ctx - (bos ? 1 : 0);
  TANDEM_REQUIRE(static_cast<int64_t>(text.size()) >= body, kInvalidArgument, f.str("file"), ": ",
                 text.size(), " tokens, fewer than one segment of ", body);

  KvStore store(model->backend(), model->kv_shape(), kv_cfg, 1, ctx);
  double nll = 0;
  int64_t count = 0, segments = 0;
  HostStats host{};
  std::vector<float> lp(static_cast<size_t>(c.vocab_size));
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t at = 0; at + static_cast<size_t>(body) <= text.size() && segments < max_segments;
       at += static_cast<size_t>(body), ++segments) {
    std::vector<int32_t> seg;
    if (bos) seg.push_back(c.bos_id);
    seg.insert(seg.end(), text.begin() + static_cast<std::ptrdiff_t>(at),
               text.begin() + static_cast<std::ptrdiff_t>(at) + body);
    auto kv = store.new_sequence(ctx);
    StepSequence s{kv.get(), std::span<const int32_t>(seg).first(static_cast<size_t>(prefill)),
                   false, false, true};
    TensorView logits = model->forward(std::span<const StepSequence>(&s, 1));
    for (int32_t i = prefill; i < ctx; ++i) {
      log_softmax(
          std::span<const float>(logits.as<const float>(), static_cast<size_t>(c.vocab_size)), lp);
      nll -= lp[static_cast<size_t>(seg[static_cast<size_t>(i)])];
      ++count;
      if (i + 1 == ctx) break;
      s = StepSequence{kv.get(), std::span<const int32_t>(&seg[static_cast<size_t>(i)], 1), false,
                       true, false};
      logits = model->forward(std::span<const StepSequence>(&s, 1));
    }
    const HostStats st = KvStore::stats_of(*kv);
    host += st;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double mean = nll / static_cast<double>(count);
  nlohmann::json j = {{"tokens", count},
                      {"nll", mean},
                      {"ppl", std::exp(mean)},
                      {"window", kv_cfg.dense ? ctx : kv_cfg.window},
                      {"sparse", kv_cfg.dense ? "dense" : std::string(policy_name(kv_cfg.sparse))},
                      {"cpu_attn", std::string(mode_name(store.config().cpu_attn))},
                      {"hgca_beta", kv_cfg.hgca_beta},
                      {"topk_blocks", kv_cfg.topk_blocks},
                      {"ctx", ctx},
                      {"prefill", prefill},
                      {"segments", segments},
                      {"host_fraction_attended", host.attended_fraction()},
                      {"seconds", seconds}};
  add_host_stats(j, kv_cfg, host);
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace tandem
