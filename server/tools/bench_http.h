// What the files of the load-test client share: the request a connection sends (one file sends
// it on a fresh client, another on each worker's kept-alive one), the test for a kept-alive
// connection the server closed unannounced, and two small predicates.
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

// Whether a request that got no answer at all (`answered`: no status line) failed because its
// kept-alive connection (`reused`: open before the send) had been closed by the server without
// notice. llama-server does so after every streamed response, though its headers say
// `Keep-Alive: timeout=5, max=100` (its chunked content provider returns false after done(),
// which cpp-httplib takes for a failed write, ending the connection). httplib reconnects when the
// close has arrived before the next send; a request written in the moment before reads
// end-of-file (Error::Read) or has its write reset (Error::Write). It never reached a handler, so
// it is sent once more on a fresh connection, as curl does.
inline bool closed_unannounced(const httplib::Result& res, bool reused, bool answered) {
  return !res && reused && !answered &&
         (res.error() == httplib::Error::Read || res.error() == httplib::Error::Write);
}

// Sends one request on `cli` (paths under `prefix`) and measures it; failures are in the result.
// May throw on a client error outside the request (send_request catches it).
RequestResult send_with(httplib::Client& cli, const std::string& prefix, const BenchConfig& cfg,
                        const BenchPrompt& prompt, const Tokenizer* tok);

}  // namespace tandem::bench
