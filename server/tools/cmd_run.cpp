// `tandem run`: one prompt, generated text streamed to stdout, speeds to stderr.
#include <cstdio>
#include <iostream>
#include <random>

#include "engine/generate.h"
#include "engine/tokenizer/tokenizer.h"
#include "kvstore/kv_store.h"
#include "server/options.h"
#include "server/tools/commands.h"
#include "server/tools/device_check.h"
#include "server/tools/kv_options.h"

namespace tandem {

int cmd_run(const Options& f) {
  const KvConfig kv_cfg = kv_config_of(f);
  const std::string dir = f.str("model");
  const auto threads = ThreadLimit(f.integer("threads"));
  LoadedModel loaded = load_model(f, dir, [](const std::string& w) {
    std::fprintf(stderr, "tandem: warning: %s\n", w.c_str());
  });
  auto& model = loaded.model;
  const Tokenizer tok = Tokenizer::load(dir);
  const ModelConfig& c = model->config();

  GenerateOptions opt;
  opt.max_tokens = static_cast<int32_t>(f.integer("max-tokens"));
  SamplingParams& sp = opt.sampling;
  sp.temperature =
      static_cast<float>(f.number("temperature", c.gen.do_sample ? c.gen.temperature : 0.8));
  sp.top_p = static_cast<float>(f.number("top-p", c.gen.top_p));
  sp.top_k = static_cast<int32_t>(f.integer("top-k", c.gen.top_k));
  sp.min_p = static_cast<float>(f.number("min-p"));
  sp.repetition_penalty =
      static_cast<float>(f.number("repetition-penalty", c.gen.repetition_penalty));
  if (f.has("seed")) sp.seed = static_cast<uint64_t>(f.integer("seed"));
  opt.seed = std::random_device{}();
  if (!f.flag("ignore-eos")) {
    opt.stop_ids = c.eos_ids;
    if (auto e = tok.eos_id()) opt.stop_ids.push_back(*e);
  }

  const std::vector<int32_t> prompt = tok.encode(f.str("prompt"), !f.flag("no-bos"));
  const int32_t ctx = static_cast<int32_t>(f.integer_in("ctx", c.max_context, 1, c.max_context));
  KvStore store(model->backend(), model->kv_shape(), kv_cfg, 1, ctx);
  auto kv = store.new_sequence(ctx);

  StreamDecoder dec(tok);
  std::cout << f.str("prompt") << std::flush;
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
