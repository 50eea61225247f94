// The OpenAI codec, request side: errors, and JSON bodies to validated ApiRequests. Turning those
// into GenerationRequests is openai_plan.cpp; the response side is openai_encoder.cpp.
#include "server/openai_codec.h"

#include <cmath>
#include <limits>

#include "engine/tokenizer/utf8.h"
#include "kernels/json_depth.h"
#include "server/openai_constraints.h"
#include "server/openai_params.h"

namespace tandem::openai {

using ojson = nlohmann::ordered_json;

ApiError invalid_request(std::string message, std::string param) {
  ApiError e;
  e.status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

ApiError error_for_kind(ErrorKind kind, const std::string& message) {
  ApiError e;
  e.message = message;
  switch (kind) {
    case ErrorKind::kInvalidArgument:
    case ErrorKind::kUnsupported:
      e.status = 400;
      break;
    case ErrorKind::kNotFound:
      e.status = 404;
      e.code = "not_found";
      break;
    case ErrorKind::kOutOfMemory:
      e.status = 429;
      e.type = "rate_limit_error";
      e.code = "rate_limit_exceeded";
      break;
    case ErrorKind::kIo:
    case ErrorKind::kInternal:
      e.status = 500;
      e.type = "server_error";
      e.code = "internal_error";
      break;
  }
  return e;
}

ApiError model_not_found(std::string_view name) {
  ApiError e = invalid_request(cat("The model '", name, "' does not exist"), "model");
  e.status = 404;
  e.code = "model_not_found";
  return e;
}

std::variant<ojson, ApiError> parse_json_object(std::string_view text) {
  if (!utf8::is_valid(text)) return invalid_request("the request body is not valid UTF-8");
  // Messages, tools and template kwargs are copied and converted recursively, one stack frame
  // per level: a body of 8 MB of '[' would overflow the stack (and parse into gigabytes).
  if (json_depth(text, kMaxRequestJsonDepth) > kMaxRequestJsonDepth)
    return invalid_request(
        cat("the request body is nested deeper than ", kMaxRequestJsonDepth, " levels"));
  ojson body;
  try {
    body = ojson::parse(text);
  } catch (const std::exception& e) {
    return invalid_request(cat("the request body is not valid JSON: ", e.what()));
  }
  if (!body.is_object()) return invalid_request("the request body must be a JSON object");
  return body;
}

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

std::string error_json(const ApiError& e) {
  ojson err = ojson::object();
  err["message"] = e.message;
  err["type"] = e.type;
  err["param"] = e.param.empty() ? ojson(nullptr) : ojson(e.param);
  err["code"] = e.code.empty() ? ojson(nullptr) : ojson(e.code);
  ojson body = ojson::object();
  body["error"] = std::move(err);
  return dump(body);
}

std::string sse_error(const ApiError& e) { return "data: " + error_json(e) + "\n\n"; }

namespace {

// Reads typed, range-checked fields of a request object; keeps the first error. A field that is
// absent or null keeps its default.
class Reader {
 public:
  explicit Reader(const ojson& body) : body_(body) {}

  const ojson* find(const char* key) const {
    auto it = body_.find(key);
    if (it == body_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  void fail(std::string message, std::string param) {
    if (!error) error = invalid_request(std::move(message), std::move(param));
  }

  // lo_open: the lower bound itself is not allowed.
  void number(const char* key, double lo, double hi, float& out, bool lo_open = false) {
    const ojson* v = find(key);
    if (!v) return;
    if (!v->is_number()) return fail(cat("'", key, "' must be a number"), key);
    const double d = v->get<double>();
    if (!std::isfinite(d) || d < lo || d > hi || (lo_open && d == lo))
      return fail(cat("'", key, "' must be in ", lo_open ? "(" : "[", lo, ", ", hi, "], got ", d),
                  key);
    out = static_cast<float>(d);
  }
  // Integers; a float with an integral value (2.0) is accepted.
  bool integer(const char* key, int64_t lo, int64_t hi, int64_t& out) {
    const ojson* v = find(key);
    if (!v) return false;
    if (!integral(*v, out)) {
      fail(cat("'", key, "' must be an integer"), key);
      return false;
    }
    if (out < lo || out > hi) {
      fail(cat("'", key, "' must be in [", lo, ", ", hi, "], got ", out), key);
      return false;
    }
    return true;
  }
  void boolean(const char* key, bool& out) {
    const ojson* v = find(key);
    if (!v) return;
    if (!v->is_boolean()) return fail(cat("'", key, "' must be a boolean"), key);
    out = v->get<bool>();
  }
  void string(const char* key, std::string& out) {
    const ojson* v = find(key);
    if (!v) return;
    if (!v->is_string()) return fail(cat("'", key, "' must be a string"), key);
    out = v->get<std::string>();
  }

  static bool integral(const ojson& v, int64_t& out) {
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
      out = static_cast<int64_t>(u);
      return true;
    }
    if (v.is_number_integer()) {
      out = v.get<int64_t>();
      return true;
    }
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (!std::isfinite(d) || std::floor(d) != d || std::fabs(d) > 9.0e15) return false;
      out = static_cast<int64_t>(d);
      return true;
    }
    return false;
  }

  std::optional<ApiError> error;

 private:
  const ojson& body_;
};

constexpr int64_t kMaxTokensCap = int64_t{1} << 30;
constexpr size_t kMaxLogitBias = 1024;

void parse_messages(Reader& r, const ojson& body, ApiRequest& out) {
  const ojson* msgs = r.find("messages");
  if (!msgs) return r.fail("'messages' is required", "messages");
  if (!msgs->is_array()) return r.fail("'messages' must be an array", "messages");
  if (msgs->empty()) return r.fail("'messages' must not be empty", "messages");
  out.messages = ojson::array();
  for (size_t i = 0; i < msgs->size(); ++i) {
    const ojson& m = (*msgs)[i];
    const std::string at = cat("messages[", i, "]");
    if (!m.is_object()) return r.fail(at + " must be an object", at);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      return r.fail(at + ".role must be a string", at + ".role");
    std::string role_s = role->get<std::string>();
    if (role_s == "developer") role_s = "system";  // the newer name of the system role
    if (role_s != "system" && role_s != "user" && role_s != "assistant" && role_s != "tool")
      return r.fail(
          cat(at, ".role must be system, developer, user, assistant or tool, got '", role_s, "'"),
          at + ".role");
    ojson msg = m;
    msg["role"] = role_s;
    auto content = m.find("content");
    std::string text;
    if (content == m.end() || content->is_null()) {
      // Only an assistant message carrying tool calls may come without content.
      if (role_s != "assistant" || !m.contains("tool_calls"))
        return r.fail(at + ".content is required", at + ".content");
    } else if (content->is_string()) {
      text = content->get<std::string>();
    } else if (content->is_array()) {
      // Content parts: only text parts, joined by newlines (as vLLM does).
      for (size_t k = 0; k < content->size(); ++k) {
        const ojson& part = (*content)[k];
        const std::string pat = cat(at, ".content[", k, "]");
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
          return r.fail(pat + " must be an object with a 'type'", pat);
        if (part["type"] != "text")
          return r.fail(cat(pat, ": content type '", part["type"].get<std::string>(),
                            "' is not supported (text only)"),
                        pat + ".type");
        if (!part.contains("text") || !part["text"].is_string())
          return r.fail(pat + ".text must be a string", pat + ".text");
        if (k) text += "\n";
        text += part["text"].get<std::string>();
      }
    } else {
      return r.fail(at + ".content must be a string or an array of content parts", at + ".content");
    }
    msg["content"] = text;
    out.messages.push_back(std::move(msg));
  }
  if (const ojson* tools = r.find("tools")) {
    if (!tools->is_array()) return r.fail("'tools' must be an array", "tools");
    out.tools = *tools;
  }
  bool parallel = true;
  r.boolean("parallel_tool_calls", parallel);
  if (const ojson* tc = r.find("tool_choice")) {
    auto forced = tool_choice_of(*tc, out.tools, parallel);
    if (auto* e = std::get_if<ApiError>(&forced)) return r.fail(e->message, e->param);
    ForcedTools& f = std::get<ForcedTools>(forced);
    out.tool_choice = f.choice;
    out.forced_function = std::move(f.function);
    out.grammar = std::move(f.grammar);
  }
  if (const ojson* rf = r.find("response_format")) {
    auto g = response_format_grammar(*rf);
    if (auto* e = std::get_if<ApiError>(&g)) return r.fail(e->message, e->param);
    auto& grammar = std::get<std::shared_ptr<const grammar::Grammar>>(g);
    if (grammar && out.grammar)
      return r.fail("'response_format' cannot constrain a reply whose 'tool_choice' forces a call",
                    "response_format");
    if (grammar) out.grammar = std::move(grammar);
  }
  if (const ojson* mod = r.find("modalities")) {
    if (!mod->is_array() || mod->empty())
      return r.fail("'modalities' must be a non-empty array", "modalities");
    for (const ojson& m : *mod)
      if (m != "text") return r.fail("only the 'text' modality is supported", "modalities");
  }
  r.boolean("add_generation_prompt", out.add_generation_prompt);
  if (const ojson* kw = r.find("chat_template_kwargs")) {
    if (!kw->is_object())
      return r.fail("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    out.template_kwargs = *kw;
  }
  (void)body;
}

bool token_list(const ojson& v, std::vector<int32_t>& out) {
  out.clear();
  for (const ojson& x : v) {
    int64_t id = 0;
    if (!Reader::integral(x, id) || id < 0 || id > std::numeric_limits<int32_t>::max())
      return false;
    out.push_back(static_cast<int32_t>(id));
  }
  return true;
}

void parse_prompt(Reader& r, ApiRequest& out) {
  const ojson* p = r.find("prompt");
  if (!p) return r.fail("'prompt' is required", "prompt");
  const char* kind_msg =
      "'prompt' must be a string, a list of strings, a list of token ids or a list of lists of "
      "token ids";
  if (p->is_string()) {
    out.prompts.push_back(PromptInput{false, p->get<std::string>(), {}});
    return;
  }
  if (!p->is_array()) return r.fail(kind_msg, "prompt");
  if (p->empty()) return r.fail("'prompt' must not be empty", "prompt");
  const ojson& first = (*p)[0];
  if (first.is_number()) {
    PromptInput in;
    in.is_ids = true;
    if (!token_list(*p, in.ids))
      return r.fail("'prompt' token ids must be non-negative integers", "prompt");
    out.prompts.push_back(std::move(in));
    return;
  }
  for (size_t i = 0; i < p->size(); ++i) {
    const ojson& x = (*p)[i];
    const std::string at = cat("prompt[", i, "]");
    if (first.is_string() && x.is_string()) {
      out.prompts.push_back(PromptInput{false, x.get<std::string>(), {}});
    } else if (first.is_array() && x.is_array()) {
      PromptInput in;
      in.is_ids = true;
      if (x.empty()) return r.fail(at + " must not be empty", at);
      if (!token_list(x, in.ids))
        return r.fail(at + ": token ids must be non-negative integers", at);
      out.prompts.push_back(std::move(in));
    } else {
      return r.fail(kind_msg, at);
    }
  }
}

void parse_stop(Reader& r, const CodecLimits& limits, ApiRequest& out) {
  const ojson* s = r.find("stop");
  if (!s) return;
  if (s->is_string()) {
    out.stop.push_back(s->get<std::string>());
  } else if (s->is_array()) {
    if (s->size() > static_cast<size_t>(limits.max_stop))
      return r.fail(cat("'stop' may hold at most ", limits.max_stop, " strings"), "stop");
    for (const ojson& x : *s) {
      if (!x.is_string()) return r.fail("'stop' must be a string or a list of strings", "stop");
      out.stop.push_back(x.get<std::string>());
    }
  } else {
    return r.fail("'stop' must be a string or a list of strings", "stop");
  }
  for (const std::string& x : out.stop)
    if (x.empty()) return r.fail("'stop' strings must not be empty", "stop");
}

void parse_sampling(Reader& r, ApiRequest& out) {
  SamplingParams& sp = out.sampling;
  r.number("temperature", 0, 2, sp.temperature);
  r.number("top_p", 0, 1, sp.top_p, /*lo_open=*/true);
  int64_t k = 0;
  if (r.integer("top_k", -1, std::numeric_limits<int32_t>::max(), k))
    sp.top_k = k < 0 ? 0 : static_cast<int32_t>(k);  // -1 (vLLM) and 0 both mean off
  r.number("min_p", 0, 1, sp.min_p);
  r.number("presence_penalty", -2, 2, sp.presence_penalty);
  r.number("frequency_penalty", -2, 2, sp.frequency_penalty);
  r.number("repetition_penalty", 0, 10, sp.repetition_penalty, /*lo_open=*/true);
  if (const ojson* lb = r.find("logit_bias")) {
    if (!lb->is_object())
      return r.fail("'logit_bias' must be an object of token id -> bias", "logit_bias");
    if (lb->size() > kMaxLogitBias)
      return r.fail(cat("'logit_bias' may hold at most ", kMaxLogitBias, " tokens"), "logit_bias");
    for (const auto& [key, bias] : lb->items()) {
      int64_t id = -1;
      const bool digits = !key.empty() && key.size() <= 10 &&
                          key.find_first_not_of("0123456789") == std::string::npos;
      if (digits) id = std::stoll(key);
      if (!digits || id > std::numeric_limits<int32_t>::max())
        return r.fail(cat("'logit_bias' keys must be token ids, got '", key, "'"), "logit_bias");
      if (!bias.is_number() || !std::isfinite(bias.get<double>()) || bias.get<double>() < -100 ||
          bias.get<double>() > 100)
        return r.fail(cat("'logit_bias' of token ", key, " must be a number in [-100, 100]"),
                      "logit_bias");
      sp.logit_bias.emplace_back(static_cast<int32_t>(id), bias.get<float>());
    }
  }
  int64_t seed = 0;
  if (r.integer("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                seed))
    sp.seed = static_cast<uint64_t>(seed);
}

}  // namespace

std::variant<ApiRequest, ApiError> parse_request(Endpoint endpoint, std::string_view body_text,
                                                 const SamplingParams& defaults,
                                                 const CodecLimits& limits) {
  auto parsed = parse_json_object(body_text);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const ojson body = std::move(std::get<ojson>(parsed));

  ApiRequest out;
  out.endpoint = endpoint;
  out.sampling = defaults;
  Reader r(body);
  const bool chat = endpoint == Endpoint::kChat;
  r.string("model", out.model);
  if (chat)
    parse_messages(r, body, out);
  else
    parse_prompt(r, out);

  int64_t v = 0;
  if (r.integer("n", 1, limits.max_n, v)) out.n = static_cast<int32_t>(v);
  if (r.integer("max_tokens", 1, kMaxTokensCap, v)) out.max_tokens = static_cast<int32_t>(v);
  if (chat && r.integer("max_completion_tokens", 1, kMaxTokensCap, v))
    out.max_tokens = static_cast<int32_t>(v);
  parse_sampling(r, out);
  parse_stop(r, limits, out);
  if (const ojson* ids = r.find("stop_token_ids")) {
    if (!ids->is_array() || !token_list(*ids, out.stop_token_ids))
      r.fail("'stop_token_ids' must be a list of token ids", "stop_token_ids");
  }
  r.boolean("ignore_eos", out.ignore_eos);
  if (r.integer("min_tokens", 0, kMaxTokensCap, v)) {
    out.min_tokens = static_cast<int32_t>(v);
    if (out.max_tokens && v > *out.max_tokens && !r.error)
      r.fail(cat("'min_tokens' (", v, ") must not exceed 'max_tokens' (", *out.max_tokens, ")"),
             "min_tokens");
  }
  if (!chat && r.integer("best_of", 1, limits.max_n, v) && v != out.n && !r.error)
    r.fail(cat("'best_of' must equal 'n' (", out.n, "): choices are not ranked"), "best_of");

  if (chat) {
    r.boolean("logprobs", out.logprobs);
    if (r.integer("top_logprobs", 0, limits.max_top_logprobs, v)) {
      out.top_logprobs = static_cast<int32_t>(v);
      if (!out.logprobs && v > 0 && !r.error)
        r.fail("'top_logprobs' requires 'logprobs' to be true", "top_logprobs");
    }
  } else if (const ojson* lp = r.find("logprobs")) {
    if (lp->is_boolean()) {
      r.fail("'logprobs' must be an integer (the number of alternatives) for completions",
             "logprobs");
    } else if (r.integer("logprobs", 0, limits.max_top_logprobs, v)) {
      out.logprobs = true;
      out.top_logprobs = static_cast<int32_t>(v);
    }
  }
  r.boolean("echo", out.echo);
  r.boolean("stream", out.stream);
  if (const ojson* so = r.find("stream_options")) {
    if (!so->is_object()) {
      r.fail("'stream_options' must be an object", "stream_options");
    } else if (!out.stream) {
      r.fail("'stream_options' is only allowed when 'stream' is true", "stream_options");
    } else {
      for (const auto& [key, value] : so->items()) {
        // include_obfuscation (OpenAI's random padding against length side channels) is
        // accepted and ignored, as by other servers.
        bool ignored = false;
        bool* flag = key == "include_usage"         ? &out.include_usage
                     : key == "include_progress"    ? &out.include_progress
                     : key == "include_obfuscation" ? &ignored
                                                    : nullptr;
        const std::string name = cat("stream_options.", key);
        if (!flag) {
          r.fail(cat("Unrecognized request argument supplied: '", name,
                     "' (stream_options has include_usage, include_progress and "
                     "include_obfuscation)"),
                 name);
        } else if (!value.is_null() && !value.is_boolean()) {
          r.fail(cat("'", name, "' must be a boolean"), name);
        } else if (value.is_boolean()) {
          *flag = value.get<bool>();
        }
      }
    }
  }
  if (const ojson* rp = r.find("return_progress")) {  // llama.cpp's name of include_progress
    if (!rp->is_boolean())
      r.fail("'return_progress' must be a boolean", "return_progress");
    else if (rp->get<bool>() && !out.stream)
      r.fail("'return_progress' needs 'stream': true (progress is sent as stream events)",
             "return_progress");
    else
      out.include_progress = out.include_progress || rp->get<bool>();
  }
  std::string user;
  r.string("user", user);  // accepted and ignored
  if (r.error) return *r.error;
  // Every key must be a parameter of this endpoint that the server implements or ignores by
  // convention (server/openai_params.cpp); null counts as absent.
  for (const auto& [key, value] : body.items()) {
    const ParamInfo* p = find_param(key, endpoint);
    if (!p)
      return invalid_request(
          cat("Unrecognized request argument supplied: '", key, "' (not a parameter of ",
              chat ? "/v1/chat/completions" : "/v1/completions", ")"),
          key);
    if (p->support == ParamSupport::kRejected && !value.is_null())
      return invalid_request(cat("'", key, "' is not supported: ", p->what), key);
  }

  const int64_t sequences = static_cast<int64_t>(chat ? 1 : out.prompts.size()) * out.n;
  if (sequences > limits.max_sequences)
    return invalid_request(cat("prompts x n is ", sequences, "; at most ", limits.max_sequences,
                               " sequences per request"),
                           "n");
  return out;
}

ojson model_json(const std::string& served_name, int64_t created, int32_t max_model_len) {
  ojson m = ojson::object();
  m["id"] = served_name;
  m["object"] = "model";
  m["created"] = created;
  m["owned_by"] = "tandem";
  m["max_model_len"] = max_model_len;
  return m;
}

std::string models_json(const std::string& served_name, int64_t created, int32_t max_model_len) {
  ojson body = ojson::object();
  body["object"] = "list";
  body["data"] = ojson::array({model_json(served_name, created, max_model_len)});
  return dump(body);
}

}  // namespace tandem::openai
