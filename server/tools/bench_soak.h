// The soak mode of `tandem bench` (--soak-seconds): a reliability load, not a measurement of
// speed. Workers send requests back to back for a fixed time to both generation routes (chat and
// completions, whatever --endpoint says), a mix of streamed and whole responses, some aborted
// mid-stream (the client hangs up after the first chunk) and some malformed (broken JSON, wrong
// types, impossible values: each must get a 4xx). It counts every status code, transport error and
// incomplete answer, and samples the server's resident memory
// (/proc/PID/status of --soak-pid) with the request count at a fixed interval, so that memory
// can be read per request. scripts/soak.sh drives it and plots the result.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "server/tools/bench_client.h"

namespace tandem::bench {

struct SoakConfig {
  double seconds = 60;
  double abort_ratio = 0.1;       // requests aborted after their first streamed chunk
  double malformed_ratio = 0.05;  // requests with a broken body
  double stream_ratio = 0.5;      // of the other requests, the share streamed
  int server_pid = 0;             // whose VmRSS is sampled; 0: none
  double sample_interval = 10;    // seconds between samples and progress lines
};

// Runs the soak with cfg.max_concurrency workers (64 when 0) on `prompts` (picked at random);
// returns the summary: counts by status and kind, and the samples [seconds, rss_bytes,
// requests]. Never throws for a failed request.
nlohmann::json run_soak(const BenchConfig& cfg, const SoakConfig& soak,
                        const std::vector<BenchPrompt>& prompts);

}  // namespace tandem::bench
