// Run-time choice of the CPU kernels' instruction set. The build's baseline is AVX2+FMA+F16C
// (CMakeLists.txt TANDEM_ARCH_FLAGS); faster paths are picked here, at run time, from what the
// CPU and the OS support (CPUID and XCR0), never assumed at build time.
//
// Paths, each a superset of the one before:
//   avx2        AVX2 + FMA + F16C (the baseline every build needs)
//   avx512      + AVX-512 F/BW/VL/DQ with the OS saving the ZMM and mask registers
//   avx512bf16  + AVX512_BF16 (VDPBF16PS): bf16 weights are multiplied with activations rounded
//               to bf16 in prefill and decode products (docs/decode-cpu.md)
// The active path is the best one supported, capped by TANDEM_CPU_ISA=avx2|avx512|avx512bf16;
// a value that is unknown or above what the CPU supports is reported (once, to stderr) and the
// best supported path below it is used instead, so no setting can raise SIGILL.
//
// Rule for code that uses instructions above the baseline (kernels/cpu/gemm_avx512.cpp): it is
// compiled in a baseline TU with function-level __attribute__((target(...))), lives in an
// anonymous namespace (templates included), and is reached only through plain non-inline entry
// points called after checking the active path. No inline function or template that a baseline
// TU also instantiates may be compiled with AVX-512 enabled (per-file -mavx512f flags would do
// exactly that to every header inline, e.g. std::vector's members: the linker keeps one copy of
// a COMDAT, possibly the AVX-512 one, and an AVX2 machine would then SIGILL in baseline code).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tandem::cpu {

enum class Isa { kAvx2 = 0, kAvx512 = 1, kAvx512Bf16 = 2 };

// What CPUID and XCR0 report (the AVX-512 and AVX flags already require the OS support).
struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_bf16 = false, avx512_vnni = false, avx_vnni = false;
};
const CpuFeatures& cpu_features();
std::string describe_cpu_features();  // "avx2 fma f16c avx512f ... avx512_vnni"

// The CPU's vendor and family/model (CPUID leaves 0 and 1, extended fields folded in), for the
// tunings that differ by microarchitecture rather than by instruction set.
struct CpuId {
  std::string vendor;  // "AuthenticAMD", "GenuineIntel", ...
  unsigned family = 0, model = 0;
};
const CpuId& cpu_id();
// Family and model from CPUID leaf 1's EAX (the extended fields added where the SDMs say).
void decode_cpu_signature(unsigned eax, unsigned* family, unsigned* model);
std::string describe_cpu_id();  // "AuthenticAMD family 0x1a model 0x2"

// How the host attention passes prefetch K and V (kernels/cpu/line_stream.h), by
// microarchitecture, each measured with two cores at 32K context (docs/host-attention.md):
//   every_f32  cache lines per software prefetch where the AVX-512 passes read a long range of
//              f32 K or V in address order: 4 on AMD family 0x19 (Zen 4), where one prefetch per
//              256 bytes lets the hardware prefetchers bring the other lines and a prefetch for
//              every line capped two cores at ~39 GB/s in the minutes the memory gave 48-50 (one
//              in four read 7-8% more); 1 elsewhere (on Zen 5, family 0x1a, one in four read
//              18-27% less). 16-bit KV and the AVX2 passes prefetch every line on every CPU.
//   to_l1      PREFETCHT0 (into L1) rather than PREFETCHT2 (into L2): on Zen 5, f32 KV 4-10%
//              faster, 16-bit KV unchanged; on Zen 4 L1 lost 10-30% (each prefetch holds an L1
//              miss buffer the demand loads then lack).
// CPUs not measured take every line into L2, the rule the kernel had before these were told
// apart. TANDEM_HOST_PREFETCH_EVERY=1..16 and TANDEM_HOST_PREFETCH_HINT=l1|l2 override it (read
// once; for measurement); a bad value is reported and ignored.
struct HostPrefetchRule {
  int every_f32 = 1;
  bool to_l1 = false;
};
const HostPrefetchRule& host_prefetch_rule();
std::string describe_host_prefetch_rule();  // "f32 one line in 1, into L1"

std::string_view isa_name(Isa isa);
bool parse_isa(std::string_view name, Isa* out);  // false for an unknown name
bool isa_supported(Isa isa);
std::vector<Isa> supported_isas();  // ascending; avx2 first (when the CPU has it)

// The path kernels use now: the best supported, capped by TANDEM_CPU_ISA (read once).
Isa active_isa();
// Forces a path (tests, benchmarks); throws tandem::Error if the CPU does not support it.
void force_isa(Isa isa);
// Back to the default (best supported, capped by TANDEM_CPU_ISA).
void reset_isa();

// Forces a path for the life of a scope, then restores the one before (tests).
class ScopedIsa {
 public:
  explicit ScopedIsa(Isa isa);
  ~ScopedIsa();
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

 private:
  Isa prev_;
};

}  // namespace tandem::cpu
