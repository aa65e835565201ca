#pragma once
// The GPU JIT service (fast::cuda_kernel; meant to serve compile's GPU
// code generator too): CUDA C++ source -> NVRTC -> cubin for the current
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

}  // namespace kiln::cuda
