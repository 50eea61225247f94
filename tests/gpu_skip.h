// Catch listener of the GPU test programs: without a CUDA device it prints one line naming the
// program and the number of tests it skips, then exits 4 (ctest's SKIP_RETURN_CODE) before any
// test runs, so CI shows "Skipped" with a reason rather than a pass.
//
// It also keeps the CPU backend, these programs' f32 reference, on f32 arithmetic: on the
// avx512bf16 path its products with bf16 weights round activations to bf16 (kernels/cpu/isa.h),
// so TANDEM_CPU_ISA caps the path at avx512 (a CPU without AVX-512 uses avx2, saying so once on
// stderr), here and in the processes the tests start.
#pragma once

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "kernels/cuda/cuda_backend.h"

namespace tandem::test {

struct SkipWithoutGpu : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testRunStarting(Catch::TestRunInfo const& info) override {
    TestEventListenerBase::testRunStarting(info);
    // Before any kernel reads it (once). Not through kernels/cpu/isa.h: its namespace `cpu` would
    // make the tests' test::cpu() ambiguous.
    setenv("TANDEM_CPU_ISA", "avx512", 1);
    if (cuda_device_info().count > 0) return;
    const size_t n = Catch::getAllTestCasesSorted(*m_config).size();
    std::fprintf(stderr, "%s: no CUDA device: %zu GPU tests skipped\n",
                 program_invocation_short_name, n);
    std::fflush(stderr);
    std::exit(4);
  }
};

}  // namespace tandem::test
