#pragma once
// The GPU JIT service (fast::cuda_kernel and compile's GPU code generator): CUDA C++ source -> NVRTC -> cubin for the current
// device's compute capability, cached in memory and on disk, loaded with
// the runtime's library API (no link to libcuda: cudart loads the driver).
#include <cuda_runtime.h>

#include <string>

namespace kiln::cuda {

// The kernel `name` (an extern "C" __global__ function) of `source`, built
// for the current device; launch it with cudaLaunchKernel(reinterpret_cast
// <const void*>(kernel), ...). The cache key is the full source, NVRTC's
// options and version, and the architecture. A compile error throws
// kiln::Error naming `op` with NVRTC's log.
cudaKernel_t jit_kernel(const std::string& source, const std::string& name, const char* op);

// The cubin of `source` for sm_<arch> (e.g. 90), built by NVRTC with the
// options jit_kernel uses, without a device and without the caches: for
// checking generated sources on a machine with no GPU. A compile error
// throws kiln::Error naming `op` with NVRTC's log.
std::string jit_compile(const std::string& source, const std::string& name, int arch, const char* op);
// The same build's PTX for compute_<arch> (what NVVM made of the source).
std::string jit_ptx(const std::string& source, const std::string& name, int arch, const char* op);

}  // namespace kiln::cuda
