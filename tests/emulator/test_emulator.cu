// Tests of the SIMT emulator itself (built only with -DTANDEM_CUDA=EMULATE; compiled like the
// backend's .cu files, so its kernels are checked and counted the same way). Two kinds:
// - semantics and counters in this process: warp shuffles and votes at every width, barriers that
//   reduce, dynamic shared memory, fresh memory reading NaN, a launch returning before its kernel
//   runs, events ordering two streams, exact byte counts of a kernel's device and mapped reads;
// - faults, each in a child process (a fault leaves the CUDA context unusable, as on a GPU): the
//   child re-runs this executable with TANDEM_EMU_SCENARIO set, and the test checks it failed
//   with the emulator's message. Each scenario is a bug the emulator must catch.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/emulator.h"

namespace {

constexpr int kThreads = 128;

// ---- kernels
// -------------------------------------------------------------------------------------

// out[lane] for one warp: shfl_xor, shfl_down, shfl_up, shfl (idx) at width w, and a ballot.
__global__ void shuffle_kernel(int* out, int width) {
  const int lane = static_cast<int>(threadIdx.x);
  out[lane] = __shfl_xor_sync(0xffffffffu, lane * 10, 1, width);
  out[32 + lane] = __shfl_down_sync(0xffffffffu, lane, 3, width);
  out[64 + lane] = __shfl_up_sync(0xffffffffu, lane, 2, width);
  out[96 + lane] = __shfl_sync(0xffffffffu, lane * 2, 5, width);
  out[128 + lane] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 3 == 0));
  const int64_t big = __shfl_xor_sync(0xffffffffu, int64_t{1} << (32 + lane % 16), 16);
  out[160 + lane] = static_cast<int>(big >> 32);
}

// Barrier reductions: or / and / count of (tid % k == 0), every thread writes what it got.
__global__ void barrier_kernel(int* out, int k) {
  const int t = static_cast<int>(threadIdx.x);
  const int p = t % k == 0;
  const int o = __syncthreads_or(p), a = __syncthreads_and(p), c = __syncthreads_count(p);
  out[t] = o + 10 * a + 100 * c;
}

// A block sum through shared memory, correct or with the second barrier missing.
__global__ void block_sum_kernel(const float* x, float* out, bool sync) {
  __shared__ float part[kThreads];
  const int t = static_cast<int>(threadIdx.x);
  part[t] = x[blockIdx.x * kThreads + t];
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (t < s) part[t] += part[t + s];
    if (sync) __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = part[0];
}

// Reads n floats of dev and m of mapped, writes one float.
__global__ void read_kernel(const float* dev, int n, const float* mapped, int m, float* out) {
  float s = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += blockDim.x) s += dev[i];
  for (int i = static_cast<int>(threadIdx.x); i < m; i += blockDim.x) s += mapped[i];
  if (threadIdx.x == 0) out[0] = s;
}

// Copies n floats, reading one more than there is when `off_by_one`.
__global__ void copy_kernel(const float* x, float* y, int n, bool off_by_one) {
  for (int i = static_cast<int>(threadIdx.x); i < n + (off_by_one ? 1 : 0); i += blockDim.x)
    y[i < n ? i : 0] = x[i];
}

// Dynamic shared memory as it is handed to the block: every float must be NaN.
__global__ void smem_kernel(int* nan_count, int n) {
  TANDEM_DYNAMIC_SHARED(float, s);
  if (threadIdx.x == 0) {
    int c = 0;
    for (int i = 0; i < n; ++i) c += std::isnan(s[i]) ? 1 : 0;
    nan_count[0] = c;
  }
}

// Spins until the mapped flag is set (by the host, after the launch returned).
__global__ void spin_kernel(const unsigned* flag, int* seen) {
  while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) == 0) __nanosleep(1000);
  seen[0] = 1;
}

// Lanes 16-31 exit while lanes 0-15 shuffle with a full mask.
__global__ void exited_lane_kernel(int* out) {
  if (threadIdx.x >= 16) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}

__global__ void trap_kernel() { __trap(); }

// ---- helpers
// -------------------------------------------------------------------------------------

#define CHECK_CUDA(call) REQUIRE((call) == cudaSuccess)

template <typename T>
T* device(size_t n) {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, n * sizeof(T)));
  return static_cast<T*>(p);
}

// A 32-bit flag in mapped pinned memory, 0: the host's view and the device's alias.
struct MappedFlag {
  unsigned* host = nullptr;
  unsigned* dev = nullptr;
  MappedFlag() {
    CHECK_CUDA(cudaHostAlloc(&host, 4, cudaHostAllocMapped));
    *host = 0;
    CHECK_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev), host, 0));
  }
  ~MappedFlag() { cudaFreeHost(host); }
  void set() { __atomic_store_n(host, 1u, __ATOMIC_RELEASE); }
};

template <typename T>
std::vector<T> down(const T* p, size_t n) {
  std::vector<T> v(n);
  CHECK_CUDA(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

// Runs this executable with TANDEM_EMU_SCENARIO=name (and extra env); returns (exited
// normally with status 0, stderr text).
std::pair<bool, std::string> run_scenario(const std::string& name,
                                          const char* extra_env = nullptr) {
  const std::string err = "/tmp/tandem-emu-scenario-" + std::to_string(getpid()) + "-" + name;
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("TANDEM_EMU_SCENARIO", name.c_str(), 1);
    if (extra_env != nullptr) putenv(const_cast<char*>(extra_env));
    if (std::freopen(err.c_str(), "w", stderr) == nullptr) _exit(99);
    execl("/proc/self/exe", "/proc/self/exe", static_cast<char*>(nullptr));
    _exit(98);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  std::string text;
  if (FILE* f = std::fopen(err.c_str(), "r")) {
    char buf[4096];
    size_t k;
    while ((k = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, k);
    std::fclose(f);
  }
  std::remove(err.c_str());
  return {WIFEXITED(status) && WEXITSTATUS(status) == 0, text};
}

// ---- the scenarios (in the child)
// ----------------------------------------------------------------

// In the child, without Catch: a plain allocation.
template <typename T>
T* raw(size_t n) {
  void* p = nullptr;
  if (cudaMalloc(&p, n * sizeof(T)) != cudaSuccess) std::_Exit(96);
  return static_cast<T*>(p);
}

int scenario(const std::string& name) {
  if (name == "block_sum_ok") {  // the same reduction with its barriers, under the race check
    std::vector<float> h(kThreads * 4);
    for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>(i % 7) + 0.25f;
    float* x = raw<float>(h.size());
    float* out = raw<float>(4);
    cudaMemcpy(x, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
    TANDEM_LAUNCH(4, kThreads, 0, nullptr, block_sum_kernel)(x, out, true);
    float got[4];
    if (cudaMemcpy(got, out, sizeof got, cudaMemcpyDeviceToHost) != cudaSuccess) return 1;
    for (int b = 0; b < 4; ++b) {
      float want = 0.0f;
      for (int t = 0; t < kThreads; ++t) want += h[static_cast<size_t>(b * kThreads + t)];
      if (std::fabs(got[b] - want) > 1e-3f) return 2;
    }
    return 0;
  }
  if (name == "oob_read") {
    float* x = raw<float>(100);
    float* y = raw<float>(100);
    TANDEM_LAUNCH(1, 32, 0, nullptr, copy_kernel)(x, y, 100, true);
    return cudaDeviceSynchronize() == cudaErrorIllegalAddress ? 0 : 1;
  }
  if (name == "missing_sync") {  // run with TANDEM_EMU_RACECHECK=1
    std::vector<float> h(kThreads * 4);
    for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>(i % 7) + 0.25f;
    float* x = raw<float>(h.size());
    float* out = raw<float>(4);
    cudaMemcpy(x, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
    TANDEM_LAUNCH(4, kThreads, 0, nullptr, block_sum_kernel)(x, out, false);
    return cudaDeviceSynchronize() == cudaErrorLaunchFailure ? 0 : 1;
  }
  if (name == "host_reads_device") {
    float* x = raw<float>(16);
    cudaDeviceSynchronize();
    volatile float v = x[3];  // a host dereference of device memory: must fault
    (void)v;
    return 0;
  }
  if (name == "read_before_sync") {
    float* x = raw<float>(1 << 20);
    void* pinned = nullptr;
    cudaHostAlloc(&pinned, (1 << 20) * sizeof(float), cudaHostAllocMapped);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    // Keep the stream busy so the copy is still queued when the host reads.
    unsigned* flag = nullptr;
    cudaHostAlloc(&flag, 4, cudaHostAllocMapped);
    *flag = 0;
    unsigned* dflag = nullptr;
    cudaHostGetDevicePointer(reinterpret_cast<void**>(&dflag), flag, 0);
    int* seen = raw<int>(1);
    TANDEM_LAUNCH(1, 1, 0, s, spin_kernel)(dflag, seen);
    cudaMemcpyAsync(pinned, x, (1 << 20) * sizeof(float), cudaMemcpyDeviceToHost, s);
    volatile float v = static_cast<float*>(pinned)[5];  // before synchronising: must fault
    (void)v;
    __atomic_store_n(flag, 1u, __ATOMIC_RELEASE);
    cudaStreamSynchronize(s);
    return 0;
  }
  if (name == "exited_lane") {
    int* out = raw<int>(32);
    TANDEM_LAUNCH(1, 32, 0, nullptr, exited_lane_kernel)(out);
    return cudaDeviceSynchronize() == cudaErrorLaunchFailure ? 0 : 1;
  }
  if (name == "trap") {
    TANDEM_LAUNCH(1, 1, 0, nullptr, trap_kernel)();
    const bool failed = cudaDeviceSynchronize() == cudaErrorLaunchFailure;
    // Sticky: the context stays unusable.
    void* p = nullptr;
    return failed && cudaMalloc(&p, 4) == cudaErrorLaunchFailure ? 0 : 1;
  }
  return 97;
}

// Before Catch's main: a child started by run_scenario runs its scenario and exits.
const int g_scenario = [] {
  if (const char* s = std::getenv("TANDEM_EMU_SCENARIO")) std::_Exit(scenario(s));
  return 0;
}();

}  // namespace

TEST_CASE("emulator: warp shuffles and votes follow CUDA's lane rules at every width") {
  int* out = device<int>(192);
  for (int width : {32, 16, 8, 4}) {
    TANDEM_LAUNCH(1, 32, 0, nullptr, shuffle_kernel)(out, width);
    const std::vector<int> v = down(out, 192);
    for (int lane = 0; lane < 32; ++lane) {
      INFO("width " << width << " lane " << lane);
      const int base = lane & ~(width - 1);
      CHECK(v[lane] == ((lane ^ 1) < base + width ? (lane ^ 1) * 10 : lane * 10));
      CHECK(v[32 + lane] == (lane + 3 < base + width ? lane + 3 : lane));
      CHECK(v[64 + lane] == (lane - 2 >= base ? lane - 2 : lane));
      CHECK(v[96 + lane] == (base + (5 & (width - 1))) * 2);
      CHECK(static_cast<unsigned>(v[128 + lane]) == 0x49249249u);
      CHECK(v[160 + lane] == (1 << ((lane ^ 16) % 16)));
    }
  }
  CHECK(cudaFree(out) == cudaSuccess);
}

TEST_CASE("emulator: __syncthreads_or / _and / _count give every thread the block's result") {
  int* out = device<int>(kThreads);
  for (int k : {1, 3, 200}) {
    TANDEM_LAUNCH(1, kThreads, 0, nullptr, barrier_kernel)(out, k);
    const std::vector<int> v = down(out, kThreads);
    const int count = (kThreads + k - 1) / k;
    const int expect = 1 + 10 * (k == 1) + 100 * count;
    for (int t = 0; t < kThreads; ++t) CHECK(v[t] == expect);
  }
  CHECK(cudaFree(out) == cudaSuccess);
}

TEST_CASE("emulator: fresh device memory and dynamic shared memory read as NaN") {
  float* x = device<float>(1000);
  for (float f : down(x, 1000)) CHECK(std::isnan(f));
  int* count = device<int>(1);
  TANDEM_LAUNCH(1, 64, 500 * sizeof(float), nullptr, smem_kernel)(count, 500);
  CHECK(down(count, 1)[0] == 500);
  // More dynamic shared memory than a block may have without opting in: a launch error.
  TANDEM_LAUNCH(1, 64, 64 * 1024, nullptr, smem_kernel)(count, 1);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaSuccess);  // not sticky
  TANDEM_LAUNCH(1, 2048, 0, nullptr, smem_kernel)(count, 1);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  cudaFree(x);
  cudaFree(count);
}

TEST_CASE("emulator: a launch returns before its kernel runs; the host overlaps the device") {
  MappedFlag flag;
  CHECK(flag.dev != flag.host);  // the device alias is another address for the same bytes
  int* seen = device<int>(1);
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  TANDEM_LAUNCH(1, 1, 0, s, spin_kernel)(flag.dev, seen);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(cudaStreamQuery(s) == cudaErrorNotReady);  // still spinning: the host was not blocked
  flag.set();
  CHECK_CUDA(cudaStreamSynchronize(s));
  CHECK(down(seen, 1)[0] == 1);
  CHECK_CUDA(cudaStreamDestroy(s));
  cudaFree(seen);
}

TEST_CASE("emulator: an event orders work across streams") {
  MappedFlag flag;
  int* seen = device<int>(1);
  float* x = device<float>(4);
  cudaStream_t a, b;
  cudaEvent_t e;
  CHECK_CUDA(cudaStreamCreate(&a));
  CHECK_CUDA(cudaStreamCreate(&b));
  CHECK_CUDA(cudaEventCreate(&e));
  TANDEM_LAUNCH(1, 1, 0, a, spin_kernel)(flag.dev, seen);
  CHECK_CUDA(cudaEventRecord(e, a));
  CHECK_CUDA(cudaStreamWaitEvent(b, e, 0));
  const float ones[4] = {1, 1, 1, 1};
  CHECK_CUDA(cudaMemcpyAsync(x, ones, sizeof ones, cudaMemcpyHostToDevice, b));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(cudaStreamQuery(b) == cudaErrorNotReady);  // b waits for a's event
  CHECK(cudaEventQuery(e) == cudaErrorNotReady);
  flag.set();
  CHECK_CUDA(cudaStreamSynchronize(b));
  CHECK(cudaEventQuery(e) == cudaSuccess);
  CHECK(down(x, 4)[3] == 1.0f);
  cudaEventDestroy(e);
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
  cudaFree(seen);
  cudaFree(x);
}

TEST_CASE("emulator: counters are exact: bytes a kernel reads, copies, launches, host waits") {
  using namespace tandem;
  float* dev = device<float>(1000);
  float* out = device<float>(1);
  void* mapped = nullptr;
  CHECK_CUDA(cudaHostAlloc(&mapped, 300 * sizeof(float), cudaHostAllocMapped));
  void* mapped_dev = nullptr;
  CHECK_CUDA(cudaHostGetDevicePointer(&mapped_dev, mapped, 0));
  std::vector<float> h(1000, 0.5f);
  CHECK_CUDA(cudaMemcpy(dev, h.data(), 1000 * sizeof(float), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaDeviceSynchronize());
  const CudaEmulatorCounters before = cuda_emulator_counters();
  TANDEM_LAUNCH(1, 64, 0, nullptr, read_kernel)
  (dev, 1000, static_cast<const float*>(mapped_dev), 300, out);
  float result = 0.0f;
  CHECK_CUDA(cudaMemcpy(&result, out, 4, cudaMemcpyDeviceToHost));
  const CudaEmulatorCounters d = cuda_emulator_counters() - before;
  CHECK(d.launches == 1);
  CHECK(d.d2h_bytes == 4);
  CHECK(d.h2d_bytes == 0);
  CHECK(d.host_syncs == 1);
  REQUIRE(d.kernels.count("read_kernel") == 1);
  const CudaKernelCounters& k = d.kernels.at("read_kernel");
  CHECK(k.launches == 1);
  CHECK(k.threads == 64);
  CHECK(k.device_read_bytes == 4000);
  CHECK(k.mapped_read_bytes == 1200);
  CHECK(k.device_write_bytes == 4);
  CHECK(k.mapped_write_bytes == 0);
  cudaFreeHost(mapped);
  cudaFree(dev);
  cudaFree(out);
}

TEST_CASE("emulator: freeing a pointer twice reports it and fails, for device and pinned memory") {
  void* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, 64));
  CHECK_CUDA(cudaFree(d));
  CHECK(cudaFree(d) == cudaErrorInvalidDevicePointer);
  void* h = nullptr;
  CHECK_CUDA(cudaHostAlloc(&h, 64, cudaHostAllocMapped));
  CHECK_CUDA(cudaFreeHost(h));
  CHECK(cudaFreeHost(h) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);  // not sticky: the context goes on
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("emulator: memory info reports the configured device, an H100's properties") {
  size_t free = 0, total = 0;
  CHECK_CUDA(cudaMemGetInfo(&free, &total));
  CHECK(total == size_t{80} << 30);
  CHECK(free <= total);
  cudaDeviceProp p;
  CHECK_CUDA(cudaGetDeviceProperties(&p, 0));
  CHECK(p.multiProcessorCount == 132);
  CHECK(p.sharedMemPerMultiprocessor == 228 * 1024);
  CHECK(p.warpSize == 32);
  CHECK(p.major == 9);
}

TEST_CASE("emulator: the correct block reduction passes the three-interleaving check") {
  const auto [ok, err] = run_scenario("block_sum_ok", "TANDEM_EMU_RACECHECK=1");
  CHECK(ok);
  CHECK(err.empty());
}

TEST_CASE("emulator catches an out-of-bounds read and names the allocation") {
  const auto [ok, err] = run_scenario("oob_read");
  CHECK(ok);
  CHECK(err.find("copy_kernel: out-of-bounds read") != std::string::npos);
  CHECK(err.find("past the end of allocation") != std::string::npos);
}

TEST_CASE("emulator catches a missing __syncthreads under three interleavings") {
  const auto [ok, err] = run_scenario("missing_sync", "TANDEM_EMU_RACECHECK=1");
  CHECK(ok);
  CHECK(err.find("block_sum_kernel: the result depends on the interleaving") != std::string::npos);
}

TEST_CASE("emulator: a host access to device memory faults with a message") {
  const auto [ok, err] = run_scenario("host_reads_device");
  CHECK_FALSE(ok);
  CHECK(err.find("the host touched device memory") != std::string::npos);
}

TEST_CASE("emulator: reading a stream's output before synchronising faults") {
  const auto [ok, err] = run_scenario("read_before_sync");
  CHECK_FALSE(ok);
  CHECK(err.find("still writing") != std::string::npos);
}

TEST_CASE("emulator catches a shuffle that waits for an exited lane, and __trap") {
  auto [ok, err] = run_scenario("exited_lane");
  CHECK(ok);
  CHECK(err.find("exited while its warp waits") != std::string::npos);
  std::tie(ok, err) = run_scenario("trap");
  CHECK(ok);
  CHECK(err.find("__trap()") != std::string::npos);
}
