// The incremental output parser (see tool_call_parser.h for the contract). The text not yet
// decided stays in buf_; every decision is taken only once the bytes it depends on are there (or
// at finish()), so how the text was cut into deltas cannot change a decision.
#include "server/tool_calls/tool_call_parser.h"

#include <algorithm>

#include "kernels/json_depth.h"
#include "server/tool_calls/call_header.h"
#include "server/tool_calls/tool_declarations.h"

namespace tandem::tool_calls {

namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralOpen = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

size_t skip_space(std::string_view s, size_t pos) {
  while (pos < s.size() && is_space(s[pos])) ++pos;
  return pos;
}

// Where the whitespace run that ends at `end` begins.
size_t space_run_start(std::string_view s, size_t end) {
  while (end > 0 && is_space(s[end - 1])) --end;
  return end;
}

// The length of the longest suffix of s that is a proper prefix of marker (held back: the next
// delta may complete the marker).
size_t partial_marker(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

// s compared with the start of marker: full match, proper prefix of it, or neither.
enum class Match { kFull, kPrefix, kNo };
Match match_at(std::string_view s, std::string_view marker) {
  if (s.size() >= marker.size())
    return s.substr(0, marker.size()) == marker ? Match::kFull : Match::kNo;
  return marker.substr(0, s.size()) == s ? Match::kPrefix : Match::kNo;
}

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

// Parses JSON text without exceptions; a discarded value when it is not JSON or too deep.
nlohmann::ordered_json parse_json(std::string_view text) {
  if (json_depth(text, kMaxRequestJsonDepth) > kMaxRequestJsonDepth)
    return nlohmann::ordered_json(nlohmann::ordered_json::value_t::discarded);
  return nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace

ToolCallParser::ToolCallParser(ParserOptions options, uint64_t seed)
    : options_(std::move(options)),
      rng_(seed),
      extent_(kMaxRequestJsonDepth),
      args_extent_(kMaxRequestJsonDepth) {
  const bool think = options_.reasoning == ReasoningFormat::kThink;
  if (think && options_.starts_in_reasoning) mode_ = Mode::kReasoning;
  think_allowed_ = think && !options_.starts_in_reasoning;
  call_position_ = options_.tool_format == ToolFormat::kLlama3Json;
}

ParserDelta ToolCallParser::push(std::string_view delta) {
  ParserDelta out;
  if (finished_) return out;
  buf_.append(delta);
  run(false, out);
  return out;
}

ParserDelta ToolCallParser::finish() {
  ParserDelta out;
  if (finished_) return out;
  finished_ = true;
  run(true, out);
  buf_.clear();  // (already empty: at the end every mode releases what it holds)
  return out;
}

void ToolCallParser::run(bool final, ParserDelta& out) {
  for (bool progress = true; progress;) {
    switch (mode_) {
      case Mode::kContent:
        progress = step_content(final, out);
        break;
      case Mode::kReasoning:
        progress = step_reasoning(final, out);
        break;
      case Mode::kCall:
        progress = step_call(final, out);
        break;
      case Mode::kSkipToClose:
        progress = step_skip_to_close(final, out);
        break;
    }
  }
}

std::string_view ToolCallParser::tool_marker() const {
  switch (options_.tool_format) {
    case ToolFormat::kHermes:
      return kHermesOpen;
    case ToolFormat::kLlama3Json:
      return kPythonTag;
    case ToolFormat::kMistral:
      return kMistralOpen;
    case ToolFormat::kNone:
      break;
  }
  return {};
}

bool ToolCallParser::step_content(bool final, ParserDelta& out) {
  if (strip_ws_) {
    buf_.erase(0, skip_space(buf_, 0));
    if (buf_.empty()) return false;
    strip_ws_ = false;
  }
  if (buf_.empty()) return false;
  if (think_allowed_) {
    const size_t start = skip_space(buf_, 0);
    const Match m = match_at(std::string_view(buf_).substr(start), kThinkOpen);
    if (m == Match::kFull) {
      buf_.erase(0, start + kThinkOpen.size());
      think_allowed_ = false;
      mode_ = Mode::kReasoning;
      return true;
    }
    if (m == Match::kPrefix && !final) return false;  // all spaces, or "<thi"
    think_allowed_ = false;
  }
  if (call_position_) {
    size_t start = skip_space(buf_, 0);
    if (after_call_ && start < buf_.size() && buf_[start] == ';')
      start = skip_space(buf_, start + 1);
    if (start == buf_.size() && !final) return false;
    if (start < buf_.size() && buf_[start] == '{') {
      start_call(start);
      return true;
    }
    if (after_call_) buf_.erase(0, start);  // a separator after a call
    call_position_ = false;
    after_call_ = false;
    if (buf_.empty()) return false;
  }
  const std::string_view marker = tool_marker();
  const size_t hit = marker.empty() ? std::string::npos : buf_.find(marker);
  if (hit != std::string::npos) {
    const size_t raw_start = space_run_start(buf_, hit);
    out.content.append(buf_, 0, raw_start);
    buf_.erase(0, raw_start);
    start_call(hit - raw_start + marker.size());
    return true;
  }
  size_t keep = buf_.size();
  if (!final && !marker.empty()) keep = space_run_start(buf_, keep - partial_marker(buf_, marker));
  out.content.append(buf_, 0, keep);
  buf_.erase(0, keep);
  return false;
}

bool ToolCallParser::step_reasoning(bool final, ParserDelta& out) {
  if (buf_.empty()) return false;
  const size_t hit = buf_.find(kThinkClose);
  if (hit != std::string::npos) {
    out.reasoning_content.append(buf_, 0, hit);
    buf_.erase(0, hit + kThinkClose.size());
    mode_ = Mode::kContent;
    strip_ws_ = true;
    call_position_ = options_.tool_format == ToolFormat::kLlama3Json;
    return true;
  }
  const size_t keep = final ? buf_.size() : buf_.size() - partial_marker(buf_, kThinkClose);
  out.reasoning_content.append(buf_, 0, keep);
  buf_.erase(0, keep);
  return false;
}

void ToolCallParser::start_call(size_t body) {
  mode_ = Mode::kCall;
  step_ = Step::kOpen;
  body_ = body;
  pos_ = body;
  named_ = false;
}

bool ToolCallParser::step_call(bool final, ParserDelta& out) {
  const bool hermes = options_.tool_format == ToolFormat::kHermes;
  const std::string_view buf = buf_;
  for (;;) {
    switch (step_) {
      case Step::kOpen: {
        pos_ = skip_space(buf, pos_);
        if (pos_ == buf.size()) break;
        const char c = buf[pos_];
        const bool array_ok = options_.tool_format == ToolFormat::kMistral;
        if (c == '{' || (c == '[' && array_ok)) {
          value_start_ = pos_;
          extent_.reset();
          step_ = c == '{' && options_.stream_arguments ? Step::kHeader : Step::kValue;
        } else if (array_ok && is_name_char(c)) {
          name_start_ = pos_;
          named_ = true;
          step_ = Step::kName;
        } else {
          return fail_call(pos_, out);
        }
        continue;
      }
      case Step::kValue: {
        const JsonExtent::State s = extent_.feed(buf, &pos_);
        if (s == JsonExtent::State::kRunning) break;
        if (s == JsonExtent::State::kFailed) return fail_call(pos_, out);
        value_end_ = pos_;
        if (!hermes) return finish_call(pos_, out) || fail_call(pos_, out);
        step_ = Step::kClose;
        continue;
      }
      case Step::kClose: {
        const size_t at = skip_space(buf, pos_);
        const Match m = match_at(buf.substr(at), kHermesClose);
        if (m == Match::kFull) {
          const size_t end = at + kHermesClose.size();
          return finish_call(end, out) || fail_call(end, out);
        }
        // Qwen models may stop right after the JSON: an unclosed call at the end is a call.
        if (final && at == buf.size()) return finish_call(at, out) || fail_call(at, out);
        if (m == Match::kNo) return fail_call(at, out);
        break;
      }
      case Step::kName: {
        while (pos_ < buf.size() && is_name_char(buf[pos_])) ++pos_;
        if (pos_ == buf.size()) break;
        name_end_ = pos_;
        step_ = Step::kArgsMarker;
        continue;
      }
      case Step::kArgsMarker: {
        const Match m = match_at(buf.substr(pos_), kMistralArgs);
        if (m == Match::kNo) return fail_call(pos_, out);
        if (m == Match::kPrefix) break;
        pos_ += kMistralArgs.size();
        step_ = Step::kArgsOpen;
        continue;
      }
      case Step::kArgsOpen: {
        pos_ = skip_space(buf, pos_);
        if (pos_ == buf.size()) break;
        if (buf[pos_] != '{') return fail_call(pos_, out);
        value_start_ = pos_;
        extent_.reset();
        step_ = Step::kValue;
        std::string name(buf.substr(name_start_, name_end_ - name_start_));
        if (options_.stream_arguments && declared_ok(name))
          begin_stream(std::move(name), pos_, out);
        continue;
      }
      case Step::kHeader: {
        const CallHeader h = read_call_header(buf.substr(value_start_));
        if (h.status == CallHeader::Status::kNeedMore) break;
        step_ = Step::kValue;  // another shape, or an undeclared name: the whole-call path
        if (h.status == CallHeader::Status::kYes && declared_ok(h.name))
          begin_stream(h.name, value_start_ + h.args_start, out);
        continue;
      }
      case Step::kStreamArgs:
        return step_stream_args(final, out);
      case Step::kStreamClose: {
        const size_t at = skip_space(buf, pos_);
        const Match m = match_at(buf.substr(at), kHermesClose);
        if (m == Match::kFull) return end_stream(at + kHermesClose.size(), true);
        if (final && at == buf.size()) return end_stream(at, true);
        if (m == Match::kNo || final) return end_stream(at, false);
        break;
      }
    }
    // Waiting for more text; at the end of the output the call is unfinished, so malformed.
    return final ? fail_call(buf.size(), out) : false;
  }
}

bool ToolCallParser::declared_ok(const std::string& name) const {
  return options_.undeclared == UndeclaredPolicy::kKeepAsCall ||
         is_declared(name, options_.declared_functions);
}

void ToolCallParser::begin_stream(std::string name, size_t args, ParserDelta& out) {
  ToolCallDelta d;
  d.index = next_index_++;
  d.id = new_id();
  d.name = std::move(name);
  out.tool_calls.push_back(std::move(d));
  args_extent_.reset();
  args_pos_ = emitted_ = args;
  pos_ = value_start_;
  step_ = Step::kStreamArgs;
}

bool ToolCallParser::step_stream_args(bool final, ParserDelta& out) {
  args_extent_.feed(buf_, &args_pos_);  // stops at the arguments' end (or where they break)
  if (args_pos_ > emitted_) {
    // One entry per call and delta: a fragment joins the call's entry already in this delta.
    const size_t index = next_index_ - 1;
    if (out.tool_calls.empty() || out.tool_calls.back().index != index) {
      out.tool_calls.emplace_back();
      out.tool_calls.back().index = index;
    }
    out.tool_calls.back().arguments.append(buf_, emitted_, args_pos_ - emitted_);
    emitted_ = args_pos_;
  }
  const JsonExtent::State s = extent_.feed(buf_, &pos_);
  if (s == JsonExtent::State::kRunning) return final ? end_stream(buf_.size(), false) : false;
  if (s == JsonExtent::State::kFailed) return end_stream(pos_, false);
  if (options_.tool_format != ToolFormat::kHermes) return end_stream(pos_, true);
  step_ = Step::kStreamClose;
  return true;
}

bool ToolCallParser::end_stream(size_t resume, bool ok) {
  buf_.erase(0, resume);
  mode_ = Mode::kContent;
  strip_ws_ = ok;
  const bool llama = ok && options_.tool_format == ToolFormat::kLlama3Json;
  call_position_ = llama;
  after_call_ = llama;
  return true;
}

bool ToolCallParser::fail_call(size_t resume, ParserDelta& out) {
  if (options_.tool_format == ToolFormat::kHermes) {
    // The raw text runs to the first </tool_call> after the opening tag.
    mode_ = Mode::kSkipToClose;
    pos_ = body_;
    return true;
  }
  out.content.append(buf_, 0, resume);
  buf_.erase(0, resume);
  mode_ = Mode::kContent;
  call_position_ = false;
  after_call_ = false;
  return true;
}

bool ToolCallParser::step_skip_to_close(bool final, ParserDelta& out) {
  // Searched from the start of the call's body, not from where the failure was noticed: a close
  // tag inside a broken string (an unterminated one hides everything after it) still ends the
  // malformed call, so that a valid call after it is found (as vLLM's non-greedy regex does).
  const size_t hit = buf_.find(kHermesClose, std::max(body_, pos_));
  if (hit == std::string::npos && !final) {
    // The next search starts where a close tag could still begin (linear over a long call).
    pos_ = buf_.size() >= kHermesClose.size() ? buf_.size() - kHermesClose.size() + 1 : 0;
    return false;
  }
  const size_t end = hit == std::string::npos ? buf_.size() : hit + kHermesClose.size();
  out.content.append(buf_, 0, end);
  buf_.erase(0, end);
  mode_ = Mode::kContent;
  return true;
}

bool ToolCallParser::finish_call(size_t end, ParserDelta& out) {
  const std::string_view value =
      std::string_view(buf_).substr(value_start_, value_end_ - value_start_);
  std::vector<ToolCallDelta> calls;
  if (named_) {  // Mistral [TOOL_CALLS]name[ARGS]{...}
    nlohmann::ordered_json call;
    call["name"] = buf_.substr(name_start_, name_end_ - name_start_);
    call["arguments"] = parse_json(value);
    if (!add_call(call, calls)) return false;
  } else if (value[0] == '[') {  // Mistral [TOOL_CALLS][{...}, ...]
    const auto list = parse_json(value);
    if (!list.is_array() || list.empty()) return false;
    for (const auto& call : list)
      if (!add_call(call, calls)) return false;
  } else if (!add_call(parse_json(value), calls)) {
    return false;
  }
  // Ids are drawn only for calls that stand, in output order.
  for (auto& call : calls) {
    call.index = next_index_++;
    call.id = new_id();
    out.tool_calls.push_back(std::move(call));
  }
  buf_.erase(0, end);
  mode_ = Mode::kContent;
  strip_ws_ = true;
  const bool llama = options_.tool_format == ToolFormat::kLlama3Json;
  call_position_ = llama;
  after_call_ = llama;
  return true;
}

bool ToolCallParser::add_call(const nlohmann::ordered_json& call,
                              std::vector<ToolCallDelta>& calls) {
  ToolCallDelta d;
  if (!read_call(call, &d.name, &d.arguments)) return false;
  if (!declared_ok(d.name)) return false;
  calls.push_back(std::move(d));
  return true;
}

std::string ToolCallParser::new_id() {
  static constexpr char kAlnum[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  const bool mistral = options_.tool_format == ToolFormat::kMistral;
  std::string id = mistral ? "" : "call_";
  // rng_() % 62 rather than a distribution: the same ids from every standard library (the bias,
  // 62 / 2^64, is nil).
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kAlnum[rng_() % 62];
  return id;
}

}  // namespace tandem::tool_calls
