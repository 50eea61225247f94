// HttpServer: the OpenAI-compatible HTTP front of Tandem, with cpp-httplib hidden behind this
// one class. Routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models,
// GET /v1/models/{id}, POST /tokenize, POST /detokenize, GET /health, GET /metrics; OPTIONS (CORS
// preflight) on any path. Every response carries X-Request-Id (the client's, or a new one).
// Handlers never throw: every failure is an OpenAI error object. Responses to generation requests
// are written by a content provider that polls the request's TokenStreams and the client socket, so
// a client that goes away — streaming or not — cancels its sequences at once. The engine is reached
// only through ServerHooks.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/request.h"
#include "server/http_connection.h"
#include "server/metrics.h"
#include "server/openai_codec.h"

namespace tandem {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;              // 0: any free port (see bind())
  std::string api_key;          // empty: no authentication
  bool metrics_public = false;  // with an API key: /metrics served without it too
  std::vector<std::string> allowed_origins = {"*"};  // CORS; empty: no CORS headers
  // A streamed response that has sent nothing for this long (a long prefill) sends an SSE
  // comment, so proxies and clients do not time out; 0: never.
  double sse_keepalive_s = 15;
  ConnectionLimits conn;  // workers, header and body bytes, deadlines
  openai::CodecLimits limits;
  SamplingParams sampling_defaults;  // the model's generation config
};

// What the server needs from the engine.
struct ServerHooks {
  // Queues one sequence; throws tandem::Error (kInvalidArgument 400, kOutOfMemory 429).
  std::function<std::shared_ptr<TokenStream>(GenerationRequest)> submit;
  std::function<EngineGauges()> gauges;
};

class HttpServer {
 public:
  // model.tokenizer (and chat_template, when set) must outlive the server.
  HttpServer(HttpOptions options, openai::ModelInfo model, ServerHooks hooks);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port and returns the port (the chosen one for port 0); throws tandem::Error.
  int bind();
  // Serves until stop(); returns once every in-flight request has ended.
  void run();
  // Thread-safe: stops accepting connections; requests in flight go on until their sequences
  // end (the caller cancels them through the engine to hurry). New generation requests on
  // kept-alive connections get 503.
  void stop();
  // Generation responses being written now.
  int64_t active_generations() const { return active_.load(); }
  const ServerMetrics& metrics() const { return metrics_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  HttpOptions opt_;
  openai::ModelInfo model_;
  ServerHooks hooks_;
  ServerMetrics metrics_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> active_{0};
  int64_t created_ = 0;  // the model's "created" time (server start)
};

}  // namespace tandem
