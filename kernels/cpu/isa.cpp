// CPU feature detection with CPUID and XGETBV (both compilers' <cpuid.h>; XGETBV as inline asm
// so that no -mxsave is needed), and the active kernel path (kernels/cpu/isa.h).
#include "kernels/cpu/isa.h"

#include <cpuid.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/common.h"

namespace tandem::cpu {
namespace {

uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return f;
  const bool osxsave = (c >> 27) & 1u;
  const bool avx = (c >> 28) & 1u;
  const bool fma = (c >> 12) & 1u;
  const bool f16c = (c >> 29) & 1u;
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = xgetbv0();
  const bool os_avx = (xcr0 & 0x6) == 0x6;       // XMM and YMM state
  const bool os_avx512 = (xcr0 & 0xe6) == 0xe6;  // + opmask, ZMM_Hi256, Hi16_ZMM
  if (!os_avx) return f;
  f.fma = fma;
  f.f16c = f16c;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return f;
  f.avx2 = (b >> 5) & 1u;
  if (os_avx512) {
    f.avx512f = (b >> 16) & 1u;
    f.avx512dq = (b >> 17) & 1u;
    f.avx512bw = (b >> 30) & 1u;
    f.avx512vl = (b >> 31) & 1u;
    f.avx512_vnni = (c >> 11) & 1u;
  }
  const unsigned max_sub = a;
  if (max_sub >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d) != 0) {
    f.avx_vnni = (a >> 4) & 1u;
    if (os_avx512) f.avx512_bf16 = (a >> 5) & 1u;
  }
  return f;
}

CpuId detect_id() {
  CpuId id;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d) == 0) return id;
  char v[12];
  std::memcpy(v, &b, 4);
  std::memcpy(v + 4, &d, 4);
  std::memcpy(v + 8, &c, 4);
  id.vendor.assign(v, 12);
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return id;
  decode_cpu_signature(a, &id.family, &id.model);
  return id;
}

HostPrefetchRule read_prefetch_rule() {
  HostPrefetchRule r;
  const CpuId& id = cpu_id();
  const bool amd = id.vendor == "AuthenticAMD";
  r.every_f32 = amd && id.family == 0x19 ? 4 : 1;  // Zen 4
  r.to_l1 = amd && id.family == 0x1a;              // Zen 5
  if (const char* env = std::getenv("TANDEM_HOST_PREFETCH_EVERY"); env != nullptr && *env != 0) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (*end == 0 && n >= 1 && n <= 16)
      r.every_f32 = static_cast<int>(n);
    else
      std::fprintf(stderr,
                   "tandem: warning: TANDEM_HOST_PREFETCH_EVERY=%s is not a number in 1..16; "
                   "ignored\n",
                   env);
  }
  if (const char* env = std::getenv("TANDEM_HOST_PREFETCH_HINT"); env != nullptr && *env != 0) {
    if (std::strcmp(env, "l1") == 0 || std::strcmp(env, "l2") == 0)
      r.to_l1 = env[1] == '1';
    else
      std::fprintf(stderr,
                   "tandem: warning: TANDEM_HOST_PREFETCH_HINT=%s is not l1 or l2; ignored\n", env);
  }
  return r;
}

Isa best_supported() {
  if (isa_supported(Isa::kAvx512Bf16)) return Isa::kAvx512Bf16;
  if (isa_supported(Isa::kAvx512)) return Isa::kAvx512;
  return Isa::kAvx2;
}

// The default: the best supported, capped by TANDEM_CPU_ISA.
Isa read_default_isa() {
  const Isa best = best_supported();
  const char* env = std::getenv("TANDEM_CPU_ISA");
  if (env == nullptr || *env == '\0') return best;
  Isa want = best;
  if (!parse_isa(env, &want)) {
    std::fprintf(stderr,
                 "tandem: warning: TANDEM_CPU_ISA=%s is not one of avx2, avx512, avx512bf16; "
                 "using %s\n",
                 env, std::string(isa_name(best)).c_str());
    return best;
  }
  if (!isa_supported(want)) {
    std::fprintf(stderr,
                 "tandem: warning: TANDEM_CPU_ISA=%s is not supported by this CPU (it has: %s); "
                 "using %s\n",
                 env, describe_cpu_features().c_str(), std::string(isa_name(best)).c_str());
    return best;
  }
  return want;
}

// Read once, so that a bad TANDEM_CPU_ISA is reported once.
Isa default_isa() {
  static const Isa d = read_default_isa();
  return d;
}

std::atomic<int>& active_slot() {
  static std::atomic<int> slot{static_cast<int>(default_isa())};
  return slot;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

void decode_cpu_signature(unsigned eax, unsigned* family, unsigned* model) {
  const unsigned base_family = (eax >> 8) & 0xfu, base_model = (eax >> 4) & 0xfu;
  *family = base_family == 0xf ? base_family + ((eax >> 20) & 0xffu) : base_family;
  *model = base_family == 0xf || base_family == 0x6 ? (((eax >> 16) & 0xfu) << 4) | base_model
                                                    : base_model;
}

const CpuId& cpu_id() {
  static const CpuId id = detect_id();
  return id;
}

std::string describe_cpu_id() {
  const CpuId& id = cpu_id();
  char buf[64];
  std::snprintf(buf, sizeof buf, " family 0x%x model 0x%x", id.family, id.model);
  return (id.vendor.empty() ? std::string("unknown") : id.vendor) + buf;
}

const HostPrefetchRule& host_prefetch_rule() {
  static const HostPrefetchRule r = read_prefetch_rule();
  return r;
}

std::string describe_host_prefetch_rule() {
  const HostPrefetchRule& r = host_prefetch_rule();
  return "f32 one line in " + std::to_string(r.every_f32) + ", into " + (r.to_l1 ? "L1" : "L2");
}

std::string describe_cpu_features() {
  const CpuFeatures& f = cpu_features();
  std::string s;
  auto add = [&s](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512dq, "avx512dq");
  add(f.avx512_bf16, "avx512_bf16");
  add(f.avx512_vnni, "avx512_vnni");
  add(f.avx_vnni, "avx_vnni");
  return s.empty() ? "none" : s;
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx512Bf16:
      return "avx512bf16";
  }
  return "?";
}

bool parse_isa(std::string_view name, Isa* out) {
  for (Isa i : {Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16})
    if (name == isa_name(i)) {
      *out = i;
      return true;
    }
  return false;
}

bool isa_supported(Isa isa) {
  const CpuFeatures& f = cpu_features();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  const bool avx512 = avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
  switch (isa) {
    case Isa::kAvx2:
      return avx2;
    case Isa::kAvx512:
      return avx512;
    case Isa::kAvx512Bf16:
      return avx512 && f.avx512_bf16;
  }
  return false;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa i : {Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16})
    if (isa_supported(i)) out.push_back(i);
  return out;
}

Isa active_isa() { return static_cast<Isa>(active_slot().load(std::memory_order_relaxed)); }

void force_isa(Isa isa) {
  TANDEM_CHECK(isa_supported(isa), "CPU kernel path ", isa_name(isa),
               " is not supported by this CPU (it has: ", describe_cpu_features(), ")");
  active_slot().store(static_cast<int>(isa), std::memory_order_relaxed);
}

void reset_isa() { active_slot().store(static_cast<int>(default_isa())); }

ScopedIsa::ScopedIsa(Isa isa) : prev_(active_isa()) { force_isa(isa); }
ScopedIsa::~ScopedIsa() { active_slot().store(static_cast<int>(prev_)); }

}  // namespace tandem::cpu
