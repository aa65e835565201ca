// fast::cuda_kernel on the GPU (include/kiln/fast.h, core/custom_kernel.cpp).
//
// Why it is shaped so: the user's kernel is compiled at run time by the
// GPU JIT service (jit.h: NVRTC to a cubin for this device, cached in
// memory and on disk) after the preamble below, and launched with
// cudaLaunchKernel on the node's stream, so it is recorded by the stream
// capture that builds the batch's CUDA graph like any built-in kernel.
// Shapes and strides travel by value as kernel parameters (no upload);
// the only other work is the optional row-contiguous copy of inputs and
// the init_value fill of outputs, both on the same stream. Its speed is
// the user's kernel's: `kiln bench` has no row for it.
#include <cstring>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/jit.h"
#include "core/host_cast.h"
#include "core/primitives_custom_kernel.h"

namespace kiln {
namespace cuda {
namespace {

constexpr const char* kOp = "fast::cuda_kernel";

// Types and helpers every custom GPU kernel sees (MLX's CUDA kernels see
// the same names: Shape, Strides, elem_to_loc, cg).
const std::string& preamble() {
  static const std::string text =
      "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <cooperative_groups.h>\n\n"
      "namespace cg = cooperative_groups;\n\n"
      "namespace kiln {\n"
      "constexpr int kMaxNdim = " + std::to_string(kKernelMaxNdim) + ";\n"
      "struct Shape {\n"
      "  int32_t v[kMaxNdim];\n"
      "  __device__ int32_t operator[](int i) const { return v[i]; }\n"
      "  __device__ const int32_t* data() const { return v; }\n"
      "};\n"
      "struct Strides {\n"
      "  int64_t v[kMaxNdim];\n"
      "  __device__ int64_t operator[](int i) const { return v[i]; }\n"
      "  __device__ const int64_t* data() const { return v; }\n"
      "};\n"
      "// The offset of row-major element `elem` in an array of these strides.\n"
      "__device__ inline int64_t elem_to_loc(int64_t elem, const int32_t* shape, const int64_t* strides, int ndim) {\n"
      "  int64_t loc = 0;\n"
      "  for (int i = ndim - 1; i >= 0 && elem > 0; --i) {\n"
      "    loc += (elem % shape[i]) * strides[i];\n"
      "    elem /= shape[i];\n"
      "  }\n"
      "  return loc;\n"
      "}\n"
      "__device__ inline int64_t elem_to_loc(int64_t elem, const Shape& shape, const Strides& strides, int ndim) {\n"
      "  return elem_to_loc(elem, shape.data(), strides.data(), ndim);\n"
      "}\n"
      "}  // namespace kiln\n\n";
  return text;
}

template <typename U>
__global__ void fill_words(U* out, U value, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = value;
  }
}

template <typename U>
void launch_fill(void* out, const unsigned char* bits, int64_t n) {
  U v;
  std::memcpy(&v, bits, sizeof(U));
  const int block = 256;
  const int64_t blocks = std::min<int64_t>((n + block - 1) / block, 65535);
  fill_words<U><<<static_cast<unsigned>(blocks), block, 0, current_stream()>>>(static_cast<U*>(out), v, n);
}

// Sets every element of out to `value` converted to out's dtype.
void fill(array& out, char* dst, float value) {
  if (out.size() == 0) return;
  unsigned char bits[8];
  detail::host_cast(&value, float32, bits, out.dtype(), 1);
  const int64_t n = static_cast<int64_t>(out.size());
  switch (out.itemsize()) {
    case 1: launch_fill<uint8_t>(dst, bits, n); break;
    case 2: launch_fill<uint16_t>(dst, bits, n); break;
    case 4: launch_fill<uint32_t>(dst, bits, n); break;
    default: launch_fill<unsigned long long>(dst, bits, n); break;
  }
  KILN_CUDA_CHECK_LAUNCH(kOp);
}

}  // namespace
}  // namespace cuda

void CustomKernel::eval_gpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  using namespace cuda;
  cudaKernel_t kernel = jit_kernel(preamble() + source_, kernel_name_, kOp);

  // Parameter storage: cudaLaunchKernel reads each parameter through a
  // pointer, so addresses must stay put: reserve first.
  std::vector<const void*> ptrs;
  std::vector<KernelShapeArgs> shape_args;
  ptrs.reserve(inputs.size() + outputs.size());
  shape_args.reserve(inputs.size());
  std::vector<void*> params;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& d = *inputs[i].desc();
    const bool copy = ensure_row_contiguous_ && !detail::is_row_contiguous(d.shape, d.strides);
    const char* src = inputs[i].size() ? in_ptr(inputs[i]) : nullptr;
    Strides st = d.strides;
    if (copy && src) {
      st = row_major_strides(d.shape);
      char* tmp = static_cast<char*>(scratch(inputs[i].nbytes(), kOp));
      copy_strided(src, d.dtype, d.shape, d.strides, tmp, d.dtype, st, kOp);
      src = tmp;
    }
    ptrs.push_back(src);
    params.push_back(&ptrs.back());
    shape_args.emplace_back();
    pack_shape_args(shape_infos_[i], d.shape, st, shape_args.back(), [&](void* p) { params.push_back(p); });
  }
  for (auto& out : outputs) {
    cuda::allocate(out, kOp);
    char* dst = out_ptr(out);
    if (init_value_) fill(out, dst, *init_value_);
    ptrs.push_back(dst);
    params.push_back(&ptrs.back());
  }

  // MLX's launch: grid counts threads, threadgroup is the block.
  const dim3 block(std::min(threadgroup_[0], grid_[0]), std::min(threadgroup_[1], grid_[1]),
                   std::min(threadgroup_[2], grid_[2]));
  const dim3 blocks((grid_[0] + threadgroup_[0] - 1) / threadgroup_[0], (grid_[1] + threadgroup_[1] - 1) / threadgroup_[1],
                    (grid_[2] + threadgroup_[2] - 1) / threadgroup_[2]);
  if (shared_memory_ > 48 * 1024) {
    int device = 0;
    KILN_CUDA_CHECK(kOp, cudaGetDevice(&device));
    KILN_CUDA_CHECK(kOp, cudaKernelSetAttributeForDevice(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                         shared_memory_, device));
  }
  KILN_CUDA_CHECK(kOp, cudaLaunchKernel(reinterpret_cast<const void*>(kernel), blocks, block, params.data(),
                                        static_cast<size_t>(shared_memory_), current_stream()));
}

}  // namespace kiln
