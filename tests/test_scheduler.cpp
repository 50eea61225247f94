// The scheduler driven by a fake KV planner, no model loaded: admission in arrival order under
// the batch, token and block limits; chunked prefill sharing steps with decodes; preemption of
// the most recently admitted sequence (recomputed on readmission); cancellation.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "engine/scheduler.h"
#include "engine/tokenizer/tokenizer.h"

using namespace tandem;

namespace {

// A pool of `total` blocks of `block` tokens; a sequence holds ceil(length / block) of them
// (one tier, no eviction), taken when it advances and given back when it is destroyed.
struct FakePlanner;

struct FakeKv final : SequenceKv {
  FakeKv(FakePlanner& p, int32_t c) : planner(p), cap(c) {}
  ~FakeKv() override;
  int32_t length() const override { return len; }
  int32_t capacity() const override { return cap; }
  void advance(int32_t n) override;
  void import_kv(Backend&, int32_t, const float*, const float*, int32_t) override {}
  FakePlanner& planner;
  int32_t cap;
  int32_t len = 0;
};

struct FakePlanner final : KvPlanner {
  FakePlanner(int64_t t, int32_t b) : total(t), block(b) {}
  int64_t blocks(int64_t tokens) const { return (tokens + block - 1) / block; }
  StepPlan plan(std::span<const PlanRequest> batch) const override {
    ++plans;
    StepPlan p;
    p.device_free = total - used;
    for (const PlanRequest& r : batch) {
      const int64_t len = r.kv != nullptr ? r.kv->length() : 0;
      SequencePlan s;
      s.request = r;
      s.device.alloc = blocks(len + r.tokens) - blocks(len);
      p.device.alloc += s.device.alloc;
      p.seqs.push_back(s);
    }
    return p;
  }
  std::unique_ptr<SequenceKv> new_sequence(int32_t capacity,
                                           std::span<const int32_t> = {}) override {
    if (fail_next) {
      fail_next = false;
      throw Error(ErrorKind::kOutOfMemory, "fake: no memory");
    }
    ++live;
    return std::make_unique<FakeKv>(*this, capacity);
  }
  int64_t device_blocks_total() const override { return total; }
  int64_t total;
  int32_t block;
  int64_t used = 0;
  int32_t live = 0;
  bool fail_next = false;
  mutable int64_t plans = 0;
};

FakeKv::~FakeKv() {
  planner.used -= planner.blocks(len);
  --planner.live;
}

void FakeKv::advance(int32_t n) {
  planner.used += planner.blocks(len + n) - planner.blocks(len);
  len += n;
}

// A byte-level tokenizer with no merges: enough for Sequence's decoder.
const Tokenizer& bytes_tokenizer() {
  static const Tokenizer t = [] {
    nlohmann::json vocab = nlohmann::json::object();
    for (int b = 0; b < 256; ++b)
      vocab[std::string(1, static_cast<char>('!' + b % 90)) + std::to_string(b)] = b;
    const nlohmann::json tj = {{"version", "1.0"},
                               {"added_tokens", nlohmann::json::array()},
                               {"normalizer", nullptr},
                               {"pre_tokenizer", nullptr},
                               {"post_processor", nullptr},
                               {"decoder", nullptr},
                               {"model",
                                {{"type", "BPE"},
                                 {"vocab", vocab},
                                 {"merges", nlohmann::json::array()},
                                 {"unk_token", nullptr}}}};
    return Tokenizer::from_json_text(tj.dump());
  }();
  return t;
}

uint64_t g_next_id = 0;

std::unique_ptr<Sequence> make_seq(int32_t prompt, int32_t max_tokens) {
  GenerationRequest req;
  req.prompt.assign(static_cast<size_t>(prompt), 7);
  req.max_tokens = max_tokens;
  return std::make_unique<Sequence>(g_next_id++, std::move(req), std::make_shared<TokenStream>(),
                                    bytes_tokenizer(), std::vector<int32_t>{}, 1);
}

// Runs what a step scheduled: every chunk's tokens are stored; a chunk that ends at the end of
// its tokens samples one more token (a fixed id). Returns the chunks as (id, n, decode).
std::vector<std::tuple<uint64_t, int32_t, bool>> run_step(Scheduler& s) {
  const Schedule plan = s.schedule();
  REQUIRE(plan.failed.empty());
  std::vector<std::tuple<uint64_t, int32_t, bool>> out;
  for (const ScheduledChunk& c : plan.chunks) {
    REQUIRE(c.seq->kv != nullptr);
    c.seq->kv->advance(c.n);
    if (c.last()) c.seq->tokens.push_back(9);
    out.emplace_back(c.seq->id, c.n, c.decode);
  }
  return out;
}

}  // namespace

TEST_CASE("admission is first come first served under max_batch and the token budget",
          "[scheduler]") {
  FakePlanner store(1000, 16);
  Scheduler s(SchedulerOptions{2, 64, 100}, store);
  const uint64_t first = g_next_id;
  for (int i = 0; i < 3; ++i) s.add(make_seq(40, 4));
  auto step = run_step(s);
  // Two admitted (max_batch), 80 of the 100 tokens; the third waits for a free slot.
  REQUIRE(step.size() == 2);
  CHECK(step[0] == std::make_tuple(first, 40, false));
  CHECK(step[1] == std::make_tuple(first + 1, 40, false));
  CHECK(s.waiting().size() == 1);
  CHECK(store.plans > 0);  // memory questions went to the planner
  // Next step: both decode.
  step = run_step(s);
  REQUIRE(step.size() == 2);
  CHECK(std::get<2>(step[0]));
  CHECK(std::get<2>(step[1]));
}

TEST_CASE("chunked prefill shares steps with decodes and marks its last chunk", "[scheduler]") {
  FakePlanner store(1000, 16);
  Scheduler s(SchedulerOptions{4, 64, 80}, store);
  s.add(make_seq(10, 8));
  run_step(s);  // A prefilled
  s.add(make_seq(200, 4));
  std::vector<int32_t> b_chunks;
  for (int i = 0; i < 6 && b_chunks.size() < 4; ++i) {
    const Schedule plan = s.schedule();
    int32_t tokens = 0;
    for (const ScheduledChunk& c : plan.chunks) {
      tokens += c.n;
      if (c.seq->prompt_len() == 200 && !c.decode) {
        b_chunks.push_back(c.n);
        CHECK(c.observe == (c.seq->computed() + c.n == 200));
      }
      c.seq->kv->advance(c.n);
      if (c.last()) c.seq->tokens.push_back(9);
    }
    CHECK(tokens <= 80);  // decodes count against the budget too
  }
  // Chunks of at most prefill_chunk, limited by the budget left after A's decode: 64, 64, 64, 8.
  CHECK(b_chunks == std::vector<int32_t>{64, 64, 64, 8});
}

TEST_CASE("a sequence that cannot grow preempts the most recently admitted one", "[scheduler]") {
  FakePlanner store(6, 4);  // 24 tokens of KV in all
  Scheduler s(SchedulerOptions{4, 64, 256}, store);
  auto a = make_seq(8, 16);
  auto b = make_seq(8, 16);
  Sequence* pa = a.get();
  Sequence* pb = b.get();
  s.add(std::move(a));
  s.add(std::move(b));
  run_step(s);  // both prefilled: 2 + 2 blocks
  CHECK(store.used == 4);
  bool preempted = false;
  for (int i = 0; i < 12 && !preempted; ++i) {
    run_step(s);
    preempted = s.preemptions() > 0;
  }
  REQUIRE(preempted);
  // B, admitted last, went back to the front of the queue with its KV freed; A kept running.
  CHECK(pb->status == SequenceStatus::kWaiting);
  CHECK(pb->kv == nullptr);
  CHECK(s.waiting().front().get() == pb);
  CHECK(pa->status == SequenceStatus::kRunning);
  CHECK(store.used == store.blocks(pa->computed()));
  // Once A is retired, B is readmitted and recomputes prompt + generated tokens in one prefill.
  const int32_t b_size = pb->size();
  s.retire(pa);
  const Schedule plan = s.schedule();
  REQUIRE(plan.chunks.size() == 1);
  CHECK(plan.chunks[0].seq == pb);
  CHECK(plan.chunks[0].n == b_size);
  CHECK(pb->prefill_end == b_size);
}

TEST_CASE("admission stops at the first sequence that does not fit", "[scheduler]") {
  FakePlanner store(5, 4);
  Scheduler s(SchedulerOptions{8, 64, 256}, store);
  s.add(make_seq(12, 4));  // 3 blocks for its prompt
  s.add(make_seq(12, 4));  // does not fit beside it
  s.add(make_seq(2, 1));   // would fit, but waits its turn
  const auto step = run_step(s);
  CHECK(step.size() == 1);
  CHECK(s.waiting().size() == 2);
}

TEST_CASE("cancelled and failed sequences leave the scheduler with their KV freed", "[scheduler]") {
  FakePlanner store(100, 4);
  Scheduler s(SchedulerOptions{4, 64, 256}, store);
  auto a = make_seq(8, 4);
  Sequence* pa = a.get();
  s.add(std::move(a));
  s.add(make_seq(8, 4));
  run_step(s);
  CHECK(store.live == 2);
  auto gone = s.retire(pa);
  REQUIRE(gone != nullptr);
  CHECK(gone->status == SequenceStatus::kFinished);
  CHECK(gone->kv == nullptr);
  CHECK(store.live == 1);
  CHECK(s.running().size() == 1);
  // A waiting sequence is retired from the queue.
  auto w = make_seq(4, 1);
  Sequence* pw = w.get();
  s.add(std::move(w));
  CHECK(s.retire(pw) != nullptr);
  CHECK(s.waiting().empty());
  // A sequence whose KV cannot be created is reported as failed, not scheduled.
  store.fail_next = true;
  s.add(make_seq(4, 1));
  const Schedule plan = s.schedule();
  REQUIRE(plan.failed.size() == 1);
  CHECK(plan.failed[0].second.find("no memory") != std::string::npos);
}
