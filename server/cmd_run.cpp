// `tandem run`: one prompt, generated text streamed to stdout, speeds to stderr.
#include <cstdio>
#include <iostream>
#include <random>

#include "engine/generate.h"
#include "engine/tokenizer/tokenizer.h"
#include "kvstore/kv_store.h"
#include "server/cli.h"
#include "server/commands.h"
#include "server/device_check.h"
#include "server/kv_flags.h"

namespace tandem {

int cmd_run(const std::vector<std::string>& args) {
  std::set<std::string> values = {"model", "prompt",  "max-tokens", "temperature",
                                  "top-p", "top-k",   "min-p",      "repetition-penalty",
                                  "seed",  "threads", "ctx"};
  values.insert(kv_value_flags().begin(), kv_value_flags().end());
  std::set<std::string> bools = {"no-bos", "ignore-eos"};
  bools.insert(kv_bool_flags().begin(), kv_bool_flags().end());
  const Flags f(args, values, bools);
  const KvConfig kv_cfg = parse_kv_flags(f);
  const std::string dir = f.required("model");
  const auto threads = ThreadLimit(f.integer("threads", 0, 0, 4096));
  LoadedModel loaded = load_model(f, dir, [](const std::string& w) {
    std::fprintf(stderr, "tandem: warning: %s\n", w.c_str());
  });
  auto& model = loaded.model;
  const Tokenizer tok = Tokenizer::load(dir);
  const ModelConfig& c = model->config();

  GenerateOptions opt;
  opt.max_tokens = static_cast<int32_t>(f.integer("max-tokens", 128, 1, 1 << 24));
  SamplingParams& sp = opt.sampling;
  sp.temperature = static_cast<float>(
      f.number("temperature", c.gen.do_sample ? c.gen.temperature : 0.8, 0, 100));
  sp.top_p = static_cast<float>(f.number("top-p", c.gen.top_p, 0, 1));
  sp.top_k = static_cast<int32_t>(f.integer("top-k", c.gen.top_k, 0, 1 << 24));
  sp.min_p = static_cast<float>(f.number("min-p", 0, 0, 1));
  sp.repetition_penalty =
      static_cast<float>(f.number("repetition-penalty", c.gen.repetition_penalty, 0.01, 100));
  if (f.has("seed")) sp.seed = static_cast<uint64_t>(f.integer("seed", 0, 0, INT64_MAX));
  opt.seed = std::random_device{}();
  if (!f.flag("ignore-eos")) {
    opt.stop_ids = c.eos_ids;
    if (auto e = tok.eos_id()) opt.stop_ids.push_back(*e);
  }

  const std::vector<int32_t> prompt = tok.encode(f.required("prompt"), !f.flag("no-bos"));
  const int32_t ctx = static_cast<int32_t>(f.integer("ctx", c.max_context, 1, c.max_context));
  KvStore store(model->backend(), model->kv_shape(), kv_cfg, 1, ctx);
  auto kv = store.new_sequence(ctx);

  StreamDecoder dec(tok);
  std::cout << f.required("prompt") << std::flush;
  const GenerateStats st = generate(*model, *kv, prompt, opt, [&](int32_t id) {
    std::cout << dec.push(id) << std::flush;
    return true;
  });
  std::cout << dec.flush() << std::endl;
  std::fprintf(stderr, "prompt: %d tokens, %.1f tokens/s | decode: %d tokens, %.1f tokens/s\n",
               st.prompt_tokens, st.prompt_tokens / std::max(st.prefill_seconds, 1e-9),
               st.generated,
               st.generated > 1 ? (st.generated - 1) / std::max(st.decode_seconds, 1e-9) : 0.0);
  return 0;
}

}  // namespace tandem
