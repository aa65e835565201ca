// Reductions (sum, prod, max, min, all, any), argmax/argmin and softmax.
//
// The input is brought to row-major order (a copy only when it is not),
// then dims are grouped into runs of kept and reduced axes. The common
// shapes have fast loops: [kept, reduced] is a row reduction, [reduced,
// kept] (and batches of it) a column reduction; anything else is permuted
// so the reduced axes come last.
#include <cmath>
#include <limits>
#include <memory>

#include "backend/cpu/cast.h"
#include "backend/cpu/copy.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/reduce_avx512.h"
#include "backend/cpu/simd_math.h"
#include "backend/cpu/softmax_avx512.h"
#include "backend/cpu/threading.h"
#include "core/array_desc.h"
#include "core/ops_util.h"
#include "core/primitives.h"
#include "core/reduce_plan.h"

namespace kiln {
namespace {

constexpr int64_t kReduceGrain = 1 << 15;

// Integer sums and products wrap (through unsigned arithmetic) instead of
// overflowing, which would be undefined.
template <typename A, bool = std::is_integral_v<A> && !std::is_same_v<A, bool>>
struct Wrap {
  using type = A;
};
template <typename A>
struct Wrap<A, true> {
  using type = cpu::ko::wrap_unsigned_t<A>;
};
template <typename A>
using WrapT = typename Wrap<A>::type;
template <typename A>
struct SumOp {
  A init() const { return A(0); }
  A operator()(A a, A b) const { return static_cast<A>(static_cast<WrapT<A>>(a) + static_cast<WrapT<A>>(b)); }
};
template <typename A>
struct ProdOp {
  A init() const { return A(1); }
  A operator()(A a, A b) const {
    if constexpr (std::is_same_v<A, bool>) return a && b;
    else return static_cast<A>(static_cast<WrapT<A>>(a) * static_cast<WrapT<A>>(b));
  }
};
template <typename A>
struct MaxOp {
  A init() const {
    if constexpr (std::numeric_limits<A>::has_infinity) return -std::numeric_limits<A>::infinity();
    else return std::numeric_limits<A>::lowest();
  }
  A operator()(A a, A b) const { return (a > b || a != a) ? a : b; }
};
template <typename A>
struct MinOp {
  A init() const {
    if constexpr (std::numeric_limits<A>::has_infinity) return std::numeric_limits<A>::infinity();
    else return std::numeric_limits<A>::max();
  }
  A operator()(A a, A b) const { return (a < b || a != a) ? a : b; }
};
template <typename A>
struct PlainMaxOp {
  A init() const { return -std::numeric_limits<A>::infinity(); }
  A operator()(A a, A b) const { return a > b ? a : b; }
};
struct AllOp {
  bool init() const { return true; }
  bool operator()(bool a, bool b) const { return a && b; }
};
struct AnyOp {
  bool init() const { return false; }
  bool operator()(bool a, bool b) const { return a || b; }
};

// Float sums are the reductions whose rounding accumulates: they are
// blocked (no accumulator adds more than a few dozen values before its block
// is folded in) and the blocks joined with Kahan's compensation, so the error
// stays a few ulps whatever the length. A single chain per accumulator made
// sum(full({10000000}, 0.1f)) 999831.19. The AVX-512 kernels do the same
// (reduce_avx512.cpp).
template <typename A, typename Op>
constexpr bool kBlockedSum = std::is_floating_point_v<A> && std::is_same_v<Op, SumOp<A>>;

// sum += x, compensated (the total is sum - comp). An infinite sum would make
// the correction NaN; it is dropped instead, so an inf in the data gives inf.
template <typename A>
void kahan_add(A& sum, A& comp, A x) {
  A y = x - comp;
  A t = sum + y;
  comp = std::abs(t) < std::numeric_limits<A>::infinity() ? (t - sum) - y : A(0);
  sum = t;
}

// The total of a compensated accumulator (comp stays 0 for other ops).
template <typename A>
A compensated(A acc, A comp) {
  if constexpr (std::is_floating_point_v<A>) return acc - comp;
  else return acc;
}

// Reduces n contiguous values with many independent accumulators so the
// loop vectorizes, then combines them pairwise.
template <typename A, typename T, typename Op>
A reduce_block(const T* p, int64_t n, Op op) {
  constexpr int W = 32;
  A acc[W];
  for (int j = 0; j < W; ++j) acc[j] = op.init();
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    for (int j = 0; j < W; ++j) acc[j] = op(acc[j], static_cast<A>(static_cast<cpu::compute_t<T>>(p[i + j])));
  }
  for (int j = 0; i + j < n; ++j) acc[j] = op(acc[j], static_cast<A>(static_cast<cpu::compute_t<T>>(p[i + j])));
  for (int w = W / 2; w > 0; w /= 2) {
    for (int j = 0; j < w; ++j) acc[j] = op(acc[j], acc[j + w]);
  }
  return acc[0];
}

// Elements per block of a blocked sum: 32 adds per accumulator above.
constexpr int64_t kSumBlock = 1024;

template <typename A, typename T, typename Op>
A reduce_contiguous(const T* p, int64_t n, Op op) {
  if constexpr (kBlockedSum<A, Op>) {
    if (n > kSumBlock) {
      A sum = 0, comp = 0;
      for (int64_t b = 0; b < n; b += kSumBlock) {
        kahan_add(sum, comp, reduce_block<A>(p + b, std::min(kSumBlock, n - b), op));
      }
      return sum - comp;
    }
  }
  return reduce_block<A>(p, n, op);
}

// n values of A, each v (a std::vector<bool> has no data()).
template <typename A>
std::unique_ptr<A[]> filled(int64_t n, A v) {
  auto p = std::make_unique<A[]>(n);
  std::fill_n(p.get(), n, v);
  return p;
}

// Rows per block of a blocked column sum.
constexpr int64_t kColumnSumBlock = 64;

// acc[j] = reduce(acc[j], base[i * ld + j]) for i < len, j < w. Blocked sums
// add each block of rows into `block` (w scratch values) and fold that into
// acc with the compensation in comp (the total is acc - comp).
template <typename T, typename A, typename Op>
void accumulate_columns(const T* base, int64_t len, int64_t w, int64_t ld, Op op, A* acc, A* comp, A* block) {
  auto add_rows = [&](const T* b, int64_t n, A* into) {
    for (int64_t i = 0; i < n; ++i) {
      const T* row = b + i * ld;
      for (int64_t j = 0; j < w; ++j) into[j] = op(into[j], static_cast<A>(static_cast<cpu::compute_t<T>>(row[j])));
    }
  };
  if constexpr (kBlockedSum<A, Op>) {
    for (int64_t i0 = 0; i0 < len; i0 += kColumnSumBlock) {
      std::fill(block, block + w, A(0));
      add_rows(base + i0 * ld, std::min(kColumnSumBlock, len - i0), block);
      for (int64_t j = 0; j < w; ++j) kahan_add(acc[j], comp[j], block[j]);
    }
  } else {
    add_rows(base, len, acc);
  }
}

// out[r] = reduce(in[r*len : (r+1)*len]) for r in [0, rows).
template <typename T, typename O, typename A, typename Op>
void row_reduce(const T* in, O* out, int64_t rows, int64_t len, Op op) {
  int threads = cpu_threads();
  if (rows >= 2 * threads || rows * len < 2 * kReduceGrain) {
    cpu::parallel_for(rows, std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(len, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) out[r] = static_cast<O>(reduce_contiguous<A>(in + r * len, len, op));
    });
    return;
  }
  // Few long rows: split each row across the threads.
  int64_t chunks = std::min<int64_t>(threads * 4, std::max<int64_t>(1, len / kReduceGrain));
  int64_t chunk = (len + chunks - 1) / chunks;
  // Not std::vector<A>: for all / any (A = bool) that is a bit vector, and
  // the threads writing neighbouring bits raced (a chunk's true lost to
  // another's write of the same byte: all() of a true array came out false
  // now and then on two cores).
  std::unique_ptr<A[]> partial = filled<A>(chunks, op.init());
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = in + r * len;
    cpu::parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) {
        int64_t s = c * chunk, t = std::min(len, s + chunk);
        partial[c] = s < t ? reduce_contiguous<A>(row + s, t - s, op) : op.init();
      }
    });
    A acc = op.init();
    for (int64_t c = 0; c < chunks; ++c) acc = op(acc, partial[c]);
    out[r] = static_cast<O>(acc);
  }
}

// out[b, j] = reduce_i in[b, i, j] for blocks of shape [len, width].
template <typename T, typename O, typename A, typename Op>
void column_reduce(const T* in, O* out, int64_t batches, int64_t len, int64_t width, Op op) {
  int threads = cpu_threads();
  // Rows are streamed whole (contiguous reads the prefetcher follows) into
  // one accumulator row per thread while that row fits in L2; only very wide
  // or very short blocks split the columns instead.
  bool split_rows = width <= (1 << 16) && len >= 4 * threads && threads > 1;
  if (!split_rows) {
    int64_t col_block = 256;
    int64_t blocks_per_batch = (width + col_block - 1) / col_block;
    cpu::parallel_for(batches * blocks_per_batch, std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(len * col_block, 1)),
                      [&](int64_t b, int64_t e) {
      auto acc = filled(col_block, op.init()), comp = filled(col_block, A(0)), block = filled(col_block, A(0));
      for (int64_t blk = b; blk < e; ++blk) {
        int64_t batch = blk / blocks_per_batch;
        int64_t j0 = (blk % blocks_per_batch) * col_block;
        int64_t w = std::min(col_block, width - j0);
        std::fill_n(acc.get(), w, op.init());
        std::fill_n(comp.get(), w, A(0));
        accumulate_columns(in + batch * len * width + j0, len, w, width, op, acc.get(), comp.get(), block.get());
        for (int64_t j = 0; j < w; ++j) out[batch * width + j0 + j] = static_cast<O>(compensated(acc[j], comp[j]));
      }
    });
    return;
  }
  for (int64_t batch = 0; batch < batches; ++batch) {
    const T* base = in + batch * len * width;
    std::vector<std::unique_ptr<A[]>> partial, comp, block;
    for (int t = 0; t < threads; ++t) {
      partial.push_back(filled(width, op.init()));
      comp.push_back(filled(width, A(0)));
      block.push_back(filled(width, A(0)));
    }
    cpu::parallel_for(
        len, 1,
        [&](int64_t b, int64_t e) {
          int t = omp_get_thread_num();
          accumulate_columns(base + b * width, e - b, width, width, op, partial[t].get(), comp[t].get(),
                             block[t].get());
        },
        threads);
    for (int64_t j = 0; j < width; ++j) {
      A acc = op.init();
      for (int t = 0; t < threads; ++t) acc = op(acc, compensated(partial[t][j], comp[t][j]));
      out[batch * width + j] = static_cast<O>(acc);
    }
  }
}

// ---- AVX-512 paths: float sum/max/min of float32, bfloat16, float16 ----

template <typename Op>
constexpr bool kIsVecOp = false;
template <>
constexpr bool kIsVecOp<SumOp<float>> = true;
template <>
constexpr bool kIsVecOp<MaxOp<float>> = true;
template <>
constexpr bool kIsVecOp<MinOp<float>> = true;

template <typename Op>
constexpr cpu::VecReduce vec_kind() {
  if constexpr (std::is_same_v<Op, SumOp<float>>) return cpu::VecReduce::sum;
  else if constexpr (std::is_same_v<Op, MaxOp<float>>) return cpu::VecReduce::max;
  else return cpu::VecReduce::min;
}

template <typename T, typename A, typename Op>
bool use_vec_reduce() {
  if constexpr (std::is_same_v<A, float> && kIsVecOp<Op> &&
                (std::is_same_v<T, float> || std::is_same_v<T, bfloat16_t> || std::is_same_v<T, float16_t>)) {
    return cpu::cpu_target() >= cpu::CpuTarget::avx512;
  }
  return false;
}

// out[r] = reduce(in[r*len : (r+1)*len]). With too few rows for the
// threads, rows are cut into pieces whose partial results are combined
// afterwards: one parallel region whatever the shape.
template <typename T, typename O, typename Op>
void row_reduce_vec(const T* in, O* out, int64_t rows, int64_t len, Op op) {
  constexpr cpu::VecReduce kind = vec_kind<Op>();
  const Dtype dt = dtype_of<T>;
  const int threads = cpu_threads();
  int64_t parts = 1;
  if (rows < 4 * threads && len >= 4 * kReduceGrain) {
    parts = std::min((4 * threads + rows - 1) / rows, len / kReduceGrain);
  }
  // Pieces are whole 64-element blocks, so only the last one has a tail.
  const int64_t piece = ((len + parts - 1) / parts + 63) / 64 * 64;
  parts = (len + piece - 1) / piece;
  std::vector<float> partial;
  float* res = nullptr;
  if constexpr (std::is_same_v<O, float>) {
    if (parts == 1) res = out;
  }
  if (!res) {
    partial.resize(rows * parts);
    res = partial.data();
  }
  if (parts == 1) {
    cpu::parallel_for(rows, std::max<int64_t>(1, kReduceGrain / len), [&](int64_t b, int64_t e) {
      cpu::reduce_rows_avx512(dt, in + b * len, e - b, len, len, kind, res + b);
    });
  } else {
    cpu::parallel_for(rows * parts, 1, [&](int64_t b, int64_t e) {
      for (int64_t item = b; item < e; ++item) {
        int64_t r = item / parts, s = (item % parts) * piece;
        cpu::reduce_rows_avx512(dt, in + r * len + s, 1, std::min(piece, len - s), len, kind, res + item);
      }
    });
  }
  if (res == reinterpret_cast<float*>(out)) return;
  for (int64_t r = 0; r < rows; ++r) {
    float acc = res[r * parts];
    for (int64_t k = 1; k < parts; ++k) acc = op(acc, res[r * parts + k]);
    out[r] = static_cast<O>(acc);
  }
}

// out[b, j] = reduce_i in[b, i, j] for blocks of shape [len, width]: the
// same split as column_reduce, with the vector kernel inside.
template <typename T, typename O, typename Op>
void column_reduce_vec(const T* in, O* out, int64_t batches, int64_t len, int64_t width, Op op) {
  constexpr cpu::VecReduce kind = vec_kind<Op>();
  const Dtype dt = dtype_of<T>;
  const int threads = cpu_threads();
  if (width <= (1 << 16) && (len >= 4 * threads || threads == 1)) {
    std::vector<std::vector<float>> partial(threads, std::vector<float>(width));
    std::vector<std::vector<float>> comp(threads, std::vector<float>(width)), block(threads, std::vector<float>(width));
    for (int64_t batch = 0; batch < batches; ++batch) {
      const T* base = in + batch * len * width;
      for (auto& p : partial) std::fill(p.begin(), p.end(), op.init());
      for (auto& c : comp) std::fill(c.begin(), c.end(), 0.0f);
      // Grain of 4 rows: the kernel combines rows four at a time.
      cpu::parallel_for(
          len, std::max<int64_t>(4, kReduceGrain / width),
          [&](int64_t b, int64_t e) {
            int t = omp_get_thread_num();
            cpu::accumulate_columns_avx512(dt, base + b * width, e - b, width, width, kind, partial[t].data(),
                                           comp[t].data(), block[t].data());
          },
          threads);
      for (int64_t j = 0; j < width; ++j) {
        float acc = partial[0][j] - comp[0][j];
        for (int t = 1; t < threads; ++t) acc = op(acc, partial[t][j] - comp[t][j]);
        out[batch * width + j] = static_cast<O>(acc);
      }
    }
    return;
  }
  constexpr int64_t kColBlock = 256;
  const int64_t blocks_per_batch = (width + kColBlock - 1) / kColBlock;
  cpu::parallel_for(batches * blocks_per_batch, std::max<int64_t>(1, kReduceGrain / (len * kColBlock)),
                    [&](int64_t b, int64_t e) {
    float acc[kColBlock], comp[kColBlock], block[kColBlock];
    for (int64_t blk = b; blk < e; ++blk) {
      int64_t batch = blk / blocks_per_batch;
      int64_t j0 = (blk % blocks_per_batch) * kColBlock;
      int64_t w = std::min(kColBlock, width - j0);
      std::fill(acc, acc + w, op.init());
      std::fill(comp, comp + w, 0.0f);
      cpu::accumulate_columns_avx512(dt, in + batch * len * width + j0, len, w, width, kind, acc, comp, block);
      for (int64_t j = 0; j < w; ++j) out[batch * width + j0 + j] = static_cast<O>(acc[j] - comp[j]);
    }
  });
}

// A row-major copy of `in` (or `in` itself when it already is one), plus
// the data pointer to read.
struct RowMajor {
  std::shared_ptr<Buffer> owned;
  const char* data;
};
RowMajor row_major_input(const array& in, const char* op) {
  const auto& d = *in.desc();
  if (detail::is_row_contiguous(d.shape, d.strides)) return {nullptr, detail::data_ptr(in)};
  auto buf = allocator::malloc(in.nbytes(), op);
  cpu::copy_strided(detail::data_ptr(in), d.dtype, d.shape, d.strides, buf->ptr(), d.dtype,
                    row_major_strides(d.shape));
  return {buf, static_cast<const char*>(buf->ptr())};
}

template <typename T, typename O, typename A, typename Op>
void reduce_typed(const array& in, array& out, const std::vector<int>& axes, Op op, const char* name) {
  O* dst = reinterpret_cast<O*>(detail::data_ptr(out));
  int64_t n_out = static_cast<int64_t>(out.size());
  if (in.size() == 0) {
    for (int64_t i = 0; i < n_out; ++i) dst[i] = static_cast<O>(op.init());
    return;
  }
  Shape shape = in.shape();
  ReducePlan plan = plan_reduction(shape, axes);
  const std::vector<int64_t>& sizes = plan.sizes;
  const std::vector<bool>& kinds = plan.reduced;
  RowMajor src = row_major_input(in, name);
  const T* p = reinterpret_cast<const T*>(src.data);
  if (sizes.empty() || (sizes.size() == 1 && !kinds[0])) {  // nothing reduced
    for (int64_t i = 0; i < n_out; ++i) dst[i] = static_cast<O>(static_cast<A>(static_cast<cpu::compute_t<T>>(p[i])));
    return;
  }
  const bool vec = use_vec_reduce<T, A, Op>();
  auto rows = [&](const T* x, int64_t n, int64_t len) {
    if constexpr (kIsVecOp<Op>) {
      if (vec) return row_reduce_vec<T, O>(x, dst, n, len, op);
    }
    row_reduce<T, O, A>(x, dst, n, len, op);
  };
  auto columns = [&](int64_t batches, int64_t len, int64_t width) {
    if constexpr (kIsVecOp<Op>) {
      if (vec) return column_reduce_vec<T, O>(p, dst, batches, len, width, op);
    }
    column_reduce<T, O, A>(p, dst, batches, len, width, op);
  };
  if (kinds.back()) {
    if (sizes.size() == 1) return rows(p, 1, sizes[0]);
    if (sizes.size() == 2) return rows(p, sizes[0], sizes[1]);
  } else {
    if (sizes.size() == 2) return columns(1, sizes[0], sizes[1]);
    if (sizes.size() == 3) return columns(sizes[0], sizes[1], sizes[2]);
  }
  // General case: move the reduced axes last, make that contiguous, reduce rows.
  ReducedLastView v = reduced_axes_last(shape, axes);
  auto buf = allocator::malloc(in.nbytes(), name);
  cpu::copy_strided(p, in.dtype(), v.shape, v.strides, buf->ptr(), in.dtype(), row_major_strides(v.shape));
  rows(static_cast<const T*>(buf->ptr()), n_out, v.row_length);
}

template <typename T, typename O>
void reduce_dispatch_op(ReduceOp op, const array& in, array& out, const std::vector<int>& axes, const char* name) {
  using C = cpu::compute_t<T>;
  // Accumulate in the output's compute type (float for 16-bit floats).
  using A = std::conditional_t<std::is_same_v<O, bool>, bool, cpu::compute_t<O>>;
  switch (op) {
    case ReduceOp::sum: return reduce_typed<T, O, A>(in, out, axes, SumOp<A>{}, name);
    case ReduceOp::prod: return reduce_typed<T, O, A>(in, out, axes, ProdOp<A>{}, name);
    case ReduceOp::max: return reduce_typed<T, O, C>(in, out, axes, MaxOp<C>{}, name);
    case ReduceOp::min: return reduce_typed<T, O, C>(in, out, axes, MinOp<C>{}, name);
    case ReduceOp::all: return reduce_typed<T, O, bool>(in, out, axes, AllOp{}, name);
    case ReduceOp::any: return reduce_typed<T, O, bool>(in, out, axes, AnyOp{}, name);
  }
}

const char* reduce_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::prod: return "prod";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
    case ReduceOp::all: return "all";
    case ReduceOp::any: return "any";
  }
  return "reduce";
}

// complex64 sum and prod (the only reductions it has): each output element
// walks its group through the input's strides, accumulating in double
// (complex products too, so a long prod rounds once per step at double
// precision). Not tuned: complex reductions are rare and small here.
void reduce_complex(ReduceOp op, const array& in, array& out, const std::vector<int>& axes) {
  const auto& d = *in.desc();
  int nd = in.ndim();
  std::vector<bool> reduced(nd, false);
  for (int ax : axes) reduced[ax] = true;
  Shape kept_shape, group_shape;
  Strides kept_strides, group_strides;
  for (int i = 0; i < nd; ++i) {
    (reduced[i] ? group_shape : kept_shape).push_back(d.shape[i]);
    (reduced[i] ? group_strides : kept_strides).push_back(d.strides[i]);
  }
  const complex64_t* src = reinterpret_cast<const complex64_t*>(detail::data_ptr(in));
  complex64_t* dst = reinterpret_cast<complex64_t*>(detail::data_ptr(out));
  auto offset_of = [](int64_t i, const Shape& shape, const Strides& strides) {
    int64_t off = 0;
    for (int k = static_cast<int>(shape.size()) - 1; k >= 0; --k) {
      off += (i % shape[k]) * strides[k];
      i /= shape[k];
    }
    return off;
  };
  int64_t n_out = static_cast<int64_t>(out.size()), n_group = shape_size(group_shape);
  cpu::parallel_for(n_out, std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(n_group, 1)), [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      const complex64_t* base = src + offset_of(o, kept_shape, kept_strides);
      double re = op == ReduceOp::sum ? 0.0 : 1.0, im = 0.0;
      for (int64_t g = 0; g < n_group; ++g) {
        complex64_t v = base[offset_of(g, group_shape, group_strides)];
        if (op == ReduceOp::sum) {
          re += v.re, im += v.im;
        } else {
          double r = re * v.re - im * v.im;
          im = re * v.im + im * v.re;
          re = r;
        }
      }
      dst[o] = complex64_t(static_cast<float>(re), static_cast<float>(im));
    }
  });
}

}  // namespace

void Reduce::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& in = inputs[0];
  const char* nm = reduce_name(op_);
  detail::allocate(out, nm);
  if (in.dtype() == complex64 && (op_ == ReduceOp::sum || op_ == ReduceOp::prod)) {
    reduce_complex(op_, in, out, axes_);
    return;
  }
  cpu::dispatch_all(in.dtype(), [&](auto it) {
    using T = typename decltype(it)::type;
    // The op layer picks the output dtype: the input's, bool for all/any,
    // or a widened integer for sums of small integers.
    if (out.dtype() == in.dtype()) {
      reduce_dispatch_op<T, T>(op_, in, out, axes_, nm);
    } else if (out.dtype() == bool_) {
      reduce_dispatch_op<T, bool>(op_, in, out, axes_, nm);
    } else if (out.dtype() == int32) {
      reduce_dispatch_op<T, int32_t>(op_, in, out, axes_, nm);
    } else if (out.dtype() == uint32) {
      reduce_dispatch_op<T, uint32_t>(op_, in, out, axes_, nm);
    } else if (out.dtype() == int64) {
      reduce_dispatch_op<T, int64_t>(op_, in, out, axes_, nm);
    } else {
      throw Error(std::string("[") + nm + "] unsupported output dtype " + dtype_name(out.dtype()));
    }
  });
}

void ArgReduce::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& in = inputs[0];
  const char* nm = is_max_ ? "argmax" : "argmin";
  detail::allocate(out, nm);
  // Move the axis last and make rows contiguous.
  const auto& d = *in.desc();
  int nd = in.ndim();
  Shape pshape;
  Strides pstrides;
  for (int i = 0; i < nd; ++i) {
    if (i != axis_) {
      pshape.push_back(d.shape[i]);
      pstrides.push_back(d.strides[i]);
    }
  }
  pshape.push_back(d.shape[axis_]);
  pstrides.push_back(d.strides[axis_]);
  int64_t len = d.shape[axis_];
  int64_t rows = static_cast<int64_t>(out.size());
  uint32_t* dst = reinterpret_cast<uint32_t*>(detail::data_ptr(out));
  if (len == 0) throw Error(std::string("[") + nm + "] cannot reduce an empty axis; input " + format_shape(d.shape));
  std::shared_ptr<Buffer> buf;
  const char* src = detail::data_ptr(in);
  if (!detail::is_row_contiguous(pshape, pstrides)) {
    buf = allocator::malloc(in.nbytes(), nm);
    cpu::copy_strided(src, d.dtype, pshape, pstrides, buf->ptr(), d.dtype, row_major_strides(pshape));
    src = static_cast<const char*>(buf->ptr());
  }
  bool is_max = is_max_;
  cpu::dispatch_all(in.dtype(), [&](auto it) {
    using T = typename decltype(it)::type;
    using C = cpu::compute_t<T>;
    const T* p = reinterpret_cast<const T*>(src);
    cpu::parallel_for(rows, std::max<int64_t>(1, kReduceGrain / len), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* row = p + r * len;
        C best = static_cast<C>(row[0]);
        uint32_t idx = 0;
        if (best == best) {
          for (int64_t k = 1; k < len; ++k) {
            C v = static_cast<C>(row[k]);
            if (v != v) {  // the first NaN wins, as in numpy
              idx = static_cast<uint32_t>(k);
              break;
            }
            if (is_max ? v > best : v < best) {
              best = v;
              idx = static_cast<uint32_t>(k);
            }
          }
        }
        dst[r] = idx;
      }
    });
  });
}

void Softmax::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& in = inputs[0];
  if (in.desc()->offset == 0) {
    detail::allocate_or_donate(out, in, "softmax");
  } else {
    detail::allocate(out, "softmax");
  }
  RowMajor src = row_major_input(in, "softmax");
  int64_t len = in.ndim() ? in.shape().back() : 1;
  int64_t rows = len ? static_cast<int64_t>(in.size()) / len : 0;
  cpu::dispatch_all(in.dtype(), [&](auto it) {
    using T = typename decltype(it)::type;
    using C = cpu::compute_t<T>;
    if constexpr (std::is_floating_point_v<C>) {
      const T* p = reinterpret_cast<const T*>(src.data);
      T* o = reinterpret_cast<T*>(detail::data_ptr(out));
      const int64_t grain = std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(len, 1));
      if constexpr (std::is_same_v<T, float>) {
        if (cpu::cpu_target() >= cpu::CpuTarget::avx512 && len > 0) {
          const bool stream = cpu::streaming_pays(in.nbytes() + out.nbytes());
          cpu::parallel_for(rows, grain, [&](int64_t b, int64_t e) {
            std::vector<float> scratch(len);
            cpu::softmax_rows_avx512(p + b * len, o + b * len, e - b, len, scratch.data(), stream);
          });
          return;
        }
      }
      cpu::parallel_for(rows, grain, [&](int64_t b, int64_t e) {
        std::vector<C> tmp(len);
        for (int64_t r = b; r < e; ++r) {
          const T* x = p + r * len;
          // A plain max vectorizes; a NaN in the row still makes every
          // output NaN through x - m below, as the NaN-aware max would.
          C m = reduce_contiguous<C>(x, len, PlainMaxOp<C>{});
          // Separate loops: the exp loop vectorizes, and the sum uses the
          // multi-accumulator reduction.
          for (int64_t k = 0; k < len; ++k) {
            if constexpr (std::is_same_v<C, float>) tmp[k] = cpu::simd::exp(static_cast<C>(x[k]) - m);
            else tmp[k] = std::exp(static_cast<C>(x[k]) - m);
          }
          C s = reduce_contiguous<C>(tmp.data(), len, SumOp<C>{});
          C inv = C(1) / s;
          T* y = o + r * len;
          for (int64_t k = 0; k < len; ++k) y[k] = static_cast<T>(tmp[k] * inv);
        }
      });
    } else {
      throw Error(std::string("[softmax] needs a floating dtype, got ") + dtype_name(in.dtype()));
    }
  });
}

}  // namespace kiln
