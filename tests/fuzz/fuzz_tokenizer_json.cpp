// Fuzz target: the tokenizer.json loader (Tokenizer::from_json_text) on fuzzed JSON: model, vocab,
// merges, added tokens, normalizer / pre-tokenizer / post-processor / decoder objects and their
// regex patterns (compiled by PCRE2). The input is tokenizer.json text, optionally followed by a
// NUL byte and tokenizer_config.json text. A tokenizer that loads must then encode and decode a
// short fixed text (kInvalidArgument from a regex limit allowed) without a crash.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "engine/tokenizer/tokenizer.h"
#include "kernels/common.h"

// The harness is a function (tests/test_hostile_input.cpp runs the regression inputs through it
// in the plain build); the libFuzzer entry point is defined unless TANDEM_FUZZ_NO_ENTRY.
namespace tandem::fuzz_tokenizer_json {

int run(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t sep = in.find('\0');
  const std::string_view config = sep == std::string_view::npos ? "" : in.substr(sep + 1);
  try {
    const Tokenizer tok = Tokenizer::from_json_text(in.substr(0, sep), config);
    try {
      const auto ids = tok.encode("Hello, world! <s> 123  \n\t caf\xC3\xA9 \xF0\x9F\x98\x80 \xFF");
      (void)tok.decode(ids, false);
      (void)tok.decode(ids, true);
      StreamDecoder d(tok);
      for (int32_t id : ids) (void)d.push(id);
      (void)d.flush();
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kInvalidArgument) {
        std::fprintf(stderr, "encode of a loaded tokenizer failed: %s\n", e.what());
        std::abort();
      }
    }
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace tandem::fuzz_tokenizer_json

#ifndef TANDEM_FUZZ_NO_ENTRY
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tandem::fuzz_tokenizer_json::run(data, size);
}
#endif
