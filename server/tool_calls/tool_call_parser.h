// Splits a model's output text into what the OpenAI API returns: content, reasoning_content
// (<think>...</think>) and tool calls, incrementally as the output is decoded.
//
// Contract (tests/test_tool_calls*.cpp and tests/fuzz/fuzz_tool_calls.cpp check it):
// - push() takes the output's text deltas in order, finish() ends it; each returns what became
//   certain. Text that may still turn into a marker ("<tool_c" at the end of a delta) is held
//   until it is decided, and released by finish() if it never became one: nothing is shown twice
//   or lost. However the text is cut into deltas, the concatenated result is the same, and equals
//   parse_all() of the whole text.
// - By default a tool call is returned in one delta (index, id, name and the whole arguments),
//   once its JSON is complete and valid: a call's validity is known only at its end, and a call
//   already streamed could not be taken back when it turns out malformed. Arguments are compact
//   JSON of the parsed object (key order kept).
// - With stream_arguments, a call that starts {"name": "...", "arguments": { (Hermes, Llama 3
//   JSON; Mistral [TOOL_CALLS]name[ARGS]{) is committed there: a first delta with index, id and
//   name, then the arguments' raw text in fragments as it arrives. Meant for output a grammar
//   keeps well-formed (tool_choice required / named): a committed call stays a call, so a call
//   cut off (max_tokens) or broken later keeps the arguments written so far (OpenAI too returns
//   a cut-off call's partial arguments), and the text after a break is content. Calls in another
//   shape (other key order, Mistral lists) still come whole.
// - A malformed call (not JSON, no "name", arguments not an object, unclosed at the end of the
//   output, or an undeclared function under UndeclaredPolicy::kAsContent) is content, verbatim,
//   where it stood; a Hermes call runs to the first </tool_call> after its opening tag. (vLLM,
//   non-streaming, returns the whole output as content then; here only the broken call's text
//   is, and the calls around it stand.) A Hermes call whose JSON is complete when the output
//   ends without </tool_call> is a call. Nothing here throws on any text.
// - Whitespace that only separates is dropped: before a call, between calls, after a call and
//   after </think>. Llama 3 JSON calls are recognised at the start of the output (or of the
//   content after </think>), after <|python_tag|> and after a previous call (one ';' between
//   calls is dropped too); a '{' elsewhere is content.
// - <think> opens reasoning only at the start of the output (after whitespace); reasoning ends at
//   </think> or at the end of the output. Tool markers inside reasoning are reasoning text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "server/tool_calls/json_extent.h"
#include "server/tool_calls/tool_format.h"

namespace tandem::tool_calls {

// What to do with a well-formed call naming a function the request did not declare. vLLM's
// hermes, llama3_json and mistral parsers keep it as a call (newer vLLM parsers, e.g. MiniMax-M2,
// drop it); kKeepAsCall is the default, matching the parsers of these formats.
enum class UndeclaredPolicy { kKeepAsCall, kAsContent };

struct ParserOptions {
  ToolFormat tool_format = ToolFormat::kNone;
  ReasoningFormat reasoning = ReasoningFormat::kNone;
  // The prompt already opened <think> (prompt_opens_reasoning()): the output starts as reasoning.
  bool starts_in_reasoning = false;
  // Function names the request declared (declared_function_names()); read only with kAsContent.
  std::vector<std::string> declared_functions;
  UndeclaredPolicy undeclared = UndeclaredPolicy::kKeepAsCall;
  // Commit calls at their header and stream the arguments' raw text (see above); off: whole calls
  // with compact arguments.
  bool stream_arguments = false;
};

// One entry of an OpenAI streaming delta.tool_calls: a whole call, or with stream_arguments the
// call's first entry (index, id, name, arguments "") and then fragments (index, arguments).
struct ToolCallDelta {
  size_t index = 0;       // 0, 1, ... in the order of the output
  std::string id;         // first entry only. "call_" + 24 alphanumerics; Mistral: 9 alphanumerics
                          // (its template refuses other lengths when the call comes back)
  std::string name;       // first entry only
  std::string arguments;  // JSON text of an object, or a fragment of it
};

struct ParserDelta {
  std::string content;
  std::string reasoning_content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return content.empty() && reasoning_content.empty() && tool_calls.empty(); }
};

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;
  bool operator==(const ToolCall&) const = default;
};

struct ParsedOutput {
  std::string content;
  std::string reasoning_content;
  std::vector<ToolCall> tool_calls;
  bool operator==(const ParsedOutput&) const = default;
};

class ToolCallParser {
 public:
  // Ids come from a generator seeded with `seed`: the same seed gives the same ids.
  ToolCallParser(ParserOptions options, uint64_t seed);

  ParserDelta push(std::string_view delta);
  // Releases everything held back. Later push()/finish() calls return nothing.
  ParserDelta finish();

 private:
  enum class Mode { kContent, kReasoning, kCall, kSkipToClose };
  // Where a call's body is: before its first '{' / '[' (or Mistral name), inside its JSON, after
  // it (Hermes: before </tool_call>), or in a Mistral [TOOL_CALLS]name[ARGS]{...} header.
  // With stream_arguments: reading {"name": ..., "arguments": (kHeader), then streaming the
  // arguments while the whole object is scanned (kStreamArgs), then (Hermes) </tool_call>.
  enum class Step {
    kOpen,
    kValue,
    kClose,
    kName,
    kArgsMarker,
    kArgsOpen,
    kHeader,
    kStreamArgs,
    kStreamClose
  };

  void run(bool final, ParserDelta& out);
  bool step_content(bool final, ParserDelta& out);
  bool step_reasoning(bool final, ParserDelta& out);
  bool step_call(bool final, ParserDelta& out);
  bool step_skip_to_close(bool final, ParserDelta& out);
  void start_call(size_t body);
  // The call's raw text up to `resume` becomes content; scanning goes on from there.
  bool fail_call(size_t resume, ParserDelta& out);
  // The call ended at buf_[end): emits it (true) or fails it (false) by its JSON.
  bool finish_call(size_t end, ParserDelta& out);
  bool add_call(const nlohmann::ordered_json& call, std::vector<ToolCallDelta>& calls);
  bool declared_ok(const std::string& name) const;
  // stream_arguments: commits the call (its first delta); its arguments start at buf_[args].
  void begin_stream(std::string name, size_t args, ParserDelta& out);
  // Emits the arguments scanned so far; outer is the state of the whole call object's scan.
  bool step_stream_args(bool final, ParserDelta& out);
  // The committed call ends; scanning goes on from buf_[resume] (ok: as after any call).
  bool end_stream(size_t resume, bool ok);
  std::string new_id();
  std::string_view tool_marker() const;

  ParserOptions options_;
  std::mt19937_64 rng_;
  std::string buf_;  // undecided text; in a call, buf_[0] is where the call's raw text begins
  Mode mode_ = Mode::kContent;
  bool finished_ = false;
  bool think_allowed_ = false;  // a <think> here opens reasoning (only at the start)
  bool strip_ws_ = false;       // whitespace here separates (after </think> or a call)
  bool call_position_ = false;  // Llama 3 JSON: a '{' here starts a call
  bool after_call_ = false;     // Llama 3 JSON: one ';' here separates two calls
  Step step_ = Step::kOpen;
  size_t body_ = 0;  // where the call's body begins in buf_ (after its marker)
  size_t pos_ = 0;   // scan position in buf_ within a call
  size_t value_start_ = 0;
  size_t value_end_ = 0;
  bool named_ = false;  // Mistral [TOOL_CALLS]name[ARGS]{...}
  size_t name_start_ = 0;
  size_t name_end_ = 0;
  JsonExtent extent_;       // the call's JSON value (the whole object, or Mistral's list)
  JsonExtent args_extent_;  // stream_arguments: the arguments object inside it
  size_t args_pos_ = 0;     // stream_arguments: scan position of the arguments
  size_t emitted_ = 0;      // stream_arguments: arguments emitted up to here
  size_t next_index_ = 0;
};

// The whole output at once: the same as push(text) then finish(), accumulated.
ParsedOutput parse_all(std::string_view text, const ParserOptions& options, uint64_t seed);

// Adds a streamed delta to a result (tool calls by index: id and name set, arguments appended).
void accumulate(ParsedOutput& into, const ParserDelta& delta);

// OpenAI shapes: an entry of a streaming chunk's delta.tool_calls, and of message.tool_calls.
nlohmann::ordered_json tool_call_delta_json(const ToolCallDelta& call);
nlohmann::ordered_json tool_call_json(const ToolCall& call);

}  // namespace tandem::tool_calls
