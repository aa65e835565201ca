// MLX's gather / scatter family, the dynamic slices and the views
// as_strided / view on the CPU.
//
// Why it is shaped so: a gather is one strided slab copy per index position
// (cpu::copy_strided), threads take index positions. A scatter must be
// deterministic without atomics: two updates can only collide when they
// agree on every non-indexed dimension of the slice, so threads split the
// non-indexed ("free") part of the update slice and each walks every index
// position in order — the same result, bit for bit, on any thread count.
// A scatter whose slices have no free part (scalar updates) runs on one
// thread. The dynamic slice is a view (its start is read when it runs).
#include <algorithm>
#include <cstring>
#include <optional>
#include <type_traits>

#include "backend/cpu/copy.h"
#include "backend/cpu/indices.h"
#include "backend/cpu/threading.h"
#include "core/array_desc.h"
#include "core/ops_util.h"
#include "core/primitives_index.h"

namespace kiln {
namespace {

// Element offsets (in a's or out's strides) of the slice each index position
// starts, with every index checked to leave room for the slice.
std::vector<int64_t> slice_offsets(const std::vector<array>& idx, const std::vector<int>& axes, const Shape& sizes,
                                   const array& a, const Strides& strides, const char* op) {
  size_t n = idx.empty() ? 1 : idx[0].size();
  std::vector<int64_t> off(n, 0);
  for (size_t j = 0; j < idx.size(); ++j) {
    int ax = axes[j];
    int64_t extent = a.shape(ax);
    std::vector<int64_t> w = cpu::load_indices(idx[j], extent, op, a);
    for (size_t i = 0; i < n; ++i) {
      if (w[i] + sizes[ax] > extent) {
        throw Error(std::string("[") + op + "] index " + std::to_string(w[i]) + " is out of range for a slice of " +
                    std::to_string(sizes[ax]) + " along axis " + std::to_string(ax) + " of size " +
                    std::to_string(extent) + "; inputs: " + format_shape(a.shape()) + " " + dtype_name(a.dtype()) +
                    ", indices " + format_shape(idx[j].shape()) + " " + dtype_name(idx[j].dtype()));
      }
      off[i] += w[i] * strides[ax];
    }
  }
  return off;
}

// The start of a dynamic slice on each axis: wrapped once, clamped to
// [0, dim - size].
int64_t dynamic_offset(const array& start, const std::vector<int>& axes, const Shape& dims, const Shape& sizes,
                       const Strides& strides) {
  const char* p = detail::data_ptr(start);
  int64_t st = start.desc()->strides.empty() ? 0 : start.desc()->strides[0];
  int64_t off = 0;
  for (size_t j = 0; j < axes.size(); ++j) {
    int ax = axes[j];
    int64_t v = cpu::read_index(p, start.dtype(), static_cast<int64_t>(j) * st);
    if (v < 0) v += dims[ax];
    v = std::clamp<int64_t>(v, 0, dims[ax] - sizes[ax]);
    off += v * strides[ax];
  }
  return off;
}

// 16-bit floats accumulate in float; integers (not bool) in the unsigned
// type of their promotion, so a sum or product that overflows wraps instead
// of being undefined.
template <typename T>
struct acc_type { using type = T; };
template <typename T>
  requires(std::is_integral_v<T> && !std::is_same_v<T, bool>)
struct acc_type<T> { using type = std::make_unsigned_t<decltype(T() + T())>; };
template <>
struct acc_type<float16_t> { using type = float; };
template <>
struct acc_type<bfloat16_t> { using type = float; };
template <typename T>
using acc_t = typename acc_type<T>::type;

template <typename T>
void combine(T& o, T v, Scatter::Reduce r) {
  using A = acc_t<T>;
  A x = static_cast<A>(o), y = static_cast<A>(v);
  switch (r) {
    case Scatter::Reduce::none: o = v; break;
    case Scatter::Reduce::sum: o = static_cast<T>(x + y); break;
    case Scatter::Reduce::prod: o = static_cast<T>(x * y); break;
    // NaN wins, as in maximum / minimum.
    case Scatter::Reduce::max: if (v > o || v != v) o = v; break;
    case Scatter::Reduce::min: if (v < o || v != v) o = v; break;
  }
}

struct ScatterPlan {
  std::vector<int64_t> out_off;  // per index position: the slice's start in out
  std::vector<int64_t> upd_off;  // per index position: its updates' start
  Shape idx_part, free_part;     // the slice's indexed and free dimensions
  Strides idx_ost, idx_ust, free_ost, free_ust;
};

// Offsets in out and updates of position p of a sub-shape.
inline void part_offsets(int64_t p, const Shape& shape, const Strides& ost, const Strides& ust, int64_t& o,
                         int64_t& u) {
  o = 0;
  u = 0;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    int64_t q = p % shape[d];
    p /= shape[d];
    o += q * ost[d];
    u += q * ust[d];
  }
}

template <typename T>
void run_scatter(const ScatterPlan& plan, const char* upd, char* out, Scatter::Reduce r) {
  const T* u = reinterpret_cast<const T*>(upd);
  T* o = reinterpret_cast<T*>(out);
  int64_t n_idx = static_cast<int64_t>(plan.out_off.size());
  int64_t n_free = shape_size(plan.free_part), n_ind = shape_size(plan.idx_part);
  cpu::parallel_for(n_free, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, n_idx * n_ind)), [&](int64_t b, int64_t e) {
    for (int64_t f = b; f < e; ++f) {
      int64_t fo, fu;
      part_offsets(f, plan.free_part, plan.free_ost, plan.free_ust, fo, fu);
      for (int64_t i = 0; i < n_idx; ++i) {
        for (int64_t g = 0; g < n_ind; ++g) {
          int64_t go, gu;
          part_offsets(g, plan.idx_part, plan.idx_ost, plan.idx_ust, go, gu);
          combine(o[plan.out_off[i] + fo + go], u[plan.upd_off[i] + fu + gu], r);
        }
      }
    }
  });
}

}  // namespace

void GatherSlices::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& a = inputs[0];
  detail::allocate(out, "gather");
  if (out.size() == 0) return;
  std::vector<array> idx(inputs.begin() + 1, inputs.end());
  const auto& d = *a.desc();
  std::vector<int64_t> off = slice_offsets(idx, axes_, slice_sizes_, a, d.strides, "gather");
  int64_t item = static_cast<int64_t>(a.itemsize());
  int64_t inner = shape_size(slice_sizes_);
  const char* src = detail::data_ptr(a);
  char* dst = detail::data_ptr(out);
  Strides dense = row_major_strides(slice_sizes_);
  // Single elements (MLX's a[i, j] indexing) skip the strided copy's setup.
  auto copy_one = [&](int64_t i) {
    if (inner == 1) {
      std::memcpy(dst + i * item, src + off[i] * item, item);
    } else {
      cpu::copy_strided(src + off[i] * item, d.dtype, slice_sizes_, d.strides, dst + i * inner * item, d.dtype, dense);
    }
  };
  int64_t n = static_cast<int64_t>(off.size());
  // Few large slices: one after another, each copy spread over the cores.
  if (n < cpu_threads()) {
    for (int64_t i = 0; i < n; ++i) copy_one(i);
    return;
  }
  cpu::parallel_for(n, std::max<int64_t>(1, 4096 / inner), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) copy_one(i);
  });
}

void Scatter::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& a = inputs[0];
  const array& upd = inputs.back();
  const char* op = scatter_op_name(reduce_);
  const auto& ad = *a.desc();
  if (detail::is_row_contiguous(ad.shape, ad.strides) && ad.offset == 0) {
    detail::allocate_or_donate(out, a, op);
  } else {
    detail::allocate(out, op);
  }
  if (out.size() == 0) return;
  if (out.desc()->buffer != ad.buffer) cpu::copy_to_row_major(a, out);
  if (upd.size() == 0) return;
  std::vector<array> idx(inputs.begin() + 1, inputs.end() - 1);
  const Strides& ost = out.desc()->strides;
  const Strides& ust = upd.desc()->strides;
  int ni = upd.ndim() - a.ndim();
  Shape slice(upd.shape().begin() + ni, upd.shape().end());
  ScatterPlan plan;
  plan.out_off = slice_offsets(idx, axes_, slice, a, ost, op);
  // Each index position's updates start at its row-major position over I.
  Shape ishape(upd.shape().begin(), upd.shape().begin() + ni);
  Strides ist(ust.begin(), ust.begin() + ni), zero(ni, 0);
  plan.upd_off.resize(plan.out_off.size());
  for (size_t i = 0; i < plan.upd_off.size(); ++i) {
    int64_t unused;
    part_offsets(static_cast<int64_t>(i), ishape, zero, ist, unused, plan.upd_off[i]);
  }
  for (int dim = 0; dim < a.ndim(); ++dim) {
    bool indexed = std::find(axes_.begin(), axes_.end(), dim) != axes_.end();
    (indexed ? plan.idx_part : plan.free_part).push_back(slice[dim]);
    (indexed ? plan.idx_ost : plan.free_ost).push_back(ost[dim]);
    (indexed ? plan.idx_ust : plan.free_ust).push_back(ust[ni + dim]);
  }
  const char* pu = detail::data_ptr(upd);
  char* po = detail::data_ptr(out);
  switch (out.dtype()) {
    case bool_: run_scatter<bool>(plan, pu, po, reduce_); break;
    case uint8: run_scatter<uint8_t>(plan, pu, po, reduce_); break;
    case uint16: run_scatter<uint16_t>(plan, pu, po, reduce_); break;
    case uint32: run_scatter<uint32_t>(plan, pu, po, reduce_); break;
    case uint64: run_scatter<uint64_t>(plan, pu, po, reduce_); break;
    case int8: run_scatter<int8_t>(plan, pu, po, reduce_); break;
    case int16: run_scatter<int16_t>(plan, pu, po, reduce_); break;
    case int32: run_scatter<int32_t>(plan, pu, po, reduce_); break;
    case int64: run_scatter<int64_t>(plan, pu, po, reduce_); break;
    case float16: run_scatter<float16_t>(plan, pu, po, reduce_); break;
    case bfloat16: run_scatter<bfloat16_t>(plan, pu, po, reduce_); break;
    case float32: run_scatter<float>(plan, pu, po, reduce_); break;
    case float64: run_scatter<double>(plan, pu, po, reduce_); break;
    case complex64: throw Error(std::string("[") + name() + "] is not supported for complex64");
    case float8_e4m3fn:
    case float8_e5m2: throw Error(std::string("[") + name() + "] is not supported for " + dtype_name(out.dtype()));
  }
}

void DynamicSlice::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& a = inputs[0];
  const auto& d = *a.desc();
  int64_t off = out.size() == 0 ? 0 : dynamic_offset(inputs[1], axes_, d.shape, slice_size_, d.strides);
  detail::share_buffer(out, a, d.strides, d.offset + off);
}

void DynamicSliceUpdate::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& src = inputs[0];
  const array& upd = inputs[1];
  const auto& sd = *src.desc();
  if (detail::is_row_contiguous(sd.shape, sd.strides) && sd.offset == 0) {
    detail::allocate_or_donate(out, src, "slice_update");
  } else {
    detail::allocate(out, "slice_update");
  }
  if (out.size() == 0) return;
  if (out.desc()->buffer != sd.buffer) cpu::copy_to_row_major(src, out);
  if (upd.size() == 0) return;
  const Strides& ost = out.desc()->strides;
  int64_t off = dynamic_offset(inputs[2], axes_, sd.shape, upd.shape(), ost);
  cpu::copy_strided(detail::data_ptr(upd), upd.dtype(), upd.shape(), upd.desc()->strides,
                    detail::data_ptr(out) + off * static_cast<int64_t>(out.itemsize()), out.dtype(), ost);
}

void AsStrided::eval_cpu(const std::vector<array>& inputs, array& out) {
  detail::share_buffer(out, inputs[0], strides_, inputs[0].desc()->offset + offset_);
}

std::optional<std::pair<Strides, int64_t>> View::layout_of(const array& input) const {
  const auto& in = *input.desc();
  int64_t ib = static_cast<int64_t>(size_of(in.dtype)), o = static_cast<int64_t>(size_of(dtype_));
  if (ib == o) return std::make_pair(in.strides, in.offset);
  if (in.shape.empty() || (in.strides.back() != 1 && in.shape.back() != 1)) return std::nullopt;
  if ((in.offset * ib) % o != 0) return std::nullopt;
  Strides st = in.strides;
  for (size_t i = 0; i + 1 < st.size(); ++i) {
    if ((st[i] * ib) % o != 0) return std::nullopt;
    st[i] = st[i] * ib / o;
  }
  st.back() = 1;
  return std::make_pair(st, in.offset * ib / o);
}

void View::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& in = inputs[0];
  const auto& d = *in.desc();
  if (auto l = layout_of(in)) {
    detail::share_buffer(out, in, std::move(l->first), l->second);
    return;
  }
  // Row-major bytes of the input, then read as the new type.
  detail::allocate(out, "view");
  cpu::copy_strided(detail::data_ptr(in), d.dtype, d.shape, d.strides, detail::data_ptr(out), d.dtype,
                    row_major_strides(d.shape));
}

}  // namespace kiln
