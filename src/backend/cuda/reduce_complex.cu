// complex64 sum and prod on the GPU (the only reductions complex64 has).
// The input is copied with the reduced axes last into a row-major scratch
// [outputs, group] (one strided-copy kernel), then a warp per output walks
// its group 32 elements at a time and combines the lanes with shuffles.
// Accumulation is in double (products too), as on the CPU (reduce.cpp).
// Not tuned: complex reductions are rare; the roofline row for reductions
// (kiln bench D2) measures the real-valued kernels of reduce.cu.
#include "backend/cuda/kernel_utils.cuh"
#include "core/ops_util.h"
#include "core/primitives.h"

namespace kiln::cuda {
namespace {

__global__ void complex_reduce_rows(const complex64_t* __restrict__ in, complex64_t* __restrict__ out, int64_t rows,
                                    int64_t len, bool is_prod) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  double re = is_prod ? 1.0 : 0.0, im = 0.0;
  const complex64_t* p = in + row * len;
  for (int64_t k = lane; k < len; k += 32) {
    complex64_t v = p[k];
    if (is_prod) {
      double r = re * v.re - im * v.im;
      im = re * v.im + im * v.re;
      re = r;
    } else {
      re += v.re;
      im += v.im;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    double ore = __shfl_xor_sync(0xffffffffu, re, o), oim = __shfl_xor_sync(0xffffffffu, im, o);
    if (is_prod) {
      double r = re * ore - im * oim;
      im = re * oim + im * ore;
      re = r;
    } else {
      re += ore;
      im += oim;
    }
  }
  if (lane == 0) out[row] = complex64_t(static_cast<float>(re), static_cast<float>(im));
}

}  // namespace

void reduce_complex(ReduceOp op, const array& in, array& out, const std::vector<int>& axes) {
  const char* nm = op == ReduceOp::sum ? "sum" : "prod";
  int64_t rows = static_cast<int64_t>(out.size());
  if (rows == 0) return;
  const auto& d = *in.desc();
  std::vector<bool> reduced(in.ndim(), false);
  for (int ax : axes) reduced[ax] = true;
  Shape pshape;
  Strides pstrides;
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < in.ndim(); ++i) {
      if (reduced[i] == (pass == 1)) {
        pshape.push_back(d.shape[i]);
        pstrides.push_back(d.strides[i]);
      }
    }
  }
  int64_t len = rows ? static_cast<int64_t>(in.size()) / rows : 0;
  char* dst = out_ptr(out);
  cudaStream_t s = current_stream();
  if (len == 0) {
    // The empty sum is 0 and the empty product 1 (filled by the kernel's start value).
    complex_reduce_rows<<<static_cast<unsigned>((rows + 7) / 8), 256, 0, s>>>(
        nullptr, reinterpret_cast<complex64_t*>(dst), rows, 0, op == ReduceOp::prod);
    KILN_CUDA_CHECK_LAUNCH(nm);
    return;
  }
  const char* src = in_ptr(in);
  if (!detail::is_row_contiguous(pshape, pstrides)) {
    char* tmp = static_cast<char*>(scratch(in.nbytes(), nm));
    copy_strided(src, d.dtype, pshape, pstrides, tmp, d.dtype, row_major_strides(pshape), nm);
    src = tmp;
  }
  complex_reduce_rows<<<static_cast<unsigned>((rows + 7) / 8), 256, 0, s>>>(
      reinterpret_cast<const complex64_t*>(src), reinterpret_cast<complex64_t*>(dst), rows, len, op == ReduceOp::prod);
  KILN_CUDA_CHECK_LAUNCH(nm);
}

}  // namespace kiln::cuda
