#pragma once
// The CPU kernels of affine quantization, shared by quantized.cpp (the
// primitives, quantize / dequantize, the generic and the QMM paths) and
// the QMV kernels (quantized_qmv*.cpp).
#include <cstdint>

#include "kiln/dtype.h"

namespace kiln::cpu {

// One product of x [M, K] (float, row-major) with a transposed quantized w
// [N, K * bits / 32] (scales and biases [N, K / group_size] of dtype `t`,
// row-contiguous) into out [M, N] (float, row-major).
struct QmvArgs {
  const float* x;
  const void* x_raw;  // the same x in dtype t (row-major), for the bf16 GEMM path
  int64_t M, N, K;
  const uint32_t* w;
  const void* scales;
  const void* biases;
  Dtype t;
  int bits, group_size;
  float* out;
  // Set (bfloat16 x, the tiled GEMM path only): the GEMM writes the bf16
  // result here, rounded once from its float32 sums, and `out` is unused.
  bfloat16_t* out_bf16 = nullptr;
};

// The largest M the register-blocked QMV kernels take.
inline constexpr int kQmvMaxRows = 8;

// Runs the SIMD QMV (bits 2, 4, 8; M <= kQmvMaxRows) for the CPU's level:
// false when no SIMD kernel applies (then the caller uses the generic path).
bool qmv_avx512(const QmvArgs& a);
// 4-bit weights with bfloat16 x through vdpbf16ps (AVX512-BF16 CPUs).
bool qmv4_avx512_bf16(const QmvArgs& a);
bool qmv_avx2(const QmvArgs& a);

// Dequantizes `rows` rows of an affine-quantized matrix (K values per row
// along its packed axis; scales and biases [rows, K / group_size]) into
// out (row stride ldo) as MLX does, in T: s * q rounded to T, then + b
// rounded to T (quantized_dequant_avx512.cpp; the caller checks for
// AVX-512). false when it does not apply: bits other than 2, 4, 8, or a
// group size that is not a multiple of 16.
template <typename T>
bool dequantize_rows_avx512(const uint32_t* w, const T* scales, const T* biases, int64_t rows, int64_t K, int bits,
                            int group_size, T* out, int64_t ldo);

// One product of x [M, K] (float, row-major) with a transposed
// microscaling w [N, K * bits / 8 bytes] and its uint8 scales [N, K / gs]
// into out [M, N] (float): the QMV kernels of quantized_fp_qmv*.cpp.
// scale_lut maps a scale byte to its value as the product uses it (the
// e8m0 / e4m3 value rounded to x's dtype, as MLX's kernels read it).
struct FpQmvArgs {
  const float* x;
  int64_t M, N, K;
  const uint8_t* w;
  const uint8_t* scales;
  const float* scale_lut;  // [256]
  int bits, group_size;
  float* out;
};
// false when the kernel does not apply (M > kQmvMaxRows, K not a multiple
// of 32).
bool fp_qmv_avx512(const FpQmvArgs& a);
// mxfp4, nvfp4 and mxfp8 with x exact in bfloat16 through vdpbf16ps
// (AVX512-BF16 CPUs; quantized_qmv_bf16.cpp).
bool fp_qmv_avx512_bf16(const FpQmvArgs& a);
bool fp_qmv_avx2(const FpQmvArgs& a);
// Row n of the product, one value at a time (rows whose scales overflow
// the kernels' folded factors, and the tests' reference).
void fp_qmv_row_scalar(const FpQmvArgs& a, int64_t n);

// out [M, N] = x [M, K] @ w, w [K, N] row-major (or [N, K] when transpose),
// in double over all cores: the float64 path of the quantized products
// (after w is dequantized), which exists for references, not speed.
void dense_product_double(const double* x, const double* w, int64_t M, int64_t N, int64_t K, bool transpose,
                          double* out);

}  // namespace kiln::cpu
