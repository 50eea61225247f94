// Prometheus text rendering of the server and engine metrics.
#include "server/metrics.h"

#include <algorithm>
#include <cstdio>

namespace tandem {

namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void head(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void line(std::string& out, const std::string& name, double v) {
  out += name;
  out += ' ';
  out += num(v);
  out += '\n';
}

void metric(std::string& out, const char* name, const char* type, const char* help, double v) {
  head(out, name, type, help);
  line(out, name, v);
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  const size_t i =
      static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(const std::string& name, std::string& out) const {
  uint64_t cum = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cum += counts_[i];
    out += name + "_bucket{le=\"" + (i < bounds_.size() ? num(bounds_[i]) : "+Inf") + "\"} " +
           std::to_string(cum) + "\n";
  }
  line(out, name + "_sum", sum_);
  out += name + "_count " + std::to_string(count_) + "\n";
}

ServerMetrics::ServerMetrics()
    : ttft_({0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,
             0.5,   0.75,   1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0}),
      tpot_({0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
             0.75, 1.0, 2.5, 5.0}),
      e2e_({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
            60.0, 120.0, 300.0}) {}

void ServerMetrics::request_done(const std::string& route, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{route, status}];
}

void ServerMetrics::client_gone() {
  std::lock_guard<std::mutex> lock(mu_);
  ++disconnects_;
}

void ServerMetrics::connection_refused() {
  std::lock_guard<std::mutex> lock(mu_);
  ++refused_;
}

void ServerMetrics::sse_keepalive() {
  std::lock_guard<std::mutex> lock(mu_);
  ++keepalives_;
}

void ServerMetrics::sequence_done(int64_t prompt_tokens, int64_t completion_tokens, double ttft,
                                  double e2e) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_tokens_ += prompt_tokens;
  generation_tokens_ += completion_tokens;
  if (ttft >= 0) {
    ttft_.observe(ttft);
    // Time per output token after the first one.
    if (completion_tokens > 1)
      tpot_.observe((e2e - ttft) / static_cast<double>(completion_tokens - 1));
  }
  e2e_.observe(e2e);
}

int64_t ServerMetrics::requests(const std::string& route, int status) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = requests_.find({route, status});
  return it == requests_.end() ? 0 : it->second;
}

std::string ServerMetrics::render(const EngineGauges& g) const {
  std::string out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    head(out, "tandem_http_requests_total", "counter",
         "HTTP requests answered, by route and status.");
    for (const auto& [key, n] : requests_)
      out += "tandem_http_requests_total{route=\"" + key.first + "\",status=\"" +
             std::to_string(key.second) + "\"} " + std::to_string(n) + "\n";
    metric(out, "tandem_http_disconnects_total", "counter",
           "Clients that hung up before their response ended (their sequences were cancelled).",
           static_cast<double>(disconnects_));
    metric(out, "tandem_http_refused_connections_total", "counter",
           "Connections refused with 503 because every HTTP worker was busy (--http-threads).",
           static_cast<double>(refused_));
    metric(out, "tandem_sse_keepalives_total", "counter",
           "Keep-alive comments sent on streamed responses that had nothing else to send for "
           "--sse-keepalive-seconds (a long prefill).",
           static_cast<double>(keepalives_));
    metric(out, "tandem_prompt_tokens_total", "counter", "Prompt tokens of finished sequences.",
           static_cast<double>(prompt_tokens_));
    metric(out, "tandem_generation_tokens_total", "counter",
           "Generated tokens of finished sequences.", static_cast<double>(generation_tokens_));
    head(out, "tandem_time_to_first_token_seconds", "histogram",
         "From the request's arrival to its first generated token.");
    ttft_.render("tandem_time_to_first_token_seconds", out);
    head(out, "tandem_time_per_output_token_seconds", "histogram",
         "Mean time between generated tokens after the first, per sequence.");
    tpot_.render("tandem_time_per_output_token_seconds", out);
    head(out, "tandem_e2e_request_latency_seconds", "histogram",
         "From the request's arrival to its last token, per sequence.");
    e2e_.render("tandem_e2e_request_latency_seconds", out);
  }
  metric(out, "tandem_num_requests_running", "gauge", "Sequences in the running batch.",
         static_cast<double>(g.running));
  metric(out, "tandem_num_requests_waiting", "gauge", "Sequences waiting for admission.",
         static_cast<double>(g.waiting));
  metric(out, "tandem_engine_steps_total", "counter", "Forward steps run by the engine.",
         static_cast<double>(g.steps));
  metric(out, "tandem_engine_prompt_tokens_total", "counter",
         "Prefill tokens run through the model (recomputation after preemption included).",
         static_cast<double>(g.engine_prompt_tokens));
  metric(out, "tandem_engine_generation_tokens_total", "counter",
         "Tokens sampled by the engine (cancelled sequences included).",
         static_cast<double>(g.engine_generation_tokens));
  head(out, "tandem_engine_sequences_finished_total", "counter",
       "Sequences retired by the engine, by reason.");
  const std::pair<const char*, int64_t> reasons[] = {{"stop", g.finished_stop},
                                                     {"length", g.finished_length},
                                                     {"cancelled", g.finished_cancelled},
                                                     {"error", g.finished_error}};
  for (const auto& [reason, n] : reasons)
    out += std::string("tandem_engine_sequences_finished_total{reason=\"") + reason + "\"} " +
           std::to_string(n) + "\n";
  metric(out, "tandem_preemptions_total", "counter", "Sequences preempted for memory.",
         static_cast<double>(g.preemptions));
  metric(out, "tandem_step_forward_seconds_total", "counter",
         "Time of steps inside the forward pass.", g.forward_seconds);
  metric(out, "tandem_step_other_seconds_total", "counter",
         "Time of steps outside the forward pass (scheduling, sampling, streaming).",
         g.step_other_seconds);
  metric(out, "tandem_step_other_cpu_seconds_total", "counter",
         "CPU time of the engine thread outside the forward pass (the rest of "
         "tandem_step_other_seconds_total it waited for a core or a lock).",
         g.step_other_cpu_seconds);
  metric(out, "tandem_cpu_attention_seconds_total", "counter",
         "Host (CPU) attention busy time, thread-seconds.", g.cpu_attention_seconds);
  metric(out, "tandem_cpu_attention_wait_seconds_total", "counter",
         "Time the forward pass waited for host attention partials before merging them (the "
         "device side held by the CPU side).",
         g.cpu_attention_wait_seconds);
  metric(out, "tandem_kv_device_blocks_used", "gauge", "Device KV blocks in use.",
         static_cast<double>(g.kv_device_blocks_used));
  metric(out, "tandem_kv_device_blocks_total", "gauge", "Device KV blocks in the pool.",
         static_cast<double>(g.kv_device_blocks_total));
  metric(out, "tandem_kv_host_blocks_used", "gauge", "Host KV blocks in use.",
         static_cast<double>(g.kv_host_blocks_used));
  metric(out, "tandem_kv_host_blocks_total", "gauge", "Host KV blocks allocated.",
         static_cast<double>(g.kv_host_blocks_total));
  metric(out, "tandem_kv_host_bytes_used", "gauge",
         "Host KV tier bytes in use (blocks of running sequences and of the prefix cache).",
         static_cast<double>(g.kv_host_bytes_used));
  metric(out, "tandem_kv_host_bytes_budget", "gauge", "Bound of the host KV tier (--kv-host-gib).",
         static_cast<double>(g.kv_host_bytes_budget));
  metric(out, "tandem_prefix_cache_queries_total", "counter",
         "Prompt tokens looked up in the prefix cache (at admission, recomputation included).",
         static_cast<double>(g.prefix_queried_tokens));
  metric(out, "tandem_prefix_cache_hits_total", "counter",
         "Prompt tokens found in the prefix cache (their prefill skipped).",
         static_cast<double>(g.prefix_hit_tokens));
  metric(out, "tandem_prefix_cache_blocks", "gauge",
         "Host KV blocks held by the prefix cache (all layers; shared ones included).",
         static_cast<double>(g.prefix_cached_blocks));
  metric(out, "tandem_prefix_cache_evicted_blocks_total", "counter",
         "Host KV blocks the prefix cache evicted (least recently used) to make room.",
         static_cast<double>(g.prefix_evicted_blocks));
  metric(out, "tandem_similarity_reuse_lookups_total", "counter",
         "Host selections of decode steps looked up by --similarity-reuse (per layer and KV head).",
         static_cast<double>(g.similarity_reuse_lookups));
  metric(out, "tandem_similarity_reuse_hits_total", "counter",
         "Lookups whose query was similar enough to reuse the kept selection (not selected again).",
         static_cast<double>(g.similarity_reuse_hits));
  metric(out, "tandem_cpu_compute_ratio", "gauge",
         "--sparse topk: mean over (sequence, layer) decode steps of the host tokens the CPU "
         "attends over the top-k budget (below 1 with --device-budget).",
         g.cpu_compute_ratio);
  metric(out, "tandem_recalls_total", "counter",
         "--device-budget: recalls of a (sequence, layer)'s resident blocks to the device.",
         static_cast<double>(g.recalls));
  metric(out, "tandem_recall_blocks_total", "counter",
         "--device-budget: host blocks copied to the device (post-prefill sets included).",
         static_cast<double>(g.recall_blocks));
  metric(out, "tandem_recall_bytes_total", "counter",
         "--device-budget: bytes of the host blocks copied to the device.",
         static_cast<double>(g.recall_bytes));
  metric(out, "tandem_recall_interval_mean", "gauge",
         "--device-budget: mean decode steps between a layer's recalls.", g.mean_recall_interval);
  metric(out, "tandem_host_kv_bytes_read_total", "counter",
         "KV bytes the host attention read for the selected host entries (values only under "
         "--value-offload).",
         static_cast<double>(g.host_kv_bytes_read));
  metric(out, "tandem_value_offload_logits_sampled_total", "counter",
         "Scaled logits whose --value-offload key-quantisation error was measured (every 16th "
         "scored item, all its entries and query heads).",
         static_cast<double>(g.value_offload_logits));
  metric(out, "tandem_value_offload_logit_abs_error_sum", "counter",
         "Sum of |approximate - exact| scaled logits over the sampled ones (divide by "
         "tandem_value_offload_logits_sampled_total for the mean).",
         g.value_offload_err_sum);
  metric(out, "tandem_value_offload_logit_abs_error_max", "gauge",
         "Largest |approximate - exact| scaled logit sampled.", g.value_offload_err_max);
  return out;
}

}  // namespace tandem
