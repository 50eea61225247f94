// Parsing of the kv flags.
#include "server/kv_flags.h"

#include "kernels/common.h"
#include "kernels/cuda/cuda_backend.h"

namespace tandem {

const std::set<std::string>& kv_value_flags() {
  static const std::set<std::string> s = {"sinks",     "window",      "block",    "sparse",
                                          "hgca-beta", "topk-blocks", "cpu-attn", "cpu-threads",
                                          "device",    "maw-alpha",   "kv-dtype", "device-check"};
  return s;
}

const std::set<std::string>& kv_bool_flags() {
  static const std::set<std::string> s = {"dense"};
  return s;
}

KvConfig parse_kv_flags(const Flags& f) {
  KvConfig c;
  c.dense = f.flag("dense");
  c.sinks = static_cast<int32_t>(f.integer("sinks", c.sinks, 0, 4096));
  c.window = static_cast<int32_t>(f.integer("window", c.window, 0, 1 << 24));
  c.block = static_cast<int32_t>(f.integer("block", c.block, 1, 4096));
  const std::string sparse = f.str("sparse", "hgca");
  if (sparse == "full")
    c.sparse = SparsePolicy::kFull;
  else if (sparse == "hgca")
    c.sparse = SparsePolicy::kHgca;
  else if (sparse == "topk")
    c.sparse = SparsePolicy::kTopk;
  else
    TANDEM_FAIL(kInvalidArgument, "--sparse must be full, hgca or topk, got \"", sparse, "\"");
  c.hgca_beta = static_cast<float>(f.number("hgca-beta", c.hgca_beta, 1e-6, 1e6));
  c.topk_blocks = static_cast<int32_t>(f.integer("topk-blocks", c.topk_blocks, 0, 1 << 24));
  const std::string mode = f.str("cpu-attn", "ahead");
  if (mode == "parallel")
    c.cpu_attn = CpuAttnMode::kParallel;
  else if (mode == "ahead")
    c.cpu_attn = CpuAttnMode::kAhead;
  else if (mode == "ahead-oracle")
    c.cpu_attn = CpuAttnMode::kAheadOracle;
  else
    TANDEM_FAIL(kInvalidArgument, "--cpu-attn must be parallel or ahead, got \"", mode, "\"");
  c.cpu_threads = static_cast<int32_t>(f.integer("cpu-threads", 0, 0, 4096));
  c.maw_alpha = static_cast<float>(f.number("maw-alpha", c.maw_alpha, 1e-6, 1.0));
  const std::string kv_dtype = f.str("kv-dtype", "f32");
  if (kv_dtype == "f32")
    c.kv_dtype = DType::kF32;
  else if (kv_dtype == "bf16")
    c.kv_dtype = DType::kBF16;
  else if (kv_dtype == "f16")
    c.kv_dtype = DType::kF16;
  else
    TANDEM_FAIL(kInvalidArgument, "--kv-dtype must be f32, bf16 or f16, got \"", kv_dtype, "\"");
  c.validate();
  return c;
}

std::unique_ptr<Backend> make_backend(const Flags& f) {
  const std::string device = f.str("device", "auto");
  TANDEM_REQUIRE(device == "cpu" || device == "cuda" || device == "auto", kInvalidArgument,
                 "--device must be cpu, cuda or auto, got \"", device, "\"");
  if (device == "cpu") return make_cpu_backend();
  const CudaDeviceInfo info = cuda_device_info();  // count 0 in a build without CUDA
  if (device == "auto")
    // The SIMT emulator is a GPU for tests and counters, far slower than the CPU backend: only
    // an explicit --device cuda picks it.
    return info.count > 0 && info.runs_kernels && !info.emulated ? make_cuda_backend()
                                                                 : make_cpu_backend();
#ifdef TANDEM_HAVE_CUDA
  constexpr bool kBuiltWithCuda = true;
#else
  constexpr bool kBuiltWithCuda = false;
#endif
  TANDEM_REQUIRE(kBuiltWithCuda, kUnsupported,
                 "--device cuda: this build has no CUDA support (use --device cpu)");
  TANDEM_REQUIRE(info.count > 0, kUnsupported,
                 "--device cuda: no CUDA device is visible (use --device cpu)");
  return make_cuda_backend();  // throws, one line, where the device cannot run the kernels
}

}  // namespace tandem
