#pragma once
// compile's GPU code generator: a fused elementwise region (core/compiled.h)
// becomes the CUDA C++ source of one kernel, which the GPU JIT service
// (jit.h) builds with NVRTC. Plain host code (no CUDA runtime), so the
// sources can be generated and checked with NVRTC on a machine without a
// GPU (tests/cuda/test_cuda_compile_codegen.cpp).
//
// A kernel is specialized on how each input is read, one letter per input:
//   'c' contiguous in the output's row-major order   in[i]
//   'v' a single element passed by value (a host scalar: no upload)
//   's' a single element in device memory            in[0]
//   'g' any other layout (broadcast, transposed, strided): its offset comes
//       from the flat index through the collapsed shape and its strides
// and on the index arithmetic: 32-bit where every index and offset fits,
// 64-bit otherwise; `vec` > 1 (only without 'g' inputs) moves `vec`
// elements per thread and load, for inputs and an output aligned to that.
#include <string>

#include "core/compiled.h"

namespace kiln::cuda::codegen {

struct KernelPlan {
  std::string inputs;       // one letter per input (see above)
  int vec = 1;              // elements per vector access; 1: none
  int ndim = 0;             // collapsed dims of the 'g' inputs (0: none)
  bool wide_index = false;  // 64-bit indices
  std::string key() const;
};

// The extern "C" name of every generated kernel.
inline constexpr const char* kKernelName = "kiln_fused";

// The complete, self-contained source of the kernel for `c` and `plan`.
// Its parameters, in order: per input a `const T*` (or a `T` for 'v'),
// `T* out`, `long long n` (elements), `unsigned zero` (always 0, see the
// .cpp), and where ndim > 0 one struct of long long: shape[ndim], then
// strides[k][ndim] for each 'g' input k in order.
std::string kernel_source(const Compiled& c, const KernelPlan& plan);

}  // namespace kiln::cuda::codegen
