// The device side of the SIMT emulator: what a kernel in kernels/cuda/*.cu sees when g++ compiles
// it (function qualifiers, thread/block indices, shared memory, barriers, warp shuffles and
// votes, atomics, intrinsics, math) and the launcher behind TANDEM_LAUNCH. Each CUDA thread of a
// block is a fiber on the stream's worker thread; a barrier or warp exchange suspends it until
// its peers arrive (simt.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "kernels/cuda/emu/vector_types.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// One copy per block: a block runs on one worker thread at a time, all its threads (fibers) on
// that thread, so a thread_local static is exactly the block's shared variable.
#define __shared__ static thread_local
#define __constant__ static

namespace tandem_emu {

struct ThreadState;  // simt.cpp
struct BlockState;
extern thread_local uint3 t_thread_idx;  // the running CUDA thread's threadIdx
extern thread_local uint3 t_block_idx;   // its block
extern thread_local dim3 t_block_dim;
extern thread_local dim3 t_grid_dim;
extern thread_local void* t_dynamic_smem;  // this block's dynamic shared memory (NaN-filled)

void syncthreads();
int syncthreads_reduce(int pred, int op);  // op 0: or, 1: and, 2: count
void syncwarp(unsigned mask);
uint64_t warp_exchange(unsigned mask, uint64_t value, int src_lane, int width, int mode);
unsigned warp_vote(unsigned mask, int pred);
void nanosleep_ns(unsigned ns);
[[noreturn]] void trap();
uint64_t globaltimer_ns();

// Shuffle of any 1-8 byte value: every lane of `mask` must arrive (mode 0: lane src, 1: lane ^
// src, 2: lane + src, 3: lane - src, within `width`).
template <typename T>
T shuffle(unsigned mask, T v, int src, int width, int mode) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  uint64_t raw = 0;
  std::memcpy(&raw, &v, sizeof(T));
  raw = warp_exchange(mask, raw, src, width, mode);
  T out;
  std::memcpy(&out, &raw, sizeof(T));
  return out;
}

// Launch: validates the configuration (errors go to cudaGetLastError) and queues the kernel on
// the stream; returns before it runs (launch.cpp).
using KernelBody = std::function<void()>;
void enqueue_kernel(const char* name, dim3 grid, dim3 block, size_t smem, void* stream,
                    KernelBody body);

template <typename... P>
struct Launcher {
  const char* name;
  dim3 grid, block;
  size_t smem;
  void* stream;
  void (*fn)(P...);
  template <typename... A>
  void operator()(A&&... args) const {
    // Kernel parameters are copied at the launch, as CUDA copies them into the launch record.
    std::tuple<std::decay_t<P>...> params(std::forward<A>(args)...);
    enqueue_kernel(name, grid, block, smem, stream, [f = fn, params]() { std::apply(f, params); });
  }
};

template <typename S, typename... P>
Launcher<P...> launch(const char* name, dim3 grid, dim3 block, size_t smem, S* stream,
                      void (*fn)(P...)) {
  return Launcher<P...>{name, grid, block, smem, static_cast<void*>(stream), fn};
}
template <typename... P>
Launcher<P...> launch(const char* name, dim3 grid, dim3 block, size_t smem, std::nullptr_t,
                      void (*fn)(P...)) {
  return Launcher<P...>{name, grid, block, smem, nullptr, fn};
}

}  // namespace tandem_emu

#define threadIdx (::tandem_emu::t_thread_idx)
#define blockIdx (::tandem_emu::t_block_idx)
#define blockDim (::tandem_emu::t_block_dim)
#define gridDim (::tandem_emu::t_grid_dim)
inline constexpr int warpSize = 32;

inline void __syncthreads() { tandem_emu::syncthreads(); }
inline int __syncthreads_or(int p) { return tandem_emu::syncthreads_reduce(p, 0); }
inline int __syncthreads_and(int p) { return tandem_emu::syncthreads_reduce(p, 1); }
inline int __syncthreads_count(int p) { return tandem_emu::syncthreads_reduce(p, 2); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { tandem_emu::syncwarp(mask); }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

template <typename T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  return tandem_emu::shuffle(mask, v, src, width, 0);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return tandem_emu::shuffle(mask, v, lane_mask, width, 1);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return tandem_emu::shuffle(mask, v, static_cast<int>(delta), width, 2);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return tandem_emu::shuffle(mask, v, static_cast<int>(delta), width, 3);
}
inline unsigned __ballot_sync(unsigned mask, int pred) { return tandem_emu::warp_vote(mask, pred); }
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) {
  return (__ballot_sync(mask, pred) & mask) == (mask & __ballot_sync(mask, 1));
}

inline void __nanosleep(unsigned ns) { tandem_emu::nanosleep_ns(ns); }
[[noreturn]] inline void __trap() { tandem_emu::trap(); }

inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
inline int __clz(int v) { return v == 0 ? 32 : __builtin_clz(static_cast<unsigned>(v)); }
inline int __ffs(int v) { return __builtin_ffs(v); }
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline int __float_as_int(float f) { return static_cast<int>(__float_as_uint(f)); }
inline float __int_as_float(int i) { return __uint_as_float(static_cast<unsigned>(i)); }
template <typename T>
T __ldg(const T* p) {
  return *p;
}

inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }

// CUDA's global min/max for any mix of arithmetic types (the usual arithmetic conversions).
template <typename A, typename B>
constexpr std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(b) < static_cast<C>(a) ? static_cast<C>(b) : static_cast<C>(a);
}
template <typename A, typename B>
constexpr std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(a) < static_cast<C>(b) ? static_cast<C>(b) : static_cast<C>(a);
}

// Atomics: real atomics (blocks of kernels on different streams run at the same time), checked
// and logged like any other device access (atomics.cpp).
float atomicAdd(float* p, float v);
double atomicAdd(double* p, double v);
int atomicAdd(int* p, int v);
unsigned atomicAdd(unsigned* p, unsigned v);
unsigned long long atomicAdd(unsigned long long* p, unsigned long long v);
int atomicMin(int* p, int v);
int atomicMax(int* p, int v);
unsigned atomicMin(unsigned* p, unsigned v);
unsigned atomicMax(unsigned* p, unsigned v);
int atomicExch(int* p, int v);
unsigned atomicExch(unsigned* p, unsigned v);
int atomicCAS(int* p, int compare, int v);
unsigned atomicCAS(unsigned* p, unsigned compare, unsigned v);
