// HttpServer: routes, bearer authentication, OpenAI error objects for every failure (httplib's
// own 404/413 included), and the response pump that moves TokenEvents to the client while
// watching the socket.
#include "server/http_server.h"

#include <httplib.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <random>

#include "server/openai_routes.h"

namespace tandem {

namespace {

using Clock = std::chrono::steady_clock;
using openai::ApiError;

constexpr auto kPoll = std::chrono::milliseconds(20);  // how long the pump waits for an event
constexpr auto kSocketCheck = std::chrono::milliseconds(20);

std::shared_ptr<spdlog::logger> logger() {
  static std::shared_ptr<spdlog::logger> log = [] {
    auto l = spdlog::get("server");
    return l ? l : spdlog::stderr_color_mt("server");
  }();
  return log;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string s = prefix;
  for (int i = 0; i < 24; ++i) s += hex[rng() & 15];
  return s;
}

void reply(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(openai::error_json(e), "application/json");
}

ApiError server_error(int status, std::string message, std::string code) {
  ApiError e;
  e.status = status;
  e.type = status >= 500 ? "server_error" : "invalid_request_error";
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

// The error object of a failure httplib answers by itself (res.status set, no body). A read the
// connection layer cut short reaches here as httplib's 400 (or 413) and gets its own status;
// the rest of that request is unread, so the connection closes after the answer.
ApiError http_error(const httplib::Request& req, httplib::Response& res,
                    const ConnectionLimits& conn) {
  const ReadLimit limit = current_read_limit();
  if (limit != ReadLimit::kNone) {
    res.status = limit == ReadLimit::kHeaderTooLarge ? 431
                 : limit == ReadLimit::kBodyTooLarge ? 413
                                                     : 408;
    res.set_header("Connection", "close");
  }
  ApiError e = server_error(res.status, cat("HTTP error ", res.status), "");
  if (res.status == 404) {
    e.message = cat("Invalid URL (", req.method, " ", req.path, ")");
    e.code = "unknown_url";
  } else if (res.status == 413) {
    e.message = cat("the request body is larger than ", conn.max_body_bytes, " bytes");
    e.code = "request_too_large";
  } else if (res.status == 431) {
    e.message =
        cat("the request line and headers are larger than ", conn.max_header_bytes, " bytes");
    e.code = "headers_too_large";
  } else if (res.status == 408) {
    e.message = cat("the request was not received within ", conn.request_timeout_s, " s");
    e.code = "request_timeout";
  } else if (res.status == 400) {
    e.message = "malformed HTTP request";
  }
  return e;
}

// The metrics label of a path: the known routes, else "other".
std::string route_label(const std::string& path) {
  for (const char* r : {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health",
                        "/metrics", "/tokenize", "/detokenize"})
    if (path == r) return r;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  return "other";
}

// Whether `given` equals `key`, in a time that depends on given's length only: every byte of
// `given` is compared with the key repeated to that length, and a length mismatch only sets a bit
// of the result. An early return on different lengths (or a loop over the key) would tell a
// client timing its guesses how long the key is. `key` is not empty (no key: no check).
bool same_secret(const std::string& given, const std::string& key) {
  const size_t n = key.size();
  unsigned d = given.size() == n ? 0u : 1u;
  for (size_t i = 0, j = 0; i < given.size(); ++i) {
    d |= static_cast<unsigned char>(given[i] ^ key[j]);
    j = j + 1 == n ? 0 : j + 1;
  }
  return d == 0;
}

// The routes a client reaches without the API key: /health always (load balancers and
// orchestrators probe it without secrets; it tells nothing but "up"), /metrics only when the
// operator says so (its counters describe the traffic; llama.cpp keeps it behind the key too).
bool open_route(const std::string& path, bool metrics_public) {
  return path == "/health" || (metrics_public && path == "/metrics");
}

// A client's X-Request-Id is echoed when it is a sane token (it reaches the log); otherwise, or
// without one, the server makes one up.
std::string request_id(const httplib::Request& req) {
  const std::string given = req.get_header_value("X-Request-Id");
  bool ok = !given.empty() && given.size() <= 128;
  for (char c : given)
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
                c == ':' || c == '/' || c == '+' || c == '=');
  return ok ? given : random_id("req-");
}

// CORS for browser clients: the response allows the request's Origin when --allowed-origins
// lists it (or "*"); a preflight (OPTIONS) is answered here, before the API-key check, since
// browsers send it without credentials.
void cors(const httplib::Request& req, httplib::Response& res,
          const std::vector<std::string>& allowed) {
  const std::string origin = req.get_header_value("Origin");
  if (origin.empty()) return;
  bool any = false, listed = false;
  for (const std::string& o : allowed) {
    any = any || o == "*";
    listed = listed || o == origin;
  }
  if (!any && !listed) return;
  res.set_header("Access-Control-Allow-Origin", any ? "*" : origin);
  if (!any) res.set_header("Vary", "Origin");
  res.set_header("Access-Control-Expose-Headers", "X-Request-Id");
}

void preflight(const httplib::Request& req, httplib::Response& res) {
  res.status = 204;
  res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
  const std::string asked = req.get_header_value("Access-Control-Request-Headers");
  res.set_header("Access-Control-Allow-Headers",
                 asked.empty() ? "Authorization, Content-Type, X-Request-Id" : asked);
  res.set_header("Access-Control-Max-Age", "600");
}

}  // namespace

// One generation request in flight: its streams and the encoder of its response.
struct Job {
  std::string route;
  bool stream = false;
  Clock::time_point t0;
  std::vector<std::shared_ptr<TokenStream>> streams;
  std::vector<int64_t> prompt_len;  // per choice
  std::vector<double> ttft;         // per choice; < 0 until the first token
  std::unique_ptr<openai::ResponseEncoder> enc;

  void cancel_unfinished() {
    for (size_t i = 0; i < streams.size(); ++i)
      if (!enc->finished(i)) streams[i]->cancel();
  }
};

struct HttpServer::Impl {
  explicit Impl(const ConnectionLimits& limits) : http(limits) {}
  GuardedServer http;

  // Writes the response of a job; returns false when the client went away (its sequences are
  // cancelled then).
  static bool pump(HttpServer& self, Job& job, httplib::DataSink& sink);
  static void on_event(HttpServer& self, Job& job, size_t i, const TokenEvent& ev,
                       std::string& out);
  static void generate(HttpServer& self, const httplib::Request& req, httplib::Response& res,
                       openai::Endpoint endpoint);
};

void HttpServer::Impl::on_event(HttpServer& self, Job& job, size_t i, const TokenEvent& ev,
                                std::string& out) {
  const double t = seconds_since(job.t0);
  if (ev.processed >= 0) {  // prefill progress: only streamed, and only when asked for
    if (job.stream) out += job.enc->sse_progress(i, ev, t * 1000);
    return;
  }
  if (!ev.tokens.empty() && job.ttft[i] < 0) job.ttft[i] = t;
  if (job.stream)
    out += job.enc->sse_event(i, ev);
  else
    job.enc->add(i, ev);
  if (ev.finish == FinishReason::kStop || ev.finish == FinishReason::kLength)
    self.metrics_.sequence_done(job.prompt_len[i], ev.completion_tokens, job.ttft[i], t);
}

bool HttpServer::Impl::pump(HttpServer& self, Job& job, httplib::DataSink& sink) {
  auto write = [&](const std::string& s) { return s.empty() || sink.write(s.data(), s.size()); };
  auto gone = [&] {
    job.cancel_unfinished();
    self.metrics_.client_gone();
    self.metrics_.request_done(job.route, 200);  // the status line went out before
    logger()->debug("client went away; {} sequence(s) cancelled", job.streams.size());
    return false;
  };
  openai::ResponseEncoder& enc = *job.enc;
  if (job.stream && !write(enc.sse_start())) return gone();
  auto last_check = Clock::now();
  auto last_write = Clock::now();
  const auto keepalive = std::chrono::duration<double>(self.opt_.sse_keepalive_s);
  std::string out;
  while (!enc.all_finished() && !enc.error()) {
    bool progressed = false;
    TokenEvent ev;
    for (size_t i = 0; i < job.streams.size(); ++i) {
      while (!enc.finished(i) && job.streams[i]->next(ev, std::chrono::milliseconds(0))) {
        on_event(self, job, i, ev, out);
        progressed = true;
      }
    }
    if (!progressed) {
      // Nothing ready: wait on the first unfinished stream (events of the others wait for the
      // next round; a round is one poll interval at most).
      for (size_t i = 0; i < job.streams.size(); ++i) {
        if (enc.finished(i)) continue;
        if (job.streams[i]->next(ev, kPoll)) on_event(self, job, i, ev, out);
        break;
      }
    }
    if (job.stream && out.empty() && self.opt_.sse_keepalive_s > 0 &&
        Clock::now() - last_write >= keepalive) {
      out = ": keep-alive\n\n";  // an SSE comment: clients skip it
      self.metrics_.sse_keepalive();
    }
    if (!out.empty()) last_write = Clock::now();
    if (!write(out)) return gone();
    out.clear();
    if (Clock::now() - last_check >= kSocketCheck) {
      // is_writable also peeks the socket: false once the client closed it.
      if (!sink.is_writable()) return gone();
      last_check = Clock::now();
    }
  }
  if (enc.error()) {
    job.cancel_unfinished();
    logger()->warn("generation failed: {}", enc.error()->message);
  }
  const std::string last = job.stream ? enc.sse_end() : enc.body();
  self.metrics_.request_done(job.route, 200);
  if (!write(last)) {
    job.cancel_unfinished();
    return false;
  }
  sink.done();
  return true;
}

void HttpServer::Impl::generate(HttpServer& self, const httplib::Request& req,
                                httplib::Response& res, openai::Endpoint endpoint) {
  const auto t0 = Clock::now();
  if (self.stopping_.load())
    return reply(res, server_error(503, "the server is shutting down", "service_unavailable"));
  auto parsed =
      openai::parse_request(endpoint, req.body, self.opt_.sampling_defaults, self.opt_.limits);
  if (auto* e = std::get_if<ApiError>(&parsed)) return reply(res, *e);
  const openai::ApiRequest& api = std::get<openai::ApiRequest>(parsed);
  auto planned = openai::plan_request(api, self.model_);
  if (auto* e = std::get_if<ApiError>(&planned)) return reply(res, *e);
  openai::Plan& plan = std::get<openai::Plan>(planned);

  auto job = std::make_shared<Job>();
  job->route = route_label(req.path);
  job->stream = api.stream;
  job->t0 = t0;
  const size_t n = plan.choices.size();
  job->ttft.assign(n, -1.0);
  for (const GenerationRequest& g : plan.choices)
    job->prompt_len.push_back(static_cast<int64_t>(g.prompt.size()));
  job->enc = std::make_unique<openai::ResponseEncoder>(
      api, plan, random_id(endpoint == openai::Endpoint::kChat ? "chatcmpl-" : "cmpl-"),
      static_cast<int64_t>(std::time(nullptr)), self.model_.served_name);
  for (size_t i = 0; i < n; ++i) {
    try {
      job->streams.push_back(self.hooks_.submit(std::move(plan.choices[i])));
    } catch (const Error& e) {
      for (auto& s : job->streams) s->cancel();
      ApiError err = openai::error_for_kind(e.kind(), e.what());
      if (e.kind() == ErrorKind::kOutOfMemory)
        err.message = cat("the server is busy: ", e.what(), "; retry later");
      return reply(res, err);
    } catch (const std::exception& e) {
      for (auto& s : job->streams) s->cancel();
      return reply(res, server_error(500, cat("internal error: ", e.what()), "internal_error"));
    }
  }

  ++self.active_;
  if (job->stream) res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      job->stream ? "text/event-stream" : "application/json",
      [&self, job](size_t, httplib::DataSink& sink) { return pump(self, *job, sink); },
      [&self, job](bool) {
        // Always runs when the response is dropped, also if the provider never ran.
        job->cancel_unfinished();
        --self.active_;
      });
}

HttpServer::HttpServer(HttpOptions options, openai::ModelInfo model, ServerHooks hooks)
    : impl_(std::make_unique<Impl>(options.conn)),
      opt_(std::move(options)),
      model_(std::move(model)),
      hooks_(std::move(hooks)),
      created_(static_cast<int64_t>(std::time(nullptr))) {
  GuardedServer& http = impl_->http;
  http.set_tcp_nodelay(true);
  http.on_refused = [this] { metrics_.connection_refused(); };

  // Every handler catches everything: a failure is a 500 error object, never an exception.
  // Requests are counted before their response goes out (a client that reads /metrics after a
  // response sees it counted); responses written by a content provider count themselves.
  auto guarded = [this](auto fn) {
    return [this, fn](const httplib::Request& req, httplib::Response& res) {
      try {
        fn(req, res);
      } catch (const std::exception& e) {
        logger()->error("{} {}: {}", req.method, req.path, e.what());
        reply(res, server_error(500, cat("internal error: ", e.what()), "internal_error"));
      } catch (...) {
        reply(res, server_error(500, "internal error", "internal_error"));
      }
      if (!res.content_provider_)
        metrics_.request_done(route_label(req.path), res.status == -1 ? 200 : res.status);
    };
  };

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    res.set_header("X-Request-Id", request_id(req));
    cors(req, res, opt_.allowed_origins);
    if (req.method == "OPTIONS") {
      preflight(req, res);
      metrics_.request_done("preflight", 204);
      return httplib::Server::HandlerResponse::Handled;
    }
    // Bodies are JSON whatever the client says. `curl -d` sends form-urlencoded, which httplib
    // caps at 8 KB (a long prompt would get 413), so that content type is replaced before the
    // body is read. The request object is httplib's own non-const local: the cast is sound.
    if (req.method == "POST" &&
        req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) == 0) {
      auto& headers = const_cast<httplib::Request&>(req).headers;
      headers.erase("Content-Type");
      headers.emplace("Content-Type", "application/json");
    }
    // A declared body over the limit is refused from the headers. httplib would read (skip) all
    // of it first, and a client that waits for an answer before sending would wait in vain.
    const uint64_t length =
        std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10);
    if (length > opt_.conn.max_body_bytes) {
      res.set_header("Connection", "close");
      reply(res,
            server_error(
                413, cat("the request body is larger than ", opt_.conn.max_body_bytes, " bytes"),
                "request_too_large"));
      close_after_response();
      metrics_.request_done(route_label(req.path), 413);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (opt_.api_key.empty() || open_route(req.path, opt_.metrics_public))
      return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (auth.size() > prefix.size() && auth.compare(0, prefix.size(), prefix) == 0 &&
        same_secret(auth.substr(prefix.size()), opt_.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    ApiError e = server_error(
        401, auth.empty() ? "missing API key: send 'Authorization: Bearer KEY'" : "invalid API key",
        "invalid_api_key");
    reply(res, e);
    metrics_.request_done(route_label(req.path), e.status);
    return httplib::Server::HandlerResponse::Handled;
  });

  http.Post("/v1/chat/completions", guarded([this](const auto& req, auto& res) {
              Impl::generate(*this, req, res, openai::Endpoint::kChat);
            }));
  http.Post("/v1/completions", guarded([this](const auto& req, auto& res) {
              Impl::generate(*this, req, res, openai::Endpoint::kCompletions);
            }));
  http.Get("/v1/models", guarded([this](const auto&, auto& res) {
             res.set_content(
                 openai::models_json(model_.served_name, created_, model_.max_model_len),
                 "application/json");
           }));
  http.Get(R"(/v1/models/(.+))", guarded([this](const httplib::Request& req, auto& res) {
             auto r = openai::model_response(req.matches[1].str(), model_, created_);
             if (auto* e = std::get_if<ApiError>(&r)) return reply(res, *e);
             res.set_content(std::get<std::string>(r), "application/json");
           }));
  http.Post("/tokenize", guarded([this](const auto& req, auto& res) {
              auto r = openai::tokenize_response(req.body, model_);
              if (auto* e = std::get_if<ApiError>(&r)) return reply(res, *e);
              res.set_content(std::get<std::string>(r), "application/json");
            }));
  http.Post("/detokenize", guarded([this](const auto& req, auto& res) {
              auto r = openai::detokenize_response(req.body, model_);
              if (auto* e = std::get_if<ApiError>(&r)) return reply(res, *e);
              res.set_content(std::get<std::string>(r), "application/json");
            }));
  http.Get("/health", guarded([this](const auto&, auto& res) {
             if (stopping_.load()) {
               reply(res, server_error(503, "the server is shutting down", "service_unavailable"));
               return;
             }
             res.set_content("{\"status\":\"ok\"}", "application/json");
           }));
  http.Get("/metrics", guarded([this](const auto&, auto& res) {
             const EngineGauges g = hooks_.gauges ? hooks_.gauges() : EngineGauges{};
             res.set_content(metrics_.render(g), "text/plain; version=0.0.4; charset=utf-8");
           }));

  // httplib's own failures (no route, body too large, bad request line), the connection
  // layer's limits and anything a handler left without a body become OpenAI error objects.
  http.set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty() || res.content_provider_)
          return httplib::Server::HandlerResponse::Unhandled;
        const ApiError e = http_error(req, res, opt_.conn);
        reply(res, e);
        metrics_.request_done(route_label(req.path), e.status);
        return httplib::Server::HandlerResponse::Handled;
      }));
  http.set_exception_handler(
      [this](const httplib::Request& req, httplib::Response& res, std::exception_ptr) {
        reply(res, server_error(500, "internal error", "internal_error"));
        metrics_.request_done(route_label(req.path), 500);
      });
  http.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    logger()->debug("{} {} -> {} (request {})", req.method, req.path, res.status,
                    res.get_header_value("X-Request-Id"));
  });
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  GuardedServer& http = impl_->http;
  int port = opt_.port;
  if (port == 0) {
    port = http.bind_to_any_port(opt_.host);
    TANDEM_REQUIRE(port > 0, kIo, "cannot bind ", opt_.host, " on any port");
  } else {
    TANDEM_REQUIRE(http.bind_to_port(opt_.host, port), kIo, "cannot bind ", opt_.host, ":", port,
                   " (in use, or not a local address?)");
  }
  // httplib 0.11 listens with a backlog of 5, which drops the SYNs of a burst of clients (they
  // retry after a second); re-listening on a listening socket only changes its backlog.
  TANDEM_REQUIRE(::listen(impl_->http.listen_fd(), SOMAXCONN) == 0, kIo, "listen() failed");
  opt_.port = port;
  return port;
}

void HttpServer::run() {
  logger()->info("listening on http://{}:{} (model '{}', max_model_len {})", opt_.host, opt_.port,
                 model_.served_name, model_.max_model_len);
  impl_->http.listen_after_bind();
}

void HttpServer::stop() {
  stopping_.store(true);
  impl_->http.stop();
}

}  // namespace tandem
