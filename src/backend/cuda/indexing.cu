// Gathers (take, take_along_axis), their scatter (put_along_axis,
// scatter_add_axis) and concatenate. Elements are moved as
// raw 1/2/4/8-byte words; the index dtype is a run-time switch. Negative
// indices wrap as on the CPU. An index out of range is clamped to the axis
// (nothing is read out of bounds) and written to a deferred-error slot: the
// next eval or synchronize that waits on the stream throws the same
// kiln::Error the CPU throws at once (cuda_common.h, index_error_slot).
#include "backend/cuda/index_read.cuh"
#include "backend/cuda/kernel_utils.cuh"
#include "core/ops_util.h"
#include "core/primitives.h"

namespace kiln {
namespace cuda {
namespace {

struct GatherArgs {
  Strided<1> outer;  // a's dims before the axis
  Strided<1> idx;    // the index array's layout
  Strided<1> slab;   // a's dims after the axis
  int64_t axis_stride, extent, n_idx, inner;
};

template <typename E>
__global__ void gather_kernel(const E* __restrict__ a, const char* __restrict__ idx, Dtype it, E* __restrict__ out,
                              GatherArgs g, int64_t n, IndexErrorSlot* err) {
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += stride) {
    int64_t r = t % g.inner;
    int64_t q = t / g.inner;
    int64_t j = q % g.n_idx;
    int64_t o = q / g.n_idx;
    int64_t off[1], ioff[1], soff[1];
    g.outer.offsets(o, off);
    g.idx.offsets(j, ioff);
    g.slab.offsets(r, soff);
    out[t] = a[off[0] + read_index(idx, it, ioff[0], g.extent, err) * g.axis_stride + soff[0]];
  }
}

struct AxisArgs {
  int ndim, axis;
  int64_t shape[kMaxDims];
  int64_t a_strides[kMaxDims];
  int64_t i_strides[kMaxDims];
  int64_t extent;
};

template <typename E>
__global__ void gather_axis_kernel(const E* __restrict__ a, const char* __restrict__ idx, Dtype it, E* __restrict__ out,
                                   AxisArgs g, int64_t n, IndexErrorSlot* err) {
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += stride) {
    int64_t rem = t, aoff = 0, ioff = 0;
    for (int k = g.ndim - 1; k >= 0; --k) {
      int64_t pos = rem % g.shape[k];
      rem /= g.shape[k];
      ioff += pos * g.i_strides[k];
      if (k != g.axis) aoff += pos * g.a_strides[k];
    }
    aoff += read_index(idx, it, ioff, g.extent, err) * g.a_strides[g.axis];
    out[t] = a[aoff];
  }
}

struct ScatterArgs {
  int ndim, axis;
  int64_t shape[kMaxDims];  // the indices' (and values') shape
  int64_t o_strides[kMaxDims];
  int64_t i_strides[kMaxDims];
  int64_t v_strides[kMaxDims];
  int64_t extent;
};

// One thread per line along the axis: lines write disjoint parts of out,
// so neither atomics nor a fixed order of additions is needed (the result
// is deterministic and matches the CPU's).
template <typename T>
__global__ void scatter_axis_kernel(const T* __restrict__ vals, const char* __restrict__ idx, Dtype it,
                                    T* __restrict__ out, ScatterArgs g, int64_t lines, bool add,
                                    IndexErrorSlot* err) {
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t len = g.shape[g.axis];
  for (int64_t l = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; l < lines; l += stride) {
    int64_t rem = l, voff = 0, ooff = 0, ioff = 0;
    for (int k = g.ndim - 1; k >= 0; --k) {
      if (k == g.axis) continue;
      int64_t pos = rem % g.shape[k];
      rem /= g.shape[k];
      voff += pos * g.v_strides[k];
      ooff += pos * g.o_strides[k];
      ioff += pos * g.i_strides[k];
    }
    for (int64_t j = 0; j < len; ++j) {
      int64_t w = read_index(idx, it, ioff + j * g.i_strides[g.axis], g.extent, err);
      T v = vals[voff + j * g.v_strides[g.axis]];
      T& o = out[ooff + w * g.o_strides[g.axis]];
      if (add) {
        o = convert<T>(to_compute(o) + to_compute(v));
      } else {
        o = v;
      }
    }
  }
}

Strided<1> layout1(const Shape& shape, const Strides& strides, const char* op) {
  Shape s = shape;
  Strides st = strides;
  if (s.empty()) {
    s.push_back(1);
    st.push_back(0);
  }
  return make_strided<1>(s, {&st}, op);
}

// The message the CPU gives for the same bad index.
IndexErrorSlot* error_slot(const char* op, const array& a, const array& idx, int64_t extent) {
  return index_error_slot([op, extent, ashape = a.shape(), at = a.dtype(), ishape = idx.shape(),
                           it = idx.dtype()](int64_t v) {
    return std::string("[") + op + "] index " + std::to_string(v) + " is out of range for an axis of size " +
           std::to_string(extent) + "; inputs: " + format_shape(ashape) + " " + dtype_name(at) + ", indices " +
           format_shape(ishape) + " " + dtype_name(it) + " (found on the GPU)";
  });
}

}  // namespace
}  // namespace cuda

void Gather::eval_gpu(const std::vector<array>& inputs, array& out) {
  const array& a = inputs[0];
  const array& idx = inputs[1];
  cuda::allocate(out, "take");
  int64_t n = static_cast<int64_t>(out.size());
  if (n == 0) return;
  const auto& d = *a.desc();
  Shape outer_shape(d.shape.begin(), d.shape.begin() + axis_);
  Strides outer_strides(d.strides.begin(), d.strides.begin() + axis_);
  Shape slab_shape(d.shape.begin() + axis_ + 1, d.shape.end());
  Strides slab_strides(d.strides.begin() + axis_ + 1, d.strides.end());
  cuda::GatherArgs g;
  g.outer = cuda::layout1(outer_shape, outer_strides, "take");
  g.idx = cuda::layout1(idx.shape(), idx.desc()->strides, "take");
  g.slab = cuda::layout1(slab_shape, slab_strides, "take");
  g.axis_stride = d.strides[axis_];
  g.extent = d.shape[axis_];
  g.n_idx = static_cast<int64_t>(idx.size());
  g.inner = shape_size(slab_shape);
  const char* pa = cuda::in_ptr(a);
  const char* pi = cuda::in_ptr(idx);
  char* po = cuda::out_ptr(out);
  cudaStream_t s = cuda::current_stream();
  Dtype it = idx.dtype();
  cuda::IndexErrorSlot* err = cuda::error_slot("take", a, idx, g.extent);
  cuda::by_item_size(a.itemsize(), [&](auto tag) {
    using E = typename decltype(tag)::type;
    cuda::gather_kernel<E><<<cuda::grid_for(n, 4, 256), 256, 0, s>>>(reinterpret_cast<const E*>(pa), pi, it,
                                                                     reinterpret_cast<E*>(po), g, n, err);
  });
  KILN_CUDA_CHECK_LAUNCH("take");
}

void GatherAxis::eval_gpu(const std::vector<array>& inputs, array& out) {
  const array& a = inputs[0];
  const array& idx = inputs[1];
  cuda::allocate(out, "take_along_axis");
  int64_t n = static_cast<int64_t>(out.size());
  if (n == 0) return;
  int nd = out.ndim();
  if (nd > cuda::kMaxDims) throw Error("[take_along_axis] more than 8 dimensions are not supported on the GPU");
  cuda::AxisArgs g{};
  g.ndim = nd;
  g.axis = axis_;
  g.extent = a.shape()[axis_];
  for (int k = 0; k < nd; ++k) {
    g.shape[k] = out.shape()[k];
    g.a_strides[k] = a.desc()->strides[k];
    g.i_strides[k] = idx.desc()->strides[k];
  }
  const char* pa = cuda::in_ptr(a);
  const char* pi = cuda::in_ptr(idx);
  char* po = cuda::out_ptr(out);
  cudaStream_t s = cuda::current_stream();
  Dtype it = idx.dtype();
  cuda::IndexErrorSlot* err = cuda::error_slot("take_along_axis", a, idx, g.extent);
  cuda::by_item_size(a.itemsize(), [&](auto tag) {
    using E = typename decltype(tag)::type;
    cuda::gather_axis_kernel<E><<<cuda::grid_for(n, 4, 256), 256, 0, s>>>(reinterpret_cast<const E*>(pa), pi, it,
                                                                          reinterpret_cast<E*>(po), g, n, err);
  });
  KILN_CUDA_CHECK_LAUNCH("take_along_axis");
}

void ScatterAxis::eval_gpu(const std::vector<array>& inputs, array& out) {
  const array& a = inputs[0];
  const array& idx = inputs[1];
  const array& vals = inputs[2];
  const char* op = reduce_ == Reduce::sum ? "scatter_add_axis" : "put_along_axis";
  cuda::allocate(out, op);
  if (out.size() == 0) return;
  char* po = cuda::out_ptr(out);
  cuda::copy_strided(cuda::in_ptr(a), a.dtype(), a.shape(), a.desc()->strides, po, out.dtype(), out.desc()->strides, op);
  if (idx.size() == 0) return;
  int nd = idx.ndim();
  if (nd > cuda::kMaxDims) throw Error(std::string("[") + op + "] more than 8 dimensions are not supported on the GPU");
  cuda::ScatterArgs g{};
  g.ndim = nd;
  g.axis = axis_;
  g.extent = a.shape()[axis_];
  for (int k = 0; k < nd; ++k) {
    g.shape[k] = idx.shape()[k];
    g.o_strides[k] = out.desc()->strides[k];
    g.i_strides[k] = idx.desc()->strides[k];
    g.v_strides[k] = vals.desc()->strides[k];
  }
  int64_t lines = static_cast<int64_t>(idx.size()) / idx.shape()[axis_];
  const char* pi = cuda::in_ptr(idx);
  const char* pv = cuda::in_ptr(vals);
  cudaStream_t s = cuda::current_stream();
  Dtype it = idx.dtype();
  cuda::IndexErrorSlot* err = cuda::error_slot(op, a, idx, g.extent);
  bool add = reduce_ == Reduce::sum;
  cuda::dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::scatter_axis_kernel<T><<<cuda::grid_for(lines, 1, 128), 128, 0, s>>>(
        reinterpret_cast<const T*>(pv), pi, it, reinterpret_cast<T*>(po), g, lines, add, err);
  });
  KILN_CUDA_CHECK_LAUNCH(op);
}

void Concatenate::eval_gpu(const std::vector<array>& inputs, array& out) {
  cuda::allocate(out, "concatenate");
  if (out.size() == 0) return;
  char* po = cuda::out_ptr(out);
  const Strides& ost = out.desc()->strides;
  int64_t item = static_cast<int64_t>(out.itemsize());
  int64_t offset = 0;
  for (const auto& in : inputs) {
    if (in.size() > 0) {
      cuda::copy_strided(cuda::in_ptr(in), in.dtype(), in.shape(), in.desc()->strides, po + offset * ost[axis_] * item,
                         out.dtype(), ost, "concatenate");
    }
    offset += in.shape()[axis_];
  }
}

}  // namespace kiln
