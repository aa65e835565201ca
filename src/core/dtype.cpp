#include "kiln/dtype.h"

#include "kiln/error.h"

namespace kiln {

size_t size_of(Dtype t) {
  switch (t) {
    case bool_: case uint8: case int8: return 1;
    case float16: case bfloat16: return 2;
    case uint32: case int32: case float32: return 4;
    case int64: case float64: return 8;
  }
  return 0;
}

const char* dtype_name(Dtype t) {
  switch (t) {
    case bool_: return "bool";
    case uint8: return "uint8";
    case uint32: return "uint32";
    case int8: return "int8";
    case int32: return "int32";
    case int64: return "int64";
    case float16: return "float16";
    case bfloat16: return "bfloat16";
    case float32: return "float32";
    case float64: return "float64";
  }
  return "unknown";
}

bool is_floating_point(Dtype t) { return t == float16 || t == bfloat16 || t == float32 || t == float64; }
bool is_integral(Dtype t) { return !is_floating_point(t); }
bool is_signed(Dtype t) { return t == int8 || t == int32 || t == int64 || is_floating_point(t); }

namespace {
// Bits of an integer type, for the signed/unsigned rule.
int int_bits(Dtype t) {
  switch (t) {
    case uint8: case int8: return 8;
    case uint32: case int32: return 32;
    case int64: return 64;
    default: return 0;
  }
}
Dtype signed_of_bits(int bits) {
  if (bits <= 8) return int8;
  if (bits <= 32) return int32;
  return int64;
}
}  // namespace

Dtype promote_types(Dtype a, Dtype b) {
  if (a == b) return a;
  if (a == bool_) return b;
  if (b == bool_) return a;
  bool fa = is_floating_point(a), fb = is_floating_point(b);
  if (fa && fb) {
    if (a == float64 || b == float64) return float64;
    if (a == float32 || b == float32) return float32;
    return float32;  // float16 with bfloat16: neither holds the other
  }
  if (fa) return a;
  if (fb) return b;
  bool sa = is_signed(a), sb = is_signed(b);
  if (sa == sb) return int_bits(a) >= int_bits(b) ? a : b;
  // One signed, one unsigned: a signed type strictly wider than the unsigned.
  int ubits = sa ? int_bits(b) : int_bits(a);
  int sbits = sa ? int_bits(a) : int_bits(b);
  int need = std::max(sbits, ubits * 2);
  // No int16 here: uint8 with int8 lands on int32.
  return signed_of_bits(need <= 8 ? 8 : need);
}

}  // namespace kiln
