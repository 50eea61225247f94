// The CUDA entry points of a build without CUDA (TANDEM_CUDA=OFF or no nvcc): no device is
// visible, and everything that would need one throws kUnsupported.
#include "kernels/common.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_memory.h"

namespace tandem {
namespace {

[[noreturn]] void no_cuda(const char* what) {
  TANDEM_FAIL(kUnsupported, what, ": this build has no CUDA support (rebuild with nvcc present)");
}

}  // namespace

CudaDeviceInfo cuda_device_info() { return {}; }
std::unique_ptr<Backend> make_cuda_backend() { no_cuda("the CUDA backend"); }

Allocator cuda_device_memory() { no_cuda("cuda_device_memory"); }
Allocator cuda_mapped_memory() { no_cuda("cuda_mapped_memory"); }
TensorView device_alias(const TensorView&) { no_cuda("device_alias"); }
Buffer upload_to_device(const TensorView&) { no_cuda("upload_to_device"); }
void copy_to_host(const TensorView&, const TensorView&) { no_cuda("copy_to_host"); }
void fill_device_bytes(const TensorView&, uint8_t) { no_cuda("fill_device_bytes"); }
double measure_d2d_bandwidth_gbs(size_t) { no_cuda("measure_d2d_bandwidth_gbs"); }

}  // namespace tandem
