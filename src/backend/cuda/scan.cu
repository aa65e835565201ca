// CUDA scans (cumsum, cumprod, cummax, cummin, logcumsumexp).
//
// Why it is shaped this way: the scanned axis is moved last and made
// contiguous (a copy only when it is not already), then one block walks
// each row in tiles of BLOCK * ITEMS elements. Each thread scans its ITEMS
// in registers, CUB's BlockScan combines the threads, and a running-prefix
// callback carries the total from tile to tile, so any row length works in
// one pass with the input read once. Short rows get 32-thread blocks so
// that many rows share an SM. Exclusive scans use the same path with the
// identity as the first prefix; reverse scans read the row backwards.
//
// Numerics match the CPU's (backend/cpu/scan.cpp): float sums, products
// and log-add-exps of every float type run in double, integer sums and
// products wrap in unsigned arithmetic, cummax/cummin propagate NaN.
// Bandwidth bound: measured by no `kiln bench` row yet.
#include <math_constants.h>

#include <cub/block/block_scan.cuh>

#include "backend/cuda/axis_rows.h"
#include "backend/cuda/kernel_utils.cuh"
#include "core/primitives_sort.h"

namespace kiln {
namespace cuda {
namespace {

template <typename T>
struct Wrapped {
  using type = ko::wrap_unsigned_t<T>;
};
template <>
struct Wrapped<bool> {
  using type = uint32_t;
};
// double for every float type; the wrapping unsigned type for integers.
template <typename T>
using accumulator_t = typename std::conditional_t<is_float_v<T>, std::type_identity<double>, Wrapped<T>>::type;

template <typename T>
__device__ __forceinline__ accumulator_t<T> widen(T x) {
  if constexpr (is_float_v<T>) return static_cast<double>(to_compute(x));
  else return static_cast<accumulator_t<T>>(x);
}

template <typename T>
struct SumOp {
  using State = accumulator_t<T>;
  static __device__ State identity() { return State(0); }
  static __device__ State load(T x) { return widen(x); }
  __device__ State operator()(const State& a, const State& b) const { return a + b; }
};

template <typename T>
struct ProdOp {
  using State = accumulator_t<T>;
  static __device__ State identity() { return State(1); }
  static __device__ State load(T x) { return widen(x); }
  __device__ State operator()(const State& a, const State& b) const {
    if constexpr (std::is_same_v<T, bool>) return a & b;
    else return a * b;
  }
};

template <typename T, bool kMax>
struct ExtremeOp {
  using State = std::conditional_t<std::is_same_v<T, bool>, uint32_t, compute_t<T>>;
  static __device__ State identity() {
    if constexpr (std::is_same_v<T, bool>) return kMax ? 0u : 1u;
    else if constexpr (std::is_floating_point_v<State>)
      return kMax ? -std::numeric_limits<State>::infinity() : std::numeric_limits<State>::infinity();
    else return kMax ? std::numeric_limits<State>::lowest() : std::numeric_limits<State>::max();
  }
  static __device__ State load(T x) { return static_cast<State>(to_compute(x)); }
  __device__ State operator()(const State& a, const State& b) const {
    if constexpr (std::is_floating_point_v<State>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return kMax ? (b > a ? b : a) : (b < a ? b : a);
  }
};

template <typename T>
struct LogAddExpOp {
  using State = double;
  static __device__ State identity() { return -CUDART_INF; }
  static __device__ State load(T x) { return static_cast<double>(to_compute(x)); }
  __device__ State operator()(const State& a, const State& b) const {
    if (a != a || b != b) return CUDART_NAN;
    double hi = fmax(a, b), lo = fmin(a, b);
    if (isinf(hi)) return hi;  // -inf + -inf, or an infinite term
    return hi + log1p(exp(lo - hi));
  }
};

// Hands each tile the total of the tiles before it.
template <typename Op>
struct RunningPrefix {
  typename Op::State running;
  __device__ typename Op::State operator()(typename Op::State tile_total) {
    typename Op::State before = running;
    running = Op()(running, tile_total);
    return before;
  }
};

template <typename Op, typename T, typename O, int BLOCK, int ITEMS>
__global__ void __launch_bounds__(BLOCK)
    scan_rows(const T* __restrict__ in, O* __restrict__ out, int64_t len, bool reverse, bool inclusive) {
  using State = typename Op::State;
  using BlockScan = cub::BlockScan<State, BLOCK>;
  __shared__ typename BlockScan::TempStorage temp;
  const T* x = in + static_cast<int64_t>(blockIdx.x) * len;
  O* y = out + static_cast<int64_t>(blockIdx.x) * len;
  RunningPrefix<Op> prefix{Op::identity()};
  for (int64_t base = 0; base < len; base += BLOCK * ITEMS) {
    State items[ITEMS];
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
      int64_t k = base + threadIdx.x * ITEMS + j;
      items[j] = k < len ? Op::load(x[reverse ? len - 1 - k : k]) : Op::identity();
    }
    if (inclusive) BlockScan(temp).InclusiveScan(items, items, Op(), prefix);
    else BlockScan(temp).ExclusiveScan(items, items, Op(), prefix);
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
      int64_t k = base + threadIdx.x * ITEMS + j;
      if (k < len) y[reverse ? len - 1 - k : k] = convert<O>(items[j]);
    }
    __syncthreads();  // the next tile reuses temp
  }
}

template <typename Op, typename T, typename O>
void launch(const T* in, O* out, int64_t rows, int64_t len, bool reverse, bool inclusive, cudaStream_t s) {
  if (len <= 64) {
    scan_rows<Op, T, O, 32, 2><<<static_cast<unsigned>(rows), 32, 0, s>>>(in, out, len, reverse, inclusive);
  } else {
    scan_rows<Op, T, O, 256, 4><<<static_cast<unsigned>(rows), 256, 0, s>>>(in, out, len, reverse, inclusive);
  }
}

}  // namespace
}  // namespace cuda

void Scan::eval_gpu(const std::vector<array>& inputs, array& out) {
  const array& in = inputs[0];
  const char* op = scan_op_name(op_);
  cuda::allocate(out, op);
  int64_t n = static_cast<int64_t>(in.size());
  if (n == 0) return;
  cuda::Rows r = cuda::rows_of(in, axis_, op);
  int64_t rows = n / r.len;
  if (rows > INT32_MAX) throw Error(std::string("[") + op + "] too many rows for the GPU scan: " + std::to_string(rows));
  bool last = axis_ == in.ndim() - 1;
  char* dst = cuda::out_ptr(out);
  char* rows_dst = last ? dst : static_cast<char*>(cuda::scratch(out.nbytes(), op));
  cudaStream_t s = cuda::current_stream();
  ScanOp sop = op_;
  bool rev = reverse_, inc = inclusive_;
  int64_t len = r.len;
  cuda::dispatch(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = reinterpret_cast<const T*>(r.data);
    T* y = reinterpret_cast<T*>(rows_dst);
    switch (sop) {
      case ScanOp::sum:
        if constexpr (std::is_same_v<T, bool>) {
          cuda::launch<cuda::SumOp<T>>(x, reinterpret_cast<int32_t*>(rows_dst), rows, len, rev, inc, s);
        } else {
          cuda::launch<cuda::SumOp<T>>(x, y, rows, len, rev, inc, s);
        }
        return;
      case ScanOp::prod: cuda::launch<cuda::ProdOp<T>>(x, y, rows, len, rev, inc, s); return;
      case ScanOp::max: cuda::launch<cuda::ExtremeOp<T, true>>(x, y, rows, len, rev, inc, s); return;
      case ScanOp::min: cuda::launch<cuda::ExtremeOp<T, false>>(x, y, rows, len, rev, inc, s); return;
      case ScanOp::logaddexp:
        if constexpr (cuda::is_float_v<T>) {
          cuda::launch<cuda::LogAddExpOp<T>>(x, y, rows, len, rev, inc, s);
          return;
        } else {
          throw Error(std::string("[logcumsumexp] needs a floating dtype, got ") + dtype_name(in.dtype()));
        }
    }
  });
  KILN_CUDA_CHECK_LAUNCH(op);
  if (!last) {
    cuda::copy_strided(rows_dst, out.dtype(), r.shape, row_major_strides(r.shape), dst, out.dtype(), r.out_strides, op);
  }
}

}  // namespace kiln
