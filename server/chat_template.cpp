// Chat templates: loading from a model folder, parsing once, rendering per request.
#include "server/chat_template.h"

#include <fstream>
#include <sstream>

#include "kernels/common.h"
#include "server/jinja/interp.h"
#include "server/jinja/lexer.h"
#include "server/jinja/parser.h"

namespace tandem {
namespace fs = std::filesystem;

namespace {

// transformers' default ChatML template.
constexpr const char* kChatMl =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  TANDEM_REQUIRE(in.good(), kIo, "cannot open ", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  TANDEM_REQUIRE(!in.bad(), kIo, "cannot read ", path.string());
  return ss.str();
}

nlohmann::json read_json(const fs::path& path) {
  const std::string text = read_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    TANDEM_FAIL(kInvalidArgument, path.string(), ": invalid JSON: ", e.what());
  }
}

// A special token in a config: "text", {"content": "text", ...}, or null/absent ("").
std::string token_string(const nlohmann::json& cfg, const char* key, const fs::path& path) {
  if (!cfg.contains(key) || cfg[key].is_null()) return "";
  const nlohmann::json& t = cfg[key];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content") && t["content"].is_string()) {
    return t["content"].get<std::string>();
  }
  TANDEM_FAIL(kInvalidArgument, path.string(), ": ", key,
              " must be a string or {\"content\": ...}");
}

// chat_template as a string, or a list of named templates ("default", else the first).
bool template_string(const nlohmann::json& cfg, const fs::path& path, std::string* out) {
  if (!cfg.contains("chat_template") || cfg["chat_template"].is_null()) return false;
  const nlohmann::json& t = cfg["chat_template"];
  if (t.is_string()) {
    *out = t.get<std::string>();
    return true;
  }
  if (t.is_array()) {
    const nlohmann::json* chosen = nullptr;
    for (const nlohmann::json& item : t) {
      TANDEM_REQUIRE(item.is_object() && item.contains("template") && item["template"].is_string(),
                     kInvalidArgument, path.string(),
                     ": chat_template list items must be {\"name\", \"template\"}");
      if (chosen == nullptr) chosen = &item;
      if (item.value("name", std::string()) == "default") {
        chosen = &item;
        break;
      }
    }
    if (chosen == nullptr) return false;
    *out = (*chosen)["template"].get<std::string>();
    return true;
  }
  TANDEM_FAIL(kInvalidArgument, path.string(), ": chat_template must be a string or a list");
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source, std::string bos_token, std::string eos_token)
    : source_(source), bos_token_(std::move(bos_token)), eos_token_(std::move(eos_token)) {
  program_ = std::make_shared<const std::vector<jinja::NodePtr>>(
      jinja::parse_template(jinja::tokenize(source_)));
}

const char* ChatTemplate::fallback_source() { return kChatMl; }

ChatTemplate ChatTemplate::from_model_dir(const fs::path& dir) {
  TANDEM_REQUIRE(fs::is_directory(dir), kNotFound, "model folder not found: ", dir.string());
  std::string bos;
  std::string eos;
  std::string source;
  bool found = false;
  fs::path origin;
  const fs::path cfg_path = dir / "tokenizer_config.json";
  if (fs::exists(cfg_path)) {
    const nlohmann::json cfg = read_json(cfg_path);
    TANDEM_REQUIRE(cfg.is_object(), kInvalidArgument, cfg_path.string(), ": not a JSON object");
    bos = token_string(cfg, "bos_token", cfg_path);
    eos = token_string(cfg, "eos_token", cfg_path);
    found = template_string(cfg, cfg_path, &source);
    origin = cfg_path;
  }
  if (!found && fs::exists(dir / "chat_template.jinja")) {
    origin = dir / "chat_template.jinja";
    source = read_file(origin);
    found = true;
  }
  if (!found && fs::exists(dir / "chat_template.json")) {
    origin = dir / "chat_template.json";
    const nlohmann::json j = read_json(origin);
    found = j.is_object() && template_string(j, origin, &source);
  }
  if (!found) {
    ChatTemplate t(kChatMl, bos, eos);
    t.fallback_ = true;
    return t;
  }
  try {
    return ChatTemplate(source, bos, eos);
  } catch (const Error& e) {
    TANDEM_FAIL(kInvalidArgument, origin.string(), ": ", e.what());
  }
}

template <typename Json>
std::string ChatTemplate::render_json(const Json& ctx) const {
  TANDEM_REQUIRE(ctx.is_object(), kInvalidArgument, "chat template context must be a JSON object");
  const jinja::Value root = jinja::Value::from_json(ctx);
  jinja::Object vars = root.object();
  if (vars.find("bos_token") == nullptr) {
    vars.set("bos_token", jinja::Value::from_string(bos_token_));
  }
  if (vars.find("eos_token") == nullptr) {
    vars.set("eos_token", jinja::Value::from_string(eos_token_));
  }
  return jinja::render(*program_, vars);
}

std::string ChatTemplate::render(const nlohmann::json& ctx) const { return render_json(ctx); }

std::string ChatTemplate::render(const nlohmann::ordered_json& ctx) const {
  return render_json(ctx);
}

}  // namespace tandem
