// make_cpu_backend(): the factory for the CPU reference backend. The op bodies live in gemm.cpp,
// norm.cpp, rope.cpp, elementwise.cpp and attention.cpp; shared helpers in simd.h.
#include "kernels/cpu/cpu_backend.h"

namespace tandem {

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace tandem
