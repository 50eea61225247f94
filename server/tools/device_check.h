// A guard for the GPU path while it is young: before serving from a CUDA backend, the model's
// forward pass there is compared with the same checkpoint on the CPU backend over a short fixed
// sequence, and `--device auto` falls back to the CPU when they disagree.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "kernels/backend.h"
#include "models/model.h"
#include "server/options.h"

namespace tandem {

// The worst relative logit difference (per row: max |a - b| / max |b|) between `model` and the
// same checkpoint loaded on the CPU backend, over a 5-token prompt (one chunk, every row's
// logits) and 3 decode steps with a dense cache. Rows of at most 5 tokens keep every matrix
// product on the f32-activation path of the CUDA backend.
double compare_with_cpu(Model& model);

// Largest difference compare_with_cpu accepts: far above the rounding of a correct backend
// (test_cuda_model expects 1e-3 on 2-layer models), far below what a broken kernel produces.
inline constexpr double kDeviceCheckTolerance = 2e-2;

struct LoadedModel {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
};

// Loads dir on `backend`; when `check` is set and the backend is not the CPU's, runs
// compare_with_cpu. On a difference above kDeviceCheckTolerance or an error: with `fallback`
// calls warn(reason) and returns the model on the CPU backend, else throws kInternal.
// `memory`: where the weights live on the CPU backend (Model::load; also for the fallback).
LoadedModel load_checked(std::unique_ptr<Backend> backend, const std::string& dir, bool check,
                         bool fallback, const std::function<void(const std::string&)>& warn,
                         WeightMemory memory = WeightMemory::kMap);

// The backend of --device (make_backend) and the model on it, checked per --device-check:
// auto (default) checks when --device is auto and falls back to the CPU; on checks for --device
// cuda too and fails there; off never checks. --weight-memory places the weights on the CPU.
LoadedModel load_model(const Options& o, const std::string& dir,
                       const std::function<void(const std::string&)>& warn);

}  // namespace tandem
