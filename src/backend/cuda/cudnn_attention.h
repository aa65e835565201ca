#pragma once
// cuDNN's fused flash attention for the prefill problems it serves
// (cudnn_attention.cpp says which); attention_prefill.cu runs the rest.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/attention_params.h"
#include "kiln/dtype.h"

namespace kiln::cuda {

// Runs p (dtype t) through cuDNN and returns true, or returns false with
// nothing enqueued where cuDNN is unavailable, declines the problem, or
// has not seen the shape before (plans are built on a shape's second
// request). Throws kiln::Error under CUDA-graph capture when the plan must
// be built first (the caller's batch then runs eagerly).
bool cudnn_sdpa(const SdpaParams& p, Dtype t, cudaStream_t s);

// For tests: the calls cuDNN ran, and whether its library loaded (false
// until a shape's second request has tried to load it).
uint64_t cudnn_sdpa_runs();
bool cudnn_sdpa_loaded();

}  // namespace kiln::cuda
