// The load-test client behind `tandem bench` (flags and semantics of `vllm bench serve`):
// random prompts, prompts sharing prefixes, multi-turn chats, Poisson arrivals, one HTTP client per
// concurrent worker, streamed responses parsed as server-sent events as they arrive, per-request
// timing (TTFT, inter-token latencies, end to end), the aggregate metrics (throughput, percentiles,
// goodput), the server's own Prometheus counters before and after, and the report as a table and as
// JSON. It talks to any OpenAI-compatible server: nothing here is specific to Tandem but the
// optional /metrics figures.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

class Tokenizer;

namespace bench {

struct BenchConfig {
  // random: independent prompts; prefix_repetition: num_prefixes shared prefixes, each prompt one
  // of them + its own suffix; multi_turn: num_prompts conversations of `turns` chat turns.
  std::string dataset = "random";
  std::string base_url = "http://127.0.0.1:8000";  // scheme://host[:port][/prefix]
  std::string endpoint = "/v1/completions";        // or /v1/chat/completions
  std::string model;                               // the "model" field; empty: not sent
  int32_t num_prompts = 1000;
  int32_t max_concurrency = 0;  // in-flight requests at most; 0: no limit
  double request_rate = 0;      // requests/s (Poisson arrivals); 0 or inf: all at once
  double burstiness = 1.0;      // gamma shape of the inter-arrival times; 1: Poisson
  int32_t input_len = 1024, output_len = 128;
  double range_ratio = 0;  // lengths uniform in [len*(1-x), len*(1+x)]
  // prefix_repetition (vllm's defaults): tokens of each prefix and suffix, distinct prefixes,
  // max_tokens.
  int32_t prefix_len = 256, suffix_len = 256, num_prefixes = 10, prefix_output_len = 128;
  // multi_turn: turns per conversation, new user tokens per turn, max_tokens per turn.
  int32_t turns = 4, turn_input_len = 64, turn_output_len = 64;
  bool ignore_eos = false;
  bool stream = true;
  double temperature = 0;  // greedy by default, as vllm bench
  std::string api_key;
  std::vector<std::string> percentile_metrics = {"ttft", "tpot", "itl"};
  std::vector<double> metric_percentiles = {99};
  std::map<std::string, double> goodput_ms;  // SLOs by metric (ttft, tpot, e2el), milliseconds
  uint64_t seed = 0;
  bool warmup = true;      // one request first; its failure ends the run
  double timeout_s = 600;  // per request
  bool progress = false;   // progress lines on stderr
  bool scrape_metrics = true;
};

struct ChatMessage {
  std::string role;  // "user" or "assistant"
  std::string content;
};

struct BenchPrompt {
  std::string text;        // the prompt, or (chat) the last user message
  int32_t prompt_len = 0;  // tokens (with a tokenizer) or words (an estimate) of what is sent
  int32_t output_len = 0;  // max_tokens
  int32_t prefix = -1;     // prefix_repetition: which shared prefix the text starts with
  std::vector<ChatMessage> history;  // chat: the messages sent before `text`
};

// A multi_turn conversation: the new user message of each turn (the history is built from the
// replies received while it runs).
struct Conversation {
  std::vector<BenchPrompt> turns;
};

// What one request measured. Times in seconds from its start.
struct RequestResult {
  bool success = false;
  std::string error;
  double start = 0;  // seconds since the run began
  double ttft = 0;   // first content chunk (non-stream: the whole response)
  double latency = 0;
  std::vector<double> itl;  // gaps between content chunks after the first
  int32_t prompt_len = 0;
  int32_t output_tokens = 0;
  bool usage_reported = false;  // output_tokens from the server's usage, not counted
  int32_t cached_tokens = -1;   // usage.prompt_tokens_details.cached_tokens; -1: not reported
  int32_t turn = -1;            // multi_turn: 0 for the first turn of its conversation
  std::string text;
};

// Incremental server-sent-event parser: feed() bytes as they come, in any split; every complete
// `data:` line calls on_data with its payload ("[DONE]" included). CR LF and LF both end lines;
// other fields (event:, id:, comments) are ignored.
class SseParser {
 public:
  explicit SseParser(std::function<void(std::string_view)> on_data)
      : on_data_(std::move(on_data)) {}
  void feed(std::string_view bytes);
  bool done() const { return done_; }  // "[DONE]" seen

 private:
  std::function<void(std::string_view)> on_data_;
  std::string line_;
  bool done_ = false;
};

// Prometheus text format: "name{labels} value" lines (comments skipped), keyed by the series as
// written (name plus labels).
std::map<std::string, double> parse_prometheus(std::string_view text);
// Sum of every series of metric `name` (any labels); nullopt when the metric is absent.
std::optional<double> prom_sum(const std::map<std::string, double>& m, const std::string& name);

// Random prompts as vllm's random dataset: lengths uniform within the range ratio; the text is
// random token ids decoded with `tok` (re-encoded to count), or words from a fixed list when
// tok is null.
std::vector<BenchPrompt> make_random_prompts(const BenchConfig& cfg, const Tokenizer* tok);

// vllm's prefix_repetition dataset: num_prefixes random prefixes of prefix_len tokens; each of
// the num_prompts prompts is one of them followed by a random suffix of suffix_len tokens. The
// prompts are spread evenly over the prefixes (prompt i has prefix i % num_prefixes before the
// shuffle), then shuffled with the seed.
std::vector<BenchPrompt> make_prefix_repetition_prompts(const BenchConfig& cfg,
                                                        const Tokenizer* tok);

// multi_turn: num_prompts conversations of `turns` random user messages of turn_input_len
// tokens (max_tokens turn_output_len each).
std::vector<Conversation> make_conversations(const BenchConfig& cfg, const Tokenizer* tok);

// The request of the next turn of `conv` after `replies` (the assistant texts received for the
// turns before): every earlier user message and reply as history, then the turn's own message.
// prompt_len estimates the whole history's length (the server's usage replaces it).
BenchPrompt next_turn(const Conversation& conv, const std::vector<std::string>& replies,
                      const Tokenizer* tok);

// Arrival offsets (seconds from the start) of n requests: gamma-distributed gaps with mean
// 1/rate and shape burstiness (exponential: Poisson); all zero for rate 0 or inf.
std::vector<double> arrival_times(int32_t n, double rate, double burstiness, uint64_t seed);

// numpy.percentile's default (linear interpolation between closest ranks); 0 for no values.
double percentile(std::vector<double> values, double p);

// Sends one request with its own client (scheme_host_port as httplib takes it) and measures it.
// Never throws: failures are in the result.
RequestResult send_request(const BenchConfig& cfg, const BenchPrompt& prompt,
                           const Tokenizer* tok = nullptr);

struct BenchOutcome {
  std::vector<RequestResult> results;
  double duration = 0;                          // seconds, first send to last response
  std::map<std::string, double> before, after;  // /metrics; empty when not scraped
  bool server_metrics = false;
  double load_avg_before = -1, load_avg_after = -1;  // 1-minute load average (Linux)
  std::string tokenizer;                             // folder, or "" for the word list
};

// Runs the benchmark: warm-up, scrape, timed requests from max_concurrency workers, scrape.
// Throws tandem::Error when the warm-up request fails (nothing would be measured).
BenchOutcome run_benchmark(const BenchConfig& cfg, const std::vector<BenchPrompt>& prompts,
                           const Tokenizer* tok);
// The same for multi_turn: each worker runs whole conversations, one turn after the other (the
// arrival times are the conversations'); results are conversation-major (conversation c, turn t
// at c * turns + t). A turn that fails ends its conversation: the later turns fail unsent.
BenchOutcome run_conversations(const BenchConfig& cfg, const std::vector<Conversation>& convs,
                               const Tokenizer* tok);

// The report as vllm's result JSON (same keys) plus failed requests, input throughput, the
// server's metric deltas and the machine's load.
nlohmann::json report_json(const BenchConfig& cfg, const BenchOutcome& out);
// The readable table of a report_json() object.
std::string format_table(const nlohmann::json& report);

// The first model id of the server's GET /v1/models; nullopt when it cannot be had.
std::optional<std::string> served_model(const BenchConfig& cfg);

// The JSON body of one generation request for `p` (chat or completions by the endpoint), streamed
// with usage in the last chunk when `stream`.
std::string request_body(const BenchConfig& cfg, const BenchPrompt& p, bool stream);

// "http://h:p/prefix" -> {"http://h:p", "/prefix"}; throws tandem::Error on a malformed URL.
std::pair<std::string, std::string> split_url(const std::string& url);

}  // namespace bench
}  // namespace tandem
