// Random-weight checkpoints with the shape of real models, for throughput measurements, and a
// streaming safetensors writer. The weights are noise: only the shapes and bytes are real.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "kernels/dtype.h"

namespace tandem {

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};

// Writes a safetensors file whose tensors (all of dtype) are produced by fill(index, out floats)
// one at a time, so files larger than memory are fine.
void write_safetensors(const std::filesystem::path& path, DType dtype,
                       const std::vector<TensorSpec>& tensors,
                       const std::function<void(size_t, std::vector<float>&)>& fill);

// Known shapes: "llama-3.2-1b", "llama-3-8b", "llama-3.1-8b" (the 8B shape with a 128K context),
// "tiny", "tiny-d128" (tiny with head_dim 128). Writes config.json, generation_config.json
// and model.safetensors into out (created). Deterministic for a seed.
void make_random_model(const std::string& shape, DType dtype, const std::filesystem::path& out,
                       uint64_t seed = 1);

}  // namespace tandem
