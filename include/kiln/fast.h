#pragma once
// Fused "fast" ops (MLX's mlx/fast.h): each is a primitive that holds the
// fallback built from plain ops. The fused kernel runs where it applies; the
// transformations (vjp, jvp, vmap) and unsupported cases run the fallback,
// which is also the oracle of the tests.
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/array.h"

namespace kiln::fast {

// ---- norms and rotary embeddings ----
//
// Differences from MLX, on purpose: float64 inputs are normalized (and
// rope's angles computed) in float64, where MLX's fallback uses float32;
// rope differentiates with respect to freqs (through the fallback) where
// MLX throws, and gives offsets a zero cotangent. The CPU kernels exist
// (MLX's CPU backend runs the fallback).

// x * rsqrt(mean(x^2, -1) + eps) * weight over the last axis; weight (if
// given) has x's last dimension. The output dtype is result_type(x, weight);
// 16-bit inputs are normalized in float32.
array rms_norm(const array& x, const std::optional<array>& weight, float eps, StreamOrDevice s = {});

// Kiln extension (not in MLX): the residual step of a pre-norm block in one
// pass, {h, rms_norm(h, weight, eps)} with h = x + residual (residual
// broadcast to x's shape, h of their result type). The same numbers as the
// two ops (h is rounded to its dtype before it is normalized); one kernel
// where x, residual and weight share a float dtype and x's shape.
std::pair<array, array> add_rms_norm(const array& x, const array& residual, const std::optional<array>& weight,
                                     float eps, StreamOrDevice s = {});

// Kiln extensions (not in MLX): a quantized product together with the op
// that computes its x, the two places a pre-norm decoder layer feeds a
// product from an elementwise op. The same numbers as the ops they stand
// for, which are their fallbacks:
//   swiglu_quantized_matmul = quantized_matmul(silu(gate) * up, w, ...)
//   add_rms_norm_quantized_matmul = {h, quantized_matmul(rms_norm(h, weight,
//       eps), w, ...)} with h = x + residual (add_rms_norm above).
// On a GPU stream, for one row of x (decode) of float32, float16 or
// bfloat16 on Q4_0, Q8_0 or Q4_K blocks (transpose true, no broadcast
// between the two inputs), one kernel computes x as each of its blocks
// rounds it (the norm for rows of 256 to 2048 16-byte vectors: 2048 to
// 16384 16-bit or 1024 to 8192 float32 values); elsewhere the plain ops run.
// KILN_FUSED_QMV=0 (read once) always takes the plain ops.
array swiglu_quantized_matmul(const array& gate, const array& up, const array& w, const array& scales,
                              const std::optional<array>& biases = std::nullopt, bool transpose = true,
                              std::optional<int> group_size = std::nullopt, std::optional<int> bits = std::nullopt,
                              const std::string& mode = "affine", StreamOrDevice s = {});
std::pair<array, array> add_rms_norm_quantized_matmul(
    const array& x, const array& residual, const std::optional<array>& weight, float eps, const array& w,
    const array& scales, const std::optional<array>& biases = std::nullopt, bool transpose = true,
    std::optional<int> group_size = std::nullopt, std::optional<int> bits = std::nullopt,
    const std::string& mode = "affine", StreamOrDevice s = {});

// (x - mean) * rsqrt(var + eps) * weight + bias over the last axis; weight
// and bias (each optional) have x's last dimension. Output dtype:
// result_type of the given arrays; 16-bit inputs are normalized in float32.
array layer_norm(const array& x, const std::optional<array>& weight, const std::optional<array>& bias, float eps,
                 StreamOrDevice s = {});

// Rotary position embedding of the first `dims` features of x's last axis
// (x: [B, ..., T, D], at least 3-d; the second-to-last axis is the
// position). Feature pairs (2i, 2i+1) when `traditional`, else (i, i +
// dims/2), rotate by (offset + t) * scale * inv_freq_i with inv_freq_i =
// base^(-2i/dims), or 1/freqs[i] when freqs ([dims/2]) is given (exactly
// one of base and freqs). The array offset is a scalar or one position
// per batch entry ([B], integer).
array rope(const array& x, int dims, bool traditional, std::optional<float> base, float scale, int offset,
           const std::optional<array>& freqs = std::nullopt, StreamOrDevice s = {});
array rope(const array& x, int dims, bool traditional, std::optional<float> base, float scale, const array& offset,
           const std::optional<array>& freqs = std::nullopt, StreamOrDevice s = {});

// ---- attention ----

// softmax(scale * queries @ keys^T + mask) @ values, MLX's signature and
// semantics. queries [B, n_q_heads, L_q, D], keys [B, n_kv_heads, L_kv, D],
// values [B, n_kv_heads, L_kv, D_v]; n_q_heads a multiple of n_kv_heads
// (grouped-query / multi-query attention: query head h reads K/V head
// h / (n_q_heads / n_kv_heads); K and V are never repeated in memory).
// mask_mode: "" (none, or the array mask_arr when given), "array" (mask_arr
// required) or "causal" (no mask_arr; query i sees keys j <= i + L_kv - L_q,
// aligned to the end as MLX does). mask_arr: bool (false = masked: the
// score becomes the dtype's lowest finite value, so a fully masked row
// averages V as MLX's fallback does) or additive (a dtype that promotes to
// the output's), broadcastable to [B, n_q_heads, L_q, L_kv]. sinks: one
// logit per query head [n_q_heads], an extra softmax column that takes
// weight but has no value (attention sinks). The result has the type the
// inputs promote to (floating only) and shape [B, n_q_heads, L_q, D_v].
// The fused kernels accumulate in float32 (scores never rounded to the
// 16-bit type, unlike the plain-op fallback, which the transformations use).
// force_fused (MLX's flag) builds the fused primitive even where the op
// would pick the fallback; a case no kernel supports then throws at eval.
array scaled_dot_product_attention(const array& queries, const array& keys, const array& values, const float scale,
                                   const std::string& mask_mode = "", std::optional<array> mask_arr = {},
                                   const std::optional<array>& sinks = {}, bool force_fused = false,
                                   StreamOrDevice s = {});

// ---- custom kernels ----
//
// MLX's cuda_kernel contract: the user writes a kernel body, Kiln writes
// its signature, compiles it (NVRTC on the GPU, the host compiler on the
// CPU), caches it in memory and on disk (keyed by the full source) and
// launches it on arrays as one node of the lazy graph (inside the cached
// CUDA graphs on the GPU). docs/custom_kernels.md has examples.
//
// The signature holds, in order: for each input `name` a pointer
// `const T* name` (T: the input's element type) and, when the source
// mentions them, `name_shape` (int32 per dim), `name_strides` (int64
// elements per dim) and `name_ndim` (int); then for each output `T* name`.
// Shapes and strides have operator[] and data(); kiln::elem_to_loc(elem,
// shape, strides, ndim) is the element offset of flat index elem. Template
// arguments become constants at the top of the body: `constexpr int`,
// `constexpr bool`, or `using Name = <element type>` for a Dtype.
// Element types: bool, uint8_t, uint32_t, int8_t, int32_t, int64_t, float,
// double, and for float16 / bfloat16 `__half` / `__nv_bfloat16` on the GPU,
// `float16_t` / `bfloat16_t` on the CPU (they convert to and from float).
// Inputs are made row-contiguous first unless ensure_row_contiguous is
// false; outputs are row-contiguous, filled with init_value when given,
// else uninitialized. verbose prints the generated source. Custom kernels
// have no vjp, jvp or vmap rule (as in MLX): those throw kiln::Error.
// `header` is pasted at file scope before the kernel (helpers, includes).
// The kernel is named custom_kernel_<name> plus the template values.
// Inputs whose shape or strides the body reads have at most 10 dims.
// Differences from MLX: argument errors throw kiln::Error (MLX:
// std::invalid_argument); a compile error of the user's source throws
// kiln::Error with the compiler's log when the outputs are evaluated;
// MLX's precompiled_cuda_kernel is not provided.
using TemplateArg = std::variant<int, bool, Dtype>;

using CustomKernelFunction = std::function<std::vector<array>(
    const std::vector<array>& inputs, const std::vector<Shape>& output_shapes,
    const std::vector<Dtype>& output_dtypes, std::tuple<int, int, int> grid, std::tuple<int, int, int> threadgroup,
    std::vector<std::pair<std::string, TemplateArg>> template_args, std::optional<float> init_value, bool verbose,
    StreamOrDevice s)>;

// A kernel for GPU streams. grid counts threads (not blocks) per dimension,
// threadgroup is the block: the launch is ceil(grid / threadgroup) blocks
// of min(threadgroup, grid) threads. The body uses CUDA's threadIdx,
// blockIdx, blockDim, gridDim, __syncthreads, and cooperative_groups
// (namespace cg). shared_memory: bytes of dynamic shared memory
// (`extern __shared__` in the body).
CustomKernelFunction cuda_kernel(const std::string& name, const std::vector<std::string>& input_names,
                                 const std::vector<std::string>& output_names, const std::string& source,
                                 const std::string& header = "", bool ensure_row_contiguous = true,
                                 int shared_memory = 0);

// Kiln's CPU twin of cuda_kernel, for CPU streams (no MLX counterpart;
// without a stream or device it runs on the CPU's default stream).
// The body runs once per thread of the grid: thread_position_in_grid has
// members x, y, z and converts to the flat index x + gx * (y + gy * z);
// threads_per_grid is the grid (x, y, z; converts to the thread count).
// The flat range is split across the CPU thread pool into contiguous
// chunks of at least threadgroup's size (x * y * z threads), one per pool
// thread; a thread's body runs to its end (`return` ends that thread) with
// no shared memory and no barrier, so a reduction is one thread per row.
// kiln::math::exp and kiln::math::tanh (float) are the library's own
// branch-free exp and tanh (the same values as the exp and tanh ops): a
// loop calling them vectorizes, where std::exp and std::tanh stay scalar
// library calls.
CustomKernelFunction cpu_kernel(const std::string& name, const std::vector<std::string>& input_names,
                                const std::vector<std::string>& output_names, const std::string& source,
                                const std::string& header = "", bool ensure_row_contiguous = true);

}  // namespace kiln::fast
