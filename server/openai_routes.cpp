// /tokenize, /detokenize and /v1/models/{id} (server/openai_routes.h).
#include "server/openai_routes.h"

#include <limits>

#include "engine/tokenizer/tokenizer.h"

namespace tandem::openai {

using ojson = nlohmann::ordered_json;

namespace {

// The body as a JSON object (parse_json_object) whose keys are all in `allowed`.
std::variant<ojson, ApiError> parse_body(std::string_view text,
                                         std::initializer_list<std::string_view> allowed,
                                         const char* route) {
  auto parsed = parse_json_object(text);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  for (const auto& [key, value] : std::get<ojson>(parsed).items()) {
    bool known = false;
    for (std::string_view a : allowed) known = known || key == a;
    if (!known)
      return invalid_request(cat("Unrecognized request argument supplied: '", key,
                                 "' (not a parameter of ", route, ")"),
                             key);
  }
  return parsed;
}

std::optional<ApiError> check_model(const ojson& body, const ModelInfo& model) {
  auto it = body.find("model");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) return invalid_request("'model' must be a string", "model");
  if (*it == model.served_name) return std::nullopt;
  return model_not_found(it->get<std::string>());
}

std::optional<bool> flag(const ojson& body, const char* key, std::optional<ApiError>& err) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) {
    err = invalid_request(cat("'", key, "' must be a boolean"), key);
    return std::nullopt;
  }
  return it->get<bool>();
}

}  // namespace

std::variant<std::string, ApiError> tokenize_response(std::string_view text,
                                                      const ModelInfo& model) {
  auto parsed = parse_body(text,
                           {"model", "prompt", "messages", "tools", "add_generation_prompt",
                            "chat_template_kwargs", "add_special_tokens", "return_token_strs"},
                           "/tokenize");
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const ojson& body = std::get<ojson>(parsed);
  if (auto e = check_model(body, model)) return *e;
  std::optional<ApiError> err;
  const std::optional<bool> add_special = flag(body, "add_special_tokens", err);
  const bool token_strs = flag(body, "return_token_strs", err).value_or(false);
  if (err) return *err;
  const bool has_prompt = body.contains("prompt") && !body["prompt"].is_null();
  const bool has_messages = body.contains("messages") && !body["messages"].is_null();
  if (has_prompt == has_messages)
    return invalid_request("give exactly one of 'prompt' and 'messages'",
                           has_prompt ? "messages" : "prompt");

  std::variant<PreparedPrompt, ApiError> prepared;
  if (has_prompt) {
    if (!body["prompt"].is_string()) return invalid_request("'prompt' must be a string", "prompt");
    prepared = prepare_text(body["prompt"].get<std::string>(), model, add_special.value_or(true),
                            "prompt");
  } else {
    // The chat keys go through the chat codec: the same message checks as a completion request.
    ojson chat = ojson::object();
    for (const char* k : {"messages", "tools", "add_generation_prompt", "chat_template_kwargs"})
      if (body.contains(k)) chat[k] = body[k];
    auto req = parse_request(Endpoint::kChat, chat.dump(), SamplingParams{});
    if (auto* e = std::get_if<ApiError>(&req)) return *e;
    prepared = prepare_chat(std::get<ApiRequest>(req), model, add_special.value_or(false));
  }
  if (auto* e = std::get_if<ApiError>(&prepared)) return *e;
  const std::vector<int32_t>& ids = std::get<PreparedPrompt>(prepared).ids;
  ojson out = ojson::object();
  out["count"] = ids.size();
  out["max_model_len"] = model.max_model_len;
  out["tokens"] = ids;
  if (token_strs) {
    ojson strs = ojson::array();
    for (int32_t id : ids) strs.push_back(model.tokenizer->id_to_token(id));
    out["token_strs"] = std::move(strs);
  } else {
    out["token_strs"] = nullptr;
  }
  return dump(out);
}

std::variant<std::string, ApiError> detokenize_response(std::string_view text,
                                                        const ModelInfo& model) {
  auto parsed = parse_body(text, {"model", "tokens"}, "/detokenize");
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const ojson& body = std::get<ojson>(parsed);
  if (auto e = check_model(body, model)) return *e;
  auto it = body.find("tokens");
  if (it == body.end() || it->is_null()) return invalid_request("'tokens' is required", "tokens");
  if (!it->is_array()) return invalid_request("'tokens' must be a list of token ids", "tokens");
  const int32_t vocab = model.tokenizer->vocab_size();
  std::vector<int32_t> ids;
  ids.reserve(it->size());
  for (const ojson& t : *it) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab)
      return invalid_request(cat("'tokens' must be token ids in [0, ", vocab, "), got ", t.dump()),
                             "tokens");
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  ojson out = ojson::object();
  out["prompt"] = model.tokenizer->decode(ids, /*skip_special=*/false);
  return dump(out);
}

std::variant<std::string, ApiError> model_response(std::string_view id, const ModelInfo& model,
                                                   int64_t created) {
  if (id != model.served_name) return model_not_found(id);
  return dump(model_json(model.served_name, created, model.max_model_len));
}

}  // namespace tandem::openai
