// Chat templates: the Jinja `chat_template` of a model's tokenizer_config.json, parsed once and
// rendered per request with the messages, tools and flags the OpenAI request carries. The Jinja
// engine (server/jinja/) follows @huggingface/jinja, which the tests compare against on the
// real templates of Llama 3, Qwen 2.5/3, Gemma 3, DeepSeek V3 and hand-transcribed others.
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tandem {

namespace jinja {
struct Node;
}

class ChatTemplate {
 public:
  // Parses once; throws tandem::Error (kInvalidArgument) "chat template syntax error at line
  // N: ..." on a syntax error. bos/eos are the tokens render() adds when ctx lacks them.
  // Copies share the parsed template (immutable); render() may run on many threads at once.
  explicit ChatTemplate(const std::string& source, std::string bos_token = "",
                        std::string eos_token = "");

  // Loads dir/tokenizer_config.json: chat_template (a string, or a list of {name, template}
  // from which "default" is taken), bos_token/eos_token (a string or {"content": ...}). When the
  // config has no template, dir/chat_template.jinja or dir/chat_template.json is used; when
  // there is none at all, a built-in ChatML template (is_fallback() is then true). Throws
  // tandem::Error (kIo / kInvalidArgument) on an unreadable or malformed config.
  static ChatTemplate from_model_dir(const std::filesystem::path& dir);

  // ctx is the JSON context: {"messages": [...], "add_generation_prompt": true, "tools": [...],
  // "bos_token": "...", ...}; any other key is visible to the template (enable_thinking, ...).
  // bos_token/eos_token default to the template's own. Keys keep their order with
  // nlohmann::ordered_json (tool schemas printed with |tojson keep the client's order);
  // nlohmann::json sorts them. Throws tandem::Error (kInvalidArgument): raise_exception's
  // message as is, other errors as "chat template error at line N: ...".
  std::string render(const nlohmann::json& ctx) const;
  std::string render(const nlohmann::ordered_json& ctx) const;

  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  const std::string& source() const { return source_; }
  bool is_fallback() const { return fallback_; }

  // The ChatML template used when a model ships none.
  static const char* fallback_source();

 private:
  template <typename Json>
  std::string render_json(const Json& ctx) const;

  std::string source_;
  std::string bos_token_;
  std::string eos_token_;
  bool fallback_ = false;
  std::shared_ptr<const std::vector<std::unique_ptr<jinja::Node>>> program_;
};

}  // namespace tandem
