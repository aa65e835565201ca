// The C++ source of a generated fused kernel (see compiled_codegen.h).
//
// Each op becomes a call of its one definition (backend/common/op_math.inc,
// on the CPU's elementary functions of libm.inc and kernel_math.inc): the
// kernel starts with the text of those files, the same text the library is
// built from. Every value of a 16-bit float dtype is rounded after the op
// that makes it (as the interpreter and the unfused kernels do), so the
// generated kernel gives the same bits as both. erfinv, whose library
// definition leaves contractible multiply-adds to the compiler, is not
// generated: the interpreter runs those regions.
//
// Where the CPU has AVX-512 and every value is float32 or bfloat16 with ops
// that vec_math_avx512.inc defines, the loop runs 16 lanes at a time on
// those intrinsic forms (the same bits: that file says why), as the scalar
// definitions vectorize into code bound by its arithmetic (vector_loop
// below has the measurements).
#include "backend/cpu/compiled_codegen.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/op_functors.h"
#include "backend/cpu/unary_avx512.h"

namespace kiln::cpu::codegen {
namespace {

bool is_float16_like(Dtype t) { return t == float16 || t == bfloat16; }
bool is_fp(Dtype t) { return is_float16_like(t) || t == float32 || t == float64; }

// The type a value of dtype t is computed in.
const char* compute_type(Dtype t) {
  switch (t) {
    case bool_: return "bool";
    case uint8: return "uint8_t";
    case uint16: return "uint16_t";
    case uint32: return "uint32_t";
    case uint64: return "uint64_t";
    case int8: return "int8_t";
    case int16: return "int16_t";
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

// Calls f(Tag<C>{}) with the compute type of dtype t.
template <typename T>
struct Tag {
  using type = T;
};
template <typename F>
bool with_compute_type(Dtype t, F&& f) {
  switch (t) {
    case bool_: return f(Tag<bool>{});
    case uint8: return f(Tag<uint8_t>{});
    case uint16: return f(Tag<uint16_t>{});
    case uint32: return f(Tag<uint32_t>{});
    case uint64: return f(Tag<uint64_t>{});
    case int8: return f(Tag<int8_t>{});
    case int16: return f(Tag<int16_t>{});
    case int32: return f(Tag<int32_t>{});
    case int64: return f(Tag<int64_t>{});
    case float16:
    case bfloat16:
    case float32: return f(Tag<float>{});
    case float64: return f(Tag<double>{});
  }
  return false;
}

// A call of the op's definition (op_math.inc, pasted into the kernel), or ""
// where the op is not defined on the dtype. erfinv is left to the
// interpreter: its library definition leaves multiply-adds to the compiler,
// which contracts them in the library (-ffp-contract=fast) but not in the
// generated kernels.
std::string unary_expr(UnaryOp op, Dtype t, const std::string& x) {
  if (op == UnaryOp::erfinv) return "";
  bool ok = with_compute_type(t, [&](auto tag) {
    using C = typename decltype(tag)::type;
    return with_unary_op<C>(op, [](auto) {});
  });
  return ok ? std::string("ko::") + unary_op_name(op) + "_op::apply(" + x + ")" : "";
}

std::string binary_expr(BinaryOp op, Dtype t, const std::string& x, const std::string& y) {
  bool ok = with_compute_type(t, [&](auto tag) {
    using C = typename decltype(tag)::type;
    return with_binary_op<C>(op, [](auto) {}, [](auto) {});
  });
  return ok ? std::string("ko::") + binary_op_name(op) + "_op::apply(" + x + ", " + y + ")" : "";
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
    if (from == uint64) return rounded(to, "km::round_to_odd_float(km::uint64_to_odd_double(" + x + "))");
    return rounded(to, "static_cast<float>(" + x + ")");
  }
  if (!is_fp(to) && is_fp(from)) return "ko::saturate<" + std::string(compute_type(to)) + ">(" + x + ")";
  return "static_cast<" + std::string(compute_type(to)) + ">(" + x + ")";
}

// ---- the 16-lane form (vec_math_avx512.inc) ----

// A value of the 16-lane loop: float32 / bfloat16 as __m512 (bfloat16
// widened), bool as a __mmask16; other dtypes have no 16-lane form.
bool vec_float(Dtype t) { return t == float32 || t == bfloat16; }
bool vec_value(Dtype t) { return vec_float(t) || t == bool_; }
const char* vec_type(Dtype t) { return t == bool_ ? "__mmask16" : "__m512"; }

std::string vec_unary_expr(UnaryOp op, Dtype in, const std::string& x) {
  if (in == bool_) return op == UnaryOp::logical_not ? "__mmask16(~" + x + ")" : "";
  switch (op) {
    case UnaryOp::abs:
    case UnaryOp::negative:
    case UnaryOp::square:
    case UnaryOp::sqrt:
    case UnaryOp::rsqrt:
    case UnaryOp::relu:
    case UnaryOp::exp:
    case UnaryOp::sigmoid:
    case UnaryOp::silu:
    case UnaryOp::gelu_approx:
    case UnaryOp::tanh:
      return std::string("kv::") + unary_op_name(op) + "(" + x + ")";
    default:
      return "";
  }
}

// The comparisons as op_math.inc defines them (x != y is true for a NaN).
const char* compare_predicate(BinaryOp op) {
  switch (op) {
    case BinaryOp::equal:
      return "_CMP_EQ_OQ";
    case BinaryOp::not_equal:
      return "_CMP_NEQ_UQ";
    case BinaryOp::less:
      return "_CMP_LT_OQ";
    case BinaryOp::less_equal:
      return "_CMP_LE_OQ";
    case BinaryOp::greater:
      return "_CMP_GT_OQ";
    case BinaryOp::greater_equal:
      return "_CMP_GE_OQ";
    default:
      return nullptr;
  }
}

std::string vec_binary_expr(BinaryOp op, Dtype in, const std::string& x, const std::string& y) {
  if (in == bool_) {
    if (op == BinaryOp::logical_and) return "__mmask16(" + x + " & " + y + ")";
    if (op == BinaryOp::logical_or) return "__mmask16(" + x + " | " + y + ")";
    if (op == BinaryOp::equal) return "__mmask16(~(" + x + " ^ " + y + "))";
    if (op == BinaryOp::not_equal) return "__mmask16(" + x + " ^ " + y + ")";
    return "";
  }
  if (const char* p = compare_predicate(op)) return "_mm512_cmp_ps_mask(" + x + ", " + y + ", " + p + ")";
  auto nonzero = [](const std::string& v) { return "_mm512_cmp_ps_mask(" + v + ", _mm512_setzero_ps(), _CMP_NEQ_UQ)"; };
  if (op == BinaryOp::logical_and) return "__mmask16(" + nonzero(x) + " & " + nonzero(y) + ")";
  if (op == BinaryOp::logical_or) return "__mmask16(" + nonzero(x) + " | " + nonzero(y) + ")";
  switch (op) {
    case BinaryOp::add:
    case BinaryOp::subtract:
    case BinaryOp::multiply:
    case BinaryOp::divide:
    case BinaryOp::maximum:
    case BinaryOp::minimum:
      return std::string("kv::") + binary_op_name(op) + "(" + x + ", " + y + ")";
    default:
      return "";
  }
}

std::string vec_cast_expr(Dtype from, Dtype to, const std::string& x) {
  if (from == bool_ && to == bool_) return x;
  if (from == bool_) return "_mm512_maskz_mov_ps(" + x + ", _mm512_set1_ps(1.0f))";
  if (to == bool_) return "_mm512_cmp_ps_mask(" + x + ", _mm512_setzero_ps(), _CMP_NEQ_UQ)";
  return x;  // float32 <-> bfloat16: rounded by the caller
}

// The statements of one 16-lane step of the loop (values v<k>, lanes m),
// or "" where a value's dtype or an op has no 16-lane form.
std::string vector_body(const Compiled& c) {
  const auto& steps = c.steps();
  const int nin = static_cast<int>(c.input_dtypes().size());
  for (Dtype t : c.input_dtypes()) {
    if (!vec_value(t)) return "";
  }
  auto v = [](int i) { return "v" + std::to_string(i); };
  std::string body;
  for (int k = 0; k < static_cast<int>(steps.size()); ++k) {
    const FusedStep& s = steps[k];
    if (!vec_value(s.in_dtype) || !vec_value(s.out_dtype)) return "";
    std::string e;
    switch (s.kind) {
      case FusedStep::Kind::unary:
        e = vec_unary_expr(static_cast<UnaryOp>(s.op), s.in_dtype, v(s.args[0]));
        break;
      case FusedStep::Kind::binary:
        e = vec_binary_expr(static_cast<BinaryOp>(s.op), s.in_dtype, v(s.args[0]), v(s.args[1]));
        break;
      case FusedStep::Kind::cast:
        e = vec_cast_expr(s.in_dtype, s.out_dtype, v(s.args[0]));
        break;
      case FusedStep::Kind::select:
        e = s.in_dtype == bool_
                ? "__mmask16((" + v(s.args[0]) + " & " + v(s.args[1]) + ") | (~" + v(s.args[0]) + " & " + v(s.args[2]) +
                      "))"
                : "_mm512_mask_mov_ps(" + v(s.args[2]) + ", " + v(s.args[0]) + ", " + v(s.args[1]) + ")";
        break;
    }
    if (e.empty()) return "";
    // As the scalar body: a bfloat16 value is rounded where an op or a cast
    // from float32 makes it, except the last one, which the store rounds
    // (a select passes rounded values on; 0 and 1 need no rounding).
    const bool stored_only = k + 1 == static_cast<int>(steps.size());
    const bool made = s.kind == FusedStep::Kind::unary || s.kind == FusedStep::Kind::binary ||
                      (s.kind == FusedStep::Kind::cast && s.in_dtype == float32);
    if (s.out_dtype == bfloat16 && made && !stored_only) e = "kv::round_bf16(" + e + ")";
    body += std::string("      const ") + vec_type(s.out_dtype) + " " + v(nin + k) + " = " + e + ";\n";
  }
  return body;
}

// The inner loop over [t0, t1) of a row, 16 lanes a step (the last masked):
// inputs loaded (a scalar or per-row input broadcast), the body, the store.
// bf16 add + gelu_approx, 2^26 elements, 2 threads (2-vCPU Xeon), processes
// alternated: the scalar body's loop 30.3-31.8 ms, this one 21.6-22.7
// (float32 25.3-25.9 -> 24.6-25.1, where memory bounds both).
std::string vector_loop(const Compiled& c, const std::string& layouts, const std::string& body, bool native_bf16) {
  const auto& in_dtypes = c.input_dtypes();
  const int nin = static_cast<int>(in_dtypes.size());
  const int nvals = nin + static_cast<int>(c.steps().size());
  std::string src = "    for (int64_t t = t0; t < t1; t += 16) {\n";
  src += "      const __mmask16 m = kv::lanes(t1 - t);\n";
  for (int i = 0; i < nin; ++i) {
    const std::string n = std::to_string(i), a = "a" + n + " + t";
    const bool per_element = layouts[i] == 'c' || layouts[i] == 'r';
    std::string e;
    if (in_dtypes[i] == bool_) {
      e = per_element ? "_mm_test_epi8_mask(_mm_maskz_loadu_epi8(m, " + a + "), _mm_set1_epi8(-1))"
                      : "(s" + n + " ? __mmask16(0xffff) : __mmask16(0))";
    } else if (!per_element) {
      e = "_mm512_set1_ps(s" + n + ")";
    } else {
      e = in_dtypes[i] == bfloat16 ? "kv::load_bf16(" + a + ", m)" : "_mm512_maskz_loadu_ps(m, " + a + ")";
    }
    src += std::string("      const ") + vec_type(in_dtypes[i]) + " v" + n + " = " + e + ";\n";
  }
  src += body;
  const std::string last = "v" + std::to_string(nvals - 1);
  const Dtype out = c.value_dtype(nvals - 1);
  if (out == bfloat16) {
    src += std::string("      _mm256_mask_storeu_epi16(o + t, m, ") +
           (native_bf16 ? "kv::to_bf16_native(" : "kv::to_bf16(") + last + "));\n";
  } else if (out == bool_) {
    src += "      _mm_mask_storeu_epi8(o + t, m, _mm_maskz_mov_epi8(" + last + ", _mm_set1_epi8(1)));\n";
  } else {
    src += "      _mm512_mask_storeu_ps(o + t, m, " + last + ");\n";
  }
  src += "    }\n";
  return src;
}

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
    // The last step's value is only stored, and the store to a 16-bit type
    // rounds as rounded() does (the same bits, NaNs included): rounding it
    // twice cost ~14% of a bf16 add + gelu kernel.
    const bool stored_only = k + 1 == static_cast<int>(steps.size()) && is_float16_like(s.out_dtype);
    if (s.kind != FusedStep::Kind::select && s.kind != FusedStep::Kind::cast && !stored_only) {
      e = rounded(s.out_dtype, e);
    }
    std::string ct = compute_type(s.out_dtype);
    body += "      const " + ct + " " + v(nin + k) + " = [&] { using C = " + compute_type(s.in_dtype) +
            "; return static_cast<" + ct + ">(" + e + "); }();\n";
  }
  Dtype out_dtype = c.value_dtype(nvals - 1);

  std::string src = "// Generated by kiln::compile for: " + c.structure() + " [" + layouts + "]\n";
  src += "#include <bit>\n#include <cmath>\n#include <cstdint>\n#include <limits>\n#include <type_traits>\n\n";
  src += "namespace km {\n";
  src += kernel_math_source();
  src += "}  // namespace km\n\nnamespace ko {\nnamespace simd = ::km;\nnamespace libm {\n";
  src += libm_source();
  src += "}  // namespace libm\n\n#define KILN_OPM inline\n";
  src += op_math_source();
  src += "}  // namespace ko\n\n";
  const cpu::CpuTarget target = cpu::cpu_target();
  const std::string vbody = target >= cpu::CpuTarget::avx512 ? vector_body(c) : "";
  if (!vbody.empty()) {
    src += "#include <immintrin.h>\n\nnamespace kv {\n";
    src += vec_math_source();
    src += "}  // namespace kv\n\n";
  }
  // flatten: every math call inlined however long the body (a 1,000-op
  // chain left 300 calls to km::tanh outlined, through the PLT, and the loop
  // scalar: 15 µs per op, 10x the eager kernels).
  src += std::string("extern \"C\" __attribute__((flatten)) void ") + kKernelSymbol +
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
  // Blocks of 256 elements, each contiguous input's bytes 2 KB ahead
  // prefetched first (prefetched_blocks in elementwise.h says why: bf16 add +
  // gelu_approx, 2^26 elements, alternating: bf16 31.4-32.9 -> 27.4-30.2 ms,
  // float32 26.1-26.5 -> 25.2-25.7).
  src += "    for (int64_t t0 = 0; t0 < len; t0 += 256) {\n";
  src += "    const int64_t t1 = len - t0 < 256 ? len : t0 + 256;\n";
  for (int i = 0; i < nin; ++i) {
    if (layouts[i] != 'c') continue;
    std::string n = std::to_string(i), sz = "sizeof(" + std::string(storage_type(in_dtypes[i])) + ")";
    src += "    for (int64_t l = t0 + 2048 / " + sz + "; l < len && l < t1 + 2048 / " + sz + "; l += 64 / " + sz +
           ") __builtin_prefetch(a" + n + " + l, 0, 3);\n";
  }
  if (!vbody.empty()) {
    src += vector_loop(c, layouts, vbody, target >= cpu::CpuTarget::avx512_bf16);
    src += "    }\n    i += len;\n  }\n}\n";
    return src;
  }
  src += "    for (int64_t t = t0; t < t1; ++t) {\n";
  for (int i = 0; i < nin; ++i) {
    std::string n = std::to_string(i);
    bool per_element = layouts[i] == 'c' || layouts[i] == 'r';
    src += "      const " + std::string(compute_type(in_dtypes[i])) + " v" + n + " = " +
           (per_element ? load(in_dtypes[i], "a" + n + "[t]") : "s" + n) + ";\n";
  }
  src += body;
  src += "      o[t] = " + store(out_dtype, v(nvals - 1)) + ";\n";
  src += "    }\n    }\n    i += len;\n  }\n}\n";
  return src;
}

}  // namespace kiln::cpu::codegen
