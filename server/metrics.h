// Server metrics in the Prometheus text format (version 0.0.4): request counts by route and
// status, token counters, latency histograms (TTFT, time per output token, end to end) kept by
// the HTTP layer, plus the engine's gauges and counters (running/waiting sequences, KV blocks,
// step time in and outside the forward pass, CPU attention time) read at scrape time.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tandem {

// A cumulative histogram with fixed upper bounds (seconds); thread-safe through its owner.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // Appends the _bucket/_sum/_count lines of `name`.
  void render(const std::string& name, std::string& out) const;
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// What the engine reports, copied from its snapshot by the serve command.
struct EngineGauges {
  int64_t running = 0, waiting = 0;
  int64_t steps = 0;
  int64_t engine_prompt_tokens = 0;      // prefill tokens run (recomputation after preemption too)
  int64_t engine_generation_tokens = 0;  // tokens sampled (cancelled sequences included)
  int64_t finished_stop = 0, finished_length = 0, finished_cancelled = 0, finished_error = 0;
  int64_t preemptions = 0;
  double forward_seconds = 0, step_other_seconds = 0, cpu_attention_seconds = 0;
  double cpu_attention_wait_seconds = 0;
  double step_other_cpu_seconds = 0;
  int64_t kv_device_blocks_used = 0, kv_device_blocks_total = 0;
  int64_t kv_host_blocks_used = 0, kv_host_blocks_total = 0;
  // The host tier's bound and use in bytes (blocks x block bytes, cached ones included).
  int64_t kv_host_bytes_used = 0, kv_host_bytes_budget = 0;
  // The prefix cache: prompt tokens looked up and found, host blocks held by entries (all
  // layers), evicted.
  int64_t prefix_queried_tokens = 0, prefix_hit_tokens = 0;
  int64_t prefix_cached_blocks = 0, prefix_evicted_blocks = 0;
  // --similarity-reuse: host selections looked up and reused ((layer, KV head) per decode step).
  int64_t similarity_reuse_lookups = 0, similarity_reuse_hits = 0;
  // --sparse topk: mean CPU compute ratio; --device-budget: recalls, their blocks and bytes,
  // mean decode steps between a layer's recalls.
  double cpu_compute_ratio = 0;
  int64_t recalls = 0, recall_blocks = 0, recall_bytes = 0;
  double mean_recall_interval = 0;
  // --value-offload: logits sampled, their summed and largest absolute error |z~ - z|; the host
  // attention's KV bytes read.
  int64_t value_offload_logits = 0;
  double value_offload_err_sum = 0, value_offload_err_max = 0;
  int64_t host_kv_bytes_read = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();

  void request_done(const std::string& route, int status);
  void client_gone();  // a client hung up before its response ended (its sequences cancelled)
  void connection_refused();  // a connection beyond the HTTP workers got 503
  void sse_keepalive();       // a streamed response sent a keep-alive comment
  // One finished sequence: its token counts and latencies in seconds (ttft < 0: no token came).
  void sequence_done(int64_t prompt_tokens, int64_t completion_tokens, double ttft, double e2e);
  // The Prometheus text, engine gauges included.
  std::string render(const EngineGauges& engine) const;

  int64_t requests(const std::string& route, int status) const;  // for tests and logs

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  int64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  int64_t disconnects_ = 0;
  int64_t refused_ = 0;
  int64_t keepalives_ = 0;
  Histogram ttft_, tpot_, e2e_;
};

}  // namespace tandem
