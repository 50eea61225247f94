// The emulator's errors, with CUDA's split: a kernel fault is sticky (every later call returns
// it, the context is unusable), a bad call is not (cudaGetLastError returns it once). And the
// SIGSEGV/SIGBUS reporter that names what the host touched: device memory outside a copy or
// kernel, a fiber stack's guard page, or pinned memory a cudaMemcpyAsync is still writing.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "kernels/cuda/emu/runtime_internal.h"

namespace tandem_emu {
namespace {

std::atomic<int> g_sticky{cudaSuccess};
thread_local cudaError_t t_last = cudaSuccess;

struct sigaction g_prev_segv, g_prev_bus;

void on_fault(int sig, siginfo_t* si, void* uc) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(si->si_addr);
  const char* what = nullptr;
  if (in_device_range(a))
    what = "the host touched device memory outside a copy or kernel (use cudaMemcpy)";
  else if (is_stack_guard(a))
    what = "a CUDA thread overflowed its stack";
  else if (pending_copy_at(a))
    what =
        "the host touched pinned memory that a cudaMemcpyAsync is still writing: synchronise "
        "the stream (or an event recorded after the copy) before reading it";
  if (what != nullptr) {
    char buf[512];
    const int len =
        std::snprintf(buf, sizeof buf, "tandem emulator: %s (address %p)\n", what, si->si_addr);
    if (len > 0) (void)!write(2, buf, static_cast<size_t>(std::min<int>(len, sizeof buf - 1)));
  }
  const struct sigaction& prev = sig == SIGBUS ? g_prev_bus : g_prev_segv;
  if ((prev.sa_flags & SA_SIGINFO) != 0 && prev.sa_sigaction != nullptr) {
    prev.sa_sigaction(sig, si, uc);
    return;
  }
  if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN && prev.sa_handler != nullptr) {
    prev.sa_handler(sig);
    return;
  }
  signal(sig, SIG_DFL);  // returning re-runs the access, which now ends the process
}

}  // namespace

// ---- errors ------------------------------------------------------------------------------------

[[noreturn]] void fault(cudaError_t code, std::string what) {
  throw KernelFault{code, std::move(what)};
}

cudaError_t ret(cudaError_t e) {
  if (e != cudaSuccess) t_last = e;
  return e;
}

void report(const std::string& what) {
  std::fprintf(stderr, "tandem emulator: %s\n", what.c_str());
  std::fflush(stderr);
}

void set_sticky_error(cudaError_t e) {
  int expected = cudaSuccess;
  g_sticky.compare_exchange_strong(expected, e);
}

cudaError_t sticky_error() { return static_cast<cudaError_t>(g_sticky.load()); }
void set_last_error(cudaError_t e) { t_last = e; }

// ---- fault reporting ---------------------------------------------------------------------------

void install_fault_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_prev_segv);
    sigaction(SIGBUS, &sa, &g_prev_bus);
  });
}

void alt_signal_stack() {
  static thread_local std::unique_ptr<char[]> stack;
  if (stack) return;
  constexpr size_t kSize = 64 * 1024;
  stack.reset(new char[kSize]);
  stack_t ss{};
  ss.ss_sp = stack.get();
  ss.ss_size = kSize;
  sigaltstack(&ss, nullptr);
}

}  // namespace tandem_emu

using namespace tandem_emu;

// ---- the runtime API ---------------------------------------------------------------------------

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer:
      return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorIllegalAddress:
      return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    case cudaErrorAssert:
      return "cudaErrorAssert";
    default:
      return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorAssert:
      return "device-side assert triggered";
    default:
      return "unknown error";
  }
}

cudaError_t cudaGetLastError() {
  const cudaError_t s = sticky_error();
  if (s != cudaSuccess) return s;
  const cudaError_t e = t_last;
  t_last = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() {
  const cudaError_t s = sticky_error();
  return s != cudaSuccess ? s : t_last;
}
