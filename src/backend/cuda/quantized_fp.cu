// MLX's microscaling modes (mxfp4, mxfp8, nvfp4) on the GPU. The encodings
// and MLX's rounding steps are backend/common/fp_quant.h, the text the CPU
// kernels use too; this file compiles with --fmad=false so that no product
// and sum contract into an fma where the CPU rounds both, and quantize /
// dequantize give the CPU's words, scales and values bit for bit
// (tests/cuda/test_cuda_quant.cpp).
//
// - quantize: a thread per group (the chain of rounded steps is serial
//   per group; quantization is not on a hot path).
// - dequantize: a thread per packed byte (two fp4 values or one fp8).
// - QMV (transposed w, M <= 8, 16-byte rows: decode; `kiln bench` rows
//   qmv_mxfp4 / qmv_mxfp8): a warp per row of w, each lane streaming every
//   32nd 16-byte vector of it (32 fp4 or 16 fp8 values). Codes decode
//   through tables in shared memory (16 fp4 values, 256 fp8 values, 256
//   scale values rounded to x's dtype as MLX's kernels read them), the dot
//   of each 16-value half is scaled once, and each decoded vector serves
//   the M rows of x, read with 128-bit loads (one 2-byte load per value
//   before: qmv_mxfp4 1 x 4096 x 14336 bf16 ran 135 us on the H200, 0.05 of
//   the copy bandwidth, against 106 us for MLX). Explicit fmaf keeps the
//   products fused.
// - QMM (everything else, prefill): w dequantized into x's dtype in a
//   scratch buffer, then cuBLASLt (as the affine QMM in quantized.cu).
// - gather_qmm: a warp per output element (correct, not fast).
#include "backend/common/fp_quant.h"
#include "backend/cuda/index_read.cuh"
#include "backend/cuda/kernel_utils.cuh"
#include "backend/cuda/quantized_fp.h"
#include "core/ops_util.h"

namespace kiln::cuda {
namespace {

// fp_quant.h's rounding policy on the device.
template <typename T>
struct RoundTo {
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  static constexpr uint8_t kNonFiniteByte = is_half_v<T> ? 0 : 0x80;
  // A NaN passes as it is: the device conversions drop its sign, the
  // CPU's keep it (and the sign reaches fp8 codes).
  __device__ static C round(C v) {
    if (v != v) return v;
    if constexpr (std::is_same_v<T, __half>) return __half2float(__float2half_rn(v));
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(__float2bfloat16_rn(v));
    else return v;
  }
};

template <typename T>
__device__ __forceinline__ typename RoundTo<T>::C load_c(T v) {
  return static_cast<typename RoundTo<T>::C>(v);
}

__device__ __forceinline__ uint32_t code_at(const uint8_t* row, int64_t k, int bits) {
  return bits == 8 ? row[k] : (row[k >> 1] >> ((k & 1) * 4)) & 15u;
}
__device__ __forceinline__ float code_value(uint32_t code, int bits) {
  return bits == 8 ? fpq::from_fp8(code) : fpq::fp4_value(code);
}

template <typename T>
__global__ void fp_quantize_kernel(const T* __restrict__ w, int64_t groups, int gs, int bits, bool nvfp4,
                                   const float* __restrict__ global, uint8_t* __restrict__ packed,
                                   uint8_t* __restrict__ scales) {
  using C = typename RoundTo<T>::C;
  const float encode = global ? __fdiv_rn(2688.0f, *global) : 1.0f;
  const int group_bytes = gs * bits / 8;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const T* x = w + g * gs;
    uint8_t codes[32];
    auto load = [x](int k) { return load_c<T>(x[k]); };
    scales[g] = fpq::quantize_group<C, RoundTo<T>>(load, gs, bits, nvfp4, encode, codes);
    uint8_t* out = packed + g * group_bytes;
    if (bits == 8) {
      for (int k = 0; k < gs; ++k) out[k] = codes[k];
    } else {
      for (int i = 0; i < gs / 2; ++i) out[i] = static_cast<uint8_t>(codes[2 * i] | (codes[2 * i + 1] << 4));
    }
  }
}

// A thread per value; `global` (nvfp4): the float32 factor is global / 2688.
template <typename T>
__global__ void fp_dequantize_kernel(const uint8_t* __restrict__ w, const uint8_t* __restrict__ scales, int64_t total,
                                     int64_t K, int gs, int bits, bool nvfp4, const float* __restrict__ global,
                                     T* __restrict__ out) {
  using C = typename RoundTo<T>::C;
  const int64_t row_bytes = K * bits / 8, G = K / gs;
  const float factor = global ? __fdiv_rn(*global, 2688.0f) : 0.0f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t r = i / K, k = i % K;
    uint32_t sb = scales[r * G + k / gs];
    float v = code_value(code_at(w + r * row_bytes, k, bits), bits);
    if (global) {
      out[i] = static_cast<T>(__fmul_rn(v, __fmul_rn(fpq::from_fp8(sb), factor)));
    } else {
      C s = RoundTo<T>::round(static_cast<C>(fpq::scale_value(sb, nvfp4)));
      out[i] = static_cast<T>(static_cast<C>(v) * s);
    }
  }
}

// qqmm's rounding of an operand: a thread per group (fp_quant.h's
// quantize_dequantize_group, every step in float32), the value rounded once to T.
template <typename T>
__global__ void fp_quantize_dequantize_kernel(const T* __restrict__ x, int64_t groups, int gs, int bits, bool nvfp4,
                                              const float* __restrict__ global, T* __restrict__ out) {
  const float encode = global ? __fdiv_rn(2688.0f, *global) : 1.0f;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const T* in = x + g * gs;
    T* o = out + g * gs;
    fpq::quantize_dequantize_group([in](int k) { return static_cast<float>(in[k]); },
                                   [o](int k, float v) { o[k] = static_cast<T>(v); }, gs, bits, nvfp4, encode);
  }
}

constexpr int kFpQmvWarps = 8;

// x[0, 16) as floats. kVec: p is 16-byte aligned, read as 128-bit loads (a
// lane's 16 values are 32 or 64 contiguous bytes, next to its neighbours':
// the warp's loads coalesce); else one load per value.
template <bool kVec, typename T>
__device__ __forceinline__ void load_x16(const T* __restrict__ p, float (&out)[16]) {
  if constexpr (kVec) {
    constexpr int kVecs = static_cast<int>(sizeof(T));  // 16 values of sizeof(T) bytes, 16 bytes a load
    uint4 raw[kVecs];
#pragma unroll
    for (int i = 0; i < kVecs; ++i) raw[i] = __ldg(reinterpret_cast<const uint4*>(p) + i);
    T v[16];
    memcpy(v, raw, sizeof v);
#pragma unroll
    for (int e = 0; e < 16; ++e) out[e] = static_cast<float>(v[e]);
  } else {
#pragma unroll
    for (int e = 0; e < 16; ++e) out[e] = static_cast<float>(p[e]);
  }
}

// Needs rows of a multiple of 16 bytes, 16-byte aligned. x is [M, K] in T.
template <typename T, int M, int BITS, bool kVecX>
__global__ void __launch_bounds__(kFpQmvWarps * 32)
    fp_qmv_kernel(const T* __restrict__ x, const uint8_t* __restrict__ w, const uint8_t* __restrict__ scales,
                  T* __restrict__ y, int64_t N, int64_t K, int gs, bool nvfp4) {
  constexpr int kPerVec = 16 * 8 / BITS;  // values per 16-byte vector: 32 or 16
  __shared__ float code_lut[BITS == 8 ? 256 : 16];
  __shared__ float scale_lut[256];
  for (int i = threadIdx.x; i < (BITS == 8 ? 256 : 16); i += blockDim.x) {
    code_lut[i] = BITS == 8 ? fpq::from_fp8(i) : fpq::fp4_value(i);
  }
  for (int i = threadIdx.x; i < 256; i += blockDim.x) {
    scale_lut[i] = RoundTo<T>::round(fpq::scale_value(i, nvfp4));
  }
  __syncthreads();
  const int lane = threadIdx.x % 32;
  const int64_t row_bytes = K * BITS / 8, vecs = row_bytes / 16, G = K / gs;
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * kFpQmvWarps + threadIdx.x / 32; n < N;
       n += static_cast<int64_t>(gridDim.x) * kFpQmvWarps) {
    float acc[M];
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = 0.f;
    const uint8_t* row = w + n * row_bytes;
    for (int64_t v = lane; v < vecs; v += 32) {
      uint4 u = __ldcs(reinterpret_cast<const uint4*>(row) + v);
      uint8_t bytes[16];
      memcpy(bytes, &u, 16);
      const int64_t k0 = v * kPerVec;
#pragma unroll
      for (int h = 0; h < kPerVec / 16; ++h) {
        float q[16];
#pragma unroll
        for (int e = 0; e < 16; ++e) {
          q[e] = BITS == 8 ? code_lut[bytes[e]] : code_lut[(bytes[h * 8 + e / 2] >> ((e & 1) * 4)) & 15u];
        }
        const int64_t kh = k0 + h * 16;
        const float s = scale_lut[scales[n * G + kh / gs]];
#pragma unroll
        for (int m = 0; m < M; ++m) {
          float xv[16];
          load_x16<kVecX>(x + m * K + kh, xv);
          float t = 0.f;
#pragma unroll
          for (int e = 0; e < 16; ++e) t = fmaf(q[e], xv[e], t);
          acc[m] = fmaf(s, t, acc[m]);
        }
      }
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], o);
    }
    if (lane < M) {
      float out = acc[0];
#pragma unroll
      for (int m = 1; m < M; ++m) out = lane == m ? acc[m] : out;
      y[lane * N + n] = static_cast<T>(out);
    }
  }
}

template <typename T>
void launch_fp_qmv(const T* x, const uint8_t* w, const uint8_t* s, T* y, int64_t M, int64_t N, int64_t K, QuantParams p,
                   cudaStream_t st) {
  const unsigned grid = static_cast<unsigned>(std::max<int64_t>(1, (N + kFpQmvWarps - 1) / kFpQmvWarps));
  const bool nv = p.mode == QuantMode::nvfp4;
  // x's rows start 16-byte aligned when x does (K is a multiple of the
  // group size, 16 or 32 values).
  const bool vec_x = reinterpret_cast<uintptr_t>(x) % 16 == 0 && (K * sizeof(T)) % 16 == 0;
  auto go = [&](auto m_tag) {
    constexpr int kM = decltype(m_tag)::value;
    auto launch = [&](auto kernel) { kernel<<<grid, kFpQmvWarps * 32, 0, st>>>(x, w, s, y, N, K, p.group_size, nv); };
    if (p.bits == 8) {
      if (vec_x) launch(fp_qmv_kernel<T, kM, 8, true>);
      else launch(fp_qmv_kernel<T, kM, 8, false>);
    } else {
      if (vec_x) launch(fp_qmv_kernel<T, kM, 4, true>);
      else launch(fp_qmv_kernel<T, kM, 4, false>);
    }
  };
  switch (M) {
    case 1: return go(std::integral_constant<int, 1>{});
    case 2: return go(std::integral_constant<int, 2>{});
    case 3: return go(std::integral_constant<int, 3>{});
    case 4: return go(std::integral_constant<int, 4>{});
    case 5: return go(std::integral_constant<int, 5>{});
    case 6: return go(std::integral_constant<int, 6>{});
    case 7: return go(std::integral_constant<int, 7>{});
    default: return go(std::integral_constant<int, 8>{});
  }
}

// out[i] = x[lhs[i]] @ dequantize(w[rhs[i]]): a warp per output element.
template <typename T>
__global__ void fp_gather_qmm_kernel(const T* __restrict__ x, const uint8_t* __restrict__ w,
                                     const uint8_t* __restrict__ scales, const uint32_t* __restrict__ lhs,
                                     const uint32_t* __restrict__ rhs, T* __restrict__ y, int64_t count,
                                     int64_t x_count, int64_t w_count, int64_t M, int64_t N, int64_t K, int gs,
                                     int bits, bool nvfp4, bool transpose, IndexErrorSlot* err) {
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int lane = threadIdx.x % 32;
  const int64_t packed_len = transpose ? K : N;
  const int64_t row_bytes = packed_len * bits / 8, G = packed_len / gs;
  const int64_t w_mat = (transpose ? N : K) * row_bytes, g_mat = (transpose ? N : K) * G;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; o < count * M * N;
       o += warps) {
    int64_t i = o / (M * N), m = (o / N) % M, n = o % N;
    const int64_t li = clamp_unsigned_index(lhs[i], x_count, lane == 0 ? err : nullptr);
    const int64_t ri = clamp_unsigned_index(rhs[i], w_count, lane == 0 ? err : nullptr);
    const uint8_t* wm = w + ri * w_mat;
    const uint8_t* sm = scales + ri * g_mat;
    const T* xr = x + (li * M + m) * K;
    C acc = 0;
    for (int64_t k = lane; k < K; k += 32) {
      int64_t r = transpose ? n : k, c = transpose ? k : n;
      C s = RoundTo<T>::round(static_cast<C>(fpq::scale_value(sm[r * G + c / gs], nvfp4)));
      C val = static_cast<C>(code_value(code_at(wm + r * row_bytes, c, bits), bits)) * s;
      acc += val * static_cast<C>(xr[k]);
    }
    for (int s = 16; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, s);
    if (lane == 0) y[o] = static_cast<T>(acc);
  }
}

template <typename F>
void fp_float_dispatch(Dtype t, const char* op, F&& f) {
  switch (t) {
    case Dtype::float32: return f(Tag<float>{});
    case Dtype::float16: return f(Tag<__half>{});
    case Dtype::bfloat16: return f(Tag<__nv_bfloat16>{});
    case Dtype::float64: return f(Tag<double>{});
    default: throw Error(std::string("[") + op + "] unsupported dtype " + dtype_name(t));
  }
}

// The device pointer of an nvfp4 global scale at `pos`, or null.
const float* global_ptr(const std::vector<array>& inputs, size_t pos) {
  return inputs.size() > pos ? reinterpret_cast<const float*>(in_ptr(inputs[pos])) : nullptr;
}

// One 2-d product on row-major device operands.
template <typename T>
void product_2d(Dtype t, const T* x, const uint8_t* w, const uint8_t* s, T* y, int64_t M, int64_t N, int64_t K,
                QuantParams p, bool transpose, cudaStream_t st) {
  const int64_t row_bytes = (transpose ? K : N) * p.bits / 8;
  const bool nv = p.mode == QuantMode::nvfp4;
  if (!std::is_same_v<T, double> && transpose && M <= 8 && row_bytes % 16 == 0 && aligned16(w) &&
      K % 16 == 0) {
    launch_fp_qmv<T>(x, w, s, y, M, N, K, p, st);
    KILN_CUDA_CHECK_LAUNCH("quantized_matmul");
    return;
  }
  T* dense = static_cast<T*>(scratch(static_cast<size_t>(N * K) * sizeof(T), "quantized_matmul"));
  int64_t packed_len = transpose ? K : N;
  fp_dequantize_kernel<T><<<quant_grid(N * K, 256), 256, 0, st>>>(w, s, N * K, packed_len, p.group_size, p.bits, nv,
                                                                   nullptr, dense);
  KILN_CUDA_CHECK_LAUNCH("quantized_matmul");
  gemm_rowmajor(t, reinterpret_cast<const char*>(x), reinterpret_cast<const char*>(dense), transpose,
                reinterpret_cast<char*>(y), M, N, K);
}

}  // namespace

void fp_quantize(const std::vector<array>& inputs, QuantParams p, std::vector<array>& outputs) {
  for (auto& o : outputs) allocate(o, "quantize");
  const array& w = inputs[0];
  int64_t groups = static_cast<int64_t>(w.size()) / p.group_size;
  if (groups == 0) return;
  const char* pw = row_major(w, "quantize");
  const float* g = global_ptr(inputs, 1);
  auto* packed = reinterpret_cast<uint8_t*>(out_ptr(outputs[0]));
  auto* scales = reinterpret_cast<uint8_t*>(out_ptr(outputs[1]));
  cudaStream_t st = current_stream();
  fp_float_dispatch(w.dtype(), "quantize", [&](auto tag) {
    using T = typename decltype(tag)::type;
    fp_quantize_kernel<T><<<quant_grid(groups, 128), 128, 0, st>>>(reinterpret_cast<const T*>(pw), groups,
                                                                   p.group_size, p.bits, p.mode == QuantMode::nvfp4, g,
                                                                   packed, scales);
  });
  KILN_CUDA_CHECK_LAUNCH("quantize");
}

void fp_dequantize(const std::vector<array>& inputs, QuantParams p, array& out) {
  allocate(out, "dequantize");
  if (out.size() == 0) return;
  const char* pw = row_major(inputs[0], "dequantize");
  const char* ps = row_major(inputs[1], "dequantize");
  const float* g = global_ptr(inputs, 2);
  char* po = out_ptr(out);
  int64_t total = static_cast<int64_t>(out.size()), K = out.shape(-1);
  cudaStream_t st = current_stream();
  fp_float_dispatch(out.dtype(), "dequantize", [&](auto tag) {
    using T = typename decltype(tag)::type;
    fp_dequantize_kernel<T><<<quant_grid(total, 256), 256, 0, st>>>(
        reinterpret_cast<const uint8_t*>(pw), reinterpret_cast<const uint8_t*>(ps), total, K, p.group_size, p.bits,
        p.mode == QuantMode::nvfp4, g, reinterpret_cast<T*>(po));
  });
  KILN_CUDA_CHECK_LAUNCH("dequantize");
}

void fp_quantized_matmul(const std::vector<array>& inputs, QuantParams p, bool transpose, array& out) {
  allocate(out, "quantized_matmul");
  if (out.size() == 0) return;
  const array& x = inputs[0];
  const array& w = inputs[1];
  int64_t K = x.shape(-1), N = out.shape(-1);
  const char* px = row_major(x, "quantized_matmul");
  const char* pw = row_major(w, "quantized_matmul");
  const char* ps = row_major(inputs[2], "quantized_matmul");
  char* po = out_ptr(out);
  cudaStream_t st = current_stream();
  int64_t M = w.ndim() == 2 ? static_cast<int64_t>(x.size()) / K : x.shape(-2);
  int64_t batches = static_cast<int64_t>(out.size()) / (M * N);
  int64_t w_bytes = static_cast<int64_t>(w.shape(-2)) * w.shape(-1) * 4;
  int64_t g_mat = static_cast<int64_t>(inputs[2].shape(-2)) * inputs[2].shape(-1);
  fp_float_dispatch(out.dtype(), "quantized_matmul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t bi = 0; bi < batches; ++bi) {
      int64_t wb = w.ndim() == 2 ? 0 : bi;
      product_2d<T>(out.dtype(), reinterpret_cast<const T*>(px) + bi * M * K,
                    reinterpret_cast<const uint8_t*>(pw) + wb * w_bytes,
                    reinterpret_cast<const uint8_t*>(ps) + wb * g_mat, reinterpret_cast<T*>(po) + bi * M * N, M, N,
                    K, p, transpose, st);
    }
  });
}

void fp_gather_qmm(const std::vector<array>& inputs, QuantParams p, bool transpose, array& out) {
  allocate(out, "gather_qmm");
  if (out.size() == 0) return;
  const array& x = inputs[0];
  const array& w = inputs[1];
  int64_t M = x.shape(-2), K = x.shape(-1), N = out.shape(-1);
  int64_t x_count = static_cast<int64_t>(x.size()) / std::max<int64_t>(M * K, 1);
  int64_t w_count =
      static_cast<int64_t>(w.size()) / std::max<int64_t>(static_cast<int64_t>(w.shape(-2)) * w.shape(-1), 1);
  const char* px = row_major(x, "gather_qmm");
  const char* pw = row_major(w, "gather_qmm");
  const char* ps = row_major(inputs[2], "gather_qmm");
  const char* pl = row_major(inputs[3], "gather_qmm");
  const char* pr = row_major(inputs[4], "gather_qmm");
  char* po = out_ptr(out);
  int64_t count = static_cast<int64_t>(inputs[3].size());
  IndexErrorSlot* err = index_error_slot([x_count, w_count](int64_t v) {
    return "[gather_qmm] index " + std::to_string(v) + " out of range: " + std::to_string(x_count) +
           " x matrices, " + std::to_string(w_count) + " w matrices (found on the GPU)";
  });
  cudaStream_t st = current_stream();
  fp_float_dispatch(out.dtype(), "gather_qmm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    fp_gather_qmm_kernel<T><<<quant_grid(count * M * N * 32, 256), 256, 0, st>>>(
        reinterpret_cast<const T*>(px), reinterpret_cast<const uint8_t*>(pw), reinterpret_cast<const uint8_t*>(ps),
        reinterpret_cast<const uint32_t*>(pl), reinterpret_cast<const uint32_t*>(pr), reinterpret_cast<T*>(po),
        count, x_count, w_count, M, N, K, p.group_size, p.bits, p.mode == QuantMode::nvfp4, transpose, err);
  });
  KILN_CUDA_CHECK_LAUNCH("gather_qmm");
}

void fp_quantize_dequantize(const std::vector<array>& inputs, QuantParams p, array& out) {
  allocate(out, "qqmm");
  const array& x = inputs[0];
  const int64_t groups = static_cast<int64_t>(x.size()) / p.group_size;
  if (groups == 0) return;
  const char* px = row_major(x, "qqmm");
  const float* g = global_ptr(inputs, 1);
  char* po = out_ptr(out);
  cudaStream_t st = current_stream();
  fp_float_dispatch(x.dtype(), "qqmm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    fp_quantize_dequantize_kernel<T>
        <<<quant_grid(groups, 128), 128, 0, st>>>(reinterpret_cast<const T*>(px), groups, p.group_size, p.bits,
                                                  p.mode == QuantMode::nvfp4, g, reinterpret_cast<T*>(po));
  });
  KILN_CUDA_CHECK_LAUNCH("qqmm");
}

}  // namespace kiln::cuda

namespace kiln {

void QuantizeDequantize::eval_gpu(const std::vector<array>& inputs, array& out) {
  cuda::fp_quantize_dequantize(inputs, p_, out);
}

}  // namespace kiln
