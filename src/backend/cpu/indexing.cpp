// Gathers (take, take_along_axis), their scatter (put_along_axis,
// scatter_add_axis) and concatenate.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "backend/cpu/cast.h"
#include "backend/cpu/copy.h"
#include "backend/cpu/indices.h"
#include "backend/cpu/threading.h"
#include "core/array_desc.h"
#include "core/ops_util.h"
#include "core/primitives.h"

namespace kiln {
namespace cpu {

int64_t read_index(const char* p, Dtype t, int64_t i) {
  switch (t) {
    case uint8: return reinterpret_cast<const uint8_t*>(p)[i];
    case uint16: return reinterpret_cast<const uint16_t*>(p)[i];
    case uint32: return reinterpret_cast<const uint32_t*>(p)[i];
    case uint64: {  // above INT64_MAX is out of range, not negative
      uint64_t u = reinterpret_cast<const uint64_t*>(p)[i];
      return u > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(u);
    }
    case int8: return reinterpret_cast<const int8_t*>(p)[i];
    case int16: return reinterpret_cast<const int16_t*>(p)[i];
    case int32: return reinterpret_cast<const int32_t*>(p)[i];
    case int64: return reinterpret_cast<const int64_t*>(p)[i];
    case bool_: return reinterpret_cast<const bool*>(p)[i];
    default: throw Error(std::string("[indexing] indices must be integers, got ") + dtype_name(t));
  }
}

std::vector<int64_t> load_indices(const array& idx, int64_t extent, const char* op, const array& a) {
  const auto& d = *idx.desc();
  std::vector<int64_t> out(idx.size());
  const char* p = detail::data_ptr(idx);
  std::vector<int> pos(d.shape.size(), 0);
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t off = 0;
    for (size_t k = 0; k < pos.size(); ++k) off += pos[k] * d.strides[k];
    int64_t v = read_index(p, d.dtype, off);
    int64_t w = v < 0 ? v + extent : v;
    if (w < 0 || w >= extent) {
      throw Error(std::string("[") + op + "] index " + std::to_string(v) + " is out of range for an axis of size " +
                  std::to_string(extent) + "; inputs: " + format_shape(a.shape()) + " " + dtype_name(a.dtype()) +
                  ", indices " + format_shape(idx.shape()) + " " + dtype_name(idx.dtype()));
    }
    out[i] = w;
    for (int k = static_cast<int>(pos.size()) - 1; k >= 0; --k) {
      if (++pos[k] < d.shape[k]) break;
      pos[k] = 0;
    }
  }
  return out;
}

}  // namespace cpu

using cpu::load_indices;

void Gather::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& a = inputs[0];
  const array& idx = inputs[1];
  detail::allocate(out, "take");
  if (out.size() == 0) return;
  std::vector<int64_t> indices = load_indices(idx, a.shape()[axis_], "take", a);
  // a viewed as [outer, extent, inner]; out as [outer, n_idx, inner].
  const auto& d = *a.desc();
  Shape slab_shape;
  Strides slab_strides;
  int64_t outer = 1;
  for (int i = 0; i < axis_; ++i) outer *= d.shape[i];
  for (int i = axis_ + 1; i < a.ndim(); ++i) {
    slab_shape.push_back(d.shape[i]);
    slab_strides.push_back(d.strides[i]);
  }
  int64_t inner = shape_size(slab_shape);
  int64_t item = static_cast<int64_t>(a.itemsize());
  int64_t n_idx = static_cast<int64_t>(indices.size());
  const char* src = detail::data_ptr(a);
  char* dst = detail::data_ptr(out);
  Strides outer_strides(d.strides.begin(), d.strides.begin() + axis_);
  Shape outer_shape(d.shape.begin(), d.shape.begin() + axis_);
  Strides dense = row_major_strides(slab_shape);
  cpu::parallel_for(outer * n_idx, std::max<int64_t>(1, 4096 / std::max<int64_t>(inner, 1)), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t o = t / n_idx, j = t % n_idx;
      int64_t off = 0, rem = o;
      for (int k = axis_ - 1; k >= 0; --k) {
        off += (rem % outer_shape[k]) * outer_strides[k];
        rem /= outer_shape[k];
      }
      off += indices[j] * d.strides[axis_];
      cpu::copy_strided(src + off * item, d.dtype, slab_shape, slab_strides, dst + t * inner * item, d.dtype, dense);
    }
  });
}

void GatherAxis::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& a = inputs[0];
  const array& idx = inputs[1];
  detail::allocate(out, "take_along_axis");
  if (out.size() == 0) return;
  std::vector<int64_t> indices = load_indices(idx, a.shape()[axis_], "take_along_axis", a);
  const auto& d = *a.desc();
  int nd = out.ndim();
  int64_t item = static_cast<int64_t>(a.itemsize());
  const char* src = detail::data_ptr(a);
  char* dst = detail::data_ptr(out);
  const Shape& os = out.shape();
  cpu::parallel_for(static_cast<int64_t>(out.size()), 1 << 14, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t rem = t, off = 0;
      for (int k = nd - 1; k >= 0; --k) {
        int64_t pos = rem % os[k];
        rem /= os[k];
        off += (k == axis_ ? indices[t] : pos) * d.strides[k];
      }
      std::memcpy(dst + t * item, src + off * item, item);
    }
  });
}

namespace {

template <typename T>
void scatter_rows(const char* vals, const Strides& vst, const std::vector<int64_t>& idx, const Shape& shape, int axis,
                  char* out, const Strides& ost, bool add) {
  // Positions that differ off the axis write different rows of out, so
  // threads take whole lines along the axis and never collide.
  int nd = static_cast<int>(shape.size());
  int64_t len = shape[axis];
  int64_t lines = len == 0 ? 0 : static_cast<int64_t>(idx.size()) / len;
  Strides ist = row_major_strides(shape);
  cpu::parallel_for(lines, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(len, 1)), [&](int64_t b, int64_t e) {
    for (int64_t l = b; l < e; ++l) {
      int64_t rem = l, voff = 0, ooff = 0, ioff = 0;
      for (int k = nd - 1; k >= 0; --k) {
        if (k == axis) continue;
        int64_t pos = rem % shape[k];
        rem /= shape[k];
        voff += pos * vst[k];
        ooff += pos * ost[k];
        ioff += pos * ist[k];
      }
      for (int64_t j = 0; j < len; ++j) {
        T v = reinterpret_cast<const T*>(vals)[voff + j * vst[axis]];
        T& o = reinterpret_cast<T*>(out)[ooff + idx[ioff + j * ist[axis]] * ost[axis]];
        if (add) {
          using Acc = std::conditional_t<std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>, float, T>;
          o = static_cast<T>(static_cast<Acc>(o) + static_cast<Acc>(v));
        } else {
          o = v;
        }
      }
    }
  });
}

}  // namespace

void ScatterAxis::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& a = inputs[0];
  const array& idx = inputs[1];
  const array& vals = inputs[2];
  const char* op = reduce_ == Reduce::sum ? "scatter_add_axis" : "put_along_axis";
  detail::allocate(out, op);
  if (out.size() > 0) cpu::copy_to_row_major(a, out);
  if (idx.size() == 0) return;
  std::vector<int64_t> indices = load_indices(idx, a.shape()[axis_], op, a);
  const char* pv = detail::data_ptr(vals);
  const Strides& vst = vals.desc()->strides;
  char* po = detail::data_ptr(out);
  const Strides& ost = out.desc()->strides;
  bool add = reduce_ == Reduce::sum;
  switch (out.dtype()) {
    case bool_: scatter_rows<bool>(pv, vst, indices, idx.shape(), axis_, po, ost, add); break;
    case uint8: scatter_rows<uint8_t>(pv, vst, indices, idx.shape(), axis_, po, ost, add); break;
    case uint16: scatter_rows<uint16_t>(pv, vst, indices, idx.shape(), axis_, po, ost, add); break;
    case uint32: scatter_rows<uint32_t>(pv, vst, indices, idx.shape(), axis_, po, ost, add); break;
    case uint64: scatter_rows<uint64_t>(pv, vst, indices, idx.shape(), axis_, po, ost, add); break;
    case int16: scatter_rows<int16_t>(pv, vst, indices, idx.shape(), axis_, po, ost, add); break;
    case int8: scatter_rows<int8_t>(pv, vst, indices, idx.shape(), axis_, po, ost, add); break;
    case int32: scatter_rows<int32_t>(pv, vst, indices, idx.shape(), axis_, po, ost, add); break;
    case int64: scatter_rows<int64_t>(pv, vst, indices, idx.shape(), axis_, po, ost, add); break;
    case float16: scatter_rows<float16_t>(pv, vst, indices, idx.shape(), axis_, po, ost, add); break;
    case bfloat16: scatter_rows<bfloat16_t>(pv, vst, indices, idx.shape(), axis_, po, ost, add); break;
    case float32: scatter_rows<float>(pv, vst, indices, idx.shape(), axis_, po, ost, add); break;
    case float64: scatter_rows<double>(pv, vst, indices, idx.shape(), axis_, po, ost, add); break;
    case complex64: throw Error(std::string("[") + op + "] is not supported for complex64");
    case float8_e4m3fn:
    case float8_e5m2: throw Error(std::string("[") + op + "] is not supported for " + dtype_name(out.dtype()));
  }
}

void Concatenate::eval_cpu(const std::vector<array>& inputs, array& out) {
  detail::allocate(out, "concatenate");
  const Strides& ost = out.desc()->strides;
  int64_t item = static_cast<int64_t>(out.itemsize());
  int64_t offset = 0;
  for (const auto& in : inputs) {
    if (in.size() > 0) {
      cpu::copy_strided(detail::data_ptr(in), in.dtype(), in.shape(), in.desc()->strides,
                        detail::data_ptr(out) + offset * ost[axis_] * item, out.dtype(), ost);
    }
    offset += in.shape()[axis_];
  }
}

}  // namespace kiln
