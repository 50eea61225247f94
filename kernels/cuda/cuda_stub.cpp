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

void DeviceBuffer::Free::operator()(void*) const {}
void MappedBuffer::Free::operator()(void*) const {}
DeviceBuffer::DeviceBuffer(DType, std::initializer_list<int64_t>) { no_cuda("DeviceBuffer"); }
DeviceBuffer DeviceBuffer::upload(const TensorView&) { no_cuda("DeviceBuffer"); }
MappedBuffer::MappedBuffer(DType, std::initializer_list<int64_t>) { no_cuda("MappedBuffer"); }
TensorView MappedBuffer::device_view() const { no_cuda("MappedBuffer"); }
void copy_to_host(const TensorView&, const TensorView&) { no_cuda("copy_to_host"); }
void fill_device_bytes(const TensorView&, uint8_t) { no_cuda("fill_device_bytes"); }
double measure_d2d_bandwidth_gbs(size_t) { no_cuda("measure_d2d_bandwidth_gbs"); }

}  // namespace tandem
