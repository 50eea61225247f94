// Single-sequence generation loop.
#include "engine/generate.h"

#include <algorithm>
#include <chrono>

namespace tandem {

GenerateStats generate(Model& model, SequenceKv& kv, std::span<const int32_t> prompt,
                       const GenerateOptions& opt, const std::function<bool(int32_t)>& on_token) {
  using Clock = std::chrono::steady_clock;
  TANDEM_REQUIRE(!prompt.empty(), kInvalidArgument, "empty prompt");
  const int32_t ctx = std::min(model.config().max_context, kv.capacity());
  TANDEM_REQUIRE(static_cast<int64_t>(prompt.size()) < ctx, kInvalidArgument, "prompt of ",
                 prompt.size(), " tokens does not fit the context of ", ctx);
  GenerateStats st;
  st.prompt_tokens = static_cast<int32_t>(prompt.size());
  const int32_t vocab = model.config().vocab_size;

  const auto t0 = Clock::now();
  TensorView logits;  // backend memory
  for (size_t at = 0; at < prompt.size(); at += static_cast<size_t>(opt.prefill_chunk)) {
    const size_t n = std::min(prompt.size() - at, static_cast<size_t>(opt.prefill_chunk));
    const bool last = at + n == prompt.size();
    const StepSequence s{&kv, prompt.subspan(at, n), false, false, last};
    logits = model.forward_on_backend(std::span<const StepSequence>(&s, 1));
  }

  Sampler sampler(opt.sampling, opt.seed);
  std::vector<int32_t> out;
  std::vector<float> row(static_cast<size_t>(vocab));
  // The next token: drawn by the backend where the host cannot read the logits in place and the
  // rule is the plain one (only the id comes back), else on the host; the same token either way.
  Backend& be = model.backend();
  const bool on_backend = !be.host_accessible() && sampler.plain();
  auto next_token = [&] {
    SampleRow r;
    if (on_backend) {
      r = sampler.backend_row();
      int32_t id = -1;
      if (be.sample(logits.slice(0, 1), &r, &id)) return id;
    }
    std::copy_n(model.logits_to_host(0, 1).as<const float>(), vocab, row.begin());
    return on_backend ? sampler.draw(row, r.uniform) : sampler.sample(row, prompt, out);
  };
  int32_t tok = next_token();
  const auto t1 = Clock::now();
  st.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  for (;;) {
    if (std::find(opt.stop_ids.begin(), opt.stop_ids.end(), tok) != opt.stop_ids.end()) {
      st.stopped = true;
      break;
    }
    out.push_back(tok);
    ++st.generated;
    if (!on_token(tok)) break;
    // Feeding the token back needs one more slot of context.
    if (st.generated >= opt.max_tokens || kv.length() + 1 > ctx) break;
    const StepSequence s{&kv, std::span<const int32_t>(&out.back(), 1), false, true, false};
    logits = model.forward_on_backend(std::span<const StepSequence>(&s, 1));
    tok = next_token();
  }
  st.decode_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  return st;
}

}  // namespace tandem
