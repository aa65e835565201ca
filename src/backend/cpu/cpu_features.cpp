#include "backend/cpu/cpu_features.h"
#include "kiln/version.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace kiln::cpu {
namespace {

CpuTarget detect() {
  __builtin_cpu_init();
  // libgcc's checks include the OS (XCR0) enabling the wider register state.
  bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  bool bf16 = avx512 && __builtin_cpu_supports("avx512bf16");
  // AMX from CPUID leaf 7 (EDX bit 24 AMX-TILE, bit 22 AMX-BF16): clang 14's
  // __builtin_cpu_supports does not know the AMX names (the fuzz build).
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  bool amx = __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (edx >> 24 & 1u) && (edx >> 22 & 1u);
  if (bf16 && amx) {
    // Linux hands out the 8 KB AMX tile state only on request
    // (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, kernel >= 5.16);
    // the grant covers the whole process.
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0) return CpuTarget::amx_bf16;
  }
  if (bf16) return CpuTarget::avx512_bf16;
  if (avx512) return CpuTarget::avx512;
  if (avx2) return CpuTarget::avx2;
  return CpuTarget::scalar;
}

bool parse(const char* s, CpuTarget* out) {
  static const struct { const char* name; CpuTarget t; } kNames[] = {
      {"scalar", CpuTarget::scalar}, {"avx2", CpuTarget::avx2},
      {"avx512", CpuTarget::avx512}, {"avx512_bf16", CpuTarget::avx512_bf16},
      {"amx_bf16", CpuTarget::amx_bf16}};
  for (const auto& n : kNames) {
    if (std::strcmp(s, n.name) == 0) {
      *out = n.t;
      return true;
    }
  }
  return false;
}

CpuTarget lower(CpuTarget a, CpuTarget b) { return static_cast<int>(a) < static_cast<int>(b) ? a : b; }

// Detected capability lowered by the environment; computed once.
CpuTarget from_environment() {
  static const CpuTarget t = [] {
    CpuTarget hw = detect();
    const char* env = std::getenv("KILN_CPU_TARGET");
    if (env == nullptr || *env == '\0') return hw;
    CpuTarget want;
    if (!parse(env, &want)) {
      std::fprintf(stderr, "kiln: ignoring unknown KILN_CPU_TARGET=%s\n", env);
      return hw;
    }
    return lower(want, hw);
  }();
  return t;
}

// -1: no override; otherwise a CpuTarget value.
std::atomic<int> g_override{-1};

}  // namespace

bool cpu_is_amd() {
  static const bool amd = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return false;
    char v[13];
    std::memcpy(v, &ebx, 4), std::memcpy(v + 4, &edx, 4), std::memcpy(v + 8, &ecx, 4), v[12] = 0;
    return std::strcmp(v, "AuthenticAMD") == 0;
  }();
  return amd;
}

CpuTarget cpu_target_detected() {
  static const CpuTarget t = detect();
  return t;
}

CpuTarget cpu_target() {
  int o = g_override.load(std::memory_order_relaxed);
  if (o >= 0) return static_cast<CpuTarget>(o);
  return from_environment();
}

bool cpu_has_avx512_vnni() {
  static const bool vnni = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni") != 0;
  }();
  return vnni && cpu_target() >= CpuTarget::avx512;
}

const char* cpu_target_name(CpuTarget t) {
  switch (t) {
    case CpuTarget::scalar: return "scalar";
    case CpuTarget::avx2: return "avx2";
    case CpuTarget::avx512: return "avx512";
    case CpuTarget::avx512_bf16: return "avx512_bf16";
    case CpuTarget::amx_bf16: return "amx_bf16";
  }
  return "unknown";
}

const char* cpu_target_name() { return cpu_target_name(cpu_target()); }

void set_cpu_target_override(CpuTarget t) {
  g_override.store(static_cast<int>(lower(t, cpu_target_detected())), std::memory_order_relaxed);
}

void clear_cpu_target_override() { g_override.store(-1, std::memory_order_relaxed); }

}  // namespace kiln::cpu

// The public name of the SIMD path this process dispatched to (kiln/version.h).
const char* kiln::cpu_simd_target() { return kiln::cpu::cpu_target_name(); }
