// Fuzz target: real chat templates rendered with fuzzed requests through server/chat_template.*.
// The templates: the bundled models' (models/tandem-demo, models/tandem-long), the ChatML
// fallback, and the real templates of tests/fixtures/templates/ (Llama 2/3/3.1, Qwen 2/2.5/3,
// Gemma, DeepSeek V3, Mistral, Phi-3, Zephyr), loaded once. The input's first byte picks one;
// the rest is a chat request body, validated by parse_request and turned into the template
// context exactly as plan_request does. A tandem::Error (raise_exception, a limit) is fine.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kernels/common.h"
#include "server/chat_template.h"
#include "server/openai_codec.h"

// The harness is a function (tests/test_hostile_input.cpp runs the regression inputs through it
// in the plain build); the libFuzzer entry point is defined unless TANDEM_FUZZ_NO_ENTRY.
namespace tandem::fuzz_chat_template {

using ojson = nlohmann::ordered_json;

std::vector<ChatTemplate> load_templates() {
  const std::string root = TANDEM_SOURCE_DIR;
  std::vector<ChatTemplate> out;
  out.push_back(ChatTemplate::from_model_dir(root + "/models/tandem-demo"));
  out.push_back(ChatTemplate::from_model_dir(root + "/models/tandem-long"));
  out.emplace_back(ChatTemplate::fallback_source(), "<s>", "</s>");
  for (const char* name :
       {"llama2", "llama3", "llama3_1_tools", "qwen2", "qwen2_5", "qwen3", "gemma", "gemma3",
        "deepseek_v3", "mistral_v0_1", "mistral_v0_3_tools", "phi3", "zephyr"}) {
    std::ifstream in(root + "/tests/fixtures/templates/" + name + ".json");
    std::stringstream text;
    text << in.rdbuf();
    const nlohmann::json j = nlohmann::json::parse(text.str());
    out.emplace_back(j["template"].get<std::string>(), j.value("bos_token", ""),
                     j.value("eos_token", ""));
  }
  return out;
}

int run(const uint8_t* data, size_t size) {
  static const std::vector<ChatTemplate> templates = load_templates();
  if (size == 0) return 0;
  const ChatTemplate& tmpl = templates[data[0] % templates.size()];
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto parsed = openai::parse_request(openai::Endpoint::kChat, body, SamplingParams{});
  if (std::holds_alternative<openai::ApiError>(parsed)) return 0;
  const openai::ApiRequest& req = std::get<openai::ApiRequest>(parsed);
  ojson ctx = req.template_kwargs;
  ctx["messages"] = req.messages;
  ctx["add_generation_prompt"] = req.add_generation_prompt;
  if (!req.tools.is_null()) ctx["tools"] = req.tools;
  try {
    (void)tmpl.render(ctx);
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace tandem::fuzz_chat_template

#ifndef TANDEM_FUZZ_NO_ENTRY
// Loads the models before the first input: libFuzzer's per-input timeout does not apply here.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  return tandem::fuzz_chat_template::run(nullptr, 0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tandem::fuzz_chat_template::run(data, size);
}
#endif
