// Catch listener of the GPU test programs: without a CUDA device it prints one line naming the
// program and the number of tests it skips, then exits 4 (ctest's SKIP_RETURN_CODE) before any
// test runs, so CI shows "Skipped" with a reason rather than a pass.
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
    if (cuda_device_info().count > 0) return;
    const size_t n = Catch::getAllTestCasesSorted(*m_config).size();
    std::fprintf(stderr, "%s: no CUDA device: %zu GPU tests skipped\n",
                 program_invocation_short_name, n);
    std::fflush(stderr);
    std::exit(4);
  }
};

}  // namespace tandem::test
