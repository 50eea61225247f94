// Fuzz target: the safetensors header parser and the model.safetensors.index.json parser
// (models/safetensors.*). Input byte 0 even: the rest is a whole safetensors file (8-byte
// little-endian header length, JSON header, data), parsed as TensorStore does; the entries that
// come back must point inside the data. Odd: the rest is index JSON. tandem::Error is fine.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "kernels/common.h"
#include "models/safetensors.h"

// The harness is a function (tests/test_hostile_input.cpp runs the regression inputs through it
// in the plain build); the libFuzzer entry point is defined unless TANDEM_FUZZ_NO_ENTRY.
namespace tandem::fuzz_safetensors {

int run(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t* file = data + 1;
  const size_t n = size - 1;
  try {
    if (data[0] % 2 == 0) {
      const SafetensorsHeader h = parse_safetensors(file, n, "fuzz.safetensors");
      for (const auto& [name, e] : h.tensors) {
        const auto* p = static_cast<const uint8_t*>(e.data);
        if (p < file + 8 || p > file + n) {
          std::fprintf(stderr, "tensor %s points outside the file\n", name.c_str());
          std::abort();
        }
      }
    } else {
      (void)parse_safetensors_index(std::string_view(reinterpret_cast<const char*>(file), n),
                                    "model.safetensors.index.json");
    }
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace tandem::fuzz_safetensors

#ifndef TANDEM_FUZZ_NO_ENTRY
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tandem::fuzz_safetensors::run(data, size);
}
#endif
