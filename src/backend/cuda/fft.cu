// The FFT primitive on the GPU, with cuFFT. A transform over several axes is
// one pass per axis: the rows along the axis are gathered into a contiguous
// scratch batch (copy_strided: any layout, no special cases), transformed by
// one batched cuFFT plan, and scattered to the output; the inverse's 1 / n
// is one scaling kernel over the output at the end. An FFT is bound by its
// n log n flops only for long rows; the gather and scatter copies cost one
// read and one write each, which is what the batched layouts of cuFFT's
// advanced interface would save. Correctness first here.
//
// Plans are cached by (size, type, batch) for the process, created without
// a work area (cufftSetAutoAllocation off): each execution takes its work
// area from Kiln's scratch memory, so nothing is cudaMalloc'ed while a batch
// is captured into a CUDA graph. A plan cannot be made during a capture
// (cufftMakePlan allocates and uploads): a missing one throws there, and the
// encoder runs that batch eagerly, which makes the plan for the next time.
#include <cufft.h>

#include <map>
#include <mutex>
#include <tuple>

#include "backend/cuda/kernel_utils.cuh"
#include "core/ops_util.h"
#include "core/primitives.h"

namespace kiln {
namespace cuda {
namespace {

#define KILN_CUFFT_CHECK(call)                                                                             \
  do {                                                                                                     \
    cufftResult kiln_r_ = (call);                                                                          \
    if (kiln_r_ != CUFFT_SUCCESS) {                                                                        \
      throw Error(std::string("[fft] cuFFT error ") + std::to_string(static_cast<int>(kiln_r_)) + " in " #call); \
    }                                                                                                      \
  } while (0)

struct Plan {
  cufftHandle handle = 0;
  size_t work_bytes = 0;
};

std::mutex& plan_mutex() {
  static std::mutex m;
  return m;
}

// The plan for `batch` contiguous rows of n points; plan_mutex() held.
Plan& plan_for(int n, cufftType type, int batch, cudaStream_t s) {
  static auto* plans = new std::map<std::tuple<int, int, int>, Plan>();
  auto key = std::make_tuple(n, static_cast<int>(type), batch);
  auto it = plans->find(key);
  if (it != plans->end()) return it->second;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  KILN_CUDA_CHECK("fft", cudaStreamIsCapturing(s, &status));
  if (status != cudaStreamCaptureStatusNone) throw Error("[fft] a cuFFT plan cannot be made while capturing a graph");
  Plan p;
  KILN_CUFFT_CHECK(cufftCreate(&p.handle));
  KILN_CUFFT_CHECK(cufftSetAutoAllocation(p.handle, 0));
  int len = n;
  int in_dist = type == CUFFT_C2R ? n / 2 + 1 : n;
  int out_dist = type == CUFFT_R2C ? n / 2 + 1 : n;
  KILN_CUFFT_CHECK(cufftMakePlanMany(p.handle, 1, &len, nullptr, 1, in_dist, nullptr, 1, out_dist, type, batch,
                                     &p.work_bytes));
  return plans->emplace(key, p).first->second;
}

enum class Pass { c2c, r2c, c2r };

// A strided operand of a pass.
struct View {
  char* data;
  Dtype dtype;
  Shape shape;
  Strides strides;
};

// shape / strides with `axis` moved last.
std::pair<Shape, Strides> axis_last(const Shape& shape, const Strides& strides, int axis) {
  Shape sh;
  Strides st;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) {
    if (d == axis) continue;
    sh.push_back(shape[d]);
    st.push_back(strides[d]);
  }
  sh.push_back(shape[axis]);
  st.push_back(strides[axis]);
  return {sh, st};
}

// numpy's irfft ignores the imaginary parts of the DC and Nyquist bins;
// cuFFT's C2R assumes them zero, so they are cleared first.
__global__ void clear_edge_imag(complex64_t* rows, int64_t batch, int bins, bool even) {
  int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= batch) return;
  rows[r * bins].im = 0.0f;
  if (even) rows[r * bins + bins - 1].im = 0.0f;
}

template <typename T>
__global__ void scale_elements(T* p, int64_t n, float scale) {
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if constexpr (is_complex_v<T>) p[i] = complex64_t(p[i].re * scale, p[i].im * scale);
    else p[i] = p[i] * scale;
  }
}

// One pass along `axis` (src and dst may share a buffer: the rows are
// gathered into scratch first).
void run_pass(const View& src, const View& dst, int axis, Pass kind, bool inverse) {
  const int n_in = src.shape[axis], n_out = dst.shape[axis];
  const int n = kind == Pass::c2r ? n_out : n_in;
  const int64_t batch = shape_size(src.shape) / n_in;
  if (batch > INT32_MAX) throw Error("[fft] more than 2^31 rows in one pass are not supported on the GPU");
  auto [in_shape, in_strides] = axis_last(src.shape, src.strides, axis);
  auto [out_shape, out_strides] = axis_last(dst.shape, dst.strides, axis);
  cudaStream_t s = current_stream();
  char* rows_in = static_cast<char*>(scratch(static_cast<size_t>(batch) * n_in * size_of(src.dtype), "fft"));
  char* rows_out = static_cast<char*>(scratch(static_cast<size_t>(batch) * n_out * size_of(dst.dtype), "fft"));
  copy_strided(src.data, src.dtype, in_shape, in_strides, rows_in, src.dtype, row_major_strides(in_shape), "fft");
  if (kind == Pass::c2r) {
    clear_edge_imag<<<static_cast<unsigned>((batch + 255) / 256), 256, 0, s>>>(reinterpret_cast<complex64_t*>(rows_in),
                                                                               batch, n_in, n % 2 == 0);
    KILN_CUDA_CHECK_LAUNCH("fft");
  }
  cufftType type = kind == Pass::c2c ? CUFFT_C2C : kind == Pass::r2c ? CUFFT_R2C : CUFFT_C2R;
  {
    std::lock_guard lock(plan_mutex());
    Plan& p = plan_for(n, type, static_cast<int>(batch), s);
    KILN_CUFFT_CHECK(cufftSetStream(p.handle, s));
    KILN_CUFFT_CHECK(cufftSetWorkArea(p.handle, p.work_bytes ? scratch(p.work_bytes, "fft") : nullptr));
    if (kind == Pass::c2c) {
      KILN_CUFFT_CHECK(cufftExecC2C(p.handle, reinterpret_cast<cufftComplex*>(rows_in),
                                    reinterpret_cast<cufftComplex*>(rows_out), inverse ? CUFFT_INVERSE : CUFFT_FORWARD));
    } else if (kind == Pass::r2c) {
      KILN_CUFFT_CHECK(cufftExecR2C(p.handle, reinterpret_cast<cufftReal*>(rows_in),
                                    reinterpret_cast<cufftComplex*>(rows_out)));
    } else {
      KILN_CUFFT_CHECK(cufftExecC2R(p.handle, reinterpret_cast<cufftComplex*>(rows_in),
                                    reinterpret_cast<cufftReal*>(rows_out)));
    }
  }
  copy_strided(rows_out, dst.dtype, out_shape, row_major_strides(out_shape), dst.data, dst.dtype, out_strides, "fft");
}

}  // namespace
}  // namespace cuda

void FFT::eval_gpu(const std::vector<array>& inputs, array& out) {
  const array& in = inputs[0];
  cuda::allocate(out, "fft");
  if (out.size() == 0) return;
  cuda::View src{const_cast<char*>(cuda::in_ptr(in)), in.dtype(), in.shape(), in.desc()->strides};
  cuda::View dst{cuda::out_ptr(out), out.dtype(), out.shape(), out.desc()->strides};
  if (!real_) {
    for (size_t i = 0; i < axes_.size(); ++i) cuda::run_pass(i == 0 ? src : dst, dst, axes_[i], cuda::Pass::c2c, inverse_);
  } else if (!inverse_) {
    cuda::run_pass(src, dst, axes_.back(), cuda::Pass::r2c, false);
    for (size_t i = 0; i + 1 < axes_.size(); ++i) cuda::run_pass(dst, dst, axes_[i], cuda::Pass::c2c, false);
  } else if (axes_.size() > 1) {
    // irfftn: the complex axes into a row-major scratch of the input's shape, then the real axis.
    cuda::View t{static_cast<char*>(cuda::scratch(in.nbytes(), "fft")), complex64, in.shape(),
                 row_major_strides(in.shape())};
    for (size_t i = 0; i + 1 < axes_.size(); ++i) cuda::run_pass(i == 0 ? src : t, t, axes_[i], cuda::Pass::c2c, true);
    cuda::run_pass(t, dst, axes_.back(), cuda::Pass::c2r, true);
  } else {
    cuda::run_pass(src, dst, axes_.back(), cuda::Pass::c2r, true);
  }
  if (inverse_) {
    // cuFFT's inverse is unnormalized: 1 / N over the transformed axes (of the output's side).
    double total = 1.0;
    for (int ax : axes_) total *= out.shape(ax);
    int64_t n = static_cast<int64_t>(out.size());
    cudaStream_t s = cuda::current_stream();
    char* po = cuda::out_ptr(out);
    if (out.dtype() == complex64) {
      cuda::scale_elements<<<cuda::grid_for(n, 4, 256), 256, 0, s>>>(reinterpret_cast<complex64_t*>(po), n,
                                                                     static_cast<float>(1.0 / total));
    } else {
      cuda::scale_elements<<<cuda::grid_for(n, 4, 256), 256, 0, s>>>(reinterpret_cast<float*>(po), n,
                                                                     static_cast<float>(1.0 / total));
    }
    KILN_CUDA_CHECK_LAUNCH("fft");
  }
}

}  // namespace kiln
