// CPU sorting and selection: Sort, ArgSort, Partition, ArgPartition,
// SearchSorted.
//
// The sorted axis is moved last and made contiguous (a strided copy when
// the layout is not already so), then each row is handled by one thread
// and the rows are spread over all cores. Rows are sorted as (key, index)
// pairs with std::stable_sort: the key is the value in its compute type
// (float for the 16-bit floats), compared with NaN after every number and
// -0.0 equal to +0.0, so the result is numpy's order and stable (the GPU's
// radix sort gives the very same permutation). Partitions use
// std::nth_element with the index as a tie-break, a strict total order, so
// that Partition and ArgPartition (and the jvp that takes one through the
// other) see one permutation.
#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "backend/common/axis_last.h"
#include "backend/cpu/copy.h"
#include "backend/cpu/dispatch.h"
#include "backend/cpu/threading.h"
#include "core/allocator.h"
#include "core/array_desc.h"
#include "core/ops_util.h"
#include "core/primitives_sort.h"

namespace kiln {
namespace {

constexpr int64_t kSortGrain = 1 << 14;  // elements per thread before splitting rows

// numpy's order: NaN after every number (NaNs equal to each other).
template <typename C>
inline bool nan_last_less(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    return a < b || (b != b && a == a);
  } else {
    return a < b;
  }
}

// `a` seen as rows along `axis`: the permuted shape and strides with the
// axis last, and a pointer to row-major rows of that permutation.
struct AxisRows {
  Shape shape;
  Strides out_strides;  // strides of a row-major output of a's shape, permuted likewise
  const char* data = nullptr;
  std::shared_ptr<Buffer> keep;
  int64_t rows = 0, len = 0;
};

AxisRows axis_rows(const array& a, int axis, const char* op) {
  layout::AxisLast p = layout::axis_last(a, axis);
  AxisRows r;
  r.shape = p.shape;
  r.out_strides = p.out_strides;
  r.len = p.len;
  r.rows = r.len ? static_cast<int64_t>(a.size()) / r.len : 0;
  r.data = detail::data_ptr(a);
  if (!p.contiguous) {
    r.keep = allocator::malloc(a.nbytes(), op);
    cpu::copy_strided(r.data, a.dtype(), r.shape, p.in_strides, r.keep->ptr(), a.dtype(), row_major_strides(r.shape));
    r.data = static_cast<const char*>(r.keep->ptr());
  }
  return r;
}

// Runs fn(in_rows, out_rows) where out_rows are row-major rows of the
// permuted shape; writes them into `out` (a's layout) afterwards when the
// axis is not last.
template <typename F>
void with_rows(const array& in, array& out, int axis, const char* op, F&& fn) {
  detail::allocate(out, op);
  if (in.size() == 0) return;
  AxisRows r = axis_rows(in, axis, op);
  bool last = axis == in.ndim() - 1;
  std::shared_ptr<Buffer> tmp;
  char* dst = detail::data_ptr(out);
  if (!last) {
    tmp = allocator::malloc(out.nbytes(), op);
    dst = static_cast<char*>(tmp->ptr());
  }
  fn(r, dst);
  if (!last) {
    cpu::copy_strided(dst, out.dtype(), r.shape, row_major_strides(r.shape), detail::data_ptr(out), out.dtype(),
                      r.out_strides);
  }
}

template <typename C>
struct Keyed {
  C key;
  uint32_t index;
};

enum class RowOp { sort, argsort, partition, argpartition };

template <typename T>
void row_kernel(RowOp op, const AxisRows& r, char* dst, int kth) {
  using C = cpu::compute_t<T>;
  const T* src = reinterpret_cast<const T*>(r.data);
  const int64_t len = r.len;
  cpu::parallel_for(r.rows, std::max<int64_t>(1, kSortGrain / std::max<int64_t>(len, 1)), [&](int64_t b, int64_t e) {
    std::vector<Keyed<C>> buf(len);
    auto by_key = [](const Keyed<C>& x, const Keyed<C>& y) { return nan_last_less(x.key, y.key); };
    auto total = [](const Keyed<C>& x, const Keyed<C>& y) {
      return nan_last_less(x.key, y.key) || (!nan_last_less(y.key, x.key) && x.index < y.index);
    };
    for (int64_t row = b; row < e; ++row) {
      const T* x = src + row * len;
      for (int64_t k = 0; k < len; ++k) buf[k] = {static_cast<C>(x[k]), static_cast<uint32_t>(k)};
      if (op == RowOp::sort || op == RowOp::argsort) {
        std::stable_sort(buf.begin(), buf.end(), by_key);
      } else {
        std::nth_element(buf.begin(), buf.begin() + kth, buf.end(), total);
      }
      if (op == RowOp::sort || op == RowOp::partition) {
        // Copy the original element (exact for every type, NaN payloads too).
        T* y = reinterpret_cast<T*>(dst) + row * len;
        for (int64_t k = 0; k < len; ++k) y[k] = x[buf[k].index];
      } else {
        uint32_t* y = reinterpret_cast<uint32_t*>(dst) + row * len;
        for (int64_t k = 0; k < len; ++k) y[k] = buf[k].index;
      }
    }
  });
}

void eval_rows(RowOp op, const array& in, array& out, int axis, int kth, const char* name) {
  with_rows(in, out, axis, name, [&](const AxisRows& r, char* dst) {
    cpu::dispatch_all(in.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      row_kernel<T>(op, r, dst, kth);
    });
  });
}

}  // namespace

void Sort::eval_cpu(const std::vector<array>& inputs, array& out) {
  eval_rows(RowOp::sort, inputs[0], out, axis_, 0, "sort");
}
void ArgSort::eval_cpu(const std::vector<array>& inputs, array& out) {
  eval_rows(RowOp::argsort, inputs[0], out, axis_, 0, "argsort");
}
void Partition::eval_cpu(const std::vector<array>& inputs, array& out) {
  eval_rows(RowOp::partition, inputs[0], out, axis_, kth_, "partition");
}
void ArgPartition::eval_cpu(const std::vector<array>& inputs, array& out) {
  eval_rows(RowOp::argpartition, inputs[0], out, axis_, kth_, "argpartition");
}

void SearchSorted::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& seq = inputs[0];
  const array& vals = inputs[1];
  detail::allocate(out, "searchsorted");
  if (vals.size() == 0) return;
  // Row-major copies of both (the sequence is usually small; the values
  // are read once).
  AxisRows s = axis_rows(seq, 0, "searchsorted");
  std::shared_ptr<Buffer> vkeep;
  const char* vdata = detail::data_ptr(vals);
  const auto& vd = *vals.desc();
  if (!detail::is_row_contiguous(vd.shape, vd.strides)) {
    vkeep = allocator::malloc(vals.nbytes(), "searchsorted");
    cpu::copy_strided(vdata, vd.dtype, vd.shape, vd.strides, vkeep->ptr(), vd.dtype, row_major_strides(vd.shape));
    vdata = static_cast<const char*>(vkeep->ptr());
  }
  uint32_t* dst = reinterpret_cast<uint32_t*>(detail::data_ptr(out));
  bool right = right_;
  cpu::dispatch_all(seq.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = cpu::compute_t<T>;
    std::vector<C> keys(s.len);
    const T* sp = reinterpret_cast<const T*>(s.data);
    for (int64_t k = 0; k < s.len; ++k) keys[k] = static_cast<C>(sp[k]);
    const T* vp = reinterpret_cast<const T*>(vdata);
    cpu::parallel_for(static_cast<int64_t>(vals.size()), kSortGrain / 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        C v = static_cast<C>(vp[i]);
        auto it = right ? std::upper_bound(keys.begin(), keys.end(), v, nan_last_less<C>)
                        : std::lower_bound(keys.begin(), keys.end(), v, nan_last_less<C>);
        dst[i] = static_cast<uint32_t>(it - keys.begin());
      }
    });
  });
}

}  // namespace kiln
