// Fuzz target: config.json (+ generation_config.json) parsing, RoPE tables included
// (models/config.*). The input is config.json text, optionally followed by a NUL byte and
// generation_config.json text. A config that loads must describe a model that can be built:
// positive sizes and a RoPE table of the rotary dimension. tandem::Error is fine.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "kernels/common.h"
#include "models/config.h"

// The harness is a function (tests/test_hostile_input.cpp runs the regression inputs through it
// in the plain build); the libFuzzer entry point is defined unless TANDEM_FUZZ_NO_ENTRY.
namespace tandem::fuzz_config {

int run(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t sep = in.find('\0');
  const std::string_view gen = sep == std::string_view::npos ? "" : in.substr(sep + 1);
  try {
    const ModelConfig c = parse_config(in.substr(0, sep), gen);
    if (c.hidden <= 0 || c.n_layer <= 0 || c.n_head_q <= 0 || c.n_head_kv <= 0 || c.head_dim <= 0 ||
        c.vocab_size <= 0 || c.max_context <= 0) {
      std::fprintf(stderr, "a config loaded with a non-positive size\n");
      std::abort();
    }
    (void)c.n_params();
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace tandem::fuzz_config

#ifndef TANDEM_FUZZ_NO_ENTRY
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tandem::fuzz_config::run(data, size);
}
#endif
