#pragma once
// Arrays to and from raw little-endian row-major bytes, for the file
// readers and writers of src/io (Kiln runs on little-endian hosts only).
#include <cstring>
#include <vector>

#include "kiln/array.h"
#include "kiln/error.h"

namespace kiln::io {

// The bytes of an evaluated, row-contiguous array.
inline const void* raw_bytes(const array& a) {
  switch (a.dtype()) {
    case bool_: return a.data<bool>();
    case uint8: return a.data<uint8_t>();
    case uint16: return a.data<uint16_t>();
    case uint32: return a.data<uint32_t>();
    case uint64: return a.data<uint64_t>();
    case int8: return a.data<int8_t>();
    case int16: return a.data<int16_t>();
    case int32: return a.data<int32_t>();
    case int64: return a.data<int64_t>();
    case float16: return a.data<float16_t>();
    case bfloat16: return a.data<bfloat16_t>();
    case float32: return a.data<float>();
    case float64: return a.data<double>();
    case complex64: return a.data<complex64_t>();
    case float8_e4m3fn: return a.data<float8_e4m3fn_t>();
    case float8_e5m2: return a.data<float8_e5m2_t>();
  }
  return nullptr;
}

template <typename T>
inline array array_from_bytes(const char* bytes, size_t n, const Shape& shape, Dtype dtype) {
  std::vector<T> values(n);
  if (n) std::memcpy(values.data(), bytes, n * sizeof(T));
  return array(values, shape, dtype);
}

inline array make_array(const char* bytes, size_t n, const Shape& shape, Dtype dtype) {
  switch (dtype) {
    // std::vector<bool> is packed: bytes go through uint8 and convert.
    case bool_: return array_from_bytes<uint8_t>(bytes, n, shape, bool_);
    case uint8: return array_from_bytes<uint8_t>(bytes, n, shape, dtype);
    case uint16: return array_from_bytes<uint16_t>(bytes, n, shape, dtype);
    case uint32: return array_from_bytes<uint32_t>(bytes, n, shape, dtype);
    case uint64: return array_from_bytes<uint64_t>(bytes, n, shape, dtype);
    case int8: return array_from_bytes<int8_t>(bytes, n, shape, dtype);
    case int16: return array_from_bytes<int16_t>(bytes, n, shape, dtype);
    case int32: return array_from_bytes<int32_t>(bytes, n, shape, dtype);
    case int64: return array_from_bytes<int64_t>(bytes, n, shape, dtype);
    case float16: return array_from_bytes<float16_t>(bytes, n, shape, dtype);
    case bfloat16: return array_from_bytes<bfloat16_t>(bytes, n, shape, dtype);
    case float32: return array_from_bytes<float>(bytes, n, shape, dtype);
    case float64: return array_from_bytes<double>(bytes, n, shape, dtype);
    case complex64: return array_from_bytes<complex64_t>(bytes, n, shape, dtype);
    case float8_e4m3fn: return array_from_bytes<float8_e4m3fn_t>(bytes, n, shape, dtype);
    case float8_e5m2: return array_from_bytes<float8_e5m2_t>(bytes, n, shape, dtype);
  }
  throw Error("[load] unknown dtype");
}

}  // namespace kiln::io
