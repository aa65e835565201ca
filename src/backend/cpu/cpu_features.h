#pragma once
// Which instruction-set level the CPU kernels may use, decided once per
// process. The library itself is built for x86-64-v3 (AVX2+FMA+F16C);
// AVX-512 code lives in functions with target attributes and is only called
// when cpu_target() says so.
//
// KILN_CPU_TARGET=scalar|avx2|avx512|avx512_bf16|amx_bf16 forces a lower level (never a
// higher one than the CPU has), so fallback paths can be tested on big
// machines. It is read once, on the first call.

namespace kiln::cpu {

// Ordered: each level includes the ones before it. amx_bf16 adds Intel AMX
// tiles (the OS must grant the tile state; detection asks for it).
enum class CpuTarget { scalar, avx2, avx512, avx512_bf16, amx_bf16 };

// The level kernels should use: detected capability, lowered by
// KILN_CPU_TARGET and by set_cpu_target_override().
CpuTarget cpu_target();
const char* cpu_target_name();
const char* cpu_target_name(CpuTarget t);
// What the hardware (and OS) supports, ignoring the environment and overrides.
CpuTarget cpu_target_detected();

// AVX512-VNNI (vpdpbusd) where cpu_target() allows AVX-512: not a level of
// its own (every AVX512-BF16 CPU has it, and so do AVX-512 CPUs without
// BF16 since Cascade Lake), so forcing avx2 turns it off.
bool cpu_has_avx512_vnni();

// Whether CPUID names AMD ("AuthenticAMD"). Only for tuning constants that
// were measured to differ between the two vendors' memory systems (the
// small-M kernels' software prefetch distance, gemm_internal.h).
bool cpu_is_amd();

// Test hook: forces a level (clamped to what the CPU supports) until
// clear_cpu_target_override(). Not meant to be flipped while kernels run.
void set_cpu_target_override(CpuTarget t);
void clear_cpu_target_override();

}  // namespace kiln::cpu
