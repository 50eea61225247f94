// `tandem eval-recall`: retrieval accuracy through the decode path. Each line of the recall set
// ({"context": N, "depth": D, "prompt_ids": [...], "answer_ids": [...]}, as written by
// scripts/train_model.py --preset recall) is prefilled whole (prefill is exact under every
// policy), then its answer is decoded greedily one token at a time, so the hybrid attention
// (window, host tier, sparse policy, start mode) is what decides it; a sample is correct when the
// decoded tokens equal answer_ids. One JSON object: accuracy per (context, depth) cell, per
// context, overall, and the share of host entries the policy attended.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/sampler.h"
#include "kvstore/kv_store.h"
#include "models/model.h"
#include "server/options.h"
#include "server/tools/commands.h"
#include "server/tools/device_check.h"
#include "server/tools/kv_options.h"

namespace tandem {

namespace {

struct RecallSample {
  int64_t context = 0;
  double depth = 0;
  std::vector<int32_t> prompt, answer;
};

std::vector<RecallSample> read_recall_set(const std::string& path, int32_t vocab) {
  std::ifstream in(path);
  TANDEM_REQUIRE(in, kNotFound, path, ": file not found");
  std::vector<RecallSample> out;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
      RecallSample s;
      s.context = j.at("context").get<int64_t>();
      s.depth = j.at("depth").get<double>();
      s.prompt = j.at("prompt_ids").get<std::vector<int32_t>>();
      s.answer = j.at("answer_ids").get<std::vector<int32_t>>();
      out.push_back(std::move(s));
    } catch (const std::exception& e) {
      TANDEM_FAIL(kInvalidArgument, path, ":", n, ": not a recall sample (", e.what(), ")");
    }
    const RecallSample& s = out.back();
    TANDEM_REQUIRE(!s.prompt.empty() && !s.answer.empty(), kInvalidArgument, path, ":", n,
                   ": empty prompt_ids or answer_ids");
    for (const auto* ids : {&s.prompt, &s.answer})
      for (int32_t t : *ids)
        TANDEM_REQUIRE(t >= 0 && t < vocab, kInvalidArgument, path, ":", n, ": token id ", t,
                       " outside the vocabulary [0, ", vocab, ")");
  }
  TANDEM_REQUIRE(!out.empty(), kInvalidArgument, path, ": no samples");
  return out;
}

}  // namespace

int cmd_eval_recall(const Options& f) {
  const ThreadLimit limit(f.integer("threads"));
  const std::string dir = f.str("model");
  const KvConfig kv_cfg = kv_config_of(f);
  LoadedModel loaded = load_model(f, dir, [](const std::string& w) {
    std::fprintf(stderr, "tandem: warning: %s\n", w.c_str());
  });
  auto& model = loaded.model;
  const ModelConfig& c = model->config();
  const std::string path = f.has("file") ? f.str("file") : dir + "/recall-eval.jsonl";
  std::vector<RecallSample> samples = read_recall_set(path, c.vocab_size);
  const int64_t max_samples = f.integer("max-samples", static_cast<int64_t>(samples.size()));
  if (max_samples < static_cast<int64_t>(samples.size())) {  // every k-th: all cells keep a share
    std::vector<RecallSample> some;
    const double step = static_cast<double>(samples.size()) / static_cast<double>(max_samples);
    for (int64_t i = 0; i < max_samples; ++i)
      some.push_back(std::move(samples[static_cast<size_t>(static_cast<double>(i) * step)]));
    samples = std::move(some);
  }
  const int64_t decode_last = f.integer("decode-last", 1);
  int32_t longest = 0;
  for (const RecallSample& s : samples)
    longest = std::max(longest, static_cast<int32_t>(s.prompt.size() + s.answer.size()));
  TANDEM_REQUIRE(longest <= c.max_context, kInvalidArgument, path, ": a sample of ", longest,
                 " tokens exceeds the model's context of ", c.max_context);

  // One sequence at a time, with no prefix cache: every sample is attended as it comes.
  KvConfig cfg = kv_cfg;
  cfg.prefix_cache = false;
  KvStore store(model->backend(), model->kv_shape(), cfg, 1, longest);
  struct Cell {
    int64_t n = 0, correct = 0;
  };
  std::map<std::pair<int64_t, double>, Cell> cells;
  std::map<int64_t, Cell> by_context;
  HostStats host{};
  const auto t0 = std::chrono::steady_clock::now();
  for (const RecallSample& s : samples) {
    auto kv = store.new_sequence(longest);
    // The prompt but its last decode_last tokens is prefilled (exact); those go through decode
    // steps, so that the policy decides the first answer token too.
    const std::span<const int32_t> prompt(s.prompt);
    const size_t tail = std::min(static_cast<size_t>(decode_last), prompt.size() - 1);
    StepSequence step{kv.get(), prompt.first(prompt.size() - tail), false, false, true};
    TensorView logits = model->forward(std::span<const StepSequence>(&step, 1));
    for (size_t i = prompt.size() - tail; i < prompt.size(); ++i) {
      step = StepSequence{kv.get(), prompt.subspan(i, 1), false, true, false};
      logits = model->forward(std::span<const StepSequence>(&step, 1));
    }
    bool ok = true;
    std::vector<int32_t> got;
    for (size_t i = 0; i < s.answer.size(); ++i) {
      const int32_t t = argmax(
          std::span<const float>(logits.as<const float>(), static_cast<size_t>(c.vocab_size)));
      got.push_back(t);
      ok = ok && t == s.answer[i];
      if (!ok || i + 1 == s.answer.size()) break;
      step = StepSequence{kv.get(), std::span<const int32_t>(&got.back(), 1), false, true, false};
      logits = model->forward(std::span<const StepSequence>(&step, 1));
    }
    Cell& cell = cells[{s.context, s.depth}];
    Cell& ctx = by_context[s.context];
    ++cell.n, ++ctx.n;
    cell.correct += ok, ctx.correct += ok;
    const HostStats st = KvStore::stats_of(*kv);
    host += st;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto acc = [](const Cell& x) {
    return static_cast<double>(x.correct) / static_cast<double>(x.n);
  };
  nlohmann::json jc = nlohmann::json::array(), jx = nlohmann::json::array();
  int64_t correct = 0;
  for (const auto& [key, x] : cells)
    jc.push_back({{"context", key.first},
                  {"depth", key.second},
                  {"n", x.n},
                  {"correct", x.correct},
                  {"accuracy", acc(x)}});
  for (const auto& [context, x] : by_context) {
    jx.push_back({{"context", context}, {"n", x.n}, {"accuracy", acc(x)}});
    correct += x.correct;
  }
  nlohmann::json j = {
      {"model", dir},
      {"file", path},
      {"kv", store.config().describe()},
      {"samples", samples.size()},
      {"decode_last", decode_last},
      {"accuracy", static_cast<double>(correct) / static_cast<double>(samples.size())},
      {"by_context", jx},
      {"cells", jc},
      {"host_fraction_attended", host.attended_fraction()},
      {"seconds", seconds}};
  add_host_stats(j, kv_cfg, host);
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace tandem
