// Fuzz target: JSON Schema -> grammar (engine/grammar/json_schema.*), then the byte matcher and
// the token mask on it. The input is schema text, optionally followed by a NUL byte and bytes
// that steer a short generation: at each step the allowed token of a small vocabulary (every
// single byte plus a few multi-byte strings) picked by the next steering byte is accepted.
// Compile errors (tandem::Error) are fine; a token the mask allows must be accepted and must
// leave a state that is complete or can go on, and the drawn text must be accepted as a prefix.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "engine/grammar/json_schema.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/token_mask.h"
#include "kernels/common.h"

// The harness is a function (a plain build can replay inputs through it); the libFuzzer entry
// point is defined unless TANDEM_FUZZ_NO_ENTRY.
namespace tandem::fuzz_json_schema {

const std::shared_ptr<const grammar::TokenVocab>& vocab() {
  static const auto v = [] {
    std::vector<std::string> bytes;
    for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
    for (const char* s : {"\":", "\",\"", "true", "null", "\xC3\xA9", "{\"", "\"}", "12", "],"})
      bytes.emplace_back(s);
    return grammar::TokenVocab::from_bytes(std::move(bytes));
  }();
  return v;
}

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "%s\n", what);
  std::abort();
}

int run(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t sep = in.find('\0');
  const std::string_view steer = sep == std::string_view::npos ? "" : in.substr(sep + 1);
  std::shared_ptr<const grammar::Grammar> g;
  try {
    g = grammar::compile_json_schema_text(in.substr(0, sep));
  } catch (const Error&) {
    return 0;
  }
  try {
    grammar::GrammarMatcher m(g, vocab());
    std::string text;
    for (size_t step = 0; step < 64 && step < steer.size() + 16; ++step) {
      const std::vector<uint64_t>& bits = m.allowed();
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < vocab()->size(); ++t)
        if ((bits[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1) allowed.push_back(t);
      if (allowed.empty()) {
        if (!m.complete()) finding("no token allowed in a state that is not complete");
        break;
      }
      const uint8_t pick = step < steer.size() ? static_cast<uint8_t>(steer[step]) : 0;
      const int32_t t = allowed[pick % allowed.size()];
      if (!m.accept(t)) finding("an allowed token was refused");
      if (m.dead()) finding("an allowed token led to a dead state");
      text += vocab()->bytes(t);
    }
    if (!grammar::accepts_prefix(*g, text)) finding("the drawn text is not a prefix");
  } catch (const Error&) {
    // The matcher's bounds (too ambiguous) are errors, not findings.
  }
  return 0;
}

}  // namespace tandem::fuzz_json_schema

#ifndef TANDEM_FUZZ_NO_ENTRY
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tandem::fuzz_json_schema::run(data, size);
}
#endif
