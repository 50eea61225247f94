// The atomics of the device side (simt.h): real atomics, as blocks of kernels on different
// streams run at the same time, each access checked and counted like any other device access.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/emu/emu_internal.h"

namespace {

template <typename T, typename F>
T atomic_update(T* p, F f) {
  tandem_emu::note_access(p, sizeof(T), true);
  T old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(p, &old, f(old), true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
  }
  return old;
}

template <typename T, typename F>
T atomic_update_fp(T* p, F f) {  // floating point: CAS on the bits
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  tandem_emu::note_access(p, sizeof(T), true);
  U* u = reinterpret_cast<U*>(p);
  U old = __atomic_load_n(u, __ATOMIC_RELAXED);
  for (;;) {
    T v;
    std::memcpy(&v, &old, sizeof(T));
    const T nv = f(v);
    U nu;
    std::memcpy(&nu, &nv, sizeof(T));
    if (__atomic_compare_exchange_n(u, &old, nu, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
      return v;
  }
}

}  // namespace

float atomicAdd(float* p, float v) {
  return atomic_update_fp(p, [v](float o) { return o + v; });
}
double atomicAdd(double* p, double v) {
  return atomic_update_fp(p, [v](double o) { return o + v; });
}
int atomicAdd(int* p, int v) {
  return atomic_update(p, [v](int o) {
    return static_cast<int>(static_cast<unsigned>(o) + static_cast<unsigned>(v));
  });
}
unsigned atomicAdd(unsigned* p, unsigned v) {
  return atomic_update(p, [v](unsigned o) { return o + v; });
}
unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return atomic_update(p, [v](unsigned long long o) { return o + v; });
}
int atomicMin(int* p, int v) {
  return atomic_update(p, [v](int o) { return std::min(o, v); });
}
int atomicMax(int* p, int v) {
  return atomic_update(p, [v](int o) { return std::max(o, v); });
}
unsigned atomicMin(unsigned* p, unsigned v) {
  return atomic_update(p, [v](unsigned o) { return std::min(o, v); });
}
unsigned atomicMax(unsigned* p, unsigned v) {
  return atomic_update(p, [v](unsigned o) { return std::max(o, v); });
}
int atomicExch(int* p, int v) {
  return atomic_update(p, [v](int) { return v; });
}
unsigned atomicExch(unsigned* p, unsigned v) {
  return atomic_update(p, [v](unsigned) { return v; });
}
int atomicCAS(int* p, int compare, int v) {
  return atomic_update(p, [compare, v](int o) { return o == compare ? v : o; });
}
unsigned atomicCAS(unsigned* p, unsigned compare, unsigned v) {
  return atomic_update(p, [compare, v](unsigned o) { return o == compare ? v : o; });
}
