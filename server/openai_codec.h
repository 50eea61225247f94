// The OpenAI codec: request bodies of /v1/chat/completions and /v1/completions in, validated
// GenerationRequests (one per choice) out; TokenEvents in, SSE chunks or one full JSON response
// out; errors as OpenAI error objects with the offending parameter's name. No sockets and no
// engine: everything here is a pure function of its inputs, unit-tested in
// tests/test_openai_codec.cpp.
//
// Parameters and how they reach the engine (server/openai_params.cpp lists every parameter with
// its status; a body key that is not there, or is rejected there, is a 400 naming it):
//   messages (chat)  -> rendered by the model's chat template, tokenized without BOS/EOS
//   prompt (compl.)  -> a string, a list of strings, a list of token ids or a list of such lists;
//                       text is tokenized with the tokenizer's special tokens (BOS)
//   n                -> n choices per prompt, choice index = prompt * n + j
//   max_tokens, max_completion_tokens (chat; wins) -> GenerationRequest::max_tokens; default: the
//                       rest of the context
//   temperature, top_p, top_k, min_p, presence/frequency/repetition_penalty -> SamplingParams
//   seed             -> SamplingParams::seed; choice j gets seed + j so n choices differ
//   stop (string or list), stop_token_ids, ignore_eos, min_tokens -> GenerationRequest
//   logit_bias       -> SamplingParams::logit_bias
//   logprobs + top_logprobs (chat), logprobs = k (completions) -> top_logprobs
//   echo (completions: the prompt text is prepended; chat: the last message when it is the
//         assistant's, as vLLM does), stream, stream_options.include_usage and
//         .include_progress (or llama.cpp's return_progress)
//   user, metadata, store, ... -> accepted, ignored
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/request.h"
#include "engine/sampler.h"
#include "kernels/common.h"
#include "server/tool_calls/tool_call_parser.h"

namespace tandem {
class Tokenizer;
class ChatTemplate;
}  // namespace tandem

namespace tandem::openai {

enum class Endpoint : uint8_t { kChat, kCompletions };

// An OpenAI error object with its HTTP status: {"error":{"message","type","param","code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null
};

ApiError invalid_request(std::string message, std::string param = "");
// 404 model_not_found for a model name this server does not serve.
ApiError model_not_found(std::string_view name);
// A request body as a JSON object: valid UTF-8, nested at most kMaxRequestJsonDepth levels
// (checked before parsing), parsed, an object; otherwise the 400 saying which.
std::variant<nlohmann::ordered_json, ApiError> parse_json_object(std::string_view body);
// The error for a tandem::Error's kind (400 for bad input, 429 queue full, 500 for bugs, ...).
ApiError error_for_kind(ErrorKind kind, const std::string& message);
std::string error_json(const ApiError& e);  // the response body
std::string sse_error(const ApiError& e);   // one SSE frame carrying the error object

// Serialises JSON for the wire: invalid UTF-8 (a partial token) becomes U+FFFD instead of throwing.
std::string dump(const nlohmann::ordered_json& j);

// One completions prompt: text or token ids.
struct PromptInput {
  bool is_ids = false;
  std::string text;
  std::vector<int32_t> ids;
};

// A validated request, before tokenization.
struct ApiRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;                // empty: the served model
  nlohmann::ordered_json messages;  // chat: normalised messages (content as a string)
  nlohmann::ordered_json tools;     // chat: passed to the template when present
  // auto: calls are parsed out of the output; none: not; required / named: the output is
  // constrained to calls (server/openai_constraints.h) and read as such.
  enum class ToolChoice : uint8_t {
    kAuto,
    kNone,
    kRequired,
    kNamed
  } tool_choice = ToolChoice::kAuto;
  std::string forced_function;  // kNamed
  // The grammar the output must follow (response_format json_object / json_schema, or a forced
  // tool call); null: free text.
  std::shared_ptr<const grammar::Grammar> grammar;
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();
  bool add_generation_prompt = true;
  std::vector<PromptInput> prompts;  // completions
  int32_t n = 1;
  std::optional<int32_t> max_tokens;
  SamplingParams sampling;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int32_t min_tokens = 0;
  bool logprobs = false;
  int32_t top_logprobs = 0;  // alternatives per token when logprobs
  bool echo = false;
  bool stream = false;
  bool include_usage = false;
  bool include_progress = false;  // stream_options.include_progress or return_progress
};

struct CodecLimits {
  int32_t max_n = 16;          // choices per prompt
  int32_t max_sequences = 64;  // prompts x n per request
  int32_t max_stop = 16;       // stop strings
  int32_t max_top_logprobs = 20;
};

// Parses and validates a body; sampling starts from `defaults` (the model's generation config).
std::variant<ApiRequest, ApiError> parse_request(Endpoint endpoint, std::string_view body,
                                                 const SamplingParams& defaults,
                                                 const CodecLimits& limits = {});

// What the codec needs to know about the served model.
struct ModelInfo {
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;  // chat requests fail with 400 without one
  int32_t max_model_len = 0;                    // prompt + generated tokens at most
  std::string served_name;
  // How the model writes tool calls and reasoning (--tool-call-parser, --reasoning-parser,
  // detected from the chat template by default): chat output is split accordingly.
  tool_calls::ToolFormat tool_format = tool_calls::ToolFormat::kNone;
  tool_calls::ReasoningFormat reasoning_format = tool_calls::ReasoningFormat::kNone;
};

struct PreparedPrompt {
  std::vector<int32_t> ids;
  std::string text;  // what echo prepends (the prompt text, or the decoded ids)
};

// The engine work of one API request: one GenerationRequest per choice.
struct Plan {
  std::vector<PreparedPrompt> prompts;
  std::vector<GenerationRequest> choices;  // choice i belongs to prompts[i / n]
  std::vector<std::string> echo;           // per choice: text prepended to its output
  // Chat: how each choice's output is split into content, reasoning_content and tool_calls
  // (tool_format kNone and reasoning kNone: all content).
  tool_calls::ParserOptions parser;
  ApiRequest::ToolChoice forced = ApiRequest::ToolChoice::kAuto;  // kRequired / kNamed: forced
  std::string forced_function;
};

// The chat of req rendered by the model's template and tokenized (BOS/EOS only when add_special),
// or a text tokenized; no length checks. Failures are 400s naming "messages" / param.
std::variant<PreparedPrompt, ApiError> prepare_chat(const ApiRequest& req, const ModelInfo& model,
                                                    bool add_special);
std::variant<PreparedPrompt, ApiError> prepare_text(const std::string& text, const ModelInfo& model,
                                                    bool add_special, const char* param);

// Renders/tokenizes and checks lengths: a prompt that does not leave room for one generated
// token, or prompt + max_tokens beyond max_model_len, is a 400; an unknown model is a 404.
std::variant<Plan, ApiError> plan_request(const ApiRequest& req, const ModelInfo& model);

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  // Prompt tokens found in the prefix cache (usage.prompt_tokens_details.cached_tokens): per
  // prompt, the fewest its choices found (a prompt is counted once, as in prompt_tokens).
  int64_t cached_tokens = 0;
};

// Turns the TokenEvents of a request's choices into the OpenAI wire format, streaming (SSE
// frames) or not (one JSON body). Feed each choice's events in order; choices may interleave.
class ResponseEncoder {
 public:
  ResponseEncoder(const ApiRequest& req, const Plan& plan, std::string id, int64_t created,
                  std::string model);

  // Streaming. sse_start: the first frames (chat: the assistant role per choice; completions with
  // echo: the prompt text). sse_event: frames for one event (may be empty). sse_end: the usage
  // chunk when include_usage, then `data: [DONE]`.
  std::string sse_start();
  std::string sse_event(size_t choice, const TokenEvent& ev);
  std::string sse_end();
  // A progress event (TokenEvent::processed >= 0; sse_event and add ignore them): a chunk with no
  // choices and llama.cpp's `prompt_progress` {index, total, cache, processed, time_ms}; empty
  // unless the request asked for progress.
  std::string sse_progress(size_t choice, const TokenEvent& ev, double time_ms) const;

  // Non-streaming: add every event, then take the body once all choices finished.
  void add(size_t choice, const TokenEvent& ev);
  std::string body() const;

  bool finished(size_t choice) const { return choices_[choice].finished; }
  bool all_finished() const;
  // Set when a choice ended with FinishReason::kError/kCancelled: the response is this error.
  const std::optional<ApiError>& error() const { return error_; }
  Usage usage() const;
  size_t n_choices() const { return choices_.size(); }

 private:
  struct Choice {
    std::string text;
    std::unique_ptr<tool_calls::ToolCallParser> parser;  // sse_event, when the output is split
    uint64_t parser_seed = 0;                            // ids of the tool calls
    tool_calls::ParsedOutput parsed;                     // non-streaming, once finished
    bool called = false;                                 // a tool call was parsed
    nlohmann::ordered_json logprobs;                     // accumulated (non-streaming)
    size_t text_offset = 0;  // bytes of text before the next token (completions)
    bool finished = false;
    FinishReason finish = FinishReason::kNone;
    int64_t completion_tokens = 0;
    int64_t cached_tokens = 0;
  };
  void absorb(size_t choice, const TokenEvent& ev);
  std::string finish_reason(const Choice& c) const;
  tool_calls::ParsedOutput forced_output(const Choice& c) const;
  nlohmann::ordered_json chunk_head() const;
  nlohmann::ordered_json logprobs_of(Choice& c, const TokenEvent& ev, bool chat) const;
  nlohmann::ordered_json usage_json() const;

  bool chat_;
  bool split_ = false;  // chat output goes through a tool-call / reasoning parser
  tool_calls::ParserOptions parser_options_;
  ApiRequest::ToolChoice forced_ = ApiRequest::ToolChoice::kAuto;
  std::string forced_function_;
  bool logprobs_;
  bool include_usage_;
  bool include_progress_;
  std::string id_;
  int64_t created_;
  std::string model_;
  int64_t prompt_tokens_ = 0;
  std::vector<int64_t> prompt_len_;  // per choice
  size_t n_per_prompt_ = 1;          // choice i belongs to prompt i / n_per_prompt_
  std::vector<std::string> echo_;
  std::vector<Choice> choices_;
  std::optional<ApiError> error_;
};

const char* finish_reason_name(FinishReason r);

// GET /v1/models.
std::string models_json(const std::string& served_name, int64_t created, int32_t max_model_len);
// One model object of that list (GET /v1/models/{id}).
nlohmann::ordered_json model_json(const std::string& served_name, int64_t created,
                                  int32_t max_model_len);

}  // namespace tandem::openai
