#pragma once
// cuDNN's convolution for the problems it serves best (cudnn_conv.cpp says
// which); conv.cu's kernels run the rest.
#include <cuda_runtime.h>

#include "backend/common/conv_geometry.h"
#include "kiln/array.h"

namespace kiln::cuda {

// Runs out = conv(x, w) through cuDNN and returns true, or returns false
// (nothing enqueued) where cuDNN is unavailable, declines the problem, or
// refuses the call (then the problem is remembered as declined).
bool cudnn_conv(const array& x, const char* px, const array& w, const char* pw, const conv::Geometry& g, char* po,
                cudaStream_t s);

}  // namespace kiln::cuda
