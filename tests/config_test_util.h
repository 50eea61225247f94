// Helpers of the config tests: scratch model folders, config.json rewrites, raw safetensors
// reading and writing, and one forward pass's logits.
#pragma once

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "models/model.h"
#include "models/random_model.h"

namespace tandem::test {

using json = nlohmann::json;

// A fresh temporary folder, removed at scope exit.
struct ScratchDir {
  std::filesystem::path dir;
  ScratchDir() {
    static std::mt19937_64 rng(std::random_device{}());
    dir = std::filesystem::temp_directory_path() / ("tandem-config-" + std::to_string(rng()));
    std::filesystem::create_directories(dir);
  }
  ~ScratchDir() { std::filesystem::remove_all(dir); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
};

inline json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}
inline void write_json(const std::filesystem::path& p, const json& j) {
  std::ofstream(p, std::ios::trunc) << j.dump(2) << "\n";
}

// The error message of load_config(dir) and its kind; empty message when it loaded.
struct LoadResult {
  std::string message;
  ErrorKind kind = ErrorKind::kInternal;
};
inline LoadResult config_error(const std::filesystem::path& dir) {
  try {
    load_config(dir);
  } catch (const Error& e) {
    return {e.what(), e.kind()};
  }
  return {};
}

// Every tensor of an all-F32 single-file checkpoint, by name: shape and values.
struct RawTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};
inline std::map<std::string, RawTensor> read_f32_tensors(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  uint64_t len = 0;
  in.read(reinterpret_cast<char*>(&len), 8);
  std::string h(len, ' ');
  in.read(h.data(), static_cast<std::streamsize>(len));
  const json header = json::parse(h);
  std::map<std::string, RawTensor> out;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    REQUIRE(e["dtype"] == "F32");
    RawTensor& t = out[name];
    t.shape = e["shape"].get<std::vector<int64_t>>();
    const auto off = e["data_offsets"].get<std::vector<uint64_t>>();
    t.values.resize((off[1] - off[0]) / 4);
    in.seekg(static_cast<std::streamoff>(8 + len + off[0]));
    in.read(reinterpret_cast<char*>(t.values.data()),
            static_cast<std::streamsize>(off[1] - off[0]));
    REQUIRE(in);
  }
  return out;
}
inline void write_f32_tensors(const std::filesystem::path& file,
                              const std::map<std::string, RawTensor>& tensors) {
  std::vector<TensorSpec> specs;
  std::vector<const RawTensor*> order;
  for (const auto& [name, t] : tensors) {
    specs.push_back({name, t.shape});
    order.push_back(&t);
  }
  write_safetensors(file, DType::kF32, specs,
                    [&](size_t i, std::vector<float>& v) { v = order[i]->values; });
}

// Logits of every position of one prefill of tokens, copied out.
inline std::vector<float> prefill_logits(const std::filesystem::path& dir,
                                         const std::vector<int32_t>& tokens) {
  auto backend = make_cpu_backend();
  auto model = Model::load(dir, *backend);
  auto kv = model->new_dense_kv(static_cast<int32_t>(tokens.size()) + 1);
  const StepSequence s{kv.get(), tokens, true};
  const TensorView l = model->forward(std::span<const StepSequence>(&s, 1));
  return std::vector<float>(l.as<float>(), l.as<float>() + l.numel());
}

inline bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace tandem::test
