// Shared test helpers: fixture paths, reference-logit files, error measures.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tandem::test {

// Tests run with the repository root as working directory; ../shared sits beside it. The
// TANDEM_SOURCE_DIR environment variable overrides the checkout compiled in (binaries staged to
// another machine, scripts/gpu_check.sh --prebuilt).
inline std::filesystem::path repo_path(const std::string& rel) {
  const char* env = std::getenv("TANDEM_SOURCE_DIR");
  return std::filesystem::path(env != nullptr && *env != '\0' ? env : TANDEM_SOURCE_DIR) / rel;
}

// max |got - ref| / max |ref| over a row: a relative error that does not blow up near zero.
inline double rel_error(const float* got, const float* ref, int64_t n) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - ref[i]));
    scale = std::max(scale, std::abs(static_cast<double>(ref[i])));
  }
  return diff / std::max(scale, 1e-30);
}

// Reference logits written by scripts/gen_reference_logits.py.
struct ReferenceLogits {
  std::filesystem::path model;
  std::vector<int32_t> prompt, decode;
  int64_t vocab = 0, rows = 0;
  std::vector<float> logits;  // [rows, vocab]

  const float* row(int64_t r) const { return logits.data() + r * vocab; }

  static ReferenceLogits load(const std::string& name) {
    const auto dir = repo_path("tests/fixtures/logits");
    std::ifstream in(dir / (name + ".json"));
    const auto j = nlohmann::json::parse(in);
    ReferenceLogits r;
    r.model = repo_path(j["model"].get<std::string>());
    r.prompt = j["prompt_ids"].get<std::vector<int32_t>>();
    r.decode = j["decode_ids"].get<std::vector<int32_t>>();
    r.vocab = j["vocab"].get<int64_t>();
    r.rows = j["rows"].get<int64_t>();
    r.logits.resize(static_cast<size_t>(r.rows * r.vocab));
    std::ifstream bin(dir / j["file"].get<std::string>(), std::ios::binary);
    bin.read(reinterpret_cast<char*>(r.logits.data()),
             static_cast<std::streamsize>(r.logits.size() * sizeof(float)));
    if (!bin) throw std::runtime_error("short reference file for " + name);
    return r;
  }
};

}  // namespace tandem::test
