// The OpenAI codec, response side: TokenEvents to chat.completion(.chunk) and text_completion
// objects, streamed as server-sent events or returned whole, with logprobs and usage.
#include <random>

#include "server/openai_codec.h"
#include "server/openai_constraints.h"

namespace tandem::openai {

using ojson = nlohmann::ordered_json;

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "abort";
    case FinishReason::kError:
      return "error";
    case FinishReason::kNone:
      break;
  }
  return "";
}

namespace {

std::string frame(const ojson& j) { return "data: " + dump(j) + "\n\n"; }

ojson bytes_of(const std::string& s) {
  ojson b = ojson::array();
  for (char c : s) b.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return b;
}

// Chat format: {"token", "logprob", "bytes"}.
ojson chat_entry(const TokenLogprob& t) {
  ojson e = ojson::object();
  e["token"] = t.piece;
  e["logprob"] = t.logprob;
  e["bytes"] = bytes_of(t.piece);
  return e;
}

std::string call_id(uint64_t seed) {
  static const char* alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += alnum[rng() % 62];
  return id;
}

}  // namespace

// The output of a forced tool_choice as calls: a named function's output is its arguments
// (partial when cut off, as OpenAI returns them); `required` output is the array of calls, or
// content when it does not parse (cut off by max_tokens).
tool_calls::ParsedOutput ResponseEncoder::forced_output(const Choice& c) const {
  tool_calls::ParsedOutput out;
  if (forced_ == ApiRequest::ToolChoice::kNamed) {
    out.tool_calls.push_back({call_id(c.parser_seed), forced_function_, c.text});
  } else if (auto calls = required_calls(c.text)) {
    for (size_t i = 0; i < calls->size(); ++i)
      out.tool_calls.push_back({call_id(c.parser_seed + i), (*calls)[i].first, (*calls)[i].second});
  } else {
    out.content = c.text;
  }
  return out;
}

ResponseEncoder::ResponseEncoder(const ApiRequest& req, const Plan& plan, std::string id,
                                 int64_t created, std::string model)
    : chat_(req.endpoint == Endpoint::kChat),
      logprobs_(req.logprobs),
      include_usage_(req.include_usage),
      include_progress_(req.include_progress),
      id_(std::move(id)),
      created_(created),
      model_(std::move(model)),
      echo_(plan.echo),
      choices_(plan.choices.size()) {
  for (const PreparedPrompt& p : plan.prompts) prompt_tokens_ += static_cast<int64_t>(p.ids.size());
  for (const GenerationRequest& g : plan.choices)
    prompt_len_.push_back(static_cast<int64_t>(g.prompt.size()));
  if (!plan.prompts.empty())
    n_per_prompt_ = std::max<size_t>(1, choices_.size() / plan.prompts.size());
  forced_ = plan.forced;
  forced_function_ = plan.forced_function;
  const bool forced =
      forced_ == ApiRequest::ToolChoice::kRequired || forced_ == ApiRequest::ToolChoice::kNamed;
  split_ = chat_ && (forced || plan.parser.tool_format != tool_calls::ToolFormat::kNone ||
                     plan.parser.reasoning != tool_calls::ReasoningFormat::kNone);
  parser_options_ = plan.parser;
  // Tool-call ids must differ between requests: each choice's parser draws them from its own
  // random seed.
  thread_local std::mt19937_64 seeds{std::random_device{}()};
  for (size_t i = 0; i < choices_.size(); ++i) {
    choices_[i].parser_seed = seeds();
    if (split_ && !forced)
      choices_[i].parser =
          std::make_unique<tool_calls::ToolCallParser>(parser_options_, choices_[i].parser_seed);
    choices_[i].text_offset = echo_[i].size();
    if (logprobs_) {
      choices_[i].logprobs = chat_ ? ojson{{"content", ojson::array()}, {"refusal", nullptr}}
                                   : ojson{{"tokens", ojson::array()},
                                           {"token_logprobs", ojson::array()},
                                           {"top_logprobs", ojson::array()},
                                           {"text_offset", ojson::array()}};
    }
  }
}

bool ResponseEncoder::all_finished() const {
  for (const Choice& c : choices_)
    if (!c.finished) return false;
  return true;
}

Usage ResponseEncoder::usage() const {
  Usage u;
  u.prompt_tokens = prompt_tokens_;
  for (const Choice& c : choices_) u.completion_tokens += c.completion_tokens;
  for (size_t p = 0; p * n_per_prompt_ < choices_.size(); ++p) {
    int64_t fewest = -1;
    for (size_t i = p * n_per_prompt_; i < std::min(choices_.size(), (p + 1) * n_per_prompt_); ++i)
      fewest = fewest < 0 ? choices_[i].cached_tokens : std::min(fewest, choices_[i].cached_tokens);
    u.cached_tokens += std::max<int64_t>(0, fewest);
  }
  return u;
}

ojson ResponseEncoder::usage_json() const {
  const Usage u = usage();
  return ojson{{"prompt_tokens", u.prompt_tokens},
               {"completion_tokens", u.completion_tokens},
               {"total_tokens", u.prompt_tokens + u.completion_tokens},
               {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

ojson ResponseEncoder::chunk_head() const {
  ojson j = ojson::object();
  j["id"] = id_;
  j["object"] = chat_ ? "chat.completion.chunk" : "text_completion";
  j["created"] = created_;
  j["model"] = model_;
  return j;
}

// The logprobs of one event's tokens, in the endpoint's format; text offsets advance by the
// bytes of each token.
ojson ResponseEncoder::logprobs_of(Choice& c, const TokenEvent& ev, bool chat) const {
  const size_t n = std::min(ev.tokens.size(), ev.logprobs.size());
  if (chat) {
    ojson content = ojson::array();
    for (size_t i = 0; i < n; ++i) {
      ojson e = chat_entry(ev.logprobs[i]);
      ojson top = ojson::array();
      if (i < ev.top.size())
        for (const TokenLogprob& t : ev.top[i]) top.push_back(chat_entry(t));
      e["top_logprobs"] = std::move(top);
      content.push_back(std::move(e));
    }
    return ojson{{"content", std::move(content)}, {"refusal", nullptr}};
  }
  ojson tokens = ojson::array(), token_lps = ojson::array(), tops = ojson::array(),
        offsets = ojson::array();
  for (size_t i = 0; i < n; ++i) {
    const TokenLogprob& t = ev.logprobs[i];
    tokens.push_back(t.piece);
    token_lps.push_back(t.logprob);
    // Legacy format: a {token: logprob} map per position holding the k alternatives.
    ojson top = ojson::object();
    if (i < ev.top.size())
      for (const TokenLogprob& a : ev.top[i]) top[a.piece] = a.logprob;
    tops.push_back(std::move(top));
    offsets.push_back(c.text_offset);
    c.text_offset += t.piece.size();
  }
  return ojson{{"tokens", std::move(tokens)},
               {"token_logprobs", std::move(token_lps)},
               {"top_logprobs", std::move(tops)},
               {"text_offset", std::move(offsets)}};
}

void ResponseEncoder::absorb(size_t choice, const TokenEvent& ev) {
  Choice& c = choices_[choice];
  c.text += ev.text;
  if (ev.finish == FinishReason::kNone) return;
  c.finished = true;
  c.finish = ev.finish;
  c.completion_tokens = ev.completion_tokens;
  c.cached_tokens = ev.cached;

  if (ev.finish == FinishReason::kError && !error_) {
    ApiError e;
    e.status = 500;
    e.type = "server_error";
    e.code = "internal_error";
    e.message = ev.error.empty() ? "the engine failed on this request" : ev.error;
    error_ = e;
  } else if (ev.finish == FinishReason::kCancelled && !error_) {
    ApiError e;
    e.status = 503;
    e.type = "server_error";
    e.code = "service_unavailable";
    e.message = "the request was cancelled: the server is shutting down";
    error_ = e;
  }
}

// "tool_calls" when the model called a tool and stopped by itself (a call cut off by max_tokens
// stays "length", as OpenAI reports it).
std::string ResponseEncoder::finish_reason(const Choice& c) const {
  if (c.called && c.finish == FinishReason::kStop) return "tool_calls";
  return finish_reason_name(c.finish);
}

std::string ResponseEncoder::sse_start() {
  std::string out;
  for (size_t i = 0; i < choices_.size(); ++i) {
    if (!chat_ && echo_[i].empty()) continue;
    ojson j = chunk_head();
    ojson ch = ojson::object();
    ch["index"] = i;
    if (chat_) {
      ch["delta"] = ojson{{"role", "assistant"}, {"content", echo_[i]}};
    } else {
      ch["text"] = echo_[i];
    }
    ch["logprobs"] = nullptr;
    ch["finish_reason"] = nullptr;
    j["choices"] = ojson::array({std::move(ch)});
    if (include_usage_) j["usage"] = nullptr;
    out += frame(j);
  }
  return out;
}

std::string ResponseEncoder::sse_event(size_t choice, const TokenEvent& ev) {
  if (ev.processed >= 0) return {};
  Choice& c = choices_[choice];
  const bool had_error = error_.has_value();
  absorb(choice, ev);
  if (error_ && !had_error) return sse_error(*error_);
  std::string out;
  const bool has_lp = logprobs_ && !ev.tokens.empty();
  ojson delta = ojson::object();
  bool any = false;
  if (split_ && !c.parser) {
    // A forced call: a named function's arguments stream as they come; `required` calls come
    // whole at the end (or as content when the array does not parse).
    ojson calls = ojson::array();
    if (forced_ == ApiRequest::ToolChoice::kNamed) {
      if (!ev.text.empty() || (ev.finish != FinishReason::kNone && !c.called)) {
        ojson call = {{"index", 0}};
        if (!c.called) {
          call["id"] = call_id(c.parser_seed);
          call["type"] = "function";
          call["function"] = {{"name", forced_function_}, {"arguments", ev.text}};
        } else {
          call["function"] = {{"arguments", ev.text}};
        }
        calls.push_back(std::move(call));
        c.called = true;
      }
    } else if (ev.finish != FinishReason::kNone) {
      const tool_calls::ParsedOutput o = forced_output(c);
      for (size_t k = 0; k < o.tool_calls.size(); ++k) {
        tool_calls::ToolCallDelta d{k, o.tool_calls[k].id, o.tool_calls[k].name,
                                    o.tool_calls[k].arguments};
        calls.push_back(tool_calls::tool_call_delta_json(d));
      }
      c.called = !o.tool_calls.empty();
      if (!o.content.empty()) delta["content"] = o.content;
    }
    if (!calls.empty()) delta["tool_calls"] = std::move(calls);
    any = !delta.empty();
  } else if (c.parser) {
    // The text goes through the tool-call / reasoning parser: what it is sure of now.
    tool_calls::ParserDelta d = c.parser->push(ev.text);
    if (ev.finish != FinishReason::kNone) {
      tool_calls::ParserDelta rest = c.parser->finish();
      d.content += rest.content;
      d.reasoning_content += rest.reasoning_content;
      for (auto& t : rest.tool_calls) d.tool_calls.push_back(std::move(t));
    }
    if (!d.content.empty()) delta["content"] = d.content;
    if (!d.reasoning_content.empty()) delta["reasoning_content"] = d.reasoning_content;
    if (!d.tool_calls.empty()) {
      c.called = true;
      ojson calls = ojson::array();
      for (const auto& t : d.tool_calls) calls.push_back(tool_calls::tool_call_delta_json(t));
      delta["tool_calls"] = std::move(calls);
    }
    any = !d.empty();
  } else if (chat_) {
    delta["content"] = ev.text;
    any = !ev.text.empty();
  } else {
    any = !ev.text.empty();
  }
  if (any || has_lp) {
    ojson j = chunk_head();
    ojson ch = ojson::object();
    ch["index"] = choice;
    if (chat_)
      ch["delta"] = std::move(delta);
    else
      ch["text"] = ev.text;
    ch["logprobs"] = has_lp ? logprobs_of(c, ev, chat_) : ojson(nullptr);
    ch["finish_reason"] = nullptr;
    j["choices"] = ojson::array({std::move(ch)});
    if (include_usage_) j["usage"] = nullptr;
    out += frame(j);
  }
  if (ev.finish == FinishReason::kStop || ev.finish == FinishReason::kLength) {
    ojson j = chunk_head();
    ojson ch = ojson::object();
    ch["index"] = choice;
    if (chat_)
      ch["delta"] = ojson::object();
    else
      ch["text"] = "";
    ch["logprobs"] = nullptr;
    ch["finish_reason"] = finish_reason(c);
    j["choices"] = ojson::array({std::move(ch)});
    if (include_usage_) j["usage"] = nullptr;
    out += frame(j);
  }
  return out;
}

std::string ResponseEncoder::sse_progress(size_t choice, const TokenEvent& ev,
                                          double time_ms) const {
  if (!include_progress_ || ev.processed < 0) return {};
  ojson j = chunk_head();
  j["choices"] = ojson::array();
  j["prompt_progress"] = ojson{{"index", choice},
                               {"total", prompt_len_[choice]},
                               {"cache", ev.cached},
                               {"processed", ev.processed},
                               {"time_ms", static_cast<int64_t>(time_ms)}};
  return frame(j);
}

std::string ResponseEncoder::sse_end() {
  std::string out;
  if (include_usage_) {
    ojson j = chunk_head();
    j["choices"] = ojson::array();
    j["usage"] = usage_json();
    out += frame(j);
  }
  out += "data: [DONE]\n\n";
  return out;
}

void ResponseEncoder::add(size_t choice, const TokenEvent& ev) {
  if (ev.processed >= 0) return;
  Choice& c = choices_[choice];
  absorb(choice, ev);
  if (split_ && c.finished) {
    c.parsed =
        c.parser ? tool_calls::parse_all(c.text, parser_options_, c.parser_seed) : forced_output(c);
    c.called = !c.parsed.tool_calls.empty();
  }
  if (!logprobs_ || ev.tokens.empty()) return;
  ojson lp = logprobs_of(c, ev, chat_);
  if (chat_) {
    for (auto& e : lp["content"]) c.logprobs["content"].push_back(std::move(e));
  } else {
    for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
      for (auto& e : lp[k]) c.logprobs[k].push_back(std::move(e));
  }
}

std::string ResponseEncoder::body() const {
  if (error_) return error_json(*error_);
  ojson j = ojson::object();
  j["id"] = id_;
  j["object"] = chat_ ? "chat.completion" : "text_completion";
  j["created"] = created_;
  j["model"] = model_;
  ojson choices = ojson::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    ojson ch = ojson::object();
    ch["index"] = i;
    if (chat_ && split_) {
      ojson msg = ojson{{"role", "assistant"}};
      const std::string content = echo_[i] + c.parsed.content;
      // OpenAI: content is null in a message that only calls tools.
      msg["content"] = content.empty() && c.called ? ojson(nullptr) : ojson(content);
      if (!c.parsed.reasoning_content.empty())
        msg["reasoning_content"] = c.parsed.reasoning_content;
      if (c.called) {
        ojson calls = ojson::array();
        for (const auto& t : c.parsed.tool_calls) calls.push_back(tool_calls::tool_call_json(t));
        msg["tool_calls"] = std::move(calls);
      }
      ch["message"] = std::move(msg);
    } else if (chat_) {
      ch["message"] = ojson{{"role", "assistant"}, {"content", echo_[i] + c.text}};
    } else {
      ch["text"] = echo_[i] + c.text;
    }
    ch["logprobs"] = logprobs_ ? c.logprobs : ojson(nullptr);
    ch["finish_reason"] = finish_reason(c);
    choices.push_back(std::move(ch));
  }
  j["choices"] = std::move(choices);
  j["usage"] = usage_json();
  return dump(j);
}

}  // namespace tandem::openai
