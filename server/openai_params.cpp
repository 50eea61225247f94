// The request-parameter table (server/openai_params.h).
#include "server/openai_params.h"

#include <array>

#include "server/openai_codec.h"

namespace tandem::openai {

namespace {

constexpr auto S = ParamSupport::kSupported;
constexpr auto I = ParamSupport::kIgnored;
constexpr auto R = ParamSupport::kRejected;

// name, chat, completions, support, extension, example, with, what
constexpr std::array kParams = std::to_array<ParamInfo>({
    // Both endpoints, OpenAI.
    {"model", true, true, S, false, R"("tandem-demo")", "",
     "the served name (`--served-model-name`); another name is a 404"},
    {"max_tokens", true, true, S, false, "8", "",
     "generated tokens at most; default: the rest of the context"},
    {"temperature", true, true, S, false, "0.7", "", "[0, 2]; 0 is greedy"},
    {"top_p", true, true, S, false, "0.9", "", "(0, 1]"},
    {"n", true, true, S, false, "2", "",
     "choices per prompt, at most 16 (64 sequences per request)"},
    {"stop", true, true, S, false, R"(["\n\n"])", "",
     "a string or up to 16; matched across token boundaries, never emitted"},
    {"seed", true, true, S, false, "42", "", "same seed, same text; choice j uses seed + j"},
    {"stream", true, true, S, false, "false", "", "server-sent events, ending with `data: [DONE]`"},
    {"stream_options", true, true, S, false, R"({"include_usage": true, "include_progress": true})",
     R"({"stream": true})",
     "needs `stream`; `include_usage`: a last chunk with the usage; `include_progress` "
     "(extension): during the prefill, chunks with no choices and `prompt_progress` {index, "
     "total, cache, processed, time_ms}; `include_obfuscation`: ignored"},
    {"presence_penalty", true, true, S, false, "0.5", "", "[-2, 2], over the generated tokens"},
    {"frequency_penalty", true, true, S, false, "0.5", "", "[-2, 2], over the generated tokens"},
    {"logit_bias", true, true, S, false, R"({"13": -100, "42": 5})", "",
     "token id (a string key) to a bias in [-100, 100] added to its logit; at most 1024 entries"},
    {"echo", true, true, S, false, "true", "",
     "completions: the prompt text is prepended; chat: the last message when it is the "
     "assistant's (as vLLM)"},
    {"user", true, true, I, false, R"("user-1")", "", "accepted, ignored"},
    {"metadata", true, true, I, false, R"({"k": "v"})", "",
     "accepted, ignored (nothing is stored)"},
    {"store", true, true, I, false, "false", "", "accepted, ignored (nothing is stored)"},
    {"service_tier", true, true, I, false, R"("auto")", "", "accepted, ignored (one tier)"},
    {"prompt_cache_key", true, true, I, false, R"("k")", "", "accepted, ignored"},
    {"safety_identifier", true, true, I, false, R"("u")", "", "accepted, ignored"},
    // Chat, OpenAI.
    {"messages", true, false, S, false, R"([{"role": "user", "content": "Hi"}])", "",
     "roles system, developer (= system), user, assistant, tool; content a string or text parts; "
     "rendered by the model's chat template"},
    {"max_completion_tokens", true, false, S, false, "8", "", "as `max_tokens`; wins over it"},
    {"logprobs", true, false, S, false, "true", "", "the chosen token's logprob"},
    {"top_logprobs", true, false, S, false, "2", R"({"logprobs": true})",
     "alternatives per token, at most 20; needs `logprobs`"},
    {"tools", true, false, S, false,
     R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])", "",
     "passed to the chat template; its calls come back as `tool_calls`"},
    {"tool_choice", true, false, S, false, R"("auto")", "",
     "`auto`: calls are parsed out of the output in the model's format (`--tool-call-parser`) "
     "into `tool_calls` / `delta.tool_calls`, finish_reason `tool_calls`; `none`: not parsed; "
     "`required` and a named function: the output is constrained by a grammar to calls of the "
     "declared tools' parameter schemas, so they always parse"},
    {"parallel_tool_calls", true, false, S, false, "true", "",
     "`required` makes at most 8 calls, exactly one when false"},
    {"response_format", true, false, S, false,
     R"({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}})",
     "",
     "`text`, `json_object`, `json_schema` (its `schema` in the subset of docs/grammar.md; "
     "anything else a 400 naming the keyword): the output always parses and validates"},
    {"modalities", true, false, S, false, R"(["text"])", "", "only `[\"text\"]`"},
    {"audio", true, false, R, false, R"({"voice": "alloy", "format": "wav"})", "", "no audio"},
    {"prediction", true, false, R, false, R"({"type": "content", "content": "x"})", "",
     "no predicted outputs"},
    {"functions", true, false, R, false, R"([{"name": "f"}])", "", "deprecated: use `tools`"},
    {"function_call", true, false, R, false, R"("auto")", "", "deprecated: use `tool_choice`"},
    {"reasoning_effort", true, false, R, false, R"("low")", "",
     "not implemented (the chat template decides whether a model reasons)"},
    {"verbosity", true, false, R, false, R"("low")", "", "not implemented"},
    {"web_search_options", true, false, R, false, "{}", "", "no web search"},
    // Completions, OpenAI.
    {"prompt", false, true, S, false, R"("def f(")", "",
     "a string, a list of strings, a list of token ids or a list of such lists"},
    {"logprobs", false, true, S, false, "2", "",
     "the number of alternatives per token (at most 20)"},
    {"best_of", false, true, S, false, "1", "", "only equal to `n` (no server-side ranking)"},
    {"suffix", false, true, R, false, R"("}")", "", "no fill-in-the-middle"},
    // Extensions (vLLM, llama.cpp).
    {"top_k", true, true, S, true, "40", "", "-1 or 0: off"},
    {"min_p", true, true, S, true, "0.05", "", "[0, 1]"},
    {"repetition_penalty", true, true, S, true, "1.1", "",
     "(0, 10], HF style, over prompt and output"},
    {"min_tokens", true, true, S, true, "4", "",
     "EOS and `stop_token_ids` cannot end the output before this many tokens (stop strings still "
     "apply); at most `max_tokens`"},
    {"stop_token_ids", true, true, S, true, "[2]", "", "extra token ids that end the output"},
    {"ignore_eos", true, true, S, true, "true", "", "generate past EOS (benchmarks)"},
    {"return_progress", true, true, S, true, "true", R"({"stream": true})",
     "llama.cpp's name of `stream_options.include_progress`; needs `stream`"},
    {"add_generation_prompt", true, false, S, true, "true", "", "passed to the chat template"},
    {"chat_template_kwargs", true, false, S, true, R"({"enable_thinking": false})", "",
     "extra variables for the chat template"},
});

}  // namespace

std::span<const ParamInfo> request_params() { return kParams; }

const ParamInfo* find_param(std::string_view name, Endpoint endpoint) {
  for (const ParamInfo& p : kParams)
    if (name == p.name && (endpoint == Endpoint::kChat ? p.chat : p.completions)) return &p;
  return nullptr;
}

std::string params_markdown() {
  std::string out =
      "| parameter | chat | completions | status | notes |\n"
      "|---|---|---|---|---|\n";
  for (const ParamInfo& p : kParams) {
    const char* status = p.support == ParamSupport::kSupported ? "supported"
                         : p.support == ParamSupport::kIgnored ? "accepted, ignored"
                                                               : "rejected (400)";
    out += "| `";
    out += p.name;
    out += p.extension ? "` (extension) | " : "` | ";
    out += p.chat ? "yes | " : "- | ";
    out += p.completions ? "yes | " : "- | ";
    out += status;
    out += " | ";
    out += p.what;
    out += " |\n";
  }
  return out;
}

}  // namespace tandem::openai
