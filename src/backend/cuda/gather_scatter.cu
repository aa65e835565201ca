// MLX's gather / scatter family, the dynamic slices and the views
// as_strided / view on the GPU.
//
// Why it is shaped so: a gather is a pure copy, one thread per output
// element, each computing its slice's start from the index arrays (strided,
// any integer dtype, read in the kernel). A scatter has one thread per
// update element; updates that land on one element race, so every reduce
// is an atomic read-modify-write: the hardware's atomicAdd where one exists
// for the type (float, double, half, bfloat16, 32/64-bit integers), else a
// compare-and-swap loop on the aligned 32- or 64-bit word that holds the
// element (1- and 2-byte types, products, NaN-propagating max / min). A
// plain scatter stores without atomics: with repeated indices any one of
// the writes wins, as in MLX. Atomic sums of floats are not ordered, so
// their rounding may differ from the CPU's (deterministic) order. A bad
// index is clamped and reported through the deferred-error slot (as take).
// The dynamic slices read their start in the kernel: no host sync. All are
// memory-bound; no bench row measures them yet.
#include <cstring>

#include "backend/cuda/index_read.cuh"
#include "backend/cuda/kernel_utils.cuh"
#include "core/ops_util.h"
#include "core/primitives_index.h"

namespace kiln {
namespace cuda {
namespace {

// The index arrays of a gather / scatter, all of one shape I and dtype.
struct IndexSet {
  int count, ndim;
  Dtype dtype;
  int64_t shape[kMaxDims];
  int64_t strides[kMaxDims][kMaxDims];
  const char* ptr[kMaxDims];
  int64_t extent[kMaxDims];  // the indexed axis's size
  int64_t room[kMaxDims];    // valid slice starts: [0, room)
  int64_t stride[kMaxDims];  // the axis's stride in the array indexed
};

// The element offset at which index position i's slice starts.
__device__ __forceinline__ int64_t slice_start(const IndexSet& s, int64_t i, IndexErrorSlot* err) {
  int64_t pos[kMaxDims];
  for (int d = s.ndim - 1; d >= 0; --d) {
    pos[d] = i % s.shape[d];
    i /= s.shape[d];
  }
  int64_t off = 0;
  for (int j = 0; j < s.count; ++j) {
    int64_t e = 0;
    for (int d = 0; d < s.ndim; ++d) e += pos[d] * s.strides[j][d];
    int64_t v = load_index(s.ptr[j], s.dtype, e);
    int64_t w = v < 0 ? v + s.extent[j] : v;
    if (w < 0 || w >= s.room[j]) {
      if (err) {
        volatile IndexErrorSlot* slot = err;
        slot->value = v;
        slot->flag = 1;
      }
      w = w < 0 ? 0 : s.room[j] - 1;
    }
    off += w * s.stride[j];
  }
  return off;
}

template <typename E>
__global__ void gather_slices_kernel(const E* __restrict__ a, E* __restrict__ out, IndexSet idx, Strided<1> slab,
                                     int64_t inner, int64_t n, IndexErrorSlot* err) {
  int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += step) {
    int64_t so[1];
    slab.offsets(t % inner, so);
    out[t] = a[slice_start(idx, t / inner, err) + so[0]];
  }
}

template <typename T>
__device__ __forceinline__ T reduce_value(T o, T v, Scatter::Reduce r) {
  auto x = to_compute(o);
  auto y = to_compute(v);
  switch (r) {
    case Scatter::Reduce::sum: return convert<T>(x + y);
    case Scatter::Reduce::prod: return convert<T>(x * y);
    case Scatter::Reduce::max: return (y > x || y != y) ? v : o;
    case Scatter::Reduce::min: return (y < x || y != y) ? v : o;
    default: return v;
  }
}

template <typename T>
inline constexpr bool has_atomic_add_v =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, __half> ||
    std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, int32_t> || std::is_same_v<T, uint32_t> ||
    std::is_same_v<T, int64_t>;

// o = reduce(o, v) atomically.
template <typename T>
__device__ void atomic_reduce(T* o, T v, Scatter::Reduce r) {
  if (r == Scatter::Reduce::none) {
    *o = v;
    return;
  }
  if constexpr (has_atomic_add_v<T>) {
    if (r == Scatter::Reduce::sum) {
      if constexpr (std::is_same_v<T, int64_t>) {
        atomicAdd(reinterpret_cast<unsigned long long*>(o), static_cast<unsigned long long>(v));
      } else {
        atomicAdd(o, v);
      }
      return;
    }
  }
  if constexpr (sizeof(T) == 8) {
    auto* w = reinterpret_cast<unsigned long long*>(o);
    unsigned long long old = *w, seen;
    do {
      seen = old;
      T cur, next;
      memcpy(&cur, &seen, 8);
      next = reduce_value(cur, v, r);
      unsigned long long nw;
      memcpy(&nw, &next, 8);
      old = atomicCAS(w, seen, nw);
    } while (old != seen);
  } else {
    // The aligned 32-bit word holding the element; other bytes kept.
    uintptr_t addr = reinterpret_cast<uintptr_t>(o);
    auto* w = reinterpret_cast<unsigned int*>(addr & ~uintptr_t{3});
    unsigned shift = static_cast<unsigned>(addr & 3) * 8;
    unsigned mask = sizeof(T) == 4 ? 0xffffffffu : ((1u << (8 * sizeof(T))) - 1u) << shift;
    unsigned old = *w, seen;
    do {
      seen = old;
      unsigned bits = (seen & mask) >> shift;
      T cur, next;
      memcpy(&cur, &bits, sizeof(T));
      next = reduce_value(cur, v, r);
      unsigned nb = 0;
      memcpy(&nb, &next, sizeof(T));
      old = atomicCAS(w, seen, (seen & ~mask) | ((nb << shift) & mask));
    } while (old != seen);
  }
}

struct ScatterLayout {
  Strided<1> ipart;  // the index dims of the updates (their strides)
  Strided<2> slice;  // the slice dims: out strides, update strides
  int64_t slice_size;
};

template <typename T>
__global__ void scatter_kernel(const T* __restrict__ upd, T* out, IndexSet idx, ScatterLayout l, Scatter::Reduce r,
                               int64_t n, IndexErrorSlot* err) {
  int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += step) {
    int64_t i = t / l.slice_size;
    int64_t io[1], so[2];
    l.ipart.offsets(i, io);
    l.slice.offsets(t % l.slice_size, so);
    atomic_reduce(out + slice_start(idx, i, err) + so[0], upd[io[0] + so[1]], r);
  }
}

// Dynamic start: the start array and, per sliced axis, what clamps it.
struct DynamicStart {
  int count;
  Dtype dtype;
  const char* ptr;
  int64_t step;                // the start array's stride
  int64_t dim[kMaxDims];       // the axis's size
  int64_t size[kMaxDims];      // the slice's size on it
  int64_t stride[kMaxDims];    // the axis's stride in the strided side
};

__device__ __forceinline__ int64_t dynamic_offset(const DynamicStart& s) {
  int64_t off = 0;
  for (int j = 0; j < s.count; ++j) {
    int64_t v = load_index(s.ptr, s.dtype, j * s.step);
    if (v < 0) v += s.dim[j];
    v = v < 0 ? 0 : (v > s.dim[j] - s.size[j] ? s.dim[j] - s.size[j] : v);
    off += v * s.stride[j];
  }
  return off;
}

// a's strided slice -> a dense out (DynamicSlice); or a dense/strided
// update -> out's strided slice (DynamicSliceUpdate, write = true).
template <typename E>
__global__ void dynamic_copy_kernel(const E* __restrict__ src, E* __restrict__ dst, Strided<2> l, DynamicStart s,
                                    bool write, int64_t n) {
  int64_t base = dynamic_offset(s);
  int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += step) {
    int64_t o[2];
    l.offsets(t, o);
    if (write) dst[base + o[0]] = src[o[1]];
    else dst[o[1]] = src[base + o[0]];
  }
}

IndexSet make_index_set(const std::vector<array>& idx, const std::vector<int>& axes, const Shape& sizes,
                        const array& a, const Strides& strides, const char* op) {
  IndexSet s{};
  s.count = static_cast<int>(idx.size());
  if (idx.empty()) return s;
  const Shape& shape = idx[0].shape();
  if (shape.size() > static_cast<size_t>(kMaxDims)) {
    throw Error(std::string("[") + op + "] index arrays of more than 8 dimensions are not supported on the GPU");
  }
  s.ndim = static_cast<int>(shape.size());
  s.dtype = idx[0].dtype();
  for (int d = 0; d < s.ndim; ++d) s.shape[d] = shape[d];
  for (int j = 0; j < s.count; ++j) {
    s.ptr[j] = in_ptr(idx[j]);
    for (int d = 0; d < s.ndim; ++d) s.strides[j][d] = idx[j].desc()->strides[d];
    int ax = axes[j];
    s.extent[j] = a.shape(ax);
    s.room[j] = a.shape(ax) - sizes[ax] + 1;
    s.stride[j] = strides[ax];
  }
  return s;
}

IndexErrorSlot* slice_error_slot(const char* op, const array& a, const array& idx) {
  return index_error_slot([op, ashape = a.shape(), at = a.dtype(), ishape = idx.shape(), it = idx.dtype()](int64_t v) {
    return std::string("[") + op + "] index " + std::to_string(v) +
           " (with its slice) is out of range; inputs: " + format_shape(ashape) + " " + dtype_name(at) +
           ", indices " + format_shape(ishape) + " " + dtype_name(it) + " (found on the GPU)";
  });
}

// A layout of one operand; a 0-d one becomes one element.
Strided<1> layout1(const Shape& shape, const Strides& strides, const char* op) {
  static const Strides zero = {0};
  if (shape.empty()) return make_strided<1>(Shape{1}, {&zero}, op);
  return make_strided<1>(shape, {&strides}, op);
}

DynamicStart make_dynamic_start(const array& start, const std::vector<int>& axes, const Shape& dims,
                                const Shape& sizes, const Strides& strides, const char* op) {
  DynamicStart s{};
  if (axes.size() > static_cast<size_t>(kMaxDims)) {
    throw Error(std::string("[") + op + "] more than 8 sliced axes are not supported on the GPU");
  }
  s.count = static_cast<int>(axes.size());
  s.dtype = start.dtype();
  s.ptr = in_ptr(start);
  s.step = start.desc()->strides.empty() ? 0 : start.desc()->strides[0];
  for (int j = 0; j < s.count; ++j) {
    s.dim[j] = dims[axes[j]];
    s.size[j] = sizes[axes[j]];
    s.stride[j] = strides[axes[j]];
  }
  return s;
}

}  // namespace
}  // namespace cuda

void GatherSlices::eval_gpu(const std::vector<array>& inputs, array& out) {
  const array& a = inputs[0];
  cuda::allocate(out, "gather");
  int64_t n = static_cast<int64_t>(out.size());
  if (n == 0) return;
  std::vector<array> idx(inputs.begin() + 1, inputs.end());
  const Strides& ast = a.desc()->strides;
  cuda::IndexSet set = cuda::make_index_set(idx, axes_, slice_sizes_, a, ast, "gather");
  cuda::Strided<1> slab = cuda::layout1(slice_sizes_, ast, "gather");
  int64_t inner = shape_size(slice_sizes_);
  const char* pa = cuda::in_ptr(a);
  char* po = cuda::out_ptr(out);
  cudaStream_t s = cuda::current_stream();
  cuda::IndexErrorSlot* err = idx.empty() ? nullptr : cuda::slice_error_slot("gather", a, idx[0]);
  cuda::by_item_size(a.itemsize(), [&](auto tag) {
    using E = typename decltype(tag)::type;
    cuda::gather_slices_kernel<E><<<cuda::grid_for(n, 4, 256), 256, 0, s>>>(
        reinterpret_cast<const E*>(pa), reinterpret_cast<E*>(po), set, slab, inner, n, err);
  });
  KILN_CUDA_CHECK_LAUNCH("gather");
}

void Scatter::eval_gpu(const std::vector<array>& inputs, array& out) {
  const array& a = inputs[0];
  const array& upd = inputs.back();
  const char* op = scatter_op_name(reduce_);
  const auto& ad = *a.desc();
  if (detail::is_row_contiguous(ad.shape, ad.strides) && ad.offset == 0) {
    cuda::allocate_or_donate(out, a, op);
  } else {
    cuda::allocate(out, op);
  }
  if (out.size() == 0) return;
  const char* pa = cuda::in_ptr(a);  // also orders us after a's producer
  char* po = cuda::out_ptr(out);
  if (out.desc()->buffer != ad.buffer) {
    cuda::copy_strided(pa, a.dtype(), a.shape(), ad.strides, po, out.dtype(), out.desc()->strides, op);
  }
  int64_t n = static_cast<int64_t>(upd.size());
  if (n == 0) return;
  std::vector<array> idx(inputs.begin() + 1, inputs.end() - 1);
  const Strides& ost = out.desc()->strides;
  const Strides& ust = upd.desc()->strides;
  int ni = upd.ndim() - a.ndim();
  Shape slice(upd.shape().begin() + ni, upd.shape().end());
  Shape ishape(upd.shape().begin(), upd.shape().begin() + ni);
  Strides ist(ust.begin(), ust.begin() + ni), sst(ust.begin() + ni, ust.end());
  cuda::ScatterLayout l;
  l.ipart = cuda::layout1(ishape, ist, op);
  Strides one = {0};
  l.slice = slice.empty() ? cuda::make_strided<2>(Shape{1}, {&one, &one}, op)
                          : cuda::make_strided<2>(slice, {&ost, &sst}, op);
  l.slice_size = shape_size(slice);
  cuda::IndexSet set = cuda::make_index_set(idx, axes_, slice, a, ost, op);
  const char* pu = cuda::in_ptr(upd);
  cudaStream_t s = cuda::current_stream();
  cuda::IndexErrorSlot* err = idx.empty() ? nullptr : cuda::slice_error_slot(op, a, idx[0]);
  Reduce r = reduce_;
  cuda::dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::scatter_kernel<T><<<cuda::grid_for(n, 4, 256), 256, 0, s>>>(reinterpret_cast<const T*>(pu),
                                                                      reinterpret_cast<T*>(po), set, l, r, n, err);
  });
  KILN_CUDA_CHECK_LAUNCH(op);
}

void DynamicSlice::eval_gpu(const std::vector<array>& inputs, array& out) {
  const array& a = inputs[0];
  cuda::allocate(out, "slice");
  int64_t n = static_cast<int64_t>(out.size());
  if (n == 0) return;
  const Strides& ast = a.desc()->strides;
  Strides dense = row_major_strides(out.shape());
  cuda::Strided<2> l = cuda::make_strided<2>(out.shape(), {&ast, &dense}, "slice");
  cuda::DynamicStart st = cuda::make_dynamic_start(inputs[1], axes_, a.shape(), slice_size_, ast, "slice");
  const char* pa = cuda::in_ptr(a);
  char* po = cuda::out_ptr(out);
  cudaStream_t s = cuda::current_stream();
  cuda::by_item_size(a.itemsize(), [&](auto tag) {
    using E = typename decltype(tag)::type;
    cuda::dynamic_copy_kernel<E><<<cuda::grid_for(n, 4, 256), 256, 0, s>>>(
        reinterpret_cast<const E*>(pa), reinterpret_cast<E*>(po), l, st, false, n);
  });
  KILN_CUDA_CHECK_LAUNCH("slice");
}

void DynamicSliceUpdate::eval_gpu(const std::vector<array>& inputs, array& out) {
  const array& src = inputs[0];
  const array& upd = inputs[1];
  const auto& sd = *src.desc();
  if (detail::is_row_contiguous(sd.shape, sd.strides) && sd.offset == 0) {
    cuda::allocate_or_donate(out, src, "slice_update");
  } else {
    cuda::allocate(out, "slice_update");
  }
  if (out.size() == 0) return;
  const char* ps = cuda::in_ptr(src);
  char* po = cuda::out_ptr(out);
  const Strides& ost = out.desc()->strides;
  if (out.desc()->buffer != sd.buffer) {
    cuda::copy_strided(ps, src.dtype(), src.shape(), sd.strides, po, out.dtype(), ost, "slice_update");
  }
  int64_t n = static_cast<int64_t>(upd.size());
  if (n == 0) return;
  const Strides& ust = upd.desc()->strides;
  cuda::Strided<2> l = cuda::make_strided<2>(upd.shape(), {&ost, &ust}, "slice_update");
  cuda::DynamicStart st = cuda::make_dynamic_start(inputs[2], axes_, src.shape(), upd.shape(), ost, "slice_update");
  const char* pu = cuda::in_ptr(upd);
  cudaStream_t s = cuda::current_stream();
  cuda::by_item_size(out.itemsize(), [&](auto tag) {
    using E = typename decltype(tag)::type;
    cuda::dynamic_copy_kernel<E><<<cuda::grid_for(n, 4, 256), 256, 0, s>>>(
        reinterpret_cast<const E*>(pu), reinterpret_cast<E*>(po), l, st, true, n);
  });
  KILN_CUDA_CHECK_LAUNCH("slice_update");
}

// A view touches no data.
void AsStrided::eval_gpu(const std::vector<array>& inputs, array& out) { eval_cpu(inputs, out); }

void View::eval_gpu(const std::vector<array>& inputs, array& out) {
  const array& in = inputs[0];
  if (auto l = layout_of(in)) {
    detail::share_buffer(out, in, std::move(l->first), l->second);
    return;
  }
  const auto& d = *in.desc();
  cuda::allocate(out, "view");
  if (out.size() == 0) return;
  const char* src = cuda::in_ptr(in);
  cuda::copy_strided(src, d.dtype, d.shape, d.strides, cuda::out_ptr(out), d.dtype, row_major_strides(d.shape), "view");
}

}  // namespace kiln
