// Engine: continuous batching against single-sequence generation (greedy outputs equal each
// request run alone, far fewer steps than tokens), chunked prefill and preemption under a tiny
// device pool, sparse policies and layer-ahead host attention, a failing step. Runs the
// bundled tandem-demo checkpoint and the llama-tiny fixture.
#include "tests/engine_fixture.h"

using namespace tandem;
using namespace tandem::test;

TEST_CASE("concurrent greedy requests equal each one run alone, in far fewer steps", "[engine]") {
  Setup s;
  const auto prompts = story_prompts();
  const int32_t max_tokens = 40;
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(cached_reference(s, p, max_tokens));

  for (const bool dense : {false, true}) {
    DYNAMIC_SECTION((dense ? "dense" : "hybrid") << " store") {
      KvStore store(s.model->backend(), s.model->kv_shape(),
                    dense ? dense_config() : hybrid_config(), 16, 512);
      EngineOptions opt;
      opt.max_batch = 16;
      opt.prefill_chunk = 32;  // the long prompt takes several steps, sharing them with decodes
      opt.step_token_budget = 64;
      Engine engine(*s.model, demo_tokenizer(), store, opt);
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
      CHECK(m.kv_host_blocks_used == m.prefix_cached_blocks);  // the rest is free
      if (!dense) {
        CHECK(m.kv_device_blocks_total > 0);
        CHECK(m.cpu_attention_busy_seconds > 0);  // the long prompt's decodes reach the host
        CHECK(m.cpu_attention_wait_seconds > 0);  // and their merges waited for it
      }
    }
  }
}

TEST_CASE("a tiny device pool forces preemption; outputs stay those of solo runs", "[engine]") {
  Setup s;
  const auto prompts = story_prompts();
  const int32_t max_tokens = 70;
  // A sequence holds at most 1 sink block + 4 window blocks per layer; the pool has room for
  // 12 per layer, so at most two sequences fit at a time.
  // The model is not shared between threads: the references are computed first.
  const int64_t layers = s.model->config().n_layer;
  std::vector<std::vector<int32_t>> want;
  for (size_t i = 0; i < 6; ++i) want.push_back(cached_reference(s, prompts[i], max_tokens));
  KvStore store(s.model->backend(), s.model->kv_shape(), hybrid_config(12 * layers), 8, 512);
  EngineOptions opt;
  opt.max_batch = 8;
  opt.prefill_chunk = 16;
  Engine engine(*s.model, demo_tokenizer(), store, opt);
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
  CHECK(m.kv_device_blocks_total == 12 * layers);
  CHECK(m.kv_device_blocks_used == 0);
  // A request that could never fit the pool is refused up front.
  KvStore tiny(s.model->backend(), s.model->kv_shape(), hybrid_config(3 * layers), 1, 512);
  Engine e2(*s.model, demo_tokenizer(), tiny, opt);
  CHECK(kind_of([&] { e2.submit(greedy(prompts[0], 200)); }) == ErrorKind::kInvalidArgument);
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
                                      demo_tokenizer(), std::vector<int32_t>{}, 0);
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
  // A sink block + one window block per layer for a short sequence; room for two in the pool.
  const int64_t layers = s.model->config().n_layer;
  KvStore store(s.model->backend(), s.model->kv_shape(), hybrid_config(4 * layers), 4, 512);
  Scheduler sched(SchedulerOptions{}, store);
  auto make = [&](uint64_t id) {
    GenerationRequest r = greedy(std::vector<int32_t>(10, 7), 100);
    return std::make_unique<Sequence>(id, std::move(r), std::make_shared<TokenStream>(),
                                      demo_tokenizer(), std::vector<int32_t>{}, 0);
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
  CHECK(store.device_blocks_used() == 4 * layers);
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
  // Readmitted first: it adopts the blocks it left in the prefix cache and prefills the rest of
  // prompt + output as one chunk; it now needs 6 blocks, so the newer request (4 more) still
  // waits.
  const Schedule p = sched.schedule();
  REQUIRE(p.chunks.size() == 1);
  CHECK(p.chunks[0].seq->id == 1);
  CHECK(p.chunks[0].seq->computed() > 0);
  CHECK(p.chunks[0].n == p.chunks[0].seq->size() - p.chunks[0].seq->computed());
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
  for (const auto& p : prompts) want.push_back(cached_reference(s, p, max_tokens));
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
      Engine engine(*s.model, demo_tokenizer(), store, opt);
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
  for (const SparsePolicy policy : {SparsePolicy::kHgca, SparsePolicy::kTopk, SparsePolicy::kTau}) {
    KvConfig kv = hybrid_config();
    kv.sparse = policy;
    kv.cpu_attn = CpuAttnMode::kAhead;
    kv.topk_blocks = 2;
    KvStore store(s.model->backend(), s.model->kv_shape(), kv, 8, 512);
    Engine engine(*s.model, demo_tokenizer(), store, EngineOptions{});
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
  Engine engine(*s.model, demo_tokenizer(), store, EngineOptions{});
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

TEST_CASE("report_progress: a progress event after each prefill chunk, then the tokens",
          "[engine]") {
  Setup s;
  KvStore store(s.model->backend(), s.model->kv_shape(), hybrid_config(), 4, 512);
  EngineOptions opt;
  opt.max_batch = 4;
  opt.prefill_chunk = 32;
  Engine engine(*s.model, demo_tokenizer(), store, opt);
  const std::vector<int32_t> prompt = story_prompts().back();  // several chunks
  REQUIRE(prompt.size() > 64);
  GenerationRequest with = greedy(prompt, 6);
  with.report_progress = true;
  auto a = engine.submit(with);
  auto b = engine.submit(greedy(prompt, 6));  // not asked: no progress event

  std::vector<int32_t> processed;
  std::vector<int32_t> tokens;
  TokenEvent ev;
  for (bool done = false; !done;) {
    REQUIRE(a->next(ev, kPatience));
    if (ev.processed >= 0) {
      CHECK(tokens.empty());  // all before the first token
      CHECK(ev.cached == 0);
      CHECK(ev.tokens.empty());
      CHECK(ev.text.empty());
      CHECK(ev.finish == FinishReason::kNone);
      processed.push_back(ev.processed);
    }
    tokens.insert(tokens.end(), ev.tokens.begin(), ev.tokens.end());
    done = ev.finish != FinishReason::kNone;
  }
  const auto n = static_cast<int32_t>(prompt.size());
  std::vector<int32_t> want;
  for (int32_t p = 32; p < n; p += 32) want.push_back(p);
  want.push_back(n);
  CHECK(processed == want);
  while (b->next(ev, kPatience)) {
    CHECK(ev.processed == -1);
    if (ev.finish != FinishReason::kNone) break;
  }
  CHECK(ev.finish == FinishReason::kLength);
  // The reference runs on the engine's model: only once the engine has nothing left to step (a
  // Model's workspace serves one forward at a time; the address sanitizer caught the overlap).
  CHECK(tokens == reference(*s.model, prompt, 6));
}
