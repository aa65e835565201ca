#pragma once
// Shared by the fast ops' CPU kernels (fast_norm.cpp, rope.cpp): a
// row-major view of an input, copied only when its layout is not one, and
// float conversions of the 16-bit types that vectorize.
#include <immintrin.h>

#include <bit>
#include <cstdint>
#include <memory>

#include "backend/cpu/copy.h"
#include "core/allocator.h"
#include "core/array_desc.h"

namespace kiln::cpu {

// Conversions written so that the loops vectorize: dtype.h's bfloat16_t
// rounding branches on NaN (kept scalar by the compiler), float16_t's is
// in software; here bfloat16 rounds to nearest even with a select and
// float16 uses F16C (part of the x86-64-v3 baseline).
template <typename T>
struct Cvt {
  static float load(const T* p, int64_t i) { return p[i]; }
  static T make(float v) { return v; }
};
template <>
struct Cvt<bfloat16_t> {
  __attribute__((always_inline)) static float load(const bfloat16_t* p, int64_t i) {
    // Through uint16_t: GCC scalarizes loads of the struct's member.
    return std::bit_cast<float>(static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(p)[i]) << 16);
  }
  __attribute__((always_inline)) static bfloat16_t make(float v) {
    const uint32_t x = std::bit_cast<uint32_t>(v);
    const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (x >> 16) | 0x40u;
    bfloat16_t out;
    out.bits = static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
    return out;
  }
};
template <>
struct Cvt<float16_t> {
  __attribute__((always_inline)) static float load(const float16_t* p, int64_t i) { return _cvtsh_ss(p[i].bits); }
  __attribute__((always_inline)) static float16_t make(float v) {
    float16_t out;
    out.bits = _cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT);
    return out;
  }
};

struct RowMajorInput {
  std::shared_ptr<Buffer> owned;  // the copy, when one was needed
  const char* data;
};

inline RowMajorInput row_major_input_of(const array& in, const char* op) {
  const auto& d = *in.desc();
  if (detail::is_row_contiguous(d.shape, d.strides)) return {nullptr, detail::data_ptr(in)};
  auto buf = allocator::malloc(in.nbytes(), op);
  copy_strided(detail::data_ptr(in), d.dtype, d.shape, d.strides, buf->ptr(), d.dtype, row_major_strides(d.shape));
  return {buf, static_cast<const char*>(buf->ptr())};
}

}  // namespace kiln::cpu
