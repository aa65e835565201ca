#include "kiln/dtype.h"

#include <algorithm>

#include "kiln/error.h"

namespace kiln {

size_t size_of(Dtype t) {
  switch (t) {
    case bool_: case uint8: case int8: case float8_e4m3fn: case float8_e5m2: return 1;
    case uint16: case int16: case float16: case bfloat16: return 2;
    case uint32: case int32: case float32: return 4;
    case uint64: case int64: case float64: case complex64: return 8;
  }
  return 0;
}

const char* dtype_name(Dtype t) {
  switch (t) {
    case bool_: return "bool";
    case uint8: return "uint8";
    case uint16: return "uint16";
    case uint32: return "uint32";
    case uint64: return "uint64";
    case int8: return "int8";
    case int16: return "int16";
    case int32: return "int32";
    case int64: return "int64";
    case float16: return "float16";
    case bfloat16: return "bfloat16";
    case float32: return "float32";
    case float64: return "float64";
    case complex64: return "complex64";
    case float8_e4m3fn: return "float8_e4m3fn";
    case float8_e5m2: return "float8_e5m2";
  }
  return "unknown";
}

bool is_fp8(Dtype t) { return t == float8_e4m3fn || t == float8_e5m2; }
bool is_floating_point(Dtype t) {
  return t == float16 || t == bfloat16 || t == float32 || t == float64 || is_fp8(t);
}
bool is_complex(Dtype t) { return t == complex64; }
bool is_integral(Dtype t) { return !is_floating_point(t) && !is_complex(t); }
bool is_signed(Dtype t) {
  return t == int8 || t == int16 || t == int32 || t == int64 || is_floating_point(t) || is_complex(t);
}

bool issubdtype(DtypeCategory a, DtypeCategory b) {
  if (a == b || b == generic) return true;
  switch (a) {
    case complexfloating: case floating: return b == inexact || b == number;
    case signedinteger: case unsignedinteger: return b == integer || b == number;
    case inexact: case integer: return b == number;
    default: return false;
  }
}

bool issubdtype(Dtype a, DtypeCategory c) {
  if (c == generic) return true;
  if (a == bool_) return false;
  DtypeCategory own = is_complex(a) ? complexfloating
                      : is_floating_point(a) ? floating
                      : is_signed(a) ? signedinteger
                                     : unsignedinteger;
  return issubdtype(own, c);
}

bool issubdtype(Dtype a, Dtype b) { return a == b; }

namespace {
// Bits of an integer type, for the signed/unsigned rule.
int int_bits(Dtype t) { return static_cast<int>(size_of(t)) * 8; }
Dtype signed_of_bits(int bits) {
  if (bits <= 8) return int8;
  if (bits <= 16) return int16;
  if (bits <= 32) return int32;
  return int64;
}
}  // namespace

// The rule behind MLX's table (mlx/dtype.cpp), entry for entry.
Dtype promote_types(Dtype a, Dtype b) {
  if (a == b) return a;
  if (a == complex64 || b == complex64) return complex64;
  if (a == bool_) return b;
  if (b == bool_) return a;
  if (is_fp8(a) || is_fp8(b)) {
    if (is_fp8(a) && is_fp8(b)) return bfloat16;
    Dtype other = is_fp8(a) ? b : a;
    return is_floating_point(other) ? other : float32;
  }
  bool fa = is_floating_point(a), fb = is_floating_point(b);
  if (fa && fb) {
    if (a == float64 || b == float64) return float64;
    return float32;  // float32 with a 16-bit float, or float16 with bfloat16
  }
  if (fa) return a;
  if (fb) return b;
  bool sa = is_signed(a), sb = is_signed(b);
  if (sa == sb) return int_bits(a) >= int_bits(b) ? a : b;
  // One signed, one unsigned: a signed type at least twice the unsigned's
  // width; no integer holds both uint64 and a signed type.
  int ubits = sa ? int_bits(b) : int_bits(a);
  int sbits = sa ? int_bits(a) : int_bits(b);
  if (ubits == 64) return float32;
  return signed_of_bits(std::max(sbits, ubits * 2));
}

}  // namespace kiln
