// What the OpenAI codec tests (test_openai_*) share: the tokenizer and template of
// models/tandem-demo, the ChatML fallback template, and a ModelInfo over them.
#pragma once

#include <string>

#include "engine/tokenizer/tokenizer.h"
#include "server/chat_template.h"
#include "server/openai_codec.h"
#include "tests/test_helpers.h"

namespace tandem::test {

inline const Tokenizer& demo_tok() {
  static const Tokenizer t = Tokenizer::load(repo_path("models/tandem-demo"));
  return t;
}

inline const ChatTemplate& demo_template() {
  static const ChatTemplate t = ChatTemplate::from_model_dir(repo_path("models/tandem-demo"));
  return t;
}

inline const ChatTemplate& chatml() {
  static const ChatTemplate t(ChatTemplate::fallback_source());
  return t;
}

// tandem-demo's tokenizer with `tmpl` (ChatML by default), served as `name`.
inline openai::ModelInfo codec_model(int32_t max_len = 1024,
                                     const std::string& name = "tandem-demo",
                                     const ChatTemplate& tmpl = chatml()) {
  openai::ModelInfo m;
  m.tokenizer = &demo_tok();
  m.chat_template = &tmpl;
  m.max_model_len = max_len;
  m.served_name = name;
  return m;
}

}  // namespace tandem::test
