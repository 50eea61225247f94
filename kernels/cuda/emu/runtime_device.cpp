// The emulated device: one device with an H100 SXM's properties, the settings read from the
// environment (kernels/cuda/emu/README.md), and the counters of kernels/cuda/emulator.h.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <string>

#include "kernels/cuda/emu/runtime_internal.h"
#include "kernels/cuda/emulator.h"

namespace tandem_emu {

// ---- settings ----------------------------------------------------------------------------------

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::kForward:
      return "forward";
    case Schedule::kReverse:
      return "reverse";
    default:
      return "random";
  }
}

Settings& settings() {
  static Settings s = [] {
    Settings v;
    if (const char* e = std::getenv("TANDEM_EMU_DEVICE_GIB"); e != nullptr && *e != '\0')
      v.device_bytes = static_cast<size_t>(std::max(1.0 / 1024, std::atof(e)) * double(1 << 30));
    if (const char* e = std::getenv("TANDEM_EMU_SCHEDULE"); e != nullptr && *e != '\0') {
      const std::string sch = e;
      if (sch == "reverse") {
        v.schedule = Schedule::kReverse;
      } else if (sch.rfind("random", 0) == 0) {
        v.schedule = Schedule::kRandom;
        if (sch.size() > 7) v.seed = std::strtoull(sch.c_str() + 7, nullptr, 10);
      } else if (sch != "forward") {
        report("TANDEM_EMU_SCHEDULE=" + sch + ": expected forward, reverse or random[:SEED]");
        std::exit(2);
      }
    }
    if (const char* e = std::getenv("TANDEM_EMU_RACECHECK"); e != nullptr)
      v.racecheck = std::string(e) == "1";
    if (const char* e = std::getenv("TANDEM_EMU_PROTECT"); e != nullptr)
      v.protect = std::string(e) != "0";
    if (const char* e = std::getenv("TANDEM_EMU_DEFER"); e != nullptr)
      v.defer = std::string(e) == "1";
    return v;
  }();
  return s;
}

// ---- counters ----------------------------------------------------------------------------------

Counters& counters() {
  static Counters* c = new Counters;
  return *c;
}

void add_kernel_counters(const std::string& name, const KernelCounters& k) {
  Counters& c = counters();
  std::lock_guard<std::mutex> l(c.m);
  KernelCounters& t = c.kernels[name];
  t.launches += k.launches;
  t.blocks += k.blocks;
  t.threads += k.threads;
  t.device_read += k.device_read;
  t.device_write += k.device_write;
  t.mapped_read += k.mapped_read;
  t.mapped_write += k.mapped_write;
}

}  // namespace tandem_emu

using namespace tandem_emu;

// ---- the runtime API ---------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : ret(cudaErrorInvalidValue);
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return ret(cudaErrorInvalidValue);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "Tandem SIMT emulator (H100 SXM properties)");
  prop->totalGlobalMem = settings().device_bytes;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->sharedMemPerMultiprocessor = 228 * 1024;
  prop->sharedMemPerBlockOptin = 227 * 1024;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->l2CacheSize = 50 * 1024 * 1024;
  prop->memoryBusWidth = 5120;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return ret(cudaErrorInvalidValue);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
      *value = p.maxThreadsPerBlock;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = static_cast<int>(p.sharedMemPerBlock);
      break;
    case cudaDevAttrWarpSize:
      *value = p.warpSize;
      break;
    case cudaDevAttrMultiProcessorCount:
      *value = p.multiProcessorCount;
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *value = p.major;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = p.minor;
      break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
      *value = static_cast<int>(p.sharedMemPerMultiprocessor);
      break;
    default:
      return ret(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}
// ---- kernels/cuda/emulator.h -------------------------------------------------------------------

namespace tandem {

bool cuda_is_emulated() { return true; }

CudaEmulatorCounters cuda_emulator_counters() {
  Counters& c = counters();
  CudaEmulatorCounters out;
  out.launches = c.launches.load();
  out.copies = c.copies.load();
  out.h2d_bytes = c.h2d.load();
  out.d2h_bytes = c.d2h.load();
  out.d2d_bytes = c.d2d.load();
  out.memset_bytes = c.memset.load();
  out.host_syncs = c.host_syncs.load();
  out.host_sync_seconds = static_cast<double>(c.host_sync_ns.load()) * 1e-9;
  out.cublas_calls = c.cublas_calls.load();
  out.cublas_bytes = c.cublas_bytes.load();
  out.cublas_flops = c.cublas_flops.load();
  std::lock_guard<std::mutex> l(c.m);
  for (const auto& [name, k] : c.kernels) {
    CudaKernelCounters& o = out.kernels[name];
    o.launches = k.launches;
    o.blocks = k.blocks;
    o.threads = k.threads;
    o.device_read_bytes = k.device_read;
    o.device_write_bytes = k.device_write;
    o.mapped_read_bytes = k.mapped_read;
    o.mapped_write_bytes = k.mapped_write;
    out.kernel_device_read_bytes += k.device_read;
    out.kernel_device_write_bytes += k.device_write;
    out.kernel_mapped_read_bytes += k.mapped_read;
    out.kernel_mapped_write_bytes += k.mapped_write;
  }
  return out;
}

void cuda_emulator_reset_counters() {
  Counters& c = counters();
  for (auto* a : {&c.launches, &c.copies, &c.h2d, &c.d2h, &c.d2d, &c.memset, &c.host_syncs,
                  &c.host_sync_ns, &c.cublas_calls, &c.cublas_bytes})
    a->store(0);
  c.cublas_flops.store(0.0);
  std::lock_guard<std::mutex> l(c.m);
  c.kernels.clear();
}

std::string cuda_emulator_settings() {
  const Settings& s = settings();
  std::ostringstream os;
  os << "SIMT emulator: " << (s.device_bytes >> 20) << " MiB device, schedule "
     << schedule_name(s.schedule);
  if (s.schedule == Schedule::kRandom) os << " (seed " << s.seed << ")";
  os << ", racecheck " << (s.racecheck ? "on" : "off") << ", host access to device memory "
     << (s.protect ? "faults" : "allowed") << ", streams " << (s.defer ? "deferred" : "eager");
  return os.str();
}

}  // namespace tandem
