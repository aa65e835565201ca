// Copies and casts between any two layouts, the views (buffer sharing, as
// on the CPU) and slice_update. A same-type copy moves raw elements of 1,
// 2, 4 or 8 bytes (contiguous: cudaMemcpyAsync; two-dim transposes: tiles
// through shared memory); a cast is one kernel per
// source type with the destination type a run-time switch, so 16 kernels
// cover all 256 pairs.
#include "backend/common/layout.h"
#include "backend/cuda/kernel_utils.cuh"
#include "core/primitives.h"

namespace kiln {
namespace cuda {
namespace {

template <typename E>
__global__ void copy_raw(const E* __restrict__ src, E* __restrict__ dst, Strided<2> l, int64_t n) {
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t off[2];
    l.offsets(i, off);
    dst[off[0]] = src[off[1]];
  }
}

// A transposing copy (two dims, destination along the row, source down the
// column): kT x kT tiles through shared memory, so reads and writes are both
// coalesced; 64-wide tiles for elements up to 4 bytes, so each row segment
// read or written is 256 bytes.
constexpr int kTileRows = 8;
template <typename E>
constexpr int tile_for() {
  return sizeof(E) <= 4 ? 64 : 32;
}

template <typename E, int kT>
__global__ void copy_tiled(const E* __restrict__ src, E* __restrict__ dst, int64_t rows, int64_t cols, int64_t s0,
                           int64_t s1, int64_t d0) {
  __shared__ E tile[kT][kT + 1];
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kT, c0 = static_cast<int64_t>(blockIdx.x) * kT;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int j = ty; j < kT; j += kTileRows) {
#pragma unroll
    for (int q = 0; q < kT; q += 32) {
      const int64_t r = r0 + tx + q, c = c0 + j;
      if (r < rows && c < cols) tile[j][tx + q] = src[r * s0 + c * s1];
    }
  }
  __syncthreads();
  for (int j = ty; j < kT; j += kTileRows) {
#pragma unroll
    for (int q = 0; q < kT; q += 32) {
      const int64_t r = r0 + j, c = c0 + tx + q;
      if (r < rows && c < cols) dst[r * d0 + c] = tile[tx + q][j];
    }
  }
}

template <typename E>
void launch_tiled(const char* src, char* dst, const Strided<2>& l, cudaStream_t s) {
  constexpr int kT = tile_for<E>();
  dim3 grid(static_cast<unsigned>((l.shape[1] + kT - 1) / kT), static_cast<unsigned>((l.shape[0] + kT - 1) / kT));
  copy_tiled<E, kT><<<grid, dim3(32, kTileRows), 0, s>>>(reinterpret_cast<const E*>(src), reinterpret_cast<E*>(dst),
                                                         l.shape[0], l.shape[1], l.strides[1][0], l.strides[1][1],
                                                         l.strides[0][0]);
}

template <typename S>
__device__ __forceinline__ void store_as(char* dst, Dtype d, int64_t i, S x) {
  switch (d) {
    case Dtype::bool_: reinterpret_cast<bool*>(dst)[i] = convert<bool>(x); break;
    case Dtype::uint8: reinterpret_cast<uint8_t*>(dst)[i] = convert<uint8_t>(x); break;
    case Dtype::uint16: reinterpret_cast<uint16_t*>(dst)[i] = convert<uint16_t>(x); break;
    case Dtype::uint32: reinterpret_cast<uint32_t*>(dst)[i] = convert<uint32_t>(x); break;
    case Dtype::uint64: reinterpret_cast<uint64_t*>(dst)[i] = convert<uint64_t>(x); break;
    case Dtype::int16: reinterpret_cast<int16_t*>(dst)[i] = convert<int16_t>(x); break;
    case Dtype::int8: reinterpret_cast<int8_t*>(dst)[i] = convert<int8_t>(x); break;
    case Dtype::int32: reinterpret_cast<int32_t*>(dst)[i] = convert<int32_t>(x); break;
    case Dtype::int64: reinterpret_cast<int64_t*>(dst)[i] = convert<int64_t>(x); break;
    case Dtype::float16: reinterpret_cast<__half*>(dst)[i] = convert<__half>(x); break;
    case Dtype::bfloat16: reinterpret_cast<__nv_bfloat16*>(dst)[i] = convert<__nv_bfloat16>(x); break;
    case Dtype::float32: reinterpret_cast<float*>(dst)[i] = convert<float>(x); break;
    case Dtype::float64: reinterpret_cast<double*>(dst)[i] = convert<double>(x); break;
    case Dtype::complex64: reinterpret_cast<complex64_t*>(dst)[i] = convert<complex64_t>(x); break;
    case Dtype::float8_e4m3fn: reinterpret_cast<float8_e4m3fn_t*>(dst)[i] = convert<float8_e4m3fn_t>(x); break;
    case Dtype::float8_e5m2: reinterpret_cast<float8_e5m2_t*>(dst)[i] = convert<float8_e5m2_t>(x); break;
  }
}

template <typename S>
__global__ void cast_strided(const S* __restrict__ src, char* __restrict__ dst, Dtype d, Strided<2> l, int64_t n) {
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t off[2];
    l.offsets(i, off);
    store_as(dst, d, off[0], src[off[1]]);
  }
}

}  // namespace

void copy_strided(const char* src, Dtype sd, const Shape& shape, const Strides& src_strides, char* dst, Dtype dd,
                  const Strides& dst_strides, const char* op) {
  int64_t n = 1;
  for (int d : shape) n *= d;
  if (n == 0) return;
  auto l = make_strided<2>(shape, {&dst_strides, &src_strides}, op);
  cudaStream_t s = current_stream();
  size_t item = size_of(sd);
  constexpr int kBlock = 256;
  if (sd == dd) {
    if (all_contiguous(l)) {
      KILN_CUDA_CHECK(op, cudaMemcpyAsync(dst, src, n * item, cudaMemcpyDeviceToDevice, s));
      return;
    }
    // Two-dim layouts with unit strides in the inner dim of both sides:
    // a pitched copy (the copy engine reaches full bandwidth).
    if (l.ndim == 2 && l.strides[0][1] == 1 && l.strides[1][1] == 1 && l.strides[1][0] >= l.shape[1] && l.strides[0][0] >= l.shape[1]) {
      KILN_CUDA_CHECK(op, cudaMemcpy2DAsync(dst, l.strides[0][0] * item, src, l.strides[1][0] * item,
                                            l.shape[1] * item, l.shape[0], cudaMemcpyDeviceToDevice, s));
      return;
    }
    // Two-dim transposes: destination rows along memory, source columns.
    if (l.ndim == 2 && l.strides[0][1] == 1 && l.strides[1][0] == 1 && l.strides[1][1] != 1 &&
        (l.shape[0] + 31) / 32 <= 65535) {
      switch (item) {
        case 1: launch_tiled<uint8_t>(src, dst, l, s); break;
        case 2: launch_tiled<uint16_t>(src, dst, l, s); break;
        case 4: launch_tiled<uint32_t>(src, dst, l, s); break;
        default: launch_tiled<uint64_t>(src, dst, l, s); break;
      }
      KILN_CUDA_CHECK_LAUNCH(op);
      return;
    }
    unsigned g = grid_for(n, 4, kBlock);
    switch (item) {
      case 1: copy_raw<uint8_t><<<g, kBlock, 0, s>>>(reinterpret_cast<const uint8_t*>(src), reinterpret_cast<uint8_t*>(dst), l, n); break;
      case 2: copy_raw<uint16_t><<<g, kBlock, 0, s>>>(reinterpret_cast<const uint16_t*>(src), reinterpret_cast<uint16_t*>(dst), l, n); break;
      case 4: copy_raw<uint32_t><<<g, kBlock, 0, s>>>(reinterpret_cast<const uint32_t*>(src), reinterpret_cast<uint32_t*>(dst), l, n); break;
      default: copy_raw<uint64_t><<<g, kBlock, 0, s>>>(reinterpret_cast<const uint64_t*>(src), reinterpret_cast<uint64_t*>(dst), l, n); break;
    }
  } else {
    dispatch_copyable(sd, [&](auto tag) {
      using S = typename decltype(tag)::type;
      cast_strided<S><<<grid_for(n, 4, kBlock), kBlock, 0, s>>>(reinterpret_cast<const S*>(src), dst, dd, l, n);
    });
  }
  KILN_CUDA_CHECK_LAUNCH(op);
}

}  // namespace cuda

void Copy::eval_gpu(const std::vector<array>& inputs, array& out) {
  const array& in = inputs[0];
  const auto& id = *in.desc();
  if (view_if_contiguous_ && in.dtype() == out.dtype() && detail::is_row_contiguous(id.shape, id.strides)) {
    detail::share_buffer(out, in, row_major_strides(out.shape()), id.offset);
    return;
  }
  if (size_of(id.dtype) == size_of(out.dtype()) && id.offset == 0 && detail::is_row_contiguous(id.shape, id.strides)) {
    cuda::allocate_or_donate(out, in, name());
  } else {
    cuda::allocate(out, name());
  }
  if (out.size() == 0) return;
  bool in_place = out.desc()->buffer == id.buffer;
  if (in_place && id.dtype == out.dtype()) return;
  const char* src = cuda::in_ptr(in);
  char* dst = cuda::out_ptr(out);
  cuda::copy_strided(src, id.dtype, id.shape, id.strides, dst, out.dtype(), out.desc()->strides, name());
}

void Reshape::eval_gpu(const std::vector<array>& inputs, array& out) {
  const array& in = inputs[0];
  const auto& id = *in.desc();
  if (out.size() == 0) {
    detail::share_buffer(out, in, row_major_strides(out.shape()), id.offset);
    return;
  }
  if (auto st = layout::reshape_strides(id.shape, id.strides, out.shape())) {
    detail::share_buffer(out, in, std::move(*st), id.offset);
    return;
  }
  cuda::allocate(out, name());
  const char* src = cuda::in_ptr(in);
  char* dst = cuda::out_ptr(out);
  cuda::copy_strided(src, id.dtype, id.shape, id.strides, dst, out.dtype(), row_major_strides(id.shape), name());
}

// Views touch no data: the CPU versions only set strides and share the buffer.
void Transpose::eval_gpu(const std::vector<array>& inputs, array& out) { eval_cpu(inputs, out); }
void Broadcast::eval_gpu(const std::vector<array>& inputs, array& out) { eval_cpu(inputs, out); }
void Slice::eval_gpu(const std::vector<array>& inputs, array& out) { eval_cpu(inputs, out); }

void SliceUpdate::eval_gpu(const std::vector<array>& inputs, array& out) {
  const array& src = inputs[0];
  const array& upd = inputs[1];
  if (detail::is_row_contiguous(src.shape(), src.desc()->strides) && src.desc()->offset == 0) {
    cuda::allocate_or_donate(out, src, name());
  } else {
    cuda::allocate(out, name());
  }
  if (out.size() == 0) return;
  bool in_place = out.desc()->buffer == src.desc()->buffer;
  const char* ps = cuda::in_ptr(src);  // also orders us after src's producer
  char* po = cuda::out_ptr(out);
  const Strides& ost = out.desc()->strides;
  if (!in_place) {
    cuda::copy_strided(ps, src.dtype(), src.shape(), src.desc()->strides, po, out.dtype(), ost, name());
  }
  if (upd.size() == 0) return;
  Strides view(ost.size());
  int64_t offset = 0;
  for (size_t i = 0; i < ost.size(); ++i) {
    view[i] = ost[i] * step_[i];
    offset += static_cast<int64_t>(start_[i]) * ost[i];
  }
  const char* pu = cuda::in_ptr(upd);
  cuda::copy_strided(pu, upd.dtype(), upd.shape(), upd.desc()->strides,
                     po + offset * static_cast<int64_t>(out.itemsize()), out.dtype(), view, name());
}

}  // namespace kiln
