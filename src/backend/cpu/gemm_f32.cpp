// fp32 GEMM entry point: picks the matrix-vector path for small M (or
// small N) and the blocked, packed path otherwise, for the ISA level
// cpu_target() allows. The pieces live in gemm_driver.cpp (loop nest and
// threads), gemm_packing.h, gemm_f32_kernels.cpp and gemm_gemv.cpp.
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/gemm_internal.h"

namespace kiln::cpu {

void gemm_f32(const GemmArgs& args) {
  using namespace gemm_detail;
  if (args.M <= 0 || args.N <= 0) return;
  const CpuTarget t = cpu_target();
  if (t >= CpuTarget::avx512) {
    if (try_gemv_avx512(args, false, false, false)) return;
    const bool small_m = prefer_small_m_tile(args.M, args.N);
    run_blocked_gemm(args, small_m ? f32_avx512_small_m_spec() : f32_avx512_spec(), false);
  } else {
    // The library's baseline is x86-64-v3, so "scalar" also runs the AVX2 kernel.
    run_blocked_gemm(args, f32_avx2_spec(), false);
  }
}

}  // namespace kiln::cpu
