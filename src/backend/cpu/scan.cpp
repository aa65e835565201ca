// CPU scans (cumsum, cumprod, cummax, cummin, logcumsumexp).
//
// The input is made row-major (a copy only when it is not) and seen as
// [outer, n, inner] around the scanned axis. With inner == 1 (the last
// axis) each row is one sequential scan and rows go to all cores. Otherwise
// the scan walks the axis once and updates a block of `inner` running
// states per step, a loop over contiguous memory that vectorizes; blocks of
// columns go to all cores.
//
// Numerics: float sums and products of float16/bfloat16/float32 run in
// double, and float64 sums are compensated (Neumaier), so a cumsum of 10^5
// float32 values is within an ulp or two of the exact one instead of
// drifting by n * eps. Integer sums and products wrap (computed unsigned:
// defined behaviour), as MLX's do. cummax/cummin propagate NaN (numpy).
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "backend/cpu/copy.h"
#include "backend/cpu/dispatch.h"
#include "backend/cpu/op_math.h"
#include "backend/cpu/threading.h"
#include "core/allocator.h"
#include "core/array_desc.h"
#include "core/ops_util.h"
#include "core/primitives_sort.h"

namespace kiln {
namespace {

constexpr int64_t kScanGrain = 1 << 15;  // elements per thread before splitting
constexpr int64_t kColumnBlock = 512;    // running states kept hot per task

template <typename T>
constexpr bool is_float_type = std::is_floating_point_v<cpu::compute_t<T>>;

// The unsigned type integer sums and products wrap in (bool sums count in
// uint32); floats accumulate in double.
template <typename T>
struct Wrapped {
  using type = cpu::ko::wrap_unsigned_t<T>;
};
template <>
struct Wrapped<bool> {
  using type = uint32_t;
};
template <typename T>
using accumulator_t =
    typename std::conditional_t<is_float_type<T>, std::type_identity<double>, Wrapped<T>>::type;

// Each op: a State with identity(), push(state, x) and get(state) -> O.
template <typename T, typename O>
struct SumOp {
  static constexpr bool kFloat = is_float_type<T>;
  static constexpr bool kCompensated = std::is_same_v<T, double>;
  using Int = accumulator_t<T>;
  struct State {
    Int s;
    double c;  // Neumaier compensation (float64 only)
  };
  static State identity() { return {0, 0.0}; }
  static void push(State& st, T x) {
    if constexpr (kCompensated) {
      double v = x, t = st.s + v;
      st.c += std::fabs(st.s) >= std::fabs(v) ? (st.s - t) + v : (v - t) + st.s;
      st.s = t;
    } else if constexpr (kFloat) {
      st.s += static_cast<double>(static_cast<float>(x));
    } else {
      st.s += static_cast<Int>(x);
    }
  }
  static O get(const State& st) {
    if constexpr (kCompensated) return static_cast<O>(st.s + st.c);
    else if constexpr (kFloat) return static_cast<O>(static_cast<float>(st.s));
    else return static_cast<O>(st.s);
  }
};

template <typename T>
struct ProdOp {
  static constexpr bool kFloat = is_float_type<T>;
  // uint8_t for bool: the states live in a std::vector, which packs bool.
  using State = std::conditional_t<std::is_same_v<T, bool>, uint8_t, accumulator_t<T>>;
  static State identity() { return State(1); }
  static void push(State& st, T x) {
    if constexpr (std::is_same_v<T, bool>) st = st && x;
    else if constexpr (kFloat) st *= static_cast<double>(static_cast<cpu::compute_t<T>>(x));
    else st *= static_cast<State>(x);
  }
  static T get(const State& st) {
    if constexpr (kFloat) return static_cast<T>(static_cast<cpu::compute_t<T>>(st));
    else return static_cast<T>(st);
  }
};

template <typename T, bool kMax>
struct ExtremeOp {
  using C = cpu::compute_t<T>;
  using State = std::conditional_t<std::is_same_v<C, bool>, uint8_t, C>;
  static State identity() {
    if constexpr (std::is_same_v<C, bool>) return !kMax;
    else if constexpr (std::is_floating_point_v<C>)
      return kMax ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
    else return kMax ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
  }
  static void push(State& st, T x) {
    C v = static_cast<C>(x);
    if constexpr (std::is_floating_point_v<C>) {
      if (st != st) return;
      if (v != v) {
        st = v;
        return;
      }
    }
    if (kMax ? v > st : v < st) st = v;
  }
  static T get(const State& st) { return static_cast<T>(st); }
};

template <typename T>
struct LogAddExpOp {
  using State = double;
  static State identity() { return -std::numeric_limits<double>::infinity(); }
  static void push(State& st, T x) {
    double v = static_cast<double>(static_cast<cpu::compute_t<T>>(x));
    double hi = std::max(st, v), lo = std::min(st, v);
    if (v != v || st != st) {
      st = std::numeric_limits<double>::quiet_NaN();
    } else if (hi == -std::numeric_limits<double>::infinity() || hi == std::numeric_limits<double>::infinity()) {
      st = hi;  // -inf + -inf, or an infinite term
    } else {
      st = hi + std::log1p(std::exp(lo - hi));
    }
  }
  static T get(const State& st) { return static_cast<T>(static_cast<cpu::compute_t<T>>(st)); }
};

template <typename Op, typename T, typename O>
void scan_kernel(const T* in, O* out, int64_t outer, int64_t n, int64_t inner, bool reverse, bool inclusive) {
  using State = typename Op::State;
  if (inner == 1) {
    cpu::parallel_for(outer, std::max<int64_t>(1, kScanGrain / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* x = in + r * n;
        O* y = out + r * n;
        State st = Op::identity();
        for (int64_t k = 0; k < n; ++k) {
          int64_t i = reverse ? n - 1 - k : k;
          if (inclusive) {
            Op::push(st, x[i]);
            y[i] = Op::get(st);
          } else {
            y[i] = Op::get(st);
            Op::push(st, x[i]);
          }
        }
      }
    });
    return;
  }
  int64_t blocks = (inner + kColumnBlock - 1) / kColumnBlock;
  int64_t tasks = outer * blocks;
  int64_t per_task = n * std::min(inner, kColumnBlock);
  cpu::parallel_for(tasks, std::max<int64_t>(1, kScanGrain / std::max<int64_t>(per_task, 1)), [&](int64_t b, int64_t e) {
    std::vector<State> st(static_cast<size_t>(std::min(inner, kColumnBlock)));
    for (int64_t t = b; t < e; ++t) {
      int64_t o = t / blocks, c0 = (t % blocks) * kColumnBlock;
      int64_t w = std::min(kColumnBlock, inner - c0);
      for (int64_t j = 0; j < w; ++j) st[j] = Op::identity();
      for (int64_t k = 0; k < n; ++k) {
        int64_t i = reverse ? n - 1 - k : k;
        const T* x = in + (o * n + i) * inner + c0;
        O* y = out + (o * n + i) * inner + c0;
        if (inclusive) {
          for (int64_t j = 0; j < w; ++j) {
            Op::push(st[j], x[j]);
            y[j] = Op::get(st[j]);
          }
        } else {
          for (int64_t j = 0; j < w; ++j) {
            y[j] = Op::get(st[j]);
            Op::push(st[j], x[j]);
          }
        }
      }
    }
  });
}

}  // namespace

void Scan::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& in = inputs[0];
  const char* name = scan_op_name(op_);
  detail::allocate(out, name);
  if (in.size() == 0) return;
  const auto& d = *in.desc();
  const char* src = detail::data_ptr(in);
  std::shared_ptr<Buffer> keep;
  if (!detail::is_row_contiguous(d.shape, d.strides)) {
    keep = allocator::malloc(in.nbytes(), name);
    cpu::copy_strided(src, d.dtype, d.shape, d.strides, keep->ptr(), d.dtype, row_major_strides(d.shape));
    src = static_cast<const char*>(keep->ptr());
  }
  int64_t n = d.shape[axis_], outer = 1, inner = 1;
  for (int i = 0; i < axis_; ++i) outer *= d.shape[i];
  for (int i = axis_ + 1; i < in.ndim(); ++i) inner *= d.shape[i];
  char* dst = detail::data_ptr(out);
  ScanOp op = op_;
  bool rev = reverse_, inc = inclusive_;
  cpu::dispatch_all(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = reinterpret_cast<const T*>(src);
    switch (op) {
      case ScanOp::sum:
        if constexpr (std::is_same_v<T, bool>) {
          scan_kernel<SumOp<T, int32_t>>(x, reinterpret_cast<int32_t*>(dst), outer, n, inner, rev, inc);
        } else {
          scan_kernel<SumOp<T, T>>(x, reinterpret_cast<T*>(dst), outer, n, inner, rev, inc);
        }
        return;
      case ScanOp::prod: scan_kernel<ProdOp<T>>(x, reinterpret_cast<T*>(dst), outer, n, inner, rev, inc); return;
      case ScanOp::max:
        scan_kernel<ExtremeOp<T, true>>(x, reinterpret_cast<T*>(dst), outer, n, inner, rev, inc);
        return;
      case ScanOp::min:
        scan_kernel<ExtremeOp<T, false>>(x, reinterpret_cast<T*>(dst), outer, n, inner, rev, inc);
        return;
      case ScanOp::logaddexp:
        if constexpr (is_float_type<T>) {
          scan_kernel<LogAddExpOp<T>>(x, reinterpret_cast<T*>(dst), outer, n, inner, rev, inc);
          return;
        } else {
          throw Error(std::string("[logcumsumexp] needs a floating dtype, got ") + dtype_name(in.dtype()));
        }
    }
  });
}

}  // namespace kiln
