#pragma once
// Reading index arrays in kernels and moving elements as raw words: shared
// by the gathers and scatters of indexing.cu and gather_scatter.cu and the
// gathered quantized products (quantized.cu, quantized_fp.cu).
#include "backend/cuda/kernel_utils.cuh"

namespace kiln::cuda {

// Element i of an integer index array as int64 (the dtype is a run-time switch).
__device__ __forceinline__ int64_t load_index(const char* p, Dtype t, int64_t i) {
  switch (t) {
    case Dtype::uint8: return reinterpret_cast<const uint8_t*>(p)[i];
    case Dtype::uint16: return reinterpret_cast<const uint16_t*>(p)[i];
    case Dtype::uint32: return reinterpret_cast<const uint32_t*>(p)[i];
    case Dtype::uint64: {  // above INT64_MAX is out of range, not negative
      uint64_t u = reinterpret_cast<const uint64_t*>(p)[i];
      return u > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(u);
    }
    case Dtype::int8: return reinterpret_cast<const int8_t*>(p)[i];
    case Dtype::int16: return reinterpret_cast<const int16_t*>(p)[i];
    case Dtype::int32: return reinterpret_cast<const int32_t*>(p)[i];
    case Dtype::bool_: return reinterpret_cast<const bool*>(p)[i];
    default: return reinterpret_cast<const int64_t*>(p)[i];
  }
}

// Writes a bad index into err, when there is one. Plain stores (no atomics
// on host memory): any bad index may win.
__device__ __forceinline__ void report_bad_index(IndexErrorSlot* err, int64_t v) {
  if (!err) return;
  volatile IndexErrorSlot* e = err;
  e->value = v;
  e->flag = 1;
}

// Element i wrapped once by extent; an index outside [0, extent) is written
// to err (when there is one) and clamped, so nothing is read out of bounds.
__device__ __forceinline__ int64_t read_index(const char* p, Dtype t, int64_t i, int64_t extent,
                                              IndexErrorSlot* err) {
  int64_t v = load_index(p, t, i);
  int64_t w = v < 0 ? v + extent : v;
  if (w >= 0 && w < extent) return w;
  report_bad_index(err, v);
  return w < 0 ? 0 : extent - 1;
}

// An unsigned index (gather_qmm's lhs / rhs) at or past extent is written
// to err (when there is one) and clamped to extent - 1.
__device__ __forceinline__ int64_t clamp_unsigned_index(int64_t v, int64_t extent, IndexErrorSlot* err) {
  if (v < extent) return v;
  report_bad_index(err, v);
  return extent - 1;
}

// Calls launch(Tag<W>{}) with an unsigned word of the element size.
template <typename Launch>
void by_item_size(size_t item, Launch&& launch) {
  switch (item) {
    case 1: return launch(Tag<uint8_t>{});
    case 2: return launch(Tag<uint16_t>{});
    case 4: return launch(Tag<uint32_t>{});
    default: return launch(Tag<uint64_t>{});
  }
}

}  // namespace kiln::cuda
