// Binary elementwise kernels (the ops' math: backend/common/op_math.inc,
// through op_math.cuh; inputs already promoted to one dtype and
// broadcast to the output shape by the op layer) and `where`. As in
// unary.cu, the op is a run-time switch inside one kernel per dtype. The
// contiguous path (each input contiguous or a single broadcast scalar) moves
// 16 bytes per load; two-dim layouts have a row path (broadcast rows or
// per-row values, 16-byte loads) and a tiled path (an input transposed);
// the strided path handles any layout.
#include <cstring>

#include "backend/cuda/kernel_utils.cuh"
#include "backend/cuda/op_math.cuh"
#include "backend/cuda/vec_tile.cuh"
#include "core/ops_util.h"
#include "core/primitives.h"

namespace kiln {
namespace cuda {
namespace {

// Inputs of a 16-bit float type compute in float and round once; bool
// inputs of a same-type op (add is or, ...) and comparisons of any type
// give bool directly.
template <typename T, typename O>
__device__ __forceinline__ O apply(BinaryOp op, T a, T b) {
  auto x = to_compute(a);
  auto y = to_compute(b);
  if constexpr (std::is_same_v<O, bool>) return ko::binary<bool>(op, x, y);
  else return convert<T>(ko::binary<decltype(x)>(op, x, y));
}

// An input of the contiguous kernel: dense, one broadcast element in device
// memory, or one element passed by value (a host scalar: no upload at all).
template <typename T>
struct ScalarArg {
  bool scalar = false;    // one broadcast element
  bool by_value = false;  // ... held in `value`, not behind the pointer
  T value{};
};

template <typename T, typename O>
__global__ void binary_contiguous(BinaryOp op, const T* __restrict__ a, const T* __restrict__ b, O* __restrict__ out,
                                  int64_t n, ScalarArg<T> as, ScalarArg<T> bs) {
  using V = Vec<T>;
  constexpr int G = V::n;
  int64_t ngroups = n / G;
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool a_scalar = as.scalar, b_scalar = bs.scalar;
  T sa = as.by_value ? as.value : (a_scalar ? a[0] : T{});
  T sb = bs.by_value ? bs.value : (b_scalar ? b[0] : T{});
  for (int64_t i = tid; i < ngroups; i += stride) {
    V va, vb;
    if (a_scalar) {
#pragma unroll
      for (int k = 0; k < G; ++k) va.v[k] = sa;
    } else {
      va = reinterpret_cast<const V*>(a)[i];
    }
    if (b_scalar) {
#pragma unroll
      for (int k = 0; k < G; ++k) vb.v[k] = sb;
    } else {
      vb = reinterpret_cast<const V*>(b)[i];
    }
    if constexpr (std::is_same_v<O, T>) {
      V r;
#pragma unroll
      for (int k = 0; k < G; ++k) r.v[k] = apply<T, O>(op, va.v[k], vb.v[k]);
      reinterpret_cast<V*>(out)[i] = r;
    } else {
#pragma unroll
      for (int k = 0; k < G; ++k) out[i * G + k] = apply<T, O>(op, va.v[k], vb.v[k]);
    }
  }
  for (int64_t i = ngroups * G + tid; i < n; i += stride) {
    out[i] = apply<T, O>(op, a_scalar ? sa : a[i], b_scalar ? sb : b[i]);
  }
}

template <typename T, typename O>
__global__ void binary_strided(BinaryOp op, const T* __restrict__ a, const T* __restrict__ b, O* __restrict__ out,
                               Strided<3> l, int64_t n) {
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t off[3];
    l.offsets(i, off);
    out[off[0]] = apply<T, O>(op, a[off[1]], b[off[2]]);
  }
}

// Two-dim layouts with a row-major output where each input either runs
// along the row (inner stride 1, any row stride: 0 is a broadcast row) or
// holds one value per row (inner stride 0): 16-byte accesses, a thread per
// 16 bytes of a row, the grid's y over rows (no index division).
template <typename T, typename O>
__global__ void binary_rows(BinaryOp op, const T* __restrict__ a, const T* __restrict__ b, O* __restrict__ out,
                            int64_t rows, int64_t cols, int64_t a_row, bool a_per_row, int64_t b_row,
                            bool b_per_row) {
  using V = Vec<T>;
  constexpr int G = V::n;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g * G >= cols) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    V va, vb;
    if (a_per_row) {
      const T x = a[r * a_row];
#pragma unroll
      for (int k = 0; k < G; ++k) va.v[k] = x;
    } else {
      va = reinterpret_cast<const V*>(a + r * a_row)[g];
    }
    if (b_per_row) {
      const T x = b[r * b_row];
#pragma unroll
      for (int k = 0; k < G; ++k) vb.v[k] = x;
    } else {
      vb = reinterpret_cast<const V*>(b + r * b_row)[g];
    }
    if constexpr (std::is_same_v<O, T>) {
      V o;
#pragma unroll
      for (int k = 0; k < G; ++k) o.v[k] = apply<T, O>(op, va.v[k], vb.v[k]);
      reinterpret_cast<V*>(out + r * cols)[g] = o;
    } else {
#pragma unroll
      for (int k = 0; k < G; ++k) out[r * cols + g * G + k] = apply<T, O>(op, va.v[k], vb.v[k]);
    }
  }
}

// Two-dim layouts with a row-major output where an input runs down the
// columns (a transposed view: outer stride 1): kT x kT tiles, such inputs
// staged through shared memory, so every global access is coalesced; 64-wide
// tiles for elements up to 4 bytes (256-byte row segments).
constexpr int kTileRows = 8;
template <typename T>
constexpr int tile_for() {
  return sizeof(T) <= 4 ? 64 : 32;
}

// kACols / kBCols: which inputs run down the columns (staged); the others are
// read along the rows. The row-read values are loaded before the staging so
// that they are in flight with it, and the loops have fixed trip counts:
// with a runtime start (ty) the compiler kept two loads in flight per thread
// (8192^2 float32 with one transposed input: 0.53 of copy, copy_tiled 0.87).
template <typename T, typename O, int kT, bool kACols, bool kBCols>
__global__ void binary_tiled(BinaryOp op, const T* __restrict__ a, const T* __restrict__ b, O* __restrict__ out,
                             int64_t rows, int64_t cols, int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  constexpr int kPasses = kT / kTileRows, kQ = kT / 32;
  __shared__ T ta[kACols ? kT : 1][kT + 1], tb[kBCols ? kT : 1][kT + 1];
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kT, c0 = static_cast<int64_t>(blockIdx.x) * kT;
  const int tx = threadIdx.x, ty = threadIdx.y;
  // The row-read input's values of this thread's outputs.
  T direct[kPasses][kQ];
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
#pragma unroll
    for (int q = 0; q < kQ; ++q) {
      const int64_t r = r0 + ty + p * kTileRows, c = c0 + tx + 32 * q;
      if (!(kACols && kBCols) && r < rows && c < cols) direct[p][q] = kACols ? b[r * b0 + c * b1] : a[r * a0 + c * a1];
    }
  }
  // Staging: consecutive threads read consecutive rows (stride 1 in memory).
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
#pragma unroll
    for (int q = 0; q < kQ; ++q) {
      const int j = ty + p * kTileRows;
      const int64_t r = r0 + tx + 32 * q, c = c0 + j;
      if (r < rows && c < cols) {
        if constexpr (kACols) ta[j][tx + 32 * q] = a[r * a0 + c * a1];
        if constexpr (kBCols) tb[j][tx + 32 * q] = b[r * b0 + c * b1];
      }
    }
  }
  __syncthreads();
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
#pragma unroll
    for (int q = 0; q < kQ; ++q) {
      const int j = ty + p * kTileRows;
      const int64_t r = r0 + j, c = c0 + tx + 32 * q;
      if (r < rows && c < cols) {
        const T va = kACols ? ta[tx + 32 * q][j] : direct[p][q];
        const T vb = kBCols ? tb[tx + 32 * q][j] : direct[p][q];
        out[r * cols + c] = apply<T, O>(op, va, vb);
      }
    }
  }
}

// binary_tiled with 16-byte accesses, where every dim and stride involved
// is a multiple of G = 16 / sizeof(T) and the pointers are 16-byte aligned:
// a row-read input and the output move G elements per access, and a staged
// input is read as G consecutive elements of its memory rows (G rows of the
// output tile) and scattered into the shared tile. A 64 x 64 tile and 256
// threads: kTx threads across a tile row, each with kPasses rows, every
// load issued before the first use. binary_tiled's 4-byte accesses held
// the strided add (8192^2 float32, one input transposed) at 0.67 of copy
// on the H200 while the plain transposed copy reached 0.88; this kernel 1.00.
template <typename T, typename O, bool kACols, bool kBCols>
__global__ void __launch_bounds__(256)
    binary_tiled_vec(BinaryOp op, const T* __restrict__ a, const T* __restrict__ b, O* __restrict__ out, int64_t rows,
                     int64_t cols, int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  using Tile = VecTile<T>;
  using V = typename Tile::V;
  constexpr int kT = Tile::kT, G = Tile::G, kTy = Tile::kTy, kPasses = Tile::kPasses;
  __shared__ T ta[kACols ? kT : 1][kT + 1], tb[kBCols ? kT : 1][kT + 1];
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kT, c0 = static_cast<int64_t>(blockIdx.x) * kT;
  const int tx = threadIdx.x % Tile::kTx, ty = threadIdx.x / Tile::kTx;
  V direct[kPasses];
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int64_t r = r0 + ty + p * kTy, c = c0 + G * tx;
    if (!(kACols && kBCols) && r < rows && c < cols) {
      direct[p] = kACols ? *reinterpret_cast<const V*>(b + r * b0 + c) : *reinterpret_cast<const V*>(a + r * a0 + c);
    }
  }
  V sa[kACols ? kPasses : 1], sb[kBCols ? kPasses : 1];
  if constexpr (kACols) Tile::load(a, a1, r0, c0, rows, cols, sa);
  if constexpr (kBCols) Tile::load(b, b1, r0, c0, rows, cols, sb);
  if constexpr (kACols) Tile::scatter(sa, ta);
  if constexpr (kBCols) Tile::scatter(sb, tb);
  __syncthreads();
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int i = ty + p * kTy;
    const int64_t r = r0 + i, c = c0 + G * tx;
    if (r < rows && c < cols) {
      O o[G];
#pragma unroll
      for (int k = 0; k < G; ++k) {
        const T va = kACols ? ta[G * tx + k][i] : direct[p].v[k];
        const T vb = kBCols ? tb[G * tx + k][i] : direct[p].v[k];
        o[k] = apply<T, O>(op, va, vb);
      }
      if constexpr (std::is_same_v<O, T>) {
        V w;
#pragma unroll
        for (int k = 0; k < G; ++k) w.v[k] = o[k];
        *reinterpret_cast<V*>(out + r * cols + c) = w;
      } else {
#pragma unroll
        for (int k = 0; k < G; ++k) out[r * cols + c + k] = o[k];
      }
    }
  }
}

template <typename T>
__global__ void select_strided(const bool* __restrict__ c, const T* __restrict__ x, const T* __restrict__ y,
                               T* __restrict__ out, Strided<4> l, int64_t n) {
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t off[4];
    l.offsets(i, off);
    out[off[0]] = c[off[1]] ? x[off[2]] : y[off[3]];
  }
}

bool is_scalar_layout(const Strided<3>& l, int k) {
  for (int d = 0; d < l.ndim; ++d) {
    if (l.strides[k][d] != 0) return false;
  }
  return true;
}
bool is_dense_layout(const Strided<3>& l, int k) { return l.ndim == 1 && l.strides[k][0] == 1; }

// Whether launch_binary takes the contiguous kernel (where host scalars go
// by value); a or b may be null for an input that is a host scalar.
bool contiguous_path(const Strided<3>& l, const char* a, const char* b, const char* out) {
  bool a_ok = is_scalar_layout(l, 1) || (is_dense_layout(l, 1) && aligned16(a));
  bool b_ok = is_scalar_layout(l, 2) || (is_dense_layout(l, 2) && aligned16(b));
  return is_dense_layout(l, 0) && a_ok && b_ok && aligned16(out);
}

// a_value / b_value: that input's single element, read on the host (then
// a / b may be null); only for the contiguous path.
template <typename T, typename O>
void launch_binary(BinaryOp op, const char* a, const char* b, char* out, const Strided<3>& l, int64_t n,
                   cudaStream_t s, const void* a_value = nullptr, const void* b_value = nullptr) {
  constexpr int kBlock = 256;
  const T* ta = reinterpret_cast<const T*>(a);
  const T* tb = reinterpret_cast<const T*>(b);
  O* to = reinterpret_cast<O*>(out);
  if (contiguous_path(l, a, b, out)) {
    ScalarArg<T> as, bs;
    as.scalar = is_scalar_layout(l, 1);
    bs.scalar = is_scalar_layout(l, 2);
    if (a_value) {
      as.by_value = true;
      std::memcpy(&as.value, a_value, sizeof(T));
    }
    if (b_value) {
      bs.by_value = true;
      std::memcpy(&bs.value, b_value, sizeof(T));
    }
    binary_contiguous<T, O><<<grid_for(n, Vec<T>::n * 4, kBlock), kBlock, 0, s>>>(op, ta, tb, to, n, as, bs);
    return;
  }
  if (l.ndim != 2 || l.strides[0][1] != 1 || l.strides[0][0] != l.shape[1]) {
    binary_strided<T, O><<<grid_for(n, 4, kBlock), kBlock, 0, s>>>(op, ta, tb, to, l, n);
    return;
  }
  const int64_t rows = l.shape[0], cols = l.shape[1];
  constexpr int G = Vec<T>::n;
  // Each input along the row with whole 16-byte groups, or one value per row.
  auto row_ok = [&](int k, const char* p) {
    return l.strides[k][1] == 0 || (l.strides[k][1] == 1 && l.strides[k][0] % G == 0 && aligned16(p));
  };
  if (cols % G == 0 && cols >= 32 * G && row_ok(1, a) && row_ok(2, b) && aligned16(out)) {
    const int64_t groups = cols / G;
    dim3 grid(static_cast<unsigned>((groups + kBlock - 1) / kBlock),
              static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
    binary_rows<T, O><<<grid, kBlock, 0, s>>>(op, ta, tb, to, rows, cols, l.strides[1][0], l.strides[1][1] == 0,
                                              l.strides[2][0], l.strides[2][1] == 0);
    return;
  }
  auto down_columns = [&](int k) { return l.strides[k][0] == 1 && l.strides[k][1] != 1 && l.strides[k][1] != 0; };
  constexpr int kT = tile_for<T>();
  if ((down_columns(1) || down_columns(2)) && (rows + kT - 1) / kT <= 65535) {
    dim3 grid(static_cast<unsigned>((cols + kT - 1) / kT), static_cast<unsigned>((rows + kT - 1) / kT));
    const int64_t a0 = l.strides[1][0], a1 = l.strides[1][1], b0 = l.strides[2][0], b1 = l.strides[2][1];
    if constexpr (kT == 64) {
      // The vector kernel: each input's memory rows hold whole aligned groups.
      auto groups_ok = [&](int k, const char* p) {
        const int64_t outer = l.strides[k][0], inner = l.strides[k][1];
        return aligned16(p) && (down_columns(k) ? inner % G == 0 : (inner == 1 && outer % G == 0));
      };
      if (rows % G == 0 && cols % G == 0 && aligned16(out) && groups_ok(1, a) && groups_ok(2, b)) {
        if (down_columns(1) && down_columns(2)) {
          binary_tiled_vec<T, O, true, true><<<grid, 256, 0, s>>>(op, ta, tb, to, rows, cols, a0, a1, b0, b1);
        } else if (down_columns(1)) {
          binary_tiled_vec<T, O, true, false><<<grid, 256, 0, s>>>(op, ta, tb, to, rows, cols, a0, a1, b0, b1);
        } else {
          binary_tiled_vec<T, O, false, true><<<grid, 256, 0, s>>>(op, ta, tb, to, rows, cols, a0, a1, b0, b1);
        }
        return;
      }
    }
    const dim3 block(32, kTileRows);
    if (down_columns(1) && down_columns(2)) {
      binary_tiled<T, O, kT, true, true><<<grid, block, 0, s>>>(op, ta, tb, to, rows, cols, a0, a1, b0, b1);
    } else if (down_columns(1)) {
      binary_tiled<T, O, kT, true, false><<<grid, block, 0, s>>>(op, ta, tb, to, rows, cols, a0, a1, b0, b1);
    } else {
      binary_tiled<T, O, kT, false, true><<<grid, block, 0, s>>>(op, ta, tb, to, rows, cols, a0, a1, b0, b1);
    }
    return;
  }
  binary_strided<T, O><<<grid_for(n, 4, kBlock), kBlock, 0, s>>>(op, ta, tb, to, l, n);
}

// Integers to negative integer powers are an error (as in numpy): a
// negative exponent is written to a deferred-error slot, reported by the
// next eval or synchronize as the CPU reports it at once (binary.cpp).
template <typename T>
__global__ void find_negative(const T* __restrict__ p, Strided<1> l, int64_t n, IndexErrorSlot* err) {
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t off[1];
    l.offsets(i, off);
    if (p[off[0]] < 0) {
      volatile IndexErrorSlot* e = err;  // plain stores to host memory: any bad value may win
      e->value = p[off[0]];
      e->flag = 1;
    }
  }
}

void check_exponents(const array& base, const array& exponent, const char* pb, const void* host_value,
                     cudaStream_t s) {
  auto describe = [bs = base.shape(), bt = base.dtype(), es = exponent.shape(), et = exponent.dtype()](int64_t v) {
    return "[power] integers to negative integer powers are not allowed (exponent " + std::to_string(v) +
           "); inputs: " + format_shape(bs) + " " + dtype_name(bt) + ", " + format_shape(es) + " " + dtype_name(et);
  };
  dispatch_with_complex(exponent.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
      if (host_value) {
        T v;
        std::memcpy(&v, host_value, sizeof(T));
        if (v < 0) throw Error(describe(v));
        return;
      }
      // Broadcast (zero-stride) dims are skipped: each element is read once.
      Shape shape;
      Strides strides;
      const auto& d = *exponent.desc();
      for (size_t k = 0; k < d.shape.size(); ++k) {
        if (d.strides[k] != 0) {
          shape.push_back(d.shape[k]);
          strides.push_back(d.strides[k]);
        }
      }
      int64_t n = shape_size(shape);
      IndexErrorSlot* err = index_error_slot(describe);
      if (!err) return;
      find_negative<T><<<grid_for(n, 4, 256), 256, 0, s>>>(reinterpret_cast<const T*>(pb),
                                                            make_strided<1>(shape, {&strides}, "power"), n, err);
      KILN_CUDA_CHECK_LAUNCH("power");
    }
  });
}

}  // namespace
}  // namespace cuda

void Binary::eval_gpu(const std::vector<array>& inputs, array& out) {
  const char* nm = binary_op_name(op_);
  const array& a = inputs[0];
  const array& b = inputs[1];
  bool donated = false;
  for (const auto& in : inputs) {
    if (!donated && in.dtype() == out.dtype() && in.size() == out.size() && in.desc()->offset == 0 &&
        cuda::can_donate(in) && detail::is_row_contiguous(in.shape(), in.desc()->strides)) {
      cuda::allocate_or_donate(out, in, nm);
      donated = true;
    }
  }
  if (!donated) cuda::allocate(out, nm);
  int64_t n = static_cast<int64_t>(out.size());
  if (n == 0) return;
  auto l = cuda::make_strided<3>(out.shape(), {&out.desc()->strides, &a.desc()->strides, &b.desc()->strides}, nm);
  // A scalar operand still on the host (a C++ constant) goes to the kernel
  // by value: no upload, no wait, one node fewer in a CUDA graph.
  alignas(8) unsigned char a_value[8], b_value[8];
  bool a_host = cuda::host_scalar(a, a_value), b_host = cuda::host_scalar(b, b_value);
  const char* pa = a_host ? nullptr : cuda::in_ptr(a);
  const char* pb = b_host ? nullptr : cuda::in_ptr(b);
  char* po = cuda::out_ptr(out);
  if ((a_host || b_host) && !cuda::contiguous_path(l, pa, pb, po)) {
    if (a_host) pa = cuda::in_ptr(a);
    if (b_host) pb = cuda::in_ptr(b);
    a_host = b_host = false;
  }
  cudaStream_t s = cuda::current_stream();
  BinaryOp op = op_;
  bool to_bool = out.dtype() == Dtype::bool_;
  const void* av = a_host ? a_value : nullptr;
  const void* bv = b_host ? b_value : nullptr;
  if (op == BinaryOp::power) cuda::check_exponents(a, b, pb, bv, s);
  cuda::dispatch_with_complex(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (to_bool) cuda::launch_binary<T, bool>(op, pa, pb, po, l, n, s, av, bv);
    else cuda::launch_binary<T, T>(op, pa, pb, po, l, n, s, av, bv);
  });
  KILN_CUDA_CHECK_LAUNCH(nm);
}

void Select::eval_gpu(const std::vector<array>& inputs, array& out) {
  const array& cond = inputs[0];
  const array& x = inputs[1];
  const array& y = inputs[2];
  cuda::allocate(out, "where");
  int64_t n = static_cast<int64_t>(out.size());
  if (n == 0) return;
  const char* pc = cuda::in_ptr(cond);
  const char* px = cuda::in_ptr(x);
  const char* py = cuda::in_ptr(y);
  char* po = cuda::out_ptr(out);
  auto l = cuda::make_strided<4>(
      out.shape(), {&out.desc()->strides, &cond.desc()->strides, &x.desc()->strides, &y.desc()->strides}, "where");
  cudaStream_t s = cuda::current_stream();
  cuda::dispatch_with_complex(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::select_strided<T><<<cuda::grid_for(n, 4, 256), 256, 0, s>>>(
        reinterpret_cast<const bool*>(pc), reinterpret_cast<const T*>(px), reinterpret_cast<const T*>(py),
        reinterpret_cast<T*>(po), l, n);
  });
  KILN_CUDA_CHECK_LAUNCH("where");
}

}  // namespace kiln
