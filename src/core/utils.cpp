#include "kiln/utils.h"

#include <limits>
#include <string>

#include "core/ops_util.h"
#include "kiln/error.h"

namespace kiln {
namespace {

template <typename T>
void float_limits(finfo& f) {
  f.bits = static_cast<int>(sizeof(T) * 8);
  f.min = -static_cast<double>(std::numeric_limits<T>::max());
  f.max = static_cast<double>(std::numeric_limits<T>::max());
  f.eps = static_cast<double>(std::numeric_limits<T>::epsilon());
  f.smallest_normal = static_cast<double>(std::numeric_limits<T>::min());
}

template <typename T>
void int_limits(iinfo& i) {
  i.min = static_cast<int64_t>(std::numeric_limits<T>::min());
  i.max = static_cast<uint64_t>(std::numeric_limits<T>::max());
}

}  // namespace

finfo::finfo(Dtype t) : dtype(t) {
  switch (t) {
    case float16:  // 5 exponent bits, 10 stored mantissa bits
      bits = 16, min = -65504.0, max = 65504.0, eps = 0x1p-10, smallest_normal = 0x1p-14;
      break;
    case bfloat16:  // float32's exponent, 7 stored mantissa bits
      bits = 16, max = static_cast<double>(bfloat16_t::to_float(0x7f7f)), min = -max, eps = 0x1p-7,
      smallest_normal = 0x1p-126;
      break;
    case float8_e4m3fn:  // 4 exponent bits (bias 7), 3 mantissa bits, no inf
      bits = 8, min = -448.0, max = 448.0, eps = 0x1p-3, smallest_normal = 0x1p-6;
      break;
    case float8_e5m2:  // 5 exponent bits (bias 15), 2 mantissa bits
      bits = 8, min = -57344.0, max = 57344.0, eps = 0x1p-2, smallest_normal = 0x1p-14;
      break;
    case float32: float_limits<float>(*this); break;
    case float64: float_limits<double>(*this); break;
    case complex64:  // the limits of its float32 parts, as numpy and MLX
      float_limits<float>(*this);
      dtype = float32;
      break;
    default: throw Error(std::string("[finfo] dtype ") + dtype_name(t) + " is not a floating-point type");
  }
}

iinfo::iinfo(Dtype t) : dtype(t) {
  switch (t) {
    case uint8: int_limits<uint8_t>(*this); break;
    case uint16: int_limits<uint16_t>(*this); break;
    case uint32: int_limits<uint32_t>(*this); break;
    case uint64: int_limits<uint64_t>(*this); break;
    case int8: int_limits<int8_t>(*this); break;
    case int16: int_limits<int16_t>(*this); break;
    case int32: int_limits<int32_t>(*this); break;
    case int64: int_limits<int64_t>(*this); break;
    default: throw Error(std::string("[iinfo] dtype ") + dtype_name(t) + " is not an integer type");
  }
}

Dtype result_type(const array& a, const array& b) { return promote_types(a.dtype(), b.dtype()); }
Dtype result_type(const array& a, const array& b, const array& c) {
  return promote_types(result_type(a, b), c.dtype());
}
Dtype result_type(const std::vector<array>& arrays) {
  if (arrays.empty()) throw Error("[result_type] needs at least one array");
  Dtype t = arrays[0].dtype();
  for (const array& a : arrays) t = promote_types(t, a.dtype());
  return t;
}

Shape broadcast_shapes(const Shape& s1, const Shape& s2) { return broadcast_shapes(s1, s2, "broadcast_shapes", {}); }

}  // namespace kiln
