// Engine: continuous batching against single-sequence generation (greedy outputs equal each
// request run alone, far fewer steps than tokens), chunked prefill and preemption under a tiny
// device pool, stop strings across token boundaries, max_tokens and the context limit, seeds,
// logprobs, cancellation freeing KV, request validation, queue limits and shutdown. Runs the real
// tinystories-656k checkpoint (model + tokenizer) and the llama-tiny fixture.
#include <catch2/catch.hpp>
#include <chrono>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/stop_matcher.h"
#include "tests/test_helpers.h"

using namespace tandem;
using tandem::test::repo_path;

namespace {

// How long a test waits for an event before calling the engine stuck (generous: sanitizer builds
// on a loaded machine are slow).
constexpr std::chrono::seconds kPatience{120};

const Tokenizer& stories_tokenizer() {
  static const Tokenizer tok = Tokenizer::load(repo_path("../shared/models/tinystories-656k"));
  return tok;
}

struct Setup {
  explicit Setup(const char* model_dir = "../shared/models/tinystories-656k")
      : backend(make_cpu_backend()), model(Model::load(repo_path(model_dir), *backend)) {}
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
};

// Hybrid split with an exact host part: sparse=full, host partial computed in parallel.
KvConfig hybrid_config(int64_t device_blocks = 0) {
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

KvConfig dense_config() {
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
Result collect(TokenStream& s) {
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

GenerationRequest greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  return r;
}

// The same request run alone through generate() with a dense cache.
std::vector<int32_t> reference(Model& model, const std::vector<int32_t>& prompt,
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

std::vector<std::vector<int32_t>> story_prompts() {
  const Tokenizer& tok = stories_tokenizer();
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

// The text out adds to the decoded prompt.
std::string continuation(const std::vector<int32_t>& prompt, const std::vector<int32_t>& out) {
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), out.begin(), out.end());
  const std::string a = stories_tokenizer().decode(prompt, true);
  const std::string b = stories_tokenizer().decode(all, true);
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

ErrorKind kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  FAIL("no tandem::Error thrown");
  return ErrorKind::kInternal;
}

}  // namespace

TEST_CASE("StopMatcher holds back possible matches and cuts before the first match", "[engine]") {
  StopMatcher m({"o w", "xyz", ""});
  CHECK(m.push("Hello") == "Hell");  // "o" may start "o w"
  CHECK(m.held() == 1);
  CHECK(m.push(" ") == "");    // "o " still may
  CHECK(m.push("wor") == "");  // "o w" matched: cut before it
  CHECK(m.matched());
  CHECK(m.push("more") == "");
  CHECK(m.finish() == "");

  StopMatcher n({"abc"});
  CHECK(n.push("xxab") == "xx");
  CHECK(n.push("d") == "abd");
  CHECK(n.push("a") == "");
  CHECK(n.finish() == "a");
  CHECK_FALSE(n.matched());

  StopMatcher first({"bb", "ab"});  // the earliest match wins, whichever stop string it is
  CHECK(first.push("xabb") == "x");
  CHECK(first.matched());

  StopMatcher none({});
  CHECK(none.push("anything") == "anything");
}

TEST_CASE("concurrent greedy requests equal each one run alone, in far fewer steps", "[engine]") {
  Setup s;
  const auto prompts = story_prompts();
  const int32_t max_tokens = 40;
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(reference(*s.model, p, max_tokens));

  for (const bool dense : {false, true}) {
    DYNAMIC_SECTION((dense ? "dense" : "hybrid") << " store") {
      KvStore store(s.model->backend(), s.model->kv_shape(),
                    dense ? dense_config() : hybrid_config(), 16, 512);
      EngineOptions opt;
      opt.max_batch = 16;
      opt.prefill_chunk = 32;  // the long prompt takes several steps, sharing them with decodes
      opt.step_token_budget = 64;
      Engine engine(*s.model, stories_tokenizer(), store, opt);
      std::vector<std::shared_ptr<TokenStream>> streams;
      for (const auto& p : prompts) streams.push_back(engine.submit(greedy(p, max_tokens)));
      int64_t total = 0;
      for (size_t i = 0; i < prompts.size(); ++i) {
        const Result r = collect(*streams[i]);
        CHECK(r.finish == FinishReason::kLength);
        CHECK(r.tokens == want[i]);
        CHECK(r.prompt_tokens == static_cast<int32_t>(prompts[i].size()));
        CHECK(r.completion_tokens == max_tokens);
        CHECK(r.text == continuation(prompts[i], want[i]));
        total += static_cast<int64_t>(prompts[i].size()) + max_tokens;
      }
      const EngineMetrics m = wait_metrics(
          engine, [](const EngineMetrics& x) { return x.running == 0 && x.finished_length == 9; });
      CHECK(m.steps < total / 4);
      CHECK(m.generation_tokens == max_tokens * static_cast<int64_t>(prompts.size()));
      CHECK(m.prompt_tokens >= total - m.generation_tokens);
      CHECK(m.waiting == 0);
      CHECK(m.forward_seconds > 0);
      CHECK(m.step_other_seconds > 0);
      CHECK(m.step_other_cpu_seconds > 0);
      CHECK(m.step_other_cpu_seconds <= m.step_other_seconds + 0.01);  // CPU time <= wall time
      CHECK(m.kv_device_blocks_used == 0);
      CHECK(m.kv_host_blocks_used == 0);
      if (!dense) {
        CHECK(m.kv_device_blocks_total > 0);
        CHECK(m.cpu_attention_busy_seconds > 0);  // the long prompt's decodes reach the host
        CHECK(m.cpu_attention_wait_seconds > 0);  // and their merges waited for it
      }
    }
  }
}

TEST_CASE("generated text continues the prompt; logprobs are <= 0 and pieces make the text",
          "[engine]") {
  Setup s;
  KvStore store(s.model->backend(), s.model->kv_shape(), hybrid_config(), 4, 512);
  Engine engine(*s.model, stories_tokenizer(), store, EngineOptions{});
  const std::string prompt = "Once upon a time";
  GenerationRequest req = greedy(stories_tokenizer().encode(prompt), 24);
  req.top_logprobs = 3;
  const Result r = collect(*engine.submit(req));
  REQUIRE(r.tokens.size() == 24);
  // The text is what decoding prompt + output adds to the prompt's own text.
  std::vector<int32_t> all = req.prompt;
  all.insert(all.end(), r.tokens.begin(), r.tokens.end());
  CHECK(stories_tokenizer().decode(all, true) == prompt + r.text);
  REQUIRE(r.logprobs.size() == r.tokens.size());
  REQUIRE(r.top.size() == r.tokens.size());
  std::string pieces;
  for (size_t i = 0; i < r.tokens.size(); ++i) {
    CHECK(r.logprobs[i].token == r.tokens[i]);
    CHECK(r.logprobs[i].logprob <= 0.0f);
    pieces += r.logprobs[i].piece;
    REQUIRE(r.top[i].size() == 3);
    CHECK(r.top[i][0].token == r.tokens[i]);  // greedy picks the most likely
    CHECK(r.top[i][0].logprob == Approx(r.logprobs[i].logprob));
    CHECK(r.top[i][0].logprob >= r.top[i][1].logprob);
    CHECK(r.top[i][1].logprob >= r.top[i][2].logprob);
  }
  CHECK(pieces == r.text);
}

TEST_CASE("stop strings cut the text across token boundaries and are never emitted", "[engine]") {
  Setup s;
  KvStore store(s.model->backend(), s.model->kv_shape(), hybrid_config(), 4, 512);
  Engine engine(*s.model, stories_tokenizer(), store, EngineOptions{});
  const auto prompt = stories_tokenizer().encode("Once upon a time");
  GenerationRequest base = greedy(prompt, 40);
  base.top_logprobs = 0;
  const Result full = collect(*engine.submit(base));
  // A stop string made of the end of one token and the start of the next.
  std::string stop;
  size_t boundary = 0;
  for (size_t i = 4; i + 1 < full.logprobs.size() && stop.empty(); ++i) {
    const std::string& a = full.logprobs[i].piece;
    const std::string& b = full.logprobs[i + 1].piece;
    if (a.size() >= 2 && b.size() >= 2) {
      stop = a.substr(a.size() - 2) + b.substr(0, 2);
      for (size_t j = 0; j <= i; ++j) boundary += full.logprobs[j].piece.size();
    }
  }
  REQUIRE(!stop.empty());
  const size_t at = full.text.find(stop);
  REQUIRE(at != std::string::npos);
  REQUIRE(at <= boundary - 2);

  GenerationRequest req = base;
  req.stop = {"never appears in a story 12345", stop};
  const Result r = collect(*engine.submit(req));
  CHECK(r.finish == FinishReason::kStop);
  CHECK(r.text == full.text.substr(0, at));
  CHECK(r.text.find(stop) == std::string::npos);
  CHECK(r.completion_tokens < 40);
  CHECK(r.completion_tokens == static_cast<int32_t>(r.tokens.size()));

  // A stop token ends generation too: its text is not emitted, the token is reported.
  req = base;
  req.stop_ids = {full.tokens[5]};
  const Result t = collect(*engine.submit(req));
  CHECK(t.finish == FinishReason::kStop);
  CHECK(t.tokens.size() <= 6);
  CHECK(t.tokens.back() == full.tokens[5]);
  CHECK(full.text.rfind(t.text, 0) == 0);
  CHECK(t.text.size() < full.text.size());
}

TEST_CASE("max_tokens and the context limit end with length; EOS ends with stop", "[engine]") {
  Setup s;
  const auto prompt = stories_tokenizer().encode("Once upon a time");  // 5 tokens
  {
    KvStore store(s.model->backend(), s.model->kv_shape(), hybrid_config(), 4, 512);
    EngineOptions opt;
    opt.max_model_len = 24;
    Engine engine(*s.model, stories_tokenizer(), store, opt);
    CHECK(engine.max_model_len() == 24);
    const Result a = collect(*engine.submit(greedy(prompt, 7)));
    CHECK(a.finish == FinishReason::kLength);
    CHECK(a.completion_tokens == 7);
    const Result b = collect(*engine.submit(greedy(prompt, 1000)));  // clamped to the context
    CHECK(b.finish == FinishReason::kLength);
    CHECK(b.completion_tokens == 24 - static_cast<int32_t>(prompt.size()));
    const Result c = collect(*engine.submit(greedy(prompt, 1)));
    CHECK(c.completion_tokens == 1);
    CHECK(c.finish == FinishReason::kLength);
    CHECK(c.events == 1);
  }
  // Without ignore_eos the model's EOS (<|end_story|>, id 2) ends the story; its text is not
  // emitted, the token is counted.
  KvStore store(s.model->backend(), s.model->kv_shape(), dense_config(), 4, 512);
  Engine engine(*s.model, stories_tokenizer(), store, EngineOptions{});
  GenerationRequest req = greedy(prompt, 500);
  req.ignore_eos = false;
  const Result r = collect(*engine.submit(req));
  CHECK(r.finish == FinishReason::kStop);
  CHECK(r.tokens.back() == 2);
  CHECK(r.completion_tokens == static_cast<int32_t>(r.tokens.size()));
  std::vector<int32_t> out(r.tokens.begin(), r.tokens.end() - 1);
  CHECK(r.text == continuation(prompt, out));
}

TEST_CASE("cancelling a stream retires it within a step and frees its KV", "[engine]") {
  Setup s;
  KvStore store(s.model->backend(), s.model->kv_shape(), hybrid_config(), 4, 512);
  Engine engine(*s.model, stories_tokenizer(), store, EngineOptions{});
  auto stream = engine.submit(greedy(story_prompts().back(), 400));  // reaches the host store
  TokenEvent ev;
  for (int i = 0; i < 40; ++i) {
    REQUIRE(stream->next(ev, kPatience));
    REQUIRE(ev.finish == FinishReason::kNone);
  }
  CHECK(engine.metrics().kv_device_blocks_used > 0);
  stream->cancel();
  const int64_t generated_at_cancel = engine.metrics().generation_tokens;
  const Result r = collect(*stream);
  CHECK(r.finish == FinishReason::kCancelled);
  // At most the token of the step in flight when cancel() was called comes after it.
  CHECK(40 + r.completion_tokens - 40 <= generated_at_cancel + 1);
  const EngineMetrics m = wait_metrics(
      engine, [](const EngineMetrics& x) { return x.running == 0 && x.finished_cancelled == 1; });
  CHECK(m.kv_device_blocks_used == 0);
  CHECK(m.kv_host_blocks_used == 0);

  // A request cancelled while it waits never runs.
  EngineOptions one;
  one.max_batch = 1;
  KvStore store2(s.model->backend(), s.model->kv_shape(), dense_config(), 1, 512);
  Engine e2(*s.model, stories_tokenizer(), store2, one);
  auto first = e2.submit(greedy(story_prompts()[0], 60));
  auto second = e2.submit(greedy(story_prompts()[1], 60));
  second->cancel();
  const Result w = collect(*second);
  CHECK(w.finish == FinishReason::kCancelled);
  CHECK(w.completion_tokens == 0);
  CHECK(collect(*first).finish == FinishReason::kLength);
}

TEST_CASE("a tiny device pool forces preemption; outputs stay those of solo runs", "[engine]") {
  Setup s;
  const auto prompts = story_prompts();
  const int32_t max_tokens = 70;
  // A sequence holds at most 2 layers x (1 sink block + 4 window blocks) = 10 device blocks.
  // The model is not shared between threads: the references are computed first.
  std::vector<std::vector<int32_t>> want;
  for (size_t i = 0; i < 6; ++i) want.push_back(reference(*s.model, prompts[i], max_tokens));
  KvStore store(s.model->backend(), s.model->kv_shape(), hybrid_config(24), 8, 512);
  EngineOptions opt;
  opt.max_batch = 8;
  opt.prefill_chunk = 16;
  Engine engine(*s.model, stories_tokenizer(), store, opt);
  std::vector<std::shared_ptr<TokenStream>> streams;
  for (size_t i = 0; i < 6; ++i) streams.push_back(engine.submit(greedy(prompts[i], max_tokens)));
  for (size_t i = 0; i < streams.size(); ++i) {
    const Result r = collect(*streams[i]);
    CHECK(r.finish == FinishReason::kLength);
    CHECK(r.tokens == want[i]);
  }
  const EngineMetrics m =
      wait_metrics(engine, [](const EngineMetrics& x) { return x.running == 0; });
  CHECK(m.preemptions > 0);
  CHECK(m.kv_device_blocks_total == 24);
  CHECK(m.kv_device_blocks_used == 0);
  // A request that could never fit the pool is refused up front.
  KvStore tiny(s.model->backend(), s.model->kv_shape(), hybrid_config(6), 1, 512);
  Engine e2(*s.model, stories_tokenizer(), tiny, opt);
  CHECK(kind_of([&] { e2.submit(greedy(prompts[0], 200)); }) == ErrorKind::kInvalidArgument);
}

TEST_CASE("seeds reproduce sampled text", "[engine]") {
  Setup s;
  KvStore store(s.model->backend(), s.model->kv_shape(), hybrid_config(), 8, 512);
  Engine engine(*s.model, stories_tokenizer(), store, EngineOptions{});
  auto sampled = [&](std::optional<uint64_t> seed) {
    GenerationRequest r = greedy(stories_tokenizer().encode("Once upon a time"), 40);
    r.sampling.temperature = 1.0f;
    r.sampling.top_p = 0.95f;
    r.sampling.seed = seed;
    return r;
  };
  auto a = engine.submit(sampled(42)), b = engine.submit(sampled(42)),
       c = engine.submit(sampled(7));
  const Result ra = collect(*a), rb = collect(*b), rc = collect(*c);
  CHECK(ra.tokens == rb.tokens);
  CHECK(ra.text == rb.text);
  CHECK(ra.tokens != rc.tokens);

  // Requests without a seed draw theirs from EngineOptions::seed, in submission order.
  auto unseeded = [&](uint64_t engine_seed) {
    KvStore st(s.model->backend(), s.model->kv_shape(), dense_config(), 2, 512);
    EngineOptions opt;
    opt.seed = engine_seed;
    Engine e(*s.model, stories_tokenizer(), st, opt);
    auto x = e.submit(sampled(std::nullopt)), y = e.submit(sampled(std::nullopt));
    return std::make_pair(collect(*x).tokens, collect(*y).tokens);
  };
  const auto u1 = unseeded(5), u2 = unseeded(5);
  CHECK(u1 == u2);
  CHECK(u1.first != u1.second);
}

TEST_CASE("invalid requests throw the right kinds; a full queue throws kOutOfMemory", "[engine]") {
  Setup s;
  KvStore store(s.model->backend(), s.model->kv_shape(), dense_config(), 2, 512);
  EngineOptions opt;
  opt.max_batch = 1;
  opt.max_waiting = 2;
  opt.max_model_len = 64;
  Engine engine(*s.model, stories_tokenizer(), store, opt);
  const auto invalid = ErrorKind::kInvalidArgument;
  CHECK(kind_of([&] { engine.submit(greedy({}, 4)); }) == invalid);
  CHECK(kind_of([&] { engine.submit(greedy(std::vector<int32_t>(64, 5), 4)); }) == invalid);
  const Result fits = collect(*engine.submit(greedy(std::vector<int32_t>(63, 5), 4)));
  INFO(fits.error);
  CHECK(fits.finish == FinishReason::kLength);
  CHECK(fits.completion_tokens == 1);
  CHECK(kind_of([&] { engine.submit(greedy({1, 2}, 0)); }) == invalid);
  CHECK(kind_of([&] { engine.submit(greedy({1, 2048}, 4)); }) == invalid);
  CHECK(kind_of([&] { engine.submit(greedy({1, -1}, 4)); }) == invalid);
  GenerationRequest bad_stop = greedy({1, 2}, 4);
  bad_stop.stop_ids = {99999};
  CHECK(kind_of([&] { engine.submit(bad_stop); }) == invalid);
  GenerationRequest bad_temp = greedy({1, 2}, 4);
  bad_temp.sampling.temperature = -1;
  CHECK(kind_of([&] { engine.submit(bad_temp); }) == invalid);
  try {
    engine.submit(greedy({}, 4));
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("empty") != std::string::npos);
  }

  // One runs, two wait; the rest are refused until the queue drains.
  std::vector<std::shared_ptr<TokenStream>> accepted;
  int refused = 0;
  for (int i = 0; i < 10; ++i) {
    try {
      accepted.push_back(engine.submit(greedy(stories_tokenizer().encode("The sun"), 60)));
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kOutOfMemory);
      ++refused;
    }
  }
  INFO("accepted " << accepted.size());
  CHECK(accepted.size() >= 2);
  CHECK(accepted.size() <= 3);
  CHECK(refused == 10 - static_cast<int>(accepted.size()));
  for (auto& a : accepted) CHECK(collect(*a).finish == FinishReason::kLength);
  CHECK_NOTHROW(collect(*engine.submit(greedy({1, 2}, 2))));

  // Options the model cannot honour.
  EngineOptions too_long;
  too_long.max_model_len = 513;
  CHECK(kind_of([&] { Engine e(*s.model, stories_tokenizer(), store, too_long); }) == invalid);
}

TEST_CASE("shutdown ends every stream", "[engine]") {
  Setup s;
  const auto prompts = story_prompts();
  for (const bool cancel : {true, false}) {
    DYNAMIC_SECTION("cancel_running " << cancel) {
      KvStore store(s.model->backend(), s.model->kv_shape(), hybrid_config(), 4, 512);
      EngineOptions opt;
      opt.max_batch = 3;  // some running, some waiting
      Engine engine(*s.model, stories_tokenizer(), store, opt);
      std::vector<std::shared_ptr<TokenStream>> streams;
      for (size_t i = 0; i < 6; ++i) streams.push_back(engine.submit(greedy(prompts[i], 30)));
      TokenEvent ev;
      REQUIRE(streams[0]->next(ev, kPatience));
      engine.shutdown(cancel);
      CHECK(kind_of([&] { engine.submit(greedy(prompts[0], 4)); }) == ErrorKind::kOutOfMemory);
      for (auto& st : streams) {
        Result r;
        TokenEvent e;
        while (st->next(e, std::chrono::milliseconds(0))) r.finish = e.finish;
        if (cancel) {
          CHECK((r.finish == FinishReason::kCancelled || r.finish == FinishReason::kLength));
        } else {
          CHECK(r.finish == FinishReason::kLength);
        }
      }
      const EngineMetrics m = engine.metrics();
      CHECK(m.running == 0);
      CHECK(m.waiting == 0);
      CHECK(m.kv_device_blocks_used == 0);
      engine.shutdown(true);  // idempotent
    }
  }
}

TEST_CASE("chunked prefill shares steps with decodes under the token budget", "[engine]") {
  Setup s;
  KvStore store(s.model->backend(), s.model->kv_shape(), hybrid_config(), 4, 512);
  SchedulerOptions opt;
  opt.max_batch = 4;
  opt.prefill_chunk = 32;
  opt.step_token_budget = 40;
  Scheduler sched(opt, store);
  auto make = [&](uint64_t id, int32_t n) {
    GenerationRequest r = greedy(std::vector<int32_t>(static_cast<size_t>(n), 7), 8);
    return std::make_unique<Sequence>(id, std::move(r), std::make_shared<TokenStream>(),
                                      stories_tokenizer(), std::vector<int32_t>{}, 0);
  };
  // Runs a schedule through the model; a finished prefill or a decode appends a token.
  auto run = [&](const Schedule& plan) {
    std::vector<StepSequence> batch;
    for (const ScheduledChunk& c : plan.chunks)
      batch.push_back(
          {c.seq->kv.get(),
           std::span<const int32_t>(c.seq->tokens)
               .subspan(static_cast<size_t>(c.seq->computed()), static_cast<size_t>(c.n)),
           false, c.decode, c.observe});
    s.model->forward(batch);
    for (const ScheduledChunk& c : plan.chunks)
      if (c.last()) c.seq->tokens.push_back(9);
  };
  sched.add(make(0, 10));
  Schedule p = sched.schedule();
  REQUIRE(p.chunks.size() == 1);
  CHECK((p.chunks[0].n == 10 && p.chunks[0].observe && !p.chunks[0].decode));
  run(p);
  sched.add(make(1, 100));
  sched.add(make(2, 5));
  p = sched.schedule();  // the decode, 32 tokens of the long prompt, the whole short one
  REQUIRE(p.chunks.size() == 3);
  CHECK((p.chunks[0].decode && p.chunks[0].n == 1));
  CHECK((p.chunks[1].n == 32 && !p.chunks[1].observe));
  CHECK((p.chunks[2].n == 5 && p.chunks[2].observe));  // 39 tokens of a budget of 40
  run(p);
  p = sched.schedule();  // two decodes first, then the long prompt's next chunk
  REQUIRE(p.chunks.size() == 3);
  CHECK((p.chunks[0].decode && p.chunks[1].n == 32 && p.chunks[2].decode));
  run(p);
  p = sched.schedule();
  CHECK(p.chunks[1].n == 32);
  run(p);
  p = sched.schedule();
  CHECK((p.chunks[1].n == 4 && p.chunks[1].observe));  // 100 = 32 + 32 + 32 + 4
  run(p);
  p = sched.schedule();
  for (const ScheduledChunk& c : p.chunks) CHECK(c.decode);
  CHECK(sched.running().size() == 3);
  for (int i = 0; i < 3; ++i) sched.retire(sched.running().back().get());
  CHECK(store.device_blocks_used() == 0);
}

TEST_CASE("a sequence that cannot grow preempts the most recently admitted one", "[engine]") {
  Setup s;
  // 2 layers x (sink block + one window block) = 4 blocks per short sequence; 8 in the pool.
  KvStore store(s.model->backend(), s.model->kv_shape(), hybrid_config(8), 4, 512);
  Scheduler sched(SchedulerOptions{}, store);
  auto make = [&](uint64_t id) {
    GenerationRequest r = greedy(std::vector<int32_t>(10, 7), 100);
    return std::make_unique<Sequence>(id, std::move(r), std::make_shared<TokenStream>(),
                                      stories_tokenizer(), std::vector<int32_t>{}, 0);
  };
  auto run = [&](const Schedule& plan) {
    std::vector<StepSequence> batch;
    for (const ScheduledChunk& c : plan.chunks)
      batch.push_back(
          {c.seq->kv.get(),
           std::span<const int32_t>(c.seq->tokens)
               .subspan(static_cast<size_t>(c.seq->computed()), static_cast<size_t>(c.n)),
           false, c.decode, c.observe});
    s.model->forward(batch);
    for (const ScheduledChunk& c : plan.chunks)
      if (c.last()) c.seq->tokens.push_back(9);
  };
  sched.add(make(0));
  sched.add(make(1));
  run(sched.schedule());
  REQUIRE(sched.running().size() == 2);
  CHECK(store.device_blocks_used() == 8);
  sched.add(make(2));  // waits: no room
  // At 20 tokens the first sequence needs a second window block per layer: the second goes.
  while (sched.preemptions() == 0) {
    const Schedule p = sched.schedule();
    REQUIRE(!p.chunks.empty());
    run(p);
  }
  REQUIRE(sched.running().size() == 1);
  CHECK(sched.running()[0]->id == 0);
  REQUIRE(sched.waiting().size() == 2);
  CHECK(sched.waiting()[0]->id == 1);  // at the front, before the newer request
  CHECK(sched.waiting()[0]->kv == nullptr);
  CHECK(sched.waiting()[0]->generated() > 0);  // kept: recomputed from prompt + output
  sched.retire(sched.running()[0].get());
  // Readmitted first, prompt + output as one prefill; it now needs 6 blocks, so the newer
  // request (4 more) still waits.
  const Schedule p = sched.schedule();
  REQUIRE(p.chunks.size() == 1);
  CHECK(p.chunks[0].seq->id == 1);
  CHECK(p.chunks[0].n == p.chunks[0].seq->size());
  CHECK(p.chunks[0].observe);
  CHECK(sched.waiting().size() == 1);
}

TEST_CASE("llama-tiny: batched, chunked and preempted runs equal solo runs", "[engine]") {
  Setup s("tests/fixtures/models/llama-tiny");
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> prompts;
  for (int len : {1, 3, 9, 17, 40, 90}) {  // 90 + 30 tokens reach the host store
    std::vector<int32_t> p(static_cast<size_t>(len));
    for (int32_t& t : p) t = static_cast<int32_t>(rng() % 256);
    prompts.push_back(p);
  }
  const int32_t max_tokens = 30;
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(reference(*s.model, p, max_tokens));
  struct Case {
    const char* name;
    KvConfig kv;
  };
  for (const Case& c : {Case{"dense", dense_config()}, Case{"hybrid", hybrid_config()},
                        Case{"hybrid, tiny pool", hybrid_config(24)}}) {
    DYNAMIC_SECTION(c.name) {
      KvStore store(s.model->backend(), s.model->kv_shape(), c.kv, 8, 512);
      EngineOptions opt;
      opt.prefill_chunk = 8;
      opt.step_token_budget = 24;
      Engine engine(*s.model, stories_tokenizer(), store, opt);
      std::vector<std::shared_ptr<TokenStream>> streams;
      for (const auto& p : prompts) streams.push_back(engine.submit(greedy(p, max_tokens)));
      for (size_t i = 0; i < prompts.size(); ++i) {
        const Result r = collect(*streams[i]);
        CHECK(r.finish == FinishReason::kLength);
        CHECK(r.tokens == want[i]);
      }
      const EngineMetrics m =
          wait_metrics(engine, [](const EngineMetrics& x) { return x.running == 0; });
      if (c.kv.device_blocks > 0) CHECK(m.preemptions > 0);
      CHECK(m.kv_device_blocks_used == 0);
    }
  }
}

TEST_CASE("sparse policies and layer-ahead host attention serve every request", "[engine]") {
  Setup s;
  const auto prompts = story_prompts();
  for (const SparsePolicy policy : {SparsePolicy::kHgca, SparsePolicy::kTopk}) {
    KvConfig kv = hybrid_config();
    kv.sparse = policy;
    kv.cpu_attn = CpuAttnMode::kAhead;
    kv.topk_blocks = 2;
    KvStore store(s.model->backend(), s.model->kv_shape(), kv, 8, 512);
    Engine engine(*s.model, stories_tokenizer(), store, EngineOptions{});
    std::vector<std::shared_ptr<TokenStream>> streams;
    for (const auto& p : prompts) streams.push_back(engine.submit(greedy(p, 50)));
    for (auto& st : streams) {
      const Result r = collect(*st);
      CHECK(r.finish == FinishReason::kLength);
      CHECK(r.completion_tokens == 50);
    }
  }
}

TEST_CASE("a failing model step fails its batch with kError and the engine goes on", "[engine]") {
  Setup s;
  // A store built for the wrong KV shape: every forward step throws inside attention.
  KvShape wrong = s.model->kv_shape();
  wrong.n_head_kv /= 2;
  KvStore store(s.model->backend(), wrong, dense_config(), 4, 512);
  Engine engine(*s.model, stories_tokenizer(), store, EngineOptions{});
  const auto prompts = story_prompts();
  std::vector<std::shared_ptr<TokenStream>> streams;
  for (size_t i = 0; i < 3; ++i) streams.push_back(engine.submit(greedy(prompts[i], 10)));
  for (auto& st : streams) {
    const Result r = collect(*st);
    CHECK(r.finish == FinishReason::kError);
    CHECK(r.error.find("model step failed") != std::string::npos);
    CHECK(r.completion_tokens == 0);
  }
  CHECK(collect(*engine.submit(greedy(prompts[3], 10))).finish == FinishReason::kError);
  const EngineMetrics m = wait_metrics(
      engine, [](const EngineMetrics& x) { return x.running == 0 && x.finished_error == 4; });
  CHECK(m.waiting == 0);
}
