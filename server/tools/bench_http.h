// What the files of the load-test client share: the request a connection sends (one file sends
// it on a fresh client, another on each worker's kept-alive one) and two small predicates.
#pragma once

#include <httplib.h>

#include <string>

#include "server/tools/bench_client.h"

namespace tandem::bench {

inline bool is_chat(const BenchConfig& cfg) {
  return cfg.endpoint.find("chat/completions") != std::string::npos;
}

inline std::string auth_header(const BenchConfig& cfg) {
  return cfg.api_key.empty() ? std::string() : "Bearer " + cfg.api_key;
}

// Sends one request on `cli` (paths under `prefix`) and measures it; failures are in the result.
// May throw on a client error outside the request (send_request catches it).
RequestResult send_with(httplib::Client& cli, const std::string& prefix, const BenchConfig& cfg,
                        const BenchPrompt& prompt, const Tokenizer* tok);

}  // namespace tandem::bench
