// The C++ source of a generated fused kernel (see compiled_codegen.h).
//
// Each op becomes one expression on the compute type of its operands,
// spelled like its definition in op_functors.h / cast.h, and every value of
// a 16-bit float dtype is rounded after the op that makes it (as the
// interpreter and the unfused kernels do), so the generated kernel gives
// the same bits as both. The float32 math comes from kernel_math.inc, the
// same text the library is built from. Ops whose library definition leaves
// contractible multiply-adds to the compiler (double gelu_approx, erfinv)
// are not generated: the interpreter runs those regions.
#include "backend/cpu/compiled_codegen.h"
#include "backend/cpu/simd_math.h"

namespace kiln::cpu::codegen {
namespace {

bool is_float16_like(Dtype t) { return t == float16 || t == bfloat16; }
bool is_fp(Dtype t) { return is_float16_like(t) || t == float32 || t == float64; }

// The type a value of dtype t is computed in.
const char* compute_type(Dtype t) {
  switch (t) {
    case bool_: return "bool";
    case uint8: return "uint8_t";
    case uint32: return "uint32_t";
    case int8: return "int8_t";
    case int32: return "int32_t";
    case int64: return "int64_t";
    case float16:
    case bfloat16:
    case float32: return "float";
    case float64: return "double";
  }
  return "";
}

const char* storage_type(Dtype t) { return is_float16_like(t) ? "uint16_t" : compute_type(t); }

// The unsigned type integer arithmetic wraps in (op_functors.h `wrapping`).
const char* unsigned_type(Dtype t) {
  switch (t) {
    case int8:
    case uint8: return "uint8_t";
    case int32:
    case uint32: return "uint32_t";
    case int64: return "uint64_t";
    default: return "";
  }
}

std::string load(Dtype t, const std::string& e) {
  if (t == bfloat16) return "km::bf16_to_float(" + e + ")";
  if (t == float16) return "km::f16_to_float(" + e + ")";
  return e;
}

std::string store(Dtype t, const std::string& e) {
  if (t == bfloat16) return "km::float_to_bf16(" + e + ")";
  if (t == float16) return "km::float_to_f16(" + e + ")";
  return e;
}

// A result of dtype t as kept between ops.
std::string rounded(Dtype t, const std::string& e) {
  if (t == bfloat16) return "km::round_bf16(" + e + ")";
  if (t == float16) return "km::round_f16(" + e + ")";
  return e;
}

// Integer add/sub/mul through the unsigned type, bool through int.
std::string wrapping(Dtype t, const std::string& x, const char* op, const std::string& y) {
  std::string c = compute_type(t);
  if (is_fp(t)) return "(" + x + " " + op + " " + y + ")";
  if (t == bool_) return "C(" + x + " " + op + " " + y + ")";
  std::string u = unsigned_type(t);
  return c + "(" + u + "(" + x + ") " + op + " " + u + "(" + y + "))";
}

std::string unary_expr(UnaryOp op, Dtype t, const std::string& x) {
  const bool fp = is_fp(t);
  const bool f32 = fp && t != float64;
  const bool uns = t == bool_ || t == uint8 || t == uint32;
  switch (op) {
    case UnaryOp::abs:
      if (uns) return x;
      if (fp) return "std::fabs(" + x + ")";
      return "(" + x + " < C(0) ? " + wrapping(t, "0", "-", x) + " : " + x + ")";
    case UnaryOp::negative:
      if (t == bool_) return x;
      return fp ? "(-" + x + ")" : wrapping(t, "0", "-", x);
    case UnaryOp::sign:
      if (t == bool_) return x;
      return "(" + x + " != " + x + " ? " + x + " : C((C(0) < " + x + ") - (" + x + " < C(0))))";
    case UnaryOp::square: return wrapping(t, x, "*", x);
    case UnaryOp::relu: return "(" + x + " > C(0) ? " + x + " : C(0))";
    case UnaryOp::floor: return fp ? "std::floor(" + x + ")" : x;
    case UnaryOp::ceil: return fp ? "std::ceil(" + x + ")" : x;
    case UnaryOp::round: return fp ? "std::nearbyint(" + x + ")" : x;
    case UnaryOp::logical_not: return "C(!" + x + ")";
    case UnaryOp::bitwise_invert: return fp || t == bool_ ? "" : "C(~" + x + ")";
    default: break;
  }
  if (!fp) return "";
  switch (op) {
    case UnaryOp::exp: return (f32 ? "km::exp(" : "std::exp(") + x + ")";
    case UnaryOp::tanh: return (f32 ? "km::tanh(" : "std::tanh(") + x + ")";
    case UnaryOp::sigmoid: return f32 ? "km::sigmoid(" + x + ")" : "(C(1) / (C(1) + std::exp(-" + x + ")))";
    case UnaryOp::silu: return f32 ? "km::silu(" + x + ")" : "(" + x + " / (C(1) + std::exp(-" + x + ")))";
    case UnaryOp::gelu_approx: return f32 ? "km::gelu_approx(" + x + ")" : "";
    case UnaryOp::gelu: return "(C(0.5) * " + x + " * std::erfc(-" + x + " * C(0.7071067811865476)))";
    case UnaryOp::expm1: return "std::expm1(" + x + ")";
    case UnaryOp::log: return "std::log(" + x + ")";
    case UnaryOp::log1p: return "std::log1p(" + x + ")";
    case UnaryOp::sqrt: return "std::sqrt(" + x + ")";
    case UnaryOp::rsqrt: return "(C(1) / std::sqrt(" + x + "))";
    case UnaryOp::sin: return "std::sin(" + x + ")";
    case UnaryOp::cos: return "std::cos(" + x + ")";
    case UnaryOp::erf: return "std::erf(" + x + ")";
    case UnaryOp::tan: return "std::tan(" + x + ")";
    case UnaryOp::arcsin: return "std::asin(" + x + ")";
    case UnaryOp::arccos: return "std::acos(" + x + ")";
    case UnaryOp::arctan: return "std::atan(" + x + ")";
    case UnaryOp::sinh: return "std::sinh(" + x + ")";
    case UnaryOp::cosh: return "std::cosh(" + x + ")";
    case UnaryOp::arcsinh: return "std::asinh(" + x + ")";
    case UnaryOp::arccosh: return "std::acosh(" + x + ")";
    case UnaryOp::arctanh: return "std::atanh(" + x + ")";
    case UnaryOp::log2: return "std::log2(" + x + ")";
    case UnaryOp::log10: return "std::log10(" + x + ")";
    default: return "";
  }
}

std::string binary_expr(BinaryOp op, Dtype t, const std::string& x, const std::string& y) {
  const bool fp = is_fp(t);
  switch (op) {
    case BinaryOp::add: return wrapping(t, x, "+", y);
    case BinaryOp::subtract: return wrapping(t, x, "-", y);
    case BinaryOp::multiply: return wrapping(t, x, "*", y);
    case BinaryOp::divide: return fp ? "(" + x + " / " + y + ")" : "";
    case BinaryOp::power:
      if (fp) return "std::pow(" + x + ", " + y + ")";
      return t == bool_ ? "" : "kiln_int_power(" + x + ", " + y + ")";
    case BinaryOp::maximum: return "((" + x + " > " + y + " || " + x + " != " + x + ") ? " + x + " : " + y + ")";
    case BinaryOp::minimum: return "((" + x + " < " + y + " || " + x + " != " + x + ") ? " + x + " : " + y + ")";
    case BinaryOp::remainder: return t == bool_ ? "" : "kiln_remainder(" + x + ", " + y + ")";
    case BinaryOp::arctan2: return fp ? "std::atan2(" + x + ", " + y + ")" : "";
    case BinaryOp::floor_divide: return t == bool_ ? "" : "kiln_floor_divide(" + x + ", " + y + ")";
    case BinaryOp::bitwise_and: return fp ? "" : "C(" + x + " & " + y + ")";
    case BinaryOp::bitwise_or: return fp ? "" : "C(" + x + " | " + y + ")";
    case BinaryOp::bitwise_xor: return fp ? "" : "C(" + x + " ^ " + y + ")";
    case BinaryOp::left_shift: return fp || t == bool_ ? "" : "kiln_left_shift(" + x + ", " + y + ")";
    case BinaryOp::right_shift: return fp || t == bool_ ? "" : "kiln_right_shift(" + x + ", " + y + ")";
    case BinaryOp::equal: return "(" + x + " == " + y + ")";
    case BinaryOp::not_equal: return "(" + x + " != " + y + ")";
    case BinaryOp::less: return "(" + x + " < " + y + ")";
    case BinaryOp::less_equal: return "(" + x + " <= " + y + ")";
    case BinaryOp::greater: return "(" + x + " > " + y + ")";
    case BinaryOp::greater_equal: return "(" + x + " >= " + y + ")";
    case BinaryOp::logical_and: return "(" + x + " != C(0) && " + y + " != C(0))";
    case BinaryOp::logical_or: return "(" + x + " != C(0) || " + y + " != C(0))";
  }
  return "";
}

// cpu::convert<To>(x) for x already in its compute type.
std::string cast_expr(Dtype from, Dtype to, const std::string& x) {
  std::string cf = compute_type(from);
  if (to == bool_) return "(" + x + " != " + cf + "(0))";
  if (is_float16_like(to)) {  // one rounding, as cpu::convert (cast.h)
    if (from == float64 || from == int32 || from == uint32) {
      return rounded(to, "km::round_to_odd_float(static_cast<double>(" + x + "))");
    }
    if (from == int64) return rounded(to, "km::round_to_odd_float(km::int64_to_odd_double(" + x + "))");
    return rounded(to, "static_cast<float>(" + x + ")");
  }
  if (!is_fp(to) && is_fp(from)) return "kiln_saturate<" + std::string(compute_type(to)) + ">(" + x + ")";
  return "static_cast<" + std::string(compute_type(to)) + ">(" + x + ")";
}

// Integer power, Python's remainder, floor division, shifts and the
// saturating float -> integer cast, as op_functors.h and cast.h define them
// (the tests compare).
constexpr const char* kHelpers = R"(
template <typename C>
C kiln_floor_divide(C x, C y) {
  if constexpr (std::is_floating_point_v<C>) {
    if (y == C(0)) return x / y;
    C mod = std::fmod(x, y);
    C div = (x - mod) / y;
    if (mod != C(0) && ((y < C(0)) != (mod < C(0)))) div -= C(1);
    if (div == C(0)) return std::copysign(C(0), x / y);
    C fl = std::floor(div);
    return div - fl > C(0.5) ? fl + C(1) : fl;
  } else if constexpr (std::is_unsigned_v<C>) {
    return y == 0 ? C(0) : static_cast<C>(x / y);
  } else {
    using U = std::make_unsigned_t<C>;
    if (y == 0) return C(0);
    if (y == C(-1)) return static_cast<C>(U(0) - static_cast<U>(x));
    C q = static_cast<C>(x / y);
    if (static_cast<C>(x % y) != 0 && ((x < 0) != (y < 0))) --q;
    return q;
  }
}

template <typename C>
C kiln_left_shift(C x, C n) {
  constexpr int bits = static_cast<int>(sizeof(C) * 8);
  bool in_range = n < C(bits);
  if constexpr (std::is_signed_v<C>) in_range = in_range && n >= 0;
  if (!in_range) return C(0);
  using U = std::make_unsigned_t<C>;
  return static_cast<C>(static_cast<U>(static_cast<U>(x) << n));
}

template <typename C>
C kiln_right_shift(C x, C n) {
  constexpr int bits = static_cast<int>(sizeof(C) * 8);
  bool in_range = n < C(bits);
  if constexpr (std::is_signed_v<C>) {
    in_range = in_range && n >= 0;
    if (!in_range) return x < 0 ? C(-1) : C(0);
  }
  if (!in_range) return C(0);
  return static_cast<C>(x >> n);
}

template <typename C>
C kiln_int_power(C base, C exp) {
  if constexpr (std::is_signed_v<C>) {
    if (exp < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exp % 2 == 0) ? 1 : -1;
      return 0;
    }
  }
  using U = std::make_unsigned_t<C>;
  U result = 1, b = static_cast<U>(base);
  auto e = static_cast<std::make_unsigned_t<C>>(exp);
  while (e) {
    if (e & 1) result *= b;
    b *= b;
    e >>= 1;
  }
  return static_cast<C>(result);
}

template <typename C>
C kiln_remainder(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    C r = std::fmod(a, b);
    if (r == C(0)) return std::copysign(C(0), b);
    if ((r < C(0)) != (b < C(0))) r += b;
    return r;
  } else if constexpr (std::is_unsigned_v<C>) {
    return b == 0 ? C(0) : static_cast<C>(a % b);
  } else {
    if (b == 0 || b == -1) return C(0);
    C r = static_cast<C>(a % b);
    if (r != 0 && ((r < 0) != (b < 0))) r = static_cast<C>(r + b);
    return r;
  }
}

template <typename To, typename C>
To kiln_saturate(C v) {
  if (!(v == v)) return To(0);
  if (v <= static_cast<C>(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
  if (v >= static_cast<C>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
  return static_cast<To>(v);
}
)";

}  // namespace

std::string kernel_source(const Compiled& c, const std::string& layouts) {
  const auto& in_dtypes = c.input_dtypes();
  const auto& steps = c.steps();
  const int nin = static_cast<int>(in_dtypes.size());
  const int nvals = nin + static_cast<int>(steps.size());
  auto v = [](int k) { return "v" + std::to_string(k); };

  // The loop body: one statement per step, each in a scope whose `C` is the
  // compute type of its operands (the expressions above use C(0) etc.).
  std::string body;
  for (int k = 0; k < static_cast<int>(steps.size()); ++k) {
    const FusedStep& s = steps[k];
    std::string e;
    switch (s.kind) {
      case FusedStep::Kind::unary:
        e = unary_expr(static_cast<UnaryOp>(s.op), s.in_dtype, v(s.args[0]));
        break;
      case FusedStep::Kind::binary:
        e = binary_expr(static_cast<BinaryOp>(s.op), s.in_dtype, v(s.args[0]), v(s.args[1]));
        break;
      case FusedStep::Kind::select:
        e = "(" + v(s.args[0]) + " ? " + v(s.args[1]) + " : " + v(s.args[2]) + ")";
        break;
      case FusedStep::Kind::cast:
        e = cast_expr(s.in_dtype, s.out_dtype, v(s.args[0]));
        break;
    }
    if (e.empty()) return "";
    if (s.kind != FusedStep::Kind::select && s.kind != FusedStep::Kind::cast) e = rounded(s.out_dtype, e);
    std::string ct = compute_type(s.out_dtype);
    body += "      const " + ct + " " + v(nin + k) + " = [&] { using C = " + compute_type(s.in_dtype) +
            "; return static_cast<" + ct + ">(" + e + "); }();\n";
  }
  Dtype out_dtype = c.value_dtype(nvals - 1);

  std::string src = "// Generated by kiln::compile for: " + c.structure() + " [" + layouts + "]\n";
  src += "#include <bit>\n#include <cmath>\n#include <cstdint>\n#include <limits>\n#include <type_traits>\n\n";
  src += "namespace km {\n";
  src += kernel_math_source();
  src += "}  // namespace km\n\nnamespace {\n";
  src += kHelpers;
  src += "}  // namespace\n\n";
  src += std::string("extern \"C\" void ") + kKernelSymbol +
         "(const void* const* in, void* out_, int64_t begin, int64_t end, int64_t inner) {\n";
  for (int i = 0; i < nin; ++i) {
    src += "  const " + std::string(storage_type(in_dtypes[i])) + "* p" + std::to_string(i) + " = static_cast<const " +
           storage_type(in_dtypes[i]) + "*>(in[" + std::to_string(i) + "]);\n";
  }
  src += "  " + std::string(storage_type(out_dtype)) + "* out = static_cast<" + storage_type(out_dtype) + "*>(out_);\n";
  for (int i = 0; i < nin; ++i) {
    if (layouts[i] == 's') {
      src += "  const " + std::string(compute_type(in_dtypes[i])) + " s" + std::to_string(i) + " = " +
             load(in_dtypes[i], "p" + std::to_string(i) + "[0]") + ";\n";
    }
  }
  src += "  for (int64_t i = begin; i < end;) {\n";
  src += "    const int64_t row = i / inner, col = i - row * inner;\n";
  src += "    const int64_t len = end - i < inner - col ? end - i : inner - col;\n";
  for (int i = 0; i < nin; ++i) {
    std::string n = std::to_string(i), st = storage_type(in_dtypes[i]);
    if (layouts[i] == 'c') src += "    const " + st + "* a" + n + " = p" + n + " + i;\n";
    if (layouts[i] == 'r') src += "    const " + st + "* a" + n + " = p" + n + " + col;\n";
    if (layouts[i] == 'k') {
      src += "    const " + std::string(compute_type(in_dtypes[i])) + " s" + n + " = " +
             load(in_dtypes[i], "p" + n + "[row]") + ";\n";
    }
  }
  src += "    " + std::string(storage_type(out_dtype)) + "* o = out + i;\n";
  src += "    for (int64_t t = 0; t < len; ++t) {\n";
  for (int i = 0; i < nin; ++i) {
    std::string n = std::to_string(i);
    bool per_element = layouts[i] == 'c' || layouts[i] == 'r';
    src += "      const " + std::string(compute_type(in_dtypes[i])) + " v" + n + " = " +
           (per_element ? load(in_dtypes[i], "a" + n + "[t]") : "s" + n) + ";\n";
  }
  src += body;
  src += "      o[t] = " + store(out_dtype, v(nvals - 1)) + ";\n";
  src += "    }\n    i += len;\n  }\n}\n";
  return src;
}

}  // namespace kiln::cpu::codegen
