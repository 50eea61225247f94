// The OpenAI codec, planning: a validated ApiRequest to GenerationRequests, one per choice —
// the chat template renders the messages, the tokenizer encodes the prompt, the context length is
// checked. Every failure is an ApiError, never an exception.
#include <algorithm>
#include <optional>
#include <variant>

#include "engine/tokenizer/tokenizer.h"
#include "kernels/common.h"
#include "server/chat_template.h"
#include "server/openai_codec.h"

namespace tandem::openai {

using ojson = nlohmann::ordered_json;

namespace {

// Prompt text (a rendered chat or a completions prompt) longer than this is refused before it is
// tokenized: no served context holds that much (a token is rarely under 2 bytes), and
// tokenizing it would only cost seconds. The chat template's own cap is 16 MiB per string.
constexpr size_t kMaxPromptBytes = size_t{8} << 20;

std::optional<ApiError> check_prompt_size(const std::string& text, const char* param) {
  if (text.size() <= kMaxPromptBytes) return std::nullopt;
  ApiError e = invalid_request(
      cat("the prompt is ", text.size(), " bytes of text; at most ", kMaxPromptBytes), param);
  e.code = "context_length_exceeded";
  return e;
}

// Text the tokenizer refuses (its pre-tokenizer regex ran out of steps on it) is the client's
// problem: a 400 naming the parameter, not a 500 or a hung request.
std::variant<std::vector<int32_t>, ApiError> encode(const Tokenizer& tok, const std::string& text,
                                                    bool add_special, const char* param) {
  try {
    return tok.encode(text, add_special, /*parse_special=*/true);
  } catch (const Error& e) {
    ApiError err = error_for_kind(e.kind(), cat("the prompt could not be tokenized: ", e.what()));
    err.param = param;
    return err;
  }
}

}  // namespace

std::variant<PreparedPrompt, ApiError> prepare_chat(const ApiRequest& req, const ModelInfo& model,
                                                    bool add_special) {
  if (!model.chat_template) return invalid_request("this model has no chat template", "messages");
  ojson ctx = req.template_kwargs;
  ctx["messages"] = req.messages;
  ctx["add_generation_prompt"] = req.add_generation_prompt;
  if (!req.tools.is_null()) ctx["tools"] = req.tools;
  PreparedPrompt p;
  try {
    p.text = model.chat_template->render(ctx);
  } catch (const std::exception& e) {
    return invalid_request(cat("the chat template failed: ", e.what()), "messages");
  }
  if (auto e = check_prompt_size(p.text, "messages")) return *e;
  // The template writes BOS itself where the model wants one (as HF apply_chat_template).
  const auto ids = encode(*model.tokenizer, p.text, add_special, "messages");
  if (auto* e = std::get_if<ApiError>(&ids)) return *e;
  p.ids = std::get<std::vector<int32_t>>(ids);
  return p;
}

std::variant<PreparedPrompt, ApiError> prepare_text(const std::string& text, const ModelInfo& model,
                                                    bool add_special, const char* param) {
  if (auto e = check_prompt_size(text, param)) return *e;
  const auto ids = encode(*model.tokenizer, text, add_special, param);
  if (auto* e = std::get_if<ApiError>(&ids)) return *e;
  return PreparedPrompt{std::get<std::vector<int32_t>>(ids), text};
}

std::variant<Plan, ApiError> plan_request(const ApiRequest& req, const ModelInfo& model) {
  if (!req.model.empty() && req.model != model.served_name) return model_not_found(req.model);
  const Tokenizer& tok = *model.tokenizer;
  const bool chat = req.endpoint == Endpoint::kChat;
  const char* param = chat ? "messages" : "prompt";
  Plan plan;
  if (chat) {
    auto p = prepare_chat(req, model, /*add_special=*/false);
    if (auto* e = std::get_if<ApiError>(&p)) return *e;
    plan.prompts.push_back(std::move(std::get<PreparedPrompt>(p)));
  } else {
    const int32_t vocab = tok.vocab_size();
    for (size_t i = 0; i < req.prompts.size(); ++i) {
      const PromptInput& in = req.prompts[i];
      PreparedPrompt p;
      if (in.is_ids) {
        for (int32_t id : in.ids)
          if (id >= vocab)
            return invalid_request(
                cat("token id ", id, " is out of range (vocabulary size ", vocab, ")"), param);
        p.ids = in.ids;
        p.text = tok.decode(p.ids, /*skip_special=*/true);
      } else {
        auto prepared = prepare_text(in.text, model, /*add_special=*/true, param);
        if (auto* e = std::get_if<ApiError>(&prepared)) return *e;
        p = std::move(std::get<PreparedPrompt>(prepared));
      }
      plan.prompts.push_back(std::move(p));
    }
  }

  for (const PreparedPrompt& p : plan.prompts) {
    const int64_t len = static_cast<int64_t>(p.ids.size());
    if (len == 0) return invalid_request("the prompt is empty (no tokens)", param);
    if (len >= model.max_model_len) {
      ApiError e = invalid_request(cat("This model's maximum context length is ",
                                       model.max_model_len, " tokens. However, your prompt has ",
                                       len, " tokens, which leaves no room for the completion."),
                                   param);
      e.code = "context_length_exceeded";
      return e;
    }
    if (req.max_tokens && len + *req.max_tokens > model.max_model_len) {
      ApiError e = invalid_request(
          cat("This model's maximum context length is ", model.max_model_len,
              " tokens. However, you requested ", len + *req.max_tokens, " tokens (", len,
              " in the prompt, ", *req.max_tokens, " for the completion)."),
          "max_tokens");
      e.code = "context_length_exceeded";
      return e;
    }
  }

  for (const auto& [id, bias] : req.sampling.logit_bias)
    if (id >= tok.vocab_size())
      return invalid_request(cat("'logit_bias' token id ", id, " is out of range (vocabulary size ",
                                 tok.vocab_size(), ")"),
                             "logit_bias");

  if (chat) {
    // Tool calls are parsed out of the output when the request declares tools and lets the
    // model call them; reasoning is split whenever the model writes it.
    tool_calls::ParserOptions& po = plan.parser;
    const bool tools = req.tools.is_array() && !req.tools.empty();
    po.tool_format = tools && req.tool_choice == ApiRequest::ToolChoice::kAuto
                         ? model.tool_format
                         : tool_calls::ToolFormat::kNone;
    po.reasoning = model.reasoning_format;
    po.starts_in_reasoning = po.reasoning != tool_calls::ReasoningFormat::kNone &&
                             tool_calls::prompt_opens_reasoning(plan.prompts[0].text);
    if (req.tool_choice == ApiRequest::ToolChoice::kRequired ||
        req.tool_choice == ApiRequest::ToolChoice::kNamed) {
      // The output is the calls themselves, in the grammar's JSON: nothing else to parse.
      plan.forced = req.tool_choice;
      plan.forced_function = req.forced_function;
      po = tool_calls::ParserOptions{};
    }
  }

  std::string chat_echo;
  if (chat && req.echo && !req.messages.empty() && req.messages.back()["role"] == "assistant")
    chat_echo = req.messages.back()["content"].get<std::string>();
  for (const PreparedPrompt& p : plan.prompts) {
    const int32_t len = static_cast<int32_t>(p.ids.size());
    for (int32_t j = 0; j < req.n; ++j) {
      GenerationRequest g;
      g.prompt = p.ids;
      g.sampling = req.sampling;
      if (req.sampling.seed) g.sampling.seed = *req.sampling.seed + static_cast<uint64_t>(j);
      g.max_tokens = req.max_tokens ? *req.max_tokens : model.max_model_len - len;
      g.stop = req.stop;
      g.stop_ids = req.stop_token_ids;
      g.ignore_eos = req.ignore_eos;
      g.min_tokens = std::min(req.min_tokens, g.max_tokens);
      g.grammar = req.grammar;
      g.top_logprobs = req.logprobs ? req.top_logprobs : -1;
      g.report_progress = req.include_progress;
      plan.choices.push_back(std::move(g));
      plan.echo.push_back(!req.echo ? std::string() : chat ? chat_echo : p.text);
    }
  }
  return plan;
}

}  // namespace tandem::openai
