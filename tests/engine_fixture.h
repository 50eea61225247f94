// Shared fixture of the engine tests (test_engine, test_engine_batching): the bundled tandem-demo
// model and tokenizer (the repository ships it: the tests run on a clone alone), store
// configurations, stream collection and solo-run references.
#pragma once

#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/stop_matcher.h"
#include "tests/test_helpers.h"

namespace tandem::test {

// How long a test waits for an event before calling the engine stuck (generous: sanitizer builds
// on a loaded machine are slow).
inline constexpr std::chrono::seconds kPatience{120};

inline const Tokenizer& demo_tokenizer() {
  static const Tokenizer tok = Tokenizer::load(repo_path("models/tandem-demo"));
  return tok;
}

struct Setup {
  explicit Setup(const char* model_dir = "models/tandem-demo")
      : dir(model_dir),
        backend(make_cpu_backend()),
        model(Model::load(repo_path(model_dir), *backend)) {}
  std::string dir;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
};

// Hybrid split with an exact host part: sparse=full, host partial computed in parallel.
inline KvConfig hybrid_config(int64_t device_blocks = 0) {
  KvConfig c;
  c.sinks = 4;
  c.window = 64;
  c.block = 16;
  c.sparse = SparsePolicy::kFull;
  c.cpu_attn = CpuAttnMode::kParallel;
  c.cpu_threads = 2;
  c.device_blocks = device_blocks;
  return c;
}

inline KvConfig dense_config() {
  KvConfig c;
  c.dense = true;
  return c;
}

struct Result {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
  std::vector<std::vector<TokenLogprob>> top;
  FinishReason finish = FinishReason::kNone;
  std::string error;
  int32_t prompt_tokens = 0, completion_tokens = 0;
  int32_t events = 0;
};

// Reads a stream to its final event.
inline Result collect(TokenStream& s) {
  Result r;
  TokenEvent ev;
  while (r.finish == FinishReason::kNone) {
    REQUIRE(s.next(ev, kPatience));
    ++r.events;
    r.text += ev.text;
    r.tokens.insert(r.tokens.end(), ev.tokens.begin(), ev.tokens.end());
    r.logprobs.insert(r.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
    r.top.insert(r.top.end(), ev.top.begin(), ev.top.end());
    r.finish = ev.finish;
    r.error = ev.error;
    r.prompt_tokens = ev.prompt_tokens;
    r.completion_tokens = ev.completion_tokens;
  }
  return r;
}

inline GenerationRequest greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  return r;
}

// The same request run alone through generate() with a dense cache.
inline std::vector<int32_t> reference(Model& model, const std::vector<int32_t>& prompt,
                                      int32_t max_tokens) {
  auto kv = model.new_dense_kv(model.config().max_context);
  GenerateOptions opt;
  opt.max_tokens = max_tokens;
  opt.sampling.temperature = 0;
  std::vector<int32_t> out;
  generate(model, *kv, prompt, opt, [&](int32_t t) {
    out.push_back(t);
    return true;
  });
  return out;
}

// reference(*s.model, prompt, max_tokens), kept for the rest of the test program: a greedy solo
// run goes step by step, so its first n tokens are the run of n tokens. The longest run of each
// (checkpoint, prompt) is kept and cut, so a test case that Catch2 reruns for each of its
// sections, or a later one that wants fewer tokens, does not generate them again.
inline std::vector<int32_t> cached_reference(Setup& s, const std::vector<int32_t>& prompt,
                                             int32_t max_tokens) {
  static std::map<std::pair<std::string, std::vector<int32_t>>, std::vector<int32_t>> runs;
  std::vector<int32_t>& run = runs[{s.dir, prompt}];
  if (static_cast<int32_t>(run.size()) < max_tokens) run = reference(*s.model, prompt, max_tokens);
  REQUIRE(static_cast<int32_t>(run.size()) >= max_tokens);
  return {run.begin(), run.begin() + max_tokens};
}

inline std::vector<std::vector<int32_t>> story_prompts() {
  const Tokenizer& tok = demo_tokenizer();
  std::vector<std::vector<int32_t>> p;
  for (const char* text :
       {"Once upon a time", "The little dog", "Lily and Tom went to the park to play with",
        "One day, a big bird", "Sam was sad because", "There was a girl named Sue. She",
        "Tim found a red ball under the tree. He", "The sun"})
    p.push_back(tok.encode(text));
  // A prompt longer than the device window: prefilled in several chunks, partly on the host.
  std::string long_text;
  for (int i = 0; i < 8; ++i) long_text += "The cat sat on the mat and looked at the bird. ";
  p.push_back(tok.encode(long_text + "Then the cat"));
  return p;
}

// A copy of the demo model's folder (weights and tokenizer linked, not copied) whose configs name
// `eos` as the end-of-sequence id. Returns the folder (under the system temp directory).
inline std::string model_with_eos(int32_t eos, const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path src = repo_path("models/tandem-demo");
  const fs::path dir =
      fs::temp_directory_path() / ("tandem-test-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"model.safetensors", "tokenizer.json", "tokenizer_config.json"})
    fs::create_symlink(src / f, dir / f);
  for (const char* f : {"config.json", "generation_config.json"}) {
    std::ifstream in(src / f);
    nlohmann::json j = nlohmann::json::parse(in);
    j["eos_token_id"] = eos;
    std::ofstream(dir / f) << j.dump(2);
  }
  return dir.string();
}

// The text out adds to the decoded prompt.
inline std::string continuation(const std::vector<int32_t>& prompt,
                                const std::vector<int32_t>& out) {
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), out.begin(), out.end());
  const std::string a = demo_tokenizer().decode(prompt, true);
  const std::string b = demo_tokenizer().decode(all, true);
  REQUIRE(b.compare(0, a.size(), a) == 0);
  return b.substr(a.size());
}

// Waits until the engine's published metrics satisfy pred.
template <typename Pred>
EngineMetrics wait_metrics(const Engine& e, Pred pred) {
  for (int i = 0; i < 24000; ++i) {  // kPatience
    const EngineMetrics m = e.metrics();
    if (pred(m)) return m;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  FAIL("metrics never reached the expected state");
  return {};
}

// The story prompts, greedy max_tokens each, through an engine of up to 8 sequences (prefill
// chunks of 16, 96 tokens a step) on a store of `cfg`: each stream's result, and the metrics
// once every sequence has finished (in *metrics).
inline std::vector<Result> serve_stories(Model& model, const KvConfig& cfg, int32_t max_tokens,
                                         EngineMetrics* metrics) {
  const auto prompts = story_prompts();
  KvStore store(model.backend(), model.kv_shape(), cfg, 8, 1024);
  EngineOptions opt;
  opt.max_batch = 8;
  opt.prefill_chunk = 16;
  opt.step_token_budget = 96;
  Engine engine(model, demo_tokenizer(), store, opt);
  std::vector<std::shared_ptr<TokenStream>> streams;
  for (const auto& p : prompts) streams.push_back(engine.submit(greedy(p, max_tokens)));
  std::vector<Result> out;
  for (auto& st : streams) out.push_back(collect(*st));
  *metrics = wait_metrics(engine, [&](const EngineMetrics& x) {
    return x.running == 0 && x.finished_length + x.finished_stop == std::ssize(prompts);
  });
  return out;
}

inline ErrorKind kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  FAIL("no tandem::Error thrown");
  return ErrorKind::kInternal;
}

}  // namespace tandem::test
