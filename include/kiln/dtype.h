#pragma once
// Element types, the 16- and 8-bit float storage types and numpy-style promotion.
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
  // Kiln extensions (MLX has no fp8 dtype), after complex64 so that the
  // values above keep their numbers.
  float8_e4m3fn,
  float8_e5m2,
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
inline constexpr Dtype float8_e4m3fn = Dtype::float8_e4m3fn;
inline constexpr Dtype float8_e5m2 = Dtype::float8_e5m2;

inline constexpr int kNumDtypes = 16;

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

// FP8 storage types (a Kiln extension: MLX has no fp8 dtype; the OCP 8-bit
// formats that torch.float8_e4m3fn / float8_e5m2 and cuBLASLt use).
//   float8_e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no
//     infinity; 0x7f and 0xff are NaN; largest finite 448; smallest normal
//     2^-6, subnormals multiples of 2^-9.
//   float8_e5m2: 1 sign, 5 exponent (bias 15), 2 mantissa bits (the upper
//     byte of an IEEE binary16); 0x7c / 0xfc are +-inf, 0x7d..0x7f and
//     0xfd..0xff NaN; largest finite 57344; subnormals multiples of 2^-16.
// To float: exact (every code is a float). From float, the rule both
// backends use bit for bit (the same code, host/device):
//   - round to nearest, ties to even;
//   - saturating: a finite value beyond the largest finite one (after
//     rounding) gives +-max (448, 57344), never inf or NaN;
//   - infinity: float8_e4m3fn has none, +-inf gives +-448; float8_e5m2
//     keeps +-inf;
//   - NaN stays NaN with its sign (e4m3fn 0x7f/0xff, e5m2 0x7e/0xfe);
//   - -0 stays -0; values below half the smallest subnormal give +-0.
// From double (astype) the value is first rounded to float to odd, so the
// result is the double rounded once (as for the 16-bit floats).
// Unlike MLX's to_fp8 (include/kiln/ops.h, uint8 codes), NaN and inf do
// not become 448 in float8_e4m3fn's NaN case: NaN stays NaN.
namespace fp8_detail {
KILN_HOST_DEVICE uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
KILN_HOST_DEVICE float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
// A format with `M` mantissa bits, exponent bias `B`, largest finite
// magnitude code `max_code` and smallest normal exponent 1 - B.
template <int M, int B>
KILN_HOST_DEVICE uint8_t encode(float f, uint32_t max_code, uint32_t inf_code, uint32_t nan_code) {
  uint32_t u = float_bits(f);
  uint32_t sign = (u >> 24) & 0x80u;
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return static_cast<uint8_t>(sign | nan_code);
  if (u == 0x7f800000u) return static_cast<uint8_t>(sign | inf_code);
  // The largest finite value as a float: saturate at and above it.
  const uint32_t max_bits = ((max_code >> M) + 127u - B) << 23 | (max_code & ((1u << M) - 1)) << (23 - M);
  if (u >= max_bits) return static_cast<uint8_t>(sign | max_code);
  if (u < ((128u - B) << 23)) {
    // Below the smallest normal: adding 2^(23 + 1 - B - M) leaves the
    // value rounded (to nearest even, by the float addition) to a
    // multiple of the subnormal step 2^(1 - B - M) in the low bits.
    const float magic = bits_float((127u + 23u + 1u - B - M) << 23);
    float r = bits_float(u) + magic;
    return static_cast<uint8_t>(sign | (float_bits(r) - float_bits(magic)));
  }
  // Normal: round the mantissa to M bits (nearest even; a carry moves
  // into the exponent), then rebias the exponent.
  const uint32_t shift = 23 - M;
  uint32_t rounded = u + ((1u << (shift - 1)) - 1u) + ((u >> shift) & 1u);
  return static_cast<uint8_t>(sign | ((rounded >> shift) - ((127u - B) << M)));
}
template <int M, int B>
KILN_HOST_DEVICE float decode(uint8_t b, bool special, bool inf) {
  uint32_t m = b & 0x7fu;
  float v;
  if (special) {
    v = bits_float(inf ? 0x7f800000u : 0x7fc00000u);
  } else if ((m >> M) == 0) {
    v = static_cast<float>(m) * bits_float((127u + 1u - B - M) << 23);  // subnormal: m * 2^(1-B-M)
  } else {
    v = bits_float((m + ((127u - B) << M)) << (23 - M));
  }
  return (b & 0x80u) ? -v : v;
}
}  // namespace fp8_detail

struct float8_e4m3fn_t {
  uint8_t bits = 0;
  float8_e4m3fn_t() = default;
  KILN_HOST_DEVICE float8_e4m3fn_t(float f) : bits(from_float(f)) {}  // NOLINT(implicit)
  KILN_HOST_DEVICE operator float() const { return to_float(bits); }  // NOLINT(implicit)
  static KILN_HOST_DEVICE uint8_t from_float(float f) {
    return fp8_detail::encode<3, 7>(f, 0x7eu, 0x7eu, 0x7fu);
  }
  static KILN_HOST_DEVICE float to_float(uint8_t b) {
    return fp8_detail::decode<3, 7>(b, (b & 0x7fu) == 0x7fu, false);
  }
};

struct float8_e5m2_t {
  uint8_t bits = 0;
  float8_e5m2_t() = default;
  KILN_HOST_DEVICE float8_e5m2_t(float f) : bits(from_float(f)) {}  // NOLINT(implicit)
  KILN_HOST_DEVICE operator float() const { return to_float(bits); }  // NOLINT(implicit)
  static KILN_HOST_DEVICE uint8_t from_float(float f) {
    return fp8_detail::encode<2, 15>(f, 0x7bu, 0x7cu, 0x7eu);
  }
  static KILN_HOST_DEVICE float to_float(uint8_t b) {
    return fp8_detail::decode<2, 15>(b, (b & 0x7cu) == 0x7cu, (b & 0x7fu) == 0x7cu);
  }
};

template <typename T>
inline constexpr bool is_fp8_v = std::is_same_v<T, float8_e4m3fn_t> || std::is_same_v<T, float8_e5m2_t>;

// Arithmetic and comparisons on the 16-bit storage types. Without them,
// `h == h` is ambiguous between float's built-in == (through the conversion
// to float) and array's == (through array's implicit constructor). They
// compute exactly as the built-in operators on the promoted float do, so a
// half op half gives float. Deliberate difference from MLX, whose
// float16_t op float16_t gives float16_t: kernels here accumulate
// `h * h` in float and must keep doing so.
template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>;

// The 16- and 8-bit float storage types: the operators below cover both.
template <typename T>
inline constexpr bool is_narrow_float_v = is_half_v<T> || is_fp8_v<T>;

template <typename A, typename B>
inline constexpr bool is_half_operand_pair_v =
    (is_narrow_float_v<A> || is_narrow_float_v<B>) && (is_narrow_float_v<A> || std::is_arithmetic_v<A>) &&
    (is_narrow_float_v<B> || std::is_arithmetic_v<B>);

template <typename T>
auto half_value(T v) {
  if constexpr (is_narrow_float_v<T>) {
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
inline float operator-(float8_e4m3fn_t a) { return -static_cast<float>(a); }
inline float operator-(float8_e5m2_t a) { return -static_cast<float>(a); }

size_t size_of(Dtype t);
const char* dtype_name(Dtype t);  // "float32", "bfloat16", ...
bool is_floating_point(Dtype t);  // the fp8 types, float16, bfloat16, float32, float64 (not complex64)
bool is_fp8(Dtype t);             // float8_e4m3fn, float8_e5m2
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
// The fp8 types (Kiln's extension) are storage types: with bool an fp8 type
// stays itself; with another float (16-bit, float32, float64) it gives that
// float; with an integer it gives float32 (not the fp8 type, as the rule
// above would: an 8-bit float holds few integers and computes nothing);
// the two fp8 types together give bfloat16, which holds both exactly.
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
template <> struct DtypeOf<float8_e4m3fn_t> { static constexpr Dtype value = float8_e4m3fn; };
template <> struct DtypeOf<float8_e5m2_t> { static constexpr Dtype value = float8_e5m2; };
// std::complex<float> is two floats, real part first: the same layout.
template <> struct DtypeOf<std::complex<float>> { static constexpr Dtype value = complex64; };

template <typename T>
inline constexpr Dtype dtype_of = DtypeOf<T>::value;

}  // namespace kiln
