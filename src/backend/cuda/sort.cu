// CUDA sorting and selection: Sort, ArgSort, Partition, ArgPartition,
// SearchSorted.
//
// Why it is shaped this way: every value becomes an unsigned radix key
// whose integer order is numpy's order (NaN last, -0.0 equal to +0.0), and
// the whole array is sorted as (key, flat index) pairs by CUB's
// DeviceRadixSort, which is stable. A second stable radix pass on the row
// number (only the bits the row count needs) groups the rows again while
// keeping each row's key order: two passes over memory sort any number of
// rows of any length, where a segmented sort would either put one block on
// each row (slow for long rows) or need a host round trip to bin the
// segments (CUB's DeviceSegmentedSort does, which a CUDA graph capture
// cannot contain). Ties keep the flat-index order, the CPU's stable order,
// so both backends give the same permutation. A sorted row is also a
// valid partition, so Partition/ArgPartition share the path (their order
// within each side differs from the CPU's nth_element, as the header says).
// SearchSorted is a binary search per value on the same keys.
#include <cub/device/device_radix_sort.cuh>

#include "backend/cuda/axis_rows.h"
#include "backend/cuda/kernel_utils.cuh"
#include "core/ops_util.h"
#include "core/primitives_sort.h"

namespace kiln {
namespace cuda {
namespace {

template <typename T>
struct KeyOf {
  using type = std::conditional_t<sizeof(T) == 1, uint8_t,
                                  std::conditional_t<sizeof(T) == 2, uint16_t,
                                                     std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
};

// The order-preserving unsigned key of a value.
template <typename T>
__device__ __forceinline__ typename KeyOf<T>::type radix_key(T x) {
  using K = typename KeyOf<T>::type;
  constexpr K sign = K(1) << (sizeof(K) * 8 - 1);
  if constexpr (std::is_same_v<T, bool>) {
    return static_cast<K>(x ? 1 : 0);
  } else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) {
    return static_cast<K>(x);
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<K>(static_cast<K>(x) ^ sign);
  } else {
    K bits;
    memcpy(&bits, &x, sizeof(K));
    K mag = bits & static_cast<K>(~sign);
    K inf;
    if constexpr (std::is_same_v<T, __half>) inf = 0x7c00u;
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) inf = 0x7f80u;
    else if constexpr (std::is_same_v<T, float>) inf = 0x7f800000u;
    else inf = 0x7ff0000000000000ull;
    if (mag > inf) return static_cast<K>(~K(0));  // every NaN, last
    if (mag == 0) return sign;                    // -0.0 as +0.0
    return (bits & sign) ? static_cast<K>(~bits) : static_cast<K>(bits | sign);
  }
}

template <typename T>
__global__ void make_keys(const T* __restrict__ in, typename KeyOf<T>::type* __restrict__ keys,
                          uint32_t* __restrict__ idx, int64_t n) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    keys[i] = radix_key(in[i]);
    idx[i] = static_cast<uint32_t>(i);
  }
}

__global__ void row_of(const uint32_t* __restrict__ perm, uint32_t* __restrict__ rows, int64_t n, uint32_t len) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) rows[i] = perm[i] / len;
}

// out[j] = the value (or its index within the row) the permutation puts at j.
template <typename T>
__global__ void write_sorted(const T* __restrict__ in, const uint32_t* __restrict__ perm, T* __restrict__ values,
                             uint32_t* __restrict__ indices, int64_t n, uint32_t len) {
  int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= n) return;
  uint32_t g = perm[j];
  if (values) values[j] = in[g];
  else indices[j] = g % len;
}

template <typename T>
__global__ void search_sorted(const T* __restrict__ seq, int64_t len, const T* __restrict__ vals,
                              uint32_t* __restrict__ out, int64_t n, bool right) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  auto v = radix_key(vals[i]);
  int64_t lo = 0, hi = len;
  while (lo < hi) {
    int64_t mid = (lo + hi) / 2;
    auto k = radix_key(seq[mid]);
    if (right ? k <= v : k < v) lo = mid + 1;
    else hi = mid;
  }
  out[i] = static_cast<uint32_t>(lo);
}

int bits_for(uint64_t count) {
  int b = 0;
  while (b < 64 && (uint64_t{1} << b) < count) ++b;
  return b;
}

// Sorts the rows of `in` along axis into `out`: its values, or (indices)
// the uint32 position of each within its row.
void sort_rows(const array& in, array& out, int axis, bool indices, const char* op) {
  allocate(out, op);
  int64_t n = static_cast<int64_t>(in.size());
  if (n == 0) return;
  if (static_cast<uint64_t>(n) > UINT32_MAX) {
    throw Error(std::string("[") + op + "] the GPU sort handles at most 2^32 - 1 elements; input " +
                format_shape(in.shape()));
  }
  Rows r = rows_of(in, axis, op);
  bool last = axis == in.ndim() - 1;
  char* dst = out_ptr(out);
  char* rows_dst = last ? dst : static_cast<char*>(scratch(out.nbytes(), op));
  int64_t rows = n / r.len;
  cudaStream_t s = current_stream();
  unsigned grid = static_cast<unsigned>((n + 255) / 256);
  dispatch(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using K = typename KeyOf<T>::type;
    auto* keys = static_cast<K*>(scratch(2 * n * sizeof(K), op));
    auto* idx = static_cast<uint32_t*>(scratch(4 * n * sizeof(uint32_t), op));
    uint32_t* idx_b = idx + n;
    uint32_t* rk = idx + 2 * n;
    uint32_t* rk_b = idx + 3 * n;
    int row_bits = bits_for(static_cast<uint64_t>(rows));
    size_t need_keys = 0, need_rows = 0;
    KILN_CUDA_CHECK(op, cub::DeviceRadixSort::SortPairs(nullptr, need_keys, keys, keys + n, idx, idx_b, n, 0,
                                                        static_cast<int>(sizeof(K) * 8), s));
    if (rows > 1) {
      KILN_CUDA_CHECK(op, cub::DeviceRadixSort::SortPairs(nullptr, need_rows, rk, rk_b, idx_b, idx, n, 0, row_bits, s));
    }
    size_t temp_bytes = std::max<size_t>({need_keys, need_rows, 1});
    void* temp = scratch(temp_bytes, op);
    const T* x = reinterpret_cast<const T*>(r.data);
    make_keys<T><<<grid, 256, 0, s>>>(x, keys, idx, n);
    KILN_CUDA_CHECK_LAUNCH(op);
    KILN_CUDA_CHECK(op, cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, keys + n, idx, idx_b, n, 0,
                                                        static_cast<int>(sizeof(K) * 8), s));
    const uint32_t* perm = idx_b;
    if (rows > 1) {
      row_of<<<grid, 256, 0, s>>>(idx_b, rk, n, static_cast<uint32_t>(r.len));
      KILN_CUDA_CHECK_LAUNCH(op);
      KILN_CUDA_CHECK(op, cub::DeviceRadixSort::SortPairs(temp, temp_bytes, rk, rk_b, idx_b, idx, n, 0, row_bits, s));
      perm = idx;
    }
    write_sorted<T><<<grid, 256, 0, s>>>(x, perm, indices ? nullptr : reinterpret_cast<T*>(rows_dst),
                                         indices ? reinterpret_cast<uint32_t*>(rows_dst) : nullptr, n,
                                         static_cast<uint32_t>(r.len));
    KILN_CUDA_CHECK_LAUNCH(op);
  });
  if (!last) {
    copy_strided(rows_dst, out.dtype(), r.shape, row_major_strides(r.shape), dst, out.dtype(), r.out_strides, op);
  }
}

}  // namespace
}  // namespace cuda

void Sort::eval_gpu(const std::vector<array>& inputs, array& out) {
  cuda::sort_rows(inputs[0], out, axis_, false, "sort");
}
void ArgSort::eval_gpu(const std::vector<array>& inputs, array& out) {
  cuda::sort_rows(inputs[0], out, axis_, true, "argsort");
}
void Partition::eval_gpu(const std::vector<array>& inputs, array& out) {
  cuda::sort_rows(inputs[0], out, axis_, false, "partition");
}
void ArgPartition::eval_gpu(const std::vector<array>& inputs, array& out) {
  cuda::sort_rows(inputs[0], out, axis_, true, "argpartition");
}

void SearchSorted::eval_gpu(const std::vector<array>& inputs, array& out) {
  const char* op = "searchsorted";
  const array& seq = inputs[0];
  const array& vals = inputs[1];
  cuda::allocate(out, op);
  int64_t n = static_cast<int64_t>(vals.size());
  if (n == 0) return;
  char* dst = cuda::out_ptr(out);
  cudaStream_t s = cuda::current_stream();
  if (seq.size() == 0) {  // every value goes to position 0
    KILN_CUDA_CHECK(op, cudaMemsetAsync(dst, 0, out.nbytes(), s));
    return;
  }
  cuda::Rows sr = cuda::rows_of(seq, 0, op);
  const auto& vd = *vals.desc();
  const char* vp = cuda::in_ptr(vals);
  if (!detail::is_row_contiguous(vd.shape, vd.strides)) {
    char* tmp = static_cast<char*>(cuda::scratch(vals.nbytes(), op));
    cuda::copy_strided(vp, vd.dtype, vd.shape, vd.strides, tmp, vd.dtype, row_major_strides(vd.shape), op);
    vp = tmp;
  }
  bool right = right_;
  cuda::dispatch(seq.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::search_sorted<T><<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(
        reinterpret_cast<const T*>(sr.data), sr.len, reinterpret_cast<const T*>(vp), reinterpret_cast<uint32_t*>(dst),
        n, right);
  });
  KILN_CUDA_CHECK_LAUNCH(op);
}

}  // namespace kiln
