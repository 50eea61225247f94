// kernels/cuda/emulator.h: the parts every build has. Without the emulator (real CUDA or no
// CUDA) nothing is emulated and the counters stay zero; the emulated build defines those four
// functions in kernels/cuda/emu/runtime_device.cpp.
#include "kernels/cuda/emulator.h"

namespace tandem {

#ifndef TANDEM_CUDA_EMULATE
bool cuda_is_emulated() { return false; }
CudaEmulatorCounters cuda_emulator_counters() { return {}; }
void cuda_emulator_reset_counters() {}
std::string cuda_emulator_settings() { return {}; }
#endif

CudaEmulatorCounters operator-(const CudaEmulatorCounters& b, const CudaEmulatorCounters& a) {
  CudaEmulatorCounters d = b;
  d.launches -= a.launches;
  d.copies -= a.copies;
  d.h2d_bytes -= a.h2d_bytes;
  d.d2h_bytes -= a.d2h_bytes;
  d.d2d_bytes -= a.d2d_bytes;
  d.memset_bytes -= a.memset_bytes;
  d.host_syncs -= a.host_syncs;
  d.host_sync_seconds -= a.host_sync_seconds;
  d.kernel_device_read_bytes -= a.kernel_device_read_bytes;
  d.kernel_device_write_bytes -= a.kernel_device_write_bytes;
  d.kernel_mapped_read_bytes -= a.kernel_mapped_read_bytes;
  d.kernel_mapped_write_bytes -= a.kernel_mapped_write_bytes;
  d.cublas_calls -= a.cublas_calls;
  d.cublas_bytes -= a.cublas_bytes;
  d.cublas_flops -= a.cublas_flops;
  for (const auto& [name, k] : a.kernels) {
    CudaKernelCounters& o = d.kernels[name];
    o.launches -= k.launches;
    o.blocks -= k.blocks;
    o.threads -= k.threads;
    o.device_read_bytes -= k.device_read_bytes;
    o.device_write_bytes -= k.device_write_bytes;
    o.mapped_read_bytes -= k.mapped_read_bytes;
    o.mapped_write_bytes -= k.mapped_write_bytes;
  }
  for (auto it = d.kernels.begin(); it != d.kernels.end();)
    it = it->second.launches == 0 ? d.kernels.erase(it) : std::next(it);
  return d;
}

}  // namespace tandem
