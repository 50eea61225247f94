// One request of the load-test client: the body it posts, the streamed answer parsed as
// server-sent events as it arrives (time to first token, gaps between chunks), or the whole
// answer; the URL split; the server's model name from /v1/models.
#include <chrono>
#include <optional>
#include <sstream>

#include "engine/tokenizer/tokenizer.h"
#include "kernels/common.h"
#include "server/tools/bench_client.h"
#include "server/tools/bench_http.h"

namespace tandem::bench {

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

// The text of a chunk's or response's first choice; nullopt when the chunk has no choices (a
// usage-only chunk).
std::optional<std::string> choice_text(const json& j, bool chat, bool stream) {
  auto it = j.find("choices");
  if (it == j.end() || !it->is_array() || it->empty()) return std::nullopt;
  const json& c = (*it)[0];
  const json* v = nullptr;
  if (!chat) {
    if (auto t = c.find("text"); t != c.end()) v = &*t;
  } else {
    auto m = c.find(stream ? "delta" : "message");
    if (m != c.end() && m->is_object())
      if (auto t = m->find("content"); t != m->end()) v = &*t;
  }
  return v && v->is_string() ? v->get<std::string>() : std::string();
}

void read_usage(const json& j, RequestResult& r) {
  auto u = j.find("usage");
  if (u == j.end() || !u->is_object()) return;
  if (auto c = u->find("completion_tokens"); c != u->end() && c->is_number_integer()) {
    r.output_tokens = c->get<int32_t>();
    r.usage_reported = true;
  }
  if (auto p = u->find("prompt_tokens"); p != u->end() && p->is_number_integer())
    r.prompt_len = p->get<int32_t>();
  // Optional (OpenAI's prompt caching): prompt tokens the server had cached.
  if (auto d = u->find("prompt_tokens_details"); d != u->end() && d->is_object())
    if (auto c = d->find("cached_tokens"); c != d->end() && c->is_number_integer())
      r.cached_tokens = c->get<int32_t>();
}

std::string error_text(const std::string& body) {
  try {
    const json j = json::parse(body);
    if (j.contains("error") && j["error"].is_object() && j["error"].contains("message"))
      return j["error"]["message"].get<std::string>();
  } catch (const std::exception&) {
  }
  return body.substr(0, 200);
}

int32_t count_words(const std::string& s) {
  std::istringstream in(s);
  std::string w;
  int32_t n = 0;
  while (in >> w) ++n;
  return n;
}

}  // namespace

std::string request_body(const BenchConfig& cfg, const BenchPrompt& p, bool stream) {
  json b;
  if (!cfg.model.empty()) b["model"] = cfg.model;
  if (is_chat(cfg)) {
    json msgs = json::array();
    for (const ChatMessage& m : p.history)
      msgs.push_back({{"role", m.role}, {"content", m.content}});
    msgs.push_back({{"role", "user"}, {"content", p.text}});
    b["messages"] = std::move(msgs);
  } else {
    b["prompt"] = p.text;
  }
  b["max_tokens"] = p.output_len;
  b["temperature"] = cfg.temperature;
  b["stream"] = stream;
  if (stream) b["stream_options"] = {{"include_usage", true}};
  if (cfg.ignore_eos) b["ignore_eos"] = true;
  return b.dump();
}

RequestResult send_with(httplib::Client& cli, const std::string& prefix, const BenchConfig& cfg,
                        const BenchPrompt& prompt, const Tokenizer* tok) {
  RequestResult r;
  r.prompt_len = prompt.prompt_len;
  const bool chat = is_chat(cfg);
  httplib::Request req;
  req.method = "POST";
  req.path = prefix + cfg.endpoint;
  req.headers.emplace("Content-Type", "application/json");
  if (!cfg.api_key.empty()) req.headers.emplace("Authorization", auth_header(cfg));
  req.body = request_body(cfg, prompt, cfg.stream);

  int status = 0;
  std::string raw;  // error bodies and non-streamed responses
  int32_t chunks = 0;
  bool first = true;
  Clock::time_point last;
  std::string parse_error;
  auto st = Clock::now();
  Clock::time_point now = st;
  SseParser sse([&](std::string_view data) {
    if (data == "[DONE]" || !parse_error.empty()) return;
    json j;
    try {
      j = json::parse(data);
    } catch (const std::exception& e) {
      parse_error = cat("bad SSE data: ", e.what());
      return;
    }
    if (j.contains("error")) {
      parse_error = error_text(std::string(data));
      return;
    }
    if (auto text = choice_text(j, chat, true); text && !text->empty()) {
      if (first) {
        r.ttft = std::chrono::duration<double>(now - st).count();
        first = false;
      } else {
        r.itl.push_back(std::chrono::duration<double>(now - last).count());
      }
      last = now;
      r.text += *text;
      ++chunks;
    }
    read_usage(j, r);
  });
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    now = Clock::now();
    if (status == 200 && cfg.stream)
      sse.feed(std::string_view(data, n));
    else
      raw.append(data, n);
    return true;
  };
  const bool reused = cli.is_socket_open() != 0;
  httplib::Result res = cli.send(req);
  if (closed_unannounced(res, reused, status != 0)) {
    st = Clock::now();  // nothing was received: the retry is the request
    res = cli.send(req);
  }
  const auto end = Clock::now();
  r.latency = std::chrono::duration<double>(end - st).count();
  if (!res) {
    r.error = cat("HTTP client error: ", httplib::to_string(res.error()));
    return r;
  }
  if (status != 200) {
    r.error = cat("HTTP ", status, ": ", error_text(raw));
    return r;
  }
  if (!parse_error.empty()) {
    r.error = parse_error;
    return r;
  }
  if (cfg.stream) {
    if (first) {
      r.error = "the stream carried no generated text";
      return r;
    }
    if (!r.usage_reported) r.output_tokens = chunks;
  } else {
    try {
      const json j = json::parse(raw);
      r.text = choice_text(j, chat, false).value_or("");
      read_usage(j, r);
    } catch (const std::exception& e) {
      r.error = cat("bad response JSON: ", e.what());
      return r;
    }
    r.ttft = r.latency;  // the first token arrives with the last
    if (!r.usage_reported)
      r.output_tokens = tok ? static_cast<int32_t>(tok->encode(r.text, false, false).size())
                            : count_words(r.text);
  }
  r.success = true;
  return r;
}

void SseParser::feed(std::string_view bytes) {
  for (char ch : bytes) {
    if (ch != '\n') {
      line_ += ch;
      continue;
    }
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    if (line_.rfind("data:", 0) == 0) {
      std::string_view v(line_);
      v.remove_prefix(5);
      if (!v.empty() && v.front() == ' ') v.remove_prefix(1);
      if (v == "[DONE]") done_ = true;
      on_data_(v);
    }
    line_.clear();
  }
}

std::pair<std::string, std::string> split_url(const std::string& url) {
  const size_t scheme = url.find("://");
  TANDEM_REQUIRE(scheme != std::string::npos && scheme > 0, kInvalidArgument,
                 "--base-url must look like http://HOST:PORT, got \"", url, "\"");
  const std::string s = url.substr(0, scheme);
  TANDEM_REQUIRE(s == "http", kInvalidArgument,
                 "--base-url: only http:// is supported (this build has no TLS), got \"", url,
                 "\"");
  const size_t path = url.find('/', scheme + 3);
  std::string host = url.substr(0, path);
  std::string prefix = path == std::string::npos ? "" : url.substr(path);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  TANDEM_REQUIRE(host.size() > scheme + 3, kInvalidArgument, "--base-url has no host: \"", url,
                 "\"");
  return {host, prefix};
}

RequestResult send_request(const BenchConfig& cfg, const BenchPrompt& prompt,
                           const Tokenizer* tok) {
  try {
    const auto [host, prefix] = split_url(cfg.base_url);
    httplib::Client cli(host);
    cli.set_connection_timeout(10);
    cli.set_read_timeout(static_cast<time_t>(cfg.timeout_s));
    return send_with(cli, prefix, cfg, prompt, tok);
  } catch (const std::exception& e) {
    RequestResult r;
    r.error = e.what();
    return r;
  }
}

std::optional<std::string> served_model(const BenchConfig& cfg) {
  try {
    const auto [host, prefix] = split_url(cfg.base_url);
    httplib::Client cli(host);
    cli.set_connection_timeout(5);
    cli.set_read_timeout(10);
    httplib::Headers h;
    if (!cfg.api_key.empty()) h.emplace("Authorization", auth_header(cfg));
    auto res = cli.Get(prefix + "/v1/models", h);
    if (!res || res->status != 200) return std::nullopt;
    const json j = json::parse(res->body);
    const json& id = j.at("data").at(0).at("id");
    if (id.is_string()) return id.get<std::string>();
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

}  // namespace tandem::bench
