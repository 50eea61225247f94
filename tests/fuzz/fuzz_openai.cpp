// Fuzz target: the OpenAI request codec. The input is a request body (its first byte picks the
// endpoint: even = /v1/chat/completions, odd = /v1/completions); it goes through the path the HTTP
// handler runs before the engine: parse_request, plan_request (chat template + tokenizer of
// models/tandem-demo, loaded once) and the response encoder's first frames. Any outcome is fine
// except a crash, a sanitizer report, a hang or an unbounded allocation; an error must be an
// ApiError with a 4xx status (a 5xx would mean the input reached a bug).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <variant>

#include "engine/tokenizer/tokenizer.h"
#include "server/chat_template.h"
#include "server/openai_codec.h"

// The harness is a function (tests/test_hostile_input.cpp runs the regression inputs through it
// in the plain build); the libFuzzer entry point is defined unless TANDEM_FUZZ_NO_ENTRY.
namespace tandem::fuzz_openai {

using namespace ::tandem::openai;

struct Model {
  Tokenizer tokenizer = Tokenizer::load(TANDEM_SOURCE_DIR "/models/tandem-demo");
  ChatTemplate chat_template =
      ChatTemplate::from_model_dir(TANDEM_SOURCE_DIR "/models/tandem-demo");
  ModelInfo info() const {
    ModelInfo m;
    m.tokenizer = &tokenizer;
    m.chat_template = &chat_template;
    m.max_model_len = 1024;
    m.served_name = "tandem-demo";
    return m;
  }
};

void check_status(const ApiError& e) {
  if (e.status < 400 || e.status >= 500) {
    std::fprintf(stderr, "status %d for a bad request: %s\n", e.status, e.message.c_str());
    std::abort();
  }
}

int run(const uint8_t* data, size_t size) {
  static const Model model;
  if (size == 0) return 0;
  const Endpoint endpoint = data[0] % 2 == 0 ? Endpoint::kChat : Endpoint::kCompletions;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto parsed = parse_request(endpoint, body, SamplingParams{});
  if (auto* e = std::get_if<ApiError>(&parsed)) {
    check_status(*e);
    (void)error_json(*e);
    return 0;
  }
  const ApiRequest& req = std::get<ApiRequest>(parsed);
  auto planned = plan_request(req, model.info());
  if (auto* e = std::get_if<ApiError>(&planned)) {
    if (e->status != 404) check_status(*e);
    (void)error_json(*e);
    return 0;
  }
  const Plan& plan = std::get<Plan>(planned);
  ResponseEncoder enc(req, plan, "id", 0, "tandem-demo");
  if (req.stream) (void)enc.sse_start();
  return 0;
}

}  // namespace tandem::fuzz_openai

#ifndef TANDEM_FUZZ_NO_ENTRY
// Loads the models before the first input: libFuzzer's per-input timeout does not apply here.
extern "C" int LLVMFuzzerInitialize(int*, char***) { return tandem::fuzz_openai::run(nullptr, 0); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tandem::fuzz_openai::run(data, size);
}
#endif
