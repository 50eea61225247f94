// What the SIMT emulator (-DTANDEM_CUDA=EMULATE, kernels/cuda/emu/) tells the rest of the
// program: whether the CUDA backend is emulated, and its exact counters (kernel launches, bytes
// over the emulated PCIe each way, host synchronisations, bytes each kernel read and wrote in
// device and in mapped host memory). In a real CUDA build or one without CUDA,
// cuda_is_emulated() is false and the counters stay zero.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace tandem {

struct CudaKernelCounters {
  int64_t launches = 0, blocks = 0, threads = 0;
  int64_t device_read_bytes = 0, device_write_bytes = 0;
  int64_t mapped_read_bytes = 0, mapped_write_bytes = 0;
};

struct CudaEmulatorCounters {
  int64_t launches = 0;  // kernels, cuBLAS calls included (one each)
  int64_t copies = 0;    // cudaMemcpy / cudaMemcpyAsync calls that moved bytes, any direction
  int64_t h2d_bytes = 0, d2h_bytes = 0, d2d_bytes = 0, memset_bytes = 0;
  int64_t host_syncs = 0;  // calls that blocked the host on the device (sync, sync copy, free)
  double host_sync_seconds = 0.0;
  int64_t kernel_device_read_bytes = 0, kernel_device_write_bytes = 0;
  int64_t kernel_mapped_read_bytes = 0, kernel_mapped_write_bytes = 0;
  int64_t cublas_calls = 0, cublas_bytes = 0;
  double cublas_flops = 0.0;
  std::map<std::string, CudaKernelCounters> kernels;  // by kernel name
};

bool cuda_is_emulated();
// Since the start or the last reset; waits for nothing (call after a synchronize).
CudaEmulatorCounters cuda_emulator_counters();
void cuda_emulator_reset_counters();
// b - a, field by field (kernels too).
CudaEmulatorCounters operator-(const CudaEmulatorCounters& b, const CudaEmulatorCounters& a);
// The emulator's settings in one line ("" when not emulated).
std::string cuda_emulator_settings();

}  // namespace tandem
