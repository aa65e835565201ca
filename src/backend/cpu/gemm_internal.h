#pragma once
// Pieces shared by the fp32 and bf16 GEMM entry points: the blocked
// (GotoBLAS/BLIS-style) driver, panel packing, micro-kernels and the
// small-M matrix-vector paths. Internal to src/backend/cpu.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/gemm.h"

namespace kiln::cpu::gemm_detail {

// How a micro-kernel writes its tile into C.
enum StoreMode : int {
  kStoreF32 = 0,       // C = tile (first K block)
  kAccumulateF32 = 1,  // C += tile (later K blocks)
  kStoreBf16 = 2,      // C = bf16(tile), round to nearest even (single K block only)
};

// Computes the MR x NR product of one packed A micro-panel and one packed B
// micro-panel over kc_padded k values, and writes its top-left mr x nr
// corner to C (row-major, leading dimension ldc in elements).
using MicroKernelFn = void (*)(int64_t kc_padded, const void* a_panel, const void* b_panel, void* c,
                               int64_t ldc, int mr, int nr, int store_mode);

// Packs `len` (<= R) lines of a strided source into one R-wide micro-panel:
// the k-th group holds element (r, k) for r in [0, R), zero beyond len and
// beyond klen (up to the kernel's K alignment). `line_stride` steps between
// lines (rows of A, columns of B), `k_stride` along K. Used for both A
// (lines = rows) and B (lines = columns).
using PackFn = void (*)(const void* src, int64_t line_stride, int64_t k_stride, int64_t len, int64_t klen,
                        void* dst);

// One kernel family with its cache blocking.
struct KernelSpec {
  const char* name;
  int mr, nr;          // register tile
  int64_t kc, mc, nc;  // cache blocks (kc multiple of k_align, mc of mr, nc of nr)
  int k_align;         // packed K is padded to this (2 for bf16 pairs)
  int packed_bytes;    // bytes per packed element (4: fp32, 2: bf16)
  int src_bytes;       // bytes per source element of A and B
  MicroKernelFn kernel;
  PackFn pack_a, pack_b;
};

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
inline int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// C = 0 (K = 0).
inline void zero_c(const GemmArgs& g, bool out_bf16) {
  const size_t es = out_bf16 ? 2 : 4;
  for (int64_t i = 0; i < g.M; ++i) std::memset(static_cast<char*>(g.C) + i * g.ldc * es, 0, g.N * es);
}

// Runs C = A * B with the given kernel family. C is float32, or bfloat16
// when out_bf16 (then partial sums over several K blocks go through an fp32
// workspace so rounding happens once).
void run_blocked_gemm(const GemmArgs& g, const KernelSpec& spec, bool out_bf16);

// Kernel families (defined in gemm_f32_kernels.cpp / gemm_bf16.cpp).
const KernelSpec& f32_avx512_spec();       // fp32 sources, 14x32 AVX-512 kernel
const KernelSpec& f32_avx2_spec();         // fp32 sources, 6x16 AVX2 kernel
const KernelSpec& bf16_to_f32_avx512_spec();  // bf16 sources widened while packing
const KernelSpec& bf16_to_f32_avx2_spec();
const KernelSpec& bf16_dot_avx512_spec();  // bf16 sources, vdpbf16ps 14x32 kernel
const KernelSpec& f32_avx512_small_m_spec();      // the 8x48 tiles of both, for small M
const KernelSpec& bf16_dot_avx512_small_m_spec();
// The AMX GEMM with its own driver (gemm_bf16_amx.cpp: A and B packed whole,
// C in L2-sized blocks over all of K); B from `columns` when it is given.
void run_amx_gemm(const GemmArgs& g, bool out_bf16, const BColumnsFn* columns = nullptr);
// 8 <= M <= 32 rows against a row-major B, or 6 <= M <= 32 against a
// transposed one (x W^T), on AMX with B streamed once (gemm_bf16_amx.cpp);
// false where the shape or layout is not one it takes. Below those rows the
// vdpbf16ps paths read B as fast (2-vCPU Xeon, K = 4096, N = 14336, ms, AMX
// / vdpbf16ps; row-major B: M = 4 5.6-6.2 / 3.8-4.1, 6 5.8-6.2 / 4.4-4.8, 8
// 5.5-6.3 / 5.6-6.1, 9 5.3-6.1 / 6.2, 16 5.7-6.3 / 10.8-11.3, 32 9.3-9.6 /
// 21-22; transposed, medians of noisy runs: M = 2 3.5-5.7 / 2.6, 3 3.3-3.9 /
// 3.3-4.2, 4 3.8-4.5 / 3.6-3.7, 6 3.2-4.8 / 4.8-6.0, 7 4.0-4.3 / 5.4-5.5).
inline constexpr int64_t kAmxSmallMinM = 8, kAmxSmallMinMTransposed = 6;
// Products of 33 or more rows up to kAmxSmallProductMax multiply-adds, A
// row-major with K a multiple of 32, on AMX without whole-operand packing or
// barriers (gemm_bf16_amx.cpp); false where the shape or layout is not one it
// takes. Against run_amx_gemm (2-vCPU Xeon, 2026-12-07, alternating, µs):
// 512^3 124 / 154, 640^3 258 / 398, 768^3 435 / 572, 896^3 706 / 761, 1024^3
// 1159 / 1064; 128 x 4096 x 128 81 / 173, 2048 x 256 x 256 141 / 159, but
// 1024 x 512 x 1024 707 / 539 and 2048 x 512 x 512 696 / 524 (A, streamed
// from L2 once per panel, no longer fits there), so the cut is at 768^3.
bool try_amx_small_product(const GemmArgs& g, bool out_bf16);
inline constexpr double kAmxSmallProductMax = 768.0 * 768 * 768;
// With `columns` (B made 32 columns at a time, as gemm_bf16_columns) any M <= 32
// takes the transposed form.
bool try_amx_small_m(const GemmArgs& g, bool out_bf16, const BColumnsFn* columns = nullptr);

// Whether C[M, N] goes faster in 8 x 48 tiles than in 14 x 32 ones. Per
// FMA the two (24 FMAs per 3 B loads, 28 per 2) ran within ~2% of each
// other on a Zen 4 VM (K = N = 4096, ms, 14x32 / 8x48: fp32 M = 512
// 84.9-88.0 / 84.1-85.5, 1024 165-169 / 169), so the tiles that pad C least
// win unless they save under ~2% of it: fp32 M = 64 14.7 / 13.6, 128
// 25.0-25.5 / 23.5-23.9, 256 46.0 / 44.2; bf16 M = 64 7.5 / 7.3, 128 12.9 /
// 12.3, 256 25.4 / 22.3; but 256^3, where 48-wide tiles pad N by 12%, 189-218
// / 220-236 us. (Session 22: M = 16 7.40 -> 5.40, bf16 4.39 -> 3.48; M = 9
// and 12 stay in 14-row tiles, bf16 3.26 / 3.19 against 3.63 / 3.42.)
inline bool prefer_small_m_tile(int64_t M, int64_t N) {
  auto up = [](int64_t x, int64_t m) { return (x + m - 1) / m * m; };
  return up(M, 8) * up(N, 48) * 102 < up(M, 14) * up(N, 32) * 100;
}

// Small-M path (AVX-512 only): streams B exactly once, split over N across
// threads. Returns false if the shape/layout is not one it handles (caller
// then uses the blocked path). b_is_bf16 selects the B element type; A is
// always read as float32 or bfloat16 matching a_is_bf16.
bool try_gemv_avx512(const GemmArgs& g, bool a_is_bf16, bool b_is_bf16, bool out_bf16);

// Largest M the matrix-vector path takes.
inline constexpr int64_t kGemvMaxM = 8;

// Small-M bf16 x bf16 on vdpbf16ps with a row-major B read in place
// (gemm_gemv_bf16.cpp; the caller checks for AVX512-BF16): false when the
// shape or layout is not one it handles.
// With a transposed B (unit row stride: a weight [N, K] as x W^T) it takes
// M <= kGemvBf16DotMaxM.
inline constexpr int kGemvBf16MaxM = 32;
inline constexpr int kGemvBf16DotMaxM = 8;
bool try_gemv_bf16_dot(const GemmArgs& g, bool out_bf16);

// Rows of B that the row-major small-M kernels prefetch ahead into L2, for
// `row_bytes` of B read per row in one pass over y's block. The AMD Zen 4/5
// VM measured faster with a long distance (`amd_rows`; session 25, 32 rows:
// 4096 x 14336 float32 7.5-8.0 -> 6.6-7.0 ms). On the Intel Xeon VM
// (session 38, 2 threads, M = 1, ms) a distance past ~256 KB evicted lines
// still to be read, and kept the prefetchers from reaching the bandwidth:
// float32 4096 x 14336 (28 KB per row and thread) 10.6 at 32 rows -> 6.0 at
// 8, 6.0 with none; 4096 x 57344 (out of the L3) 49.1 -> 29.8-31.2;
// bfloat16 4096 x 114688 49.8 -> 31.7. Other CPUs prefetch at most 256 KB
// ahead.
inline int64_t gemv_ahead_rows(int64_t amd_rows, int64_t row_bytes) {
  if (cpu_is_amd()) return amd_rows;
  return std::clamp<int64_t>((int64_t{256} << 10) / std::max<int64_t>(row_bytes, 1), 1, amd_rows);
}

// Threads worth using for `flops` of work (OpenMP start-up is a few
// microseconds; below ~1 MFLOP one thread wins).
int useful_threads(int requested, double flops);

// Splits [0, n) into `parts` near-equal contiguous ranges; returns part i.
inline void split_range(int64_t n, int parts, int i, int64_t* begin, int64_t* end) {
  int64_t q = n / parts, r = n % parts;
  *begin = i * q + (i < r ? i : r);
  *end = *begin + q + (i < r ? 1 : 0);
}

// The small-M paths (gemm_gemv.cpp, gemm_gemv_bf16.cpp): f(n0, n1) over
// column ranges in units of `unit` columns, with threads by the bytes of B
// (below ~256 KB one thread streams it in microseconds and fork/join would
// dominate).
template <typename F>
void over_columns(int threads, double b_bytes, int64_t N, int64_t unit, F&& f) {
  const int64_t units = (N + unit - 1) / unit;
  int nt = std::max(1, std::min<int>(threads, static_cast<int>(b_bytes / (256 * 1024))));
  nt = static_cast<int>(std::min<int64_t>(nt, units));
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    int64_t u0, u1;
    split_range(units, omp_get_num_threads(), omp_get_thread_num(), &u0, &u1);
    const int64_t n0 = u0 * unit, n1 = std::min(N, u1 * unit);
    if (n0 < n1) f(n0, n1);
  }
}

// make(std::integral_constant<int, M>) for the M among 1 .. sizeof...(Ms):
// a kernel template instantiated per row count, picked at run time.
template <typename Make, int... Ms>
auto pick_m(int64_t M, std::integer_sequence<int, Ms...>, Make make) {
  decltype(make(std::integral_constant<int, 1>{})) fn = nullptr;
  ((M == Ms + 1 ? (fn = make(std::integral_constant<int, Ms + 1>{})) : fn), ...);
  return fn;
}

// C[off] = v, rounded to bf16 where C is bf16.
inline void store_c(void* c, bool c_bf16, int64_t off, float v) {
  if (c_bf16) {
    static_cast<bfloat16_t*>(c)[off] = bfloat16_t(v);
  } else {
    static_cast<float*>(c)[off] = v;
  }
}

}  // namespace kiln::cpu::gemm_detail
