// Engine: the request queue, the scheduler and the step loop on one engine thread. HTTP threads
// submit() GenerationRequests and read TokenEvents from the returned TokenStreams; the engine
// thread batches every running sequence into one Model::forward per step (chunked prefills and
// decodes together), samples (on the backend where it can, and the logits would otherwise have
// to come down to the host), detokenises, applies stop conditions and streams the events.
#pragma once

#include <spdlog/logger.h>

#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/tokenizer/tokenizer.h"
#include "kvstore/kv_store.h"
#include "models/model.h"

namespace tandem {

// The engine's logger ("engine").
std::shared_ptr<spdlog::logger> engine_logger();

struct EngineOptions {
  int32_t max_batch = 64;            // running sequences at most
  int32_t max_model_len = 0;         // prompt + generated tokens at most; 0: the model's context
  int32_t max_waiting = 256;         // requests queued (not yet admitted) at most; more are refused
                                     // with kOutOfMemory
  int32_t prefill_chunk = 512;       // prompt tokens of one sequence per step at most
  int32_t step_token_budget = 2048;  // tokens per step (decodes of running sequences always run)
  uint64_t seed = 0;  // seeds the generator of per-request seeds (requests without one)
};

// A consistent snapshot, taken at the end of each step.
struct EngineMetrics {
  int32_t running = 0;
  int32_t waiting = 0;
  int64_t steps = 0;              // forward steps run
  int64_t prompt_tokens = 0;      // prefill tokens run through the model (recomputation included)
  int64_t generation_tokens = 0;  // tokens sampled
  int64_t finished_stop = 0;      // requests finished, by reason
  int64_t finished_length = 0;
  int64_t finished_cancelled = 0;
  int64_t finished_error = 0;
  double forward_seconds = 0;     // total in the forward pass, until its results are on the host
  double step_other_seconds = 0;  // total in steps outside forward: scheduling, sampling, streaming
  double step_other_cpu_seconds = 0;  // the engine thread's CPU time of step_other_seconds
  int64_t kv_device_blocks_used = 0;
  int64_t kv_device_blocks_total = 0;
  int64_t kv_host_blocks_used = 0;
  int64_t kv_host_blocks_total = 0;
  int64_t kv_host_bytes_used = 0;     // host blocks in use x their bytes
  int64_t kv_host_bytes_budget = 0;   // the host tier's bound (0: none)
  int64_t prefix_queried_tokens = 0;  // prefix cache (kvstore/prefix_cache.h Stats)
  int64_t prefix_hit_tokens = 0;
  int64_t prefix_cached_blocks = 0;
  int64_t prefix_evicted_blocks = 0;
  int64_t similarity_reuse_lookups = 0;  // --similarity-reuse: (layer, KV head) selections
  int64_t similarity_reuse_hits = 0;     // of which reused the kept selection
  // --sparse topk: mean CPU compute ratio of (sequence, layer) decode steps; --device-budget:
  // recalls of resident sets, blocks and bytes copied, mean decode steps between recalls.
  double cpu_compute_ratio = 0;
  int64_t recalls = 0, recall_blocks = 0, recall_bytes = 0;
  double mean_recall_interval = 0;
  // --value-offload: sampled logits, their summed and largest |z~ - z| (HostStats::quant_*).
  int64_t value_offload_logits = 0;
  double value_offload_err_sum = 0, value_offload_err_max = 0;
  int64_t host_kv_bytes_read = 0;         // host attention's KV reads of the selected entries
  double cpu_attention_busy_seconds = 0;  // host attention thread-seconds (0 with a dense store)
  double cpu_attention_wait_seconds = 0;  // forward pass waiting for host partials, seconds
  int64_t preemptions = 0;
};

class Engine {
 public:
  // Starts the engine thread. The references must outlive the engine. Throws kInvalidArgument
  // on inconsistent options (max_model_len above the model's context, non-positive sizes).
  Engine(Model& model, const Tokenizer& tokenizer, KvStore& store, const EngineOptions& options);
  ~Engine();  // shutdown(true)
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Thread-safe. Validates and queues a request; throws tandem::Error kInvalidArgument on a bad
  // request, kOutOfMemory when max_waiting requests are queued or the engine is shutting down.
  // max_tokens is clamped so that prompt + max_tokens <= max_model_len.
  std::shared_ptr<TokenStream> submit(GenerationRequest request);

  // Stops accepting requests, then either finishes every queued and running request
  // (cancel_running false) or ends them all with kCancelled; joins the engine thread. Idempotent.
  void shutdown(bool cancel_running);

  EngineMetrics metrics() const;
  int32_t max_model_len() const { return max_model_len_; }

 private:
  void loop();
  // One step, in five parts: reap cancelled requests, schedule, run the batch (forward pass and
  // sampling), postprocess (tokens into text and events), publish the metrics.
  void step();
  struct StepOutput;  // engine/engine_step.cpp
  struct StepTimes;
  void reap_cancelled();
  Schedule schedule_step();
  // false: the batch failed as a whole (its sequences were failed and the step published).
  bool run(const Schedule& work, StepOutput& out, StepTimes& times);
  void postprocess(const Schedule& work, StepOutput& out);
  // Appends the sampled token `tok` of a sequence whose step ended at the end of its tokens and
  // streams its event; returns why the sequence finished (kNone: it goes on). logits is the
  // sequence's row on the host (null where the backend sampled it: no logprobs then).
  FinishReason advance(Sequence& seq, const float* logits, int32_t tok);
  // Ends a sequence that did not finish by itself: pushes the final event (kCancelled or kError).
  void fail(Sequence* seq, FinishReason reason, const std::string& error = {});
  void retire(Sequence* seq, FinishReason reason);  // frees its KV now and counts it
  void cancel_everything();
  const std::string& piece(int32_t token);  // the token decoded alone, cached
  void publish(double forward_s, double other_s, double other_cpu_s, int64_t prompt_tokens,
               int64_t gen_tokens, bool stepped);

  Model& model_;
  const Tokenizer& tokenizer_;
  KvStore& store_;
  EngineOptions opt_;
  int32_t max_model_len_ = 0;
  int32_t vocab_ = 0;
  int64_t device_blocks_total_ = 0;
  std::vector<int32_t> eos_ids_;
  // The tokenizer's bytes per token for constrained decoding, built by the first request with a
  // grammar (a 150K vocabulary takes ~0.1 s).
  std::once_flag vocab_once_;
  std::shared_ptr<const grammar::TokenVocab> grammar_vocab_;

  // Engine thread only.
  Scheduler scheduler_;
  std::unordered_map<int32_t, std::string> pieces_;
  int32_t piece_primer_ = -1;
  std::vector<float> logprobs_;
  std::array<int64_t, 5> finished_{};  // by FinishReason, counted here, published per step

  // Shared with submitters.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> inbox_;
  int32_t queued_ = 0;  // scheduler's waiting count, as of the last step
  bool stopping_ = false, cancel_all_ = false;
  uint64_t next_id_ = 0;
  std::mt19937_64 seeds_;
  EngineMetrics metrics_;
  std::mutex join_mu_;
  std::thread thread_;
};

}  // namespace tandem
