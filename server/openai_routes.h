// The small routes next to the generation endpoints, as pure functions of a body (tested in
// tests/test_openai_routes.cpp): POST /tokenize and POST /detokenize in vLLM's shapes, and
// GET /v1/models/{id}.
//   /tokenize    {"prompt": text} or {"messages": [...], "tools", "add_generation_prompt",
//                "chat_template_kwargs"}, optional "model", "add_special_tokens" (default: true
//                for a prompt, false for messages, whose template writes its own), and
//                "return_token_strs" -> {"count", "max_model_len", "tokens", "token_strs"}
//   /detokenize  {"tokens": [ids]} (optional "model") -> {"prompt": text}
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "server/openai_codec.h"

namespace tandem::openai {

std::variant<std::string, ApiError> tokenize_response(std::string_view body,
                                                      const ModelInfo& model);
std::variant<std::string, ApiError> detokenize_response(std::string_view body,
                                                        const ModelInfo& model);
// One model object; a 404 (model_not_found) for another id.
std::variant<std::string, ApiError> model_response(std::string_view id, const ModelInfo& model,
                                                   int64_t created);

}  // namespace tandem::openai
