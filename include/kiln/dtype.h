#pragma once
// Element types, the 16-bit float storage types and numpy-style promotion.
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "kiln/complex.h"

namespace kiln {

enum class Dtype : uint8_t {
  bool_,
  uint8,
  uint16,
  uint32,
  uint64,
  int8,
  int16,
  int32,
  int64,
  float16,
  bfloat16,
  float32,
  float64,
  complex64,
};

inline constexpr Dtype bool_ = Dtype::bool_;
inline constexpr Dtype uint8 = Dtype::uint8;
inline constexpr Dtype uint16 = Dtype::uint16;
inline constexpr Dtype uint32 = Dtype::uint32;
inline constexpr Dtype uint64 = Dtype::uint64;
inline constexpr Dtype int8 = Dtype::int8;
inline constexpr Dtype int16 = Dtype::int16;
inline constexpr Dtype int32 = Dtype::int32;
inline constexpr Dtype int64 = Dtype::int64;
inline constexpr Dtype float16 = Dtype::float16;
inline constexpr Dtype bfloat16 = Dtype::bfloat16;
inline constexpr Dtype float32 = Dtype::float32;
inline constexpr Dtype float64 = Dtype::float64;
inline constexpr Dtype complex64 = Dtype::complex64;

inline constexpr int kNumDtypes = 14;

// IEEE binary16 storage. Arithmetic happens in float.
struct float16_t {
  uint16_t bits = 0;
  float16_t() = default;
  float16_t(float f) : bits(from_float(f)) {}  // NOLINT(implicit)
  operator float() const { return to_float(bits); }  // NOLINT(implicit)

  static uint16_t from_float(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t mag = x & 0x7fffffffu;
    if (mag >= 0x7f800000u) {  // inf or nan
      return static_cast<uint16_t>(sign | 0x7c00u | (mag > 0x7f800000u ? 0x200u : 0u));
    }
    if (mag >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow
    if (mag < 0x38800000u) {  // subnormal or zero in half precision
      // Round to nearest even by adding the magic 0.5 in float arithmetic.
      float af;
      std::memcpy(&af, &mag, 4);
      af += 0.5f;
      uint32_t r;
      std::memcpy(&r, &af, 4);
      return static_cast<uint16_t>(sign | (r - 0x3f000000u));
    }
    uint32_t odd = (mag >> 13) & 1u;
    mag += 0xc8000fffu + odd;  // rebias exponent (-112 << 23) and round to nearest even
    return static_cast<uint16_t>(sign | (mag >> 13));
  }
  static float to_float(uint16_t h) {
    uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t x;
    if (exp == 0x1f) {
      x = sign | 0x7f800000u | (mant << 13);
    } else if (exp == 0) {
      float f = static_cast<float>(mant) * (1.0f / 16777216.0f);  // 2^-24
      std::memcpy(&x, &f, 4);
      x |= sign;
    } else {
      x = sign | ((exp + 112u) << 23) | (mant << 13);
    }
    float out;
    std::memcpy(&out, &x, 4);
    return out;
  }
};

// bfloat16 storage: the upper half of a float32, rounded to nearest even.
struct bfloat16_t {
  uint16_t bits = 0;
  bfloat16_t() = default;
  bfloat16_t(float f) : bits(from_float(f)) {}  // NOLINT(implicit)
  operator float() const { return to_float(bits); }  // NOLINT(implicit)

  static uint16_t from_float(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
    x += 0x7fffu + ((x >> 16) & 1u);
    return static_cast<uint16_t>(x >> 16);
  }
  static float to_float(uint16_t b) {
    uint32_t x = static_cast<uint32_t>(b) << 16;
    float out;
    std::memcpy(&out, &x, 4);
    return out;
  }
};

// Arithmetic and comparisons on the 16-bit storage types. Without them,
// `h == h` is ambiguous between float's built-in == (through the conversion
// to float) and array's == (through array's implicit constructor). They
// compute exactly as the built-in operators on the promoted float do, so a
// half op half gives float. Deliberate difference from MLX, whose
// float16_t op float16_t gives float16_t: kernels here accumulate
// `h * h` in float and must keep doing so.
template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>;

template <typename A, typename B>
inline constexpr bool is_half_operand_pair_v =
    (is_half_v<A> || is_half_v<B>) && (is_half_v<A> || std::is_arithmetic_v<A>) &&
    (is_half_v<B> || std::is_arithmetic_v<B>);

template <typename T>
auto half_value(T v) {
  if constexpr (is_half_v<T>) {
    return static_cast<float>(v);
  } else {
    return v;
  }
}

#define KILN_HALF_OPERATOR(OP)                                                                  \
  template <typename A, typename B, typename = std::enable_if_t<is_half_operand_pair_v<A, B>>> \
  auto operator OP(A a, B b) {                                                                 \
    return half_value(a) OP half_value(b);                                                     \
  }
KILN_HALF_OPERATOR(+)
KILN_HALF_OPERATOR(-)
KILN_HALF_OPERATOR(*)
KILN_HALF_OPERATOR(/)
KILN_HALF_OPERATOR(==)
KILN_HALF_OPERATOR(!=)
KILN_HALF_OPERATOR(<)
KILN_HALF_OPERATOR(<=)
KILN_HALF_OPERATOR(>)
KILN_HALF_OPERATOR(>=)
#undef KILN_HALF_OPERATOR

inline float operator-(float16_t a) { return -static_cast<float>(a); }
inline float operator-(bfloat16_t a) { return -static_cast<float>(a); }

size_t size_of(Dtype t);
const char* dtype_name(Dtype t);  // "float32", "bfloat16", ...
bool is_floating_point(Dtype t);  // float16, bfloat16, float32, float64 (not complex64)
bool is_complex(Dtype t);         // complex64
bool is_integral(Dtype t);        // every integer type and bool
bool is_signed(Dtype t);          // the signed integers, the floats and complex64

// MLX's dtype categories (numpy's abstract scalar types), for issubdtype:
// complexfloating and floating are both inexact; inexact and integer are
// both number; generic holds everything.
enum class DtypeCategory : uint8_t {
  complexfloating,
  floating,
  inexact,
  signedinteger,
  unsignedinteger,
  integer,
  number,
  generic,
};
inline constexpr DtypeCategory complexfloating = DtypeCategory::complexfloating;
inline constexpr DtypeCategory floating = DtypeCategory::floating;
inline constexpr DtypeCategory inexact = DtypeCategory::inexact;
inline constexpr DtypeCategory signedinteger = DtypeCategory::signedinteger;
inline constexpr DtypeCategory unsignedinteger = DtypeCategory::unsignedinteger;
inline constexpr DtypeCategory integer = DtypeCategory::integer;
inline constexpr DtypeCategory number = DtypeCategory::number;
inline constexpr DtypeCategory generic = DtypeCategory::generic;
// As MLX: bool is only generic; each dtype is a subtype of itself.
bool issubdtype(Dtype a, DtypeCategory c);
bool issubdtype(Dtype a, Dtype b);
bool issubdtype(DtypeCategory a, DtypeCategory b);
// MLX's promotion table (JAX's rules): bool < integers < floats; mixing
// signed and unsigned integers gives the smallest signed type that holds
// both, except uint64 with a signed integer, which gives float32; any
// integer with a float gives that float; float16 with bfloat16 gives float32;
// complex64 with anything gives complex64 (float64 included, as MLX: Kiln
// has no complex128).
Dtype promote_types(Dtype a, Dtype b);

template <typename T>
struct DtypeOf;
template <> struct DtypeOf<bool> { static constexpr Dtype value = bool_; };
template <> struct DtypeOf<uint8_t> { static constexpr Dtype value = uint8; };
template <> struct DtypeOf<uint16_t> { static constexpr Dtype value = uint16; };
template <> struct DtypeOf<uint32_t> { static constexpr Dtype value = uint32; };
template <> struct DtypeOf<uint64_t> { static constexpr Dtype value = uint64; };
template <> struct DtypeOf<int8_t> { static constexpr Dtype value = int8; };
template <> struct DtypeOf<int16_t> { static constexpr Dtype value = int16; };
template <> struct DtypeOf<int32_t> { static constexpr Dtype value = int32; };
template <> struct DtypeOf<int64_t> { static constexpr Dtype value = int64; };
template <> struct DtypeOf<float16_t> { static constexpr Dtype value = float16; };
template <> struct DtypeOf<bfloat16_t> { static constexpr Dtype value = bfloat16; };
template <> struct DtypeOf<float> { static constexpr Dtype value = float32; };
template <> struct DtypeOf<double> { static constexpr Dtype value = float64; };
template <> struct DtypeOf<complex64_t> { static constexpr Dtype value = complex64; };
// std::complex<float> is two floats, real part first: the same layout.
template <> struct DtypeOf<std::complex<float>> { static constexpr Dtype value = complex64; };

template <typename T>
inline constexpr Dtype dtype_of = DtypeOf<T>::value;

}  // namespace kiln
