// quantize, dequantize, quantized_matmul, gather_qmm: argument checks with
// MLX's rules, then the block formats (core/quantize_blocks.h) or the
// affine primitives (core/primitives_quant.h) and their transformation
// rules.
#include <cmath>
#include <numeric>
#include <string>
#include <tuple>

#include "core/ops_util.h"
#include "core/primitives.h"
#include "core/quantize_blocks.h"
#include "core/quantize_checks.h"
#include "core/transform_util.h"
#include "kiln/ops.h"

namespace kiln {
namespace {

std::string params_text(int group_size, int bits) {
  return "group_size=" + std::to_string(group_size) + ", bits=" + std::to_string(bits);
}

}  // namespace

namespace detail {

// The parameters of a mode with MLX's defaults, checked (the block formats
// are handled before). Deliberate difference: MLX checks the microscaling
// modes' group size and bits only in quantize / dequantize; every op does
// here (a product with other parameters would read the words wrongly).
QuantParams quant_mode_params(const char* op, const std::string& mode, std::optional<int> group_size,
                              std::optional<int> bits, const std::vector<array>& inputs) {
  QuantMode m;
  if (!quant_mode_from_name(mode, m)) fail(op, "Invalid quantization mode '" + mode + "'.", inputs);
  if (m == QuantMode::affine) {
    QuantParams p{group_size.value_or(64), bits.value_or(4)};
    if (p.group_size != 32 && p.group_size != 64 && p.group_size != 128) {
      fail(op, "group size " + std::to_string(p.group_size) + " is not supported (32, 64 or 128)", inputs);
    }
    if (p.bits < 2 || p.bits > 8 || p.bits == 7) {
      fail(op, "bits " + std::to_string(p.bits) + " is not supported (2, 3, 4, 5, 6 or 8)", inputs);
    }
    return p;
  }
  const int expected_gs = m == QuantMode::nvfp4 ? 16 : 32, expected_bits = m == QuantMode::mxfp8 ? 8 : 4;
  QuantParams p{group_size.value_or(expected_gs), bits.value_or(expected_bits), m};
  if (p.group_size != expected_gs) {
    fail(op, mode + " quantization requires group size " + std::to_string(expected_gs) + " but got " +
                 std::to_string(p.group_size) + ".", inputs);
  }
  if (p.bits != expected_bits) {
    fail(op, mode + " quantization requires bits to be " + std::to_string(expected_bits) + " but got " +
                 std::to_string(p.bits) + ".", inputs);
  }
  return p;
}

// MLX's validate_global_scale: nvfp4 only, a float32 scalar.
void check_quant_global_scale(const char* op, QuantParams p, const std::optional<array>& global_scale,
                              std::vector<array> in) {
  if (!global_scale) return;
  in.push_back(*global_scale);
  if (p.mode != QuantMode::nvfp4) fail(op, "Global scale is only supported for 'nvfp4' quantization mode.", in);
  if (global_scale->size() != 1) fail(op, "Global scale must be a scalar.", in);
  if (global_scale->dtype() != float32) {
    fail(op, std::string("Global scale must have dtype float32 but got ") + dtype_name(global_scale->dtype()) + ".",
         in);
  }
}

bool is_real_float(Dtype t) { return t == float16 || t == bfloat16 || t == float32 || t == float64; }

// MLX's validate_quantized_input: w uint32, scales (and biases, affine
// only) alike, batch axes shared, and w's packed width consistent with the
// scales. The microscaling modes' scales are uint8 and they have no biases.
void check_quant_packed(const char* op, const array& w, const array& scales, const std::optional<array>& biases,
                        QuantParams p) {
  std::vector<array> in{w, scales};
  if (biases) in.push_back(*biases);
  if (p.affine()) {
    if (!biases) fail(op, "biases must be given for the 'affine' mode", in);
  } else {
    if (biases) fail(op, std::string("Biases must be null for quantization mode '") + quant_mode_name(p.mode) + "'.", in);
    if (scales.dtype() != uint8) {
      fail(op, std::string("Scale type must be uint8 but received type ") + dtype_name(scales.dtype()) + ".", in);
    }
  }
  if (w.dtype() != uint32) fail(op, "the packed weights must be uint32", in);
  if (w.ndim() < 2) fail(op, "the packed weights need at least 2 dimensions", in);
  if (p.affine()) {
    if (scales.shape() != biases->shape()) fail(op, "scales and biases must have the same shape", in);
    if (scales.dtype() != biases->dtype()) fail(op, "scales and biases must have the same dtype", in);
    if (!is_real_float(scales.dtype())) fail(op, "scales and biases must be floating point", in);
  }
  if (scales.ndim() != w.ndim() || !std::equal(w.shape().begin(), w.shape().end() - 1, scales.shape().begin())) {
    fail(op, "scales must have the packed weights' shape but for the last axis", in);
  }
  if (static_cast<int64_t>(w.shape(-1)) * 32 != static_cast<int64_t>(scales.shape(-1)) * p.group_size * p.bits) {
    fail(op, "the packed width " + std::to_string(w.shape(-1)) + " and " + std::to_string(scales.shape(-1)) +
                 " scales do not match " + params_text(p.group_size, p.bits), in);
  }
}

}  // namespace detail

namespace {

using detail::is_real_float;

Dtype checked_float(const char* op, Dtype t, const std::vector<array>& in) {
  if (!is_real_float(t)) fail(op, std::string("needs a floating point dtype, got ") + dtype_name(t), in);
  return t;
}

// The unpacked [inner, outer] of w for the product: K (what x's last axis
// must be) and N (the output's last axis).
std::pair<int, int> matmul_dims(const char* op, const array& x, const array& w, bool transpose, QuantParams p,
                                const std::vector<array>& in) {
  int unpacked = static_cast<int>(static_cast<int64_t>(w.shape(-1)) * 32 / p.bits);
  int inner = transpose ? unpacked : w.shape(-2);
  int outer = transpose ? w.shape(-2) : unpacked;
  if (x.ndim() < 1 || x.shape(-1) != inner) {
    fail(op, "the last axis of x must be " + std::to_string(inner) + ", the inner size of the dequantized w (" +
                 std::to_string(inner) + ", " + std::to_string(outer) + ") with " + params_text(p.group_size, p.bits) +
                 " and transpose=" + (transpose ? "true" : "false"), in);
  }
  return {inner, outer};
}

// The batch shape of a [..., a, b] array.
Shape batch_of(const array& a) { return Shape(a.shape().begin(), a.shape().end() - 2); }
Shape with_inner(Shape batch, const array& a) {
  batch.push_back(a.shape(-2));
  batch.push_back(a.shape(-1));
  return batch;
}

}  // namespace

std::vector<array> quantize(const array& w, std::optional<int> group_size, std::optional<int> bits,
                            const std::string& mode, const std::optional<array>& global_scale, StreamOrDevice s) {
  if (detail::is_block_format(mode)) return detail::block_quantize(w, mode, s);
  QuantParams p = detail::quant_mode_params("quantize", mode, group_size, bits, {w});
  checked_float("quantize", w.dtype(), {w});
  if (w.ndim() < 2) fail("quantize", "the matrix to quantize needs at least 2 dimensions", {&w});
  if (w.shape(-1) % p.group_size != 0) {
    fail("quantize", "the last axis " + std::to_string(w.shape(-1)) + " is not a multiple of the group size " +
                         std::to_string(p.group_size), {&w});
  }
  detail::check_quant_global_scale("quantize", p, global_scale, {w});
  Stream st = to_stream(s);
  Shape packed = w.shape(), groups = w.shape();
  packed.back() = static_cast<int>(static_cast<int64_t>(w.shape(-1)) * p.bits / 32);
  groups.back() = w.shape(-1) / p.group_size;
  if (!p.affine()) {
    std::vector<array> in{w};
    if (global_scale) in.push_back(*global_scale);
    return array::make_arrays({packed, groups}, {uint32, uint8}, std::make_shared<Quantize>(st, p), std::move(in));
  }
  return array::make_arrays({packed, groups, groups}, {uint32, w.dtype(), w.dtype()},
                            std::make_shared<Quantize>(st, p), {w});
}

array dequantize(const array& w, const array& scales, const std::optional<array>& biases,
                 std::optional<int> group_size, std::optional<int> bits, const std::string& mode,
                 const std::optional<array>& global_scale, std::optional<Dtype> dtype, StreamOrDevice s) {
  if (detail::is_block_format(mode)) return detail::block_dequantize(w, mode, dtype.value_or(float32), s);
  std::vector<array> in{w, scales};
  QuantParams p = detail::quant_mode_params("dequantize", mode, group_size, bits, in);
  if (dtype) checked_float("dequantize", *dtype, in);
  detail::check_quant_packed("dequantize", w, scales, biases, p);
  detail::check_quant_global_scale("dequantize", p, global_scale, in);
  Stream st = to_stream(s);
  Shape out = w.shape();
  out.back() = scales.shape(-1) * p.group_size;
  if (!p.affine()) {
    // MLX's default for the microscaling modes (their scales carry no dtype).
    Dtype t = dtype.value_or(bfloat16);
    if (global_scale) in.push_back(*global_scale);
    return make_node<Dequantize>(out, t, std::move(in), st, p, t);
  }
  array r = make_node<Dequantize>(out, scales.dtype(), {w, scales, *biases}, st, p, scales.dtype());
  return dtype && *dtype != scales.dtype() ? astype(r, *dtype, st) : r;
}

array quantized_matmul(const array& x, const array& w, const array& scales, const std::optional<array>& biases,
                       bool transpose, std::optional<int> group_size, std::optional<int> bits,
                       const std::string& mode, StreamOrDevice s) {
  if (detail::is_block_format(mode)) return detail::block_quantized_matmul(x, w, transpose, mode, s);
  std::vector<array> in{x, w, scales};
  QuantParams p = detail::quant_mode_params("quantized_matmul", mode, group_size, bits, in);
  if (biases) in.push_back(*biases);
  detail::check_quant_packed("quantized_matmul", w, scales, biases, p);
  int outer = matmul_dims("quantized_matmul", x, w, transpose, p, in).second;
  // The microscaling modes compute in x's dtype (MLX's rule).
  Dtype t = checked_float("quantized_matmul", p.affine() ? promote_types(x.dtype(), scales.dtype()) : x.dtype(), in);
  Stream st = to_stream(s);
  std::vector<array> ops{astype(x, t, st), w, p.affine() ? astype(scales, t, st) : scales};
  if (p.affine()) ops.push_back(astype(*biases, t, st));
  if (w.ndim() > 2) {
    if (x.ndim() < 3) fail("quantized_matmul", "a w with batch axes needs an x with batch axes", in);
    Shape batch = broadcast_shapes(batch_of(x), batch_of(w), "quantized_matmul", {&x, &w});
    for (auto& a : ops) a = broadcast_to(a, with_inner(batch, a), st);
  }
  Shape out = ops[0].shape();
  out.back() = outer;
  return make_node<QuantizedMatmul>(out, t, std::move(ops), st, p, transpose);
}

array gather_qmm(const array& x, const array& w, const array& scales, const std::optional<array>& biases,
                 std::optional<array> lhs_indices, std::optional<array> rhs_indices, bool transpose,
                 std::optional<int> group_size, std::optional<int> bits, const std::string& mode,
                 bool /*sorted_indices*/, StreamOrDevice s) {
  if (!lhs_indices && !rhs_indices) {
    return quantized_matmul(x, w, scales, biases, transpose, group_size, bits, mode, s);
  }
  std::vector<array> in{x, w, scales};
  if (detail::is_block_format(mode)) fail("gather_qmm", "block format '" + mode + "' is not supported here", in);
  QuantParams p = detail::quant_mode_params("gather_qmm", mode, group_size, bits, in);
  if (biases) in.push_back(*biases);
  detail::check_quant_packed("gather_qmm", w, scales, biases, p);
  if (x.ndim() < 2) fail("gather_qmm", "x needs at least 2 dimensions", in);
  int outer = matmul_dims("gather_qmm", x, w, transpose, p, in).second;
  Dtype t = checked_float("gather_qmm", p.affine() ? promote_types(x.dtype(), scales.dtype()) : x.dtype(), in);
  Stream st = to_stream(s);
  // Default indices: every batch entry of the operand in order.
  auto indices_or_default = [&](const std::optional<array>& idx, const array& a) {
    if (idx) {
      if (!is_integral(idx->dtype()) || idx->dtype() == bool_) fail("gather_qmm", "indices must be integers", in);
      return astype(*idx, uint32, st);
    }
    Shape batch = batch_of(a);
    int n = static_cast<int>(shape_size(batch));
    return reshape(arange(0, n, 1, st), batch, st);
  };
  array lhs = indices_or_default(lhs_indices, x), rhs = indices_or_default(rhs_indices, w);
  lhs = astype(lhs, uint32, st);
  rhs = astype(rhs, uint32, st);
  Shape ishape = broadcast_shapes(lhs.shape(), rhs.shape(), "gather_qmm", {&lhs, &rhs});
  lhs = broadcast_to(lhs, ishape, st);
  rhs = broadcast_to(rhs, ishape, st);
  Shape out = ishape;
  out.push_back(x.shape(-2));
  out.push_back(outer);
  std::vector<array> ops{astype(x, t, st), w, p.affine() ? astype(scales, t, st) : scales};
  if (p.affine()) ops.push_back(astype(*biases, t, st));
  ops.push_back(lhs);
  ops.push_back(rhs);
  return make_node<GatherQMM>(out, t, std::move(ops), st, p, transpose);
}

// MLX's fp8 bridge, written with ordinary ops (MLX has a primitive): the
// bit algorithm of backend/common/fp_quant.h's to_fp8 / from_fp8, so the
// codes match the quantize kernels' on every backend.
array to_fp8(const array& x, StreamOrDevice s) {
  if (!is_real_float(x.dtype())) {
    fail("to_fp8", std::string("Only real floating types are supported but x.dtype() == ") + dtype_name(x.dtype()) +
                       ".", {&x});
  }
  Stream st = to_stream(s);
  auto u32 = [&](uint32_t v) { return array(v); };
  array u = view(astype(x, float32, st), uint32, st);
  array sign = bitwise_and(right_shift(u, u32(24), st), u32(0x80), st);
  array mag = bitwise_and(u, u32(0x7fffffffu), st);
  // Below 2^-6: adding 2^14 rounds to a multiple of 2^-9 (the subnormals).
  array low = subtract(view(add(view(mag, float32, st), array(16384.0f), st), uint32, st), u32(0x46800000u), st);
  array odd = bitwise_and(right_shift(mag, u32(20), st), u32(1), st);
  array high = subtract(right_shift(add(add(mag, u32(0x7ffffu), st), odd, st), u32(20), st), u32(120u << 3), st);
  array code = where(less(mag, u32(121u << 23), st), low, high, st);
  code = where(greater_equal(mag, u32(0x43e00000u), st), u32(0x7e), code, st);
  return astype(bitwise_or(code, sign, st), uint8, st);
}

array from_fp8(const array& x, Dtype dtype, StreamOrDevice s) {
  if (x.dtype() != uint8) {
    fail("from_fp8", std::string("Input must have type uint8 but x.dtype() == ") + dtype_name(x.dtype()) + ".", {&x});
  }
  if (!is_real_float(dtype)) {
    fail("from_fp8", std::string("Only real floating types are supported but dtype == ") + dtype_name(dtype) + ".",
         {&x});
  }
  Stream st = to_stream(s);
  // The 256 values (exact in every floating dtype; 0x7f, 0xff NaN), gathered by code.
  std::vector<float> values(256);
  for (int c = 0; c < 256; ++c) {
    int e = (c >> 3) & 15, m = c & 7;
    float v = (c & 0x7f) == 0x7f ? NAN : e == 0 ? std::ldexp(m / 8.0f, -6) : std::ldexp(1.0f + m / 8.0f, e - 7);
    values[c] = (c & 0x80) ? -v : v;
  }
  array table(values, Shape{256}, float32);
  return astype(take(table, astype(x, int32, st), st), dtype, st);
}

// ---- transformation rules ----

const char* quant_mode_name(QuantMode m) {
  switch (m) {
    case QuantMode::mxfp4: return "mxfp4";
    case QuantMode::mxfp8: return "mxfp8";
    case QuantMode::nvfp4: return "nvfp4";
    default: return "affine";
  }
}
bool quant_mode_from_name(const std::string& name, QuantMode& m) {
  for (QuantMode c : {QuantMode::affine, QuantMode::mxfp4, QuantMode::mxfp8, QuantMode::nvfp4}) {
    if (name == quant_mode_name(c)) {
      m = c;
      return true;
    }
  }
  return false;
}

namespace {
// The biases of an affine primitive's inputs (at `pos`); none otherwise.
std::optional<array> biases_in(const std::vector<array>& in, QuantParams p, size_t pos) {
  if (p.affine()) return in[pos];
  return std::nullopt;
}
// The global scale of an nvfp4 quantize / dequantize (the input after w
// and the scales), or none.
std::optional<array> global_in(const std::vector<array>& in, size_t pos) {
  if (in.size() > pos) return in[pos];
  return std::nullopt;
}
}  // namespace

bool Quantize::is_equivalent(const Primitive& o) const {
  auto* q = dynamic_cast<const Quantize*>(&o);
  return q && q->p_ == p_;
}
bool Dequantize::is_equivalent(const Primitive& o) const {
  auto* q = dynamic_cast<const Dequantize*>(&o);
  return q && q->p_ == p_ && q->out_ == out_;
}
bool QuantizedMatmul::is_equivalent(const Primitive& o) const {
  auto* q = dynamic_cast<const QuantizedMatmul*>(&o);
  return q && q->p_ == p_ && q->transpose_ == transpose_;
}
bool GatherQMM::is_equivalent(const Primitive& o) const {
  auto* q = dynamic_cast<const GatherQMM*>(&o);
  return q && q->p_ == p_ && q->transpose_ == transpose_;
}

std::vector<Shape> Quantize::output_shapes(const std::vector<array>& inputs) {
  Shape packed = inputs[0].shape(), groups = inputs[0].shape();
  packed.back() = static_cast<int>(static_cast<int64_t>(packed.back()) * p_.bits / 32);
  groups.back() /= p_.group_size;
  if (!p_.affine()) return {packed, groups};
  return {packed, groups, groups};
}
std::vector<Shape> Dequantize::output_shapes(const std::vector<array>& inputs) {
  Shape out = inputs[0].shape();
  out.back() = inputs[1].shape().back() * p_.group_size;
  return {out};
}
std::vector<Shape> QuantizedMatmul::output_shapes(const std::vector<array>& inputs) {
  Shape out = inputs[0].shape();
  out.back() = transpose_ ? inputs[1].shape(-2) : inputs[2].shape(-1) * p_.group_size;
  return {out};
}
std::vector<Shape> GatherQMM::output_shapes(const std::vector<array>& inputs) {
  Shape out = inputs[inputs.size() - 2].shape();
  out.push_back(inputs[0].shape(-2));
  out.push_back(transpose_ ? inputs[1].shape(-2) : inputs[2].shape(-1) * p_.group_size);
  return {out};
}

// Rounding is a step function: quantize has no useful derivative (MLX
// defines none either).
std::vector<array> Quantize::vjp(const std::vector<array>&, const std::vector<array>&, const std::vector<int>&,
                                 const std::vector<array>&) {
  throw Error("[Quantize] quantize is not differentiable");
}
std::vector<array> Quantize::jvp(const std::vector<array>&, const std::vector<array>&, const std::vector<int>&) {
  throw Error("[Quantize] quantize is not differentiable");
}
std::pair<std::vector<array>, std::vector<int>> Quantize::vmap(const std::vector<array>& inputs,
                                                               const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  if (axes.size() > 1 && axes[1] >= 0) throw Error("[Quantize] vmap over the global scale is not supported");
  // The mapped axis leads; the quantized axis stays last.
  array w = detail::move_axis(inputs[0], axes[0], 0);
  auto outs = quantize(w, p_.group_size, p_.bits, quant_mode_name(p_.mode), global_in(inputs, 1));
  return {outs, std::vector<int>(outs.size(), 0)};
}

// Dequantization is linear in scales and biases (out = q * s + b per
// group); the packed integers have no derivative, nor have the
// microscaling modes' encoded (uint8) scales.
std::vector<array> Dequantize::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                                   const std::vector<int>& argnums, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  if (!p_.affine()) throw Error("[Dequantize] no derivative in the microscaling modes (encoded scales)");
  Shape grouped = cot[0].shape();
  grouped.back() = primals[1].shape(-1);
  grouped.push_back(p_.group_size);
  array c = reshape(cot[0], grouped);
  std::vector<array> out;
  for (int k : argnums) {
    if (k == 0) throw Error("[Dequantize] no derivative with respect to the packed weights");
    if (k == 2) {
      out.push_back(sum(c, -1));
    } else {
      array q = dequantize(primals[0], ones_like(primals[1]), zeros_like(primals[2]), p_.group_size, p_.bits);
      out.push_back(sum(c * reshape(q, grouped), -1));
    }
  }
  return out;
}
std::vector<array> Dequantize::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                                   const std::vector<int>& argnums) {
  detail::RuleStreamScope scope(stream());
  if (!p_.affine()) throw Error("[Dequantize] no derivative in the microscaling modes (encoded scales)");
  std::optional<array> out;
  for (size_t i = 0; i < argnums.size(); ++i) {
    int k = argnums[i];
    if (k == 0) throw Error("[Dequantize] no derivative with respect to the packed weights");
    array term = k == 1 ? dequantize(primals[0], tan[i], zeros_like(primals[2]), p_.group_size, p_.bits)
                        : dequantize(primals[0], zeros_like(primals[1]), tan[i], p_.group_size, p_.bits);
    out = out ? *out + term : term;
  }
  return {*out};
}
std::pair<std::vector<array>, std::vector<int>> Dequantize::vmap(const std::vector<array>& inputs,
                                                                 const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  if (!p_.affine() && axes.size() > 2 && axes[2] >= 0) {
    throw Error("[Dequantize] vmap over the global scale is not supported");
  }
  int n = detail::batch_size(inputs, axes);
  std::vector<array> in;
  for (size_t i = 0; i < std::min<size_t>(inputs.size(), p_.affine() ? 3 : 2); ++i) {
    in.push_back(detail::batch_first(inputs[i], axes[i], n));
  }
  if (!p_.affine()) {
    return {{dequantize(in[0], in[1], std::nullopt, p_.group_size, p_.bits, quant_mode_name(p_.mode),
                        global_in(inputs, 2), out_)},
            {0}};
  }
  return {{dequantize(in[0], in[1], in[2], p_.group_size, p_.bits)}, {0}};
}

// Linear in x: the cotangent of x is the product with the other
// orientation of the same quantized matrix.
std::vector<array> QuantizedMatmul::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                                        const std::vector<int>& argnums, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  std::vector<array> out;
  for (int k : argnums) {
    if (k != 0) {
      throw Error("[QuantizedMatmul] no derivative with respect to the quantized weights, scales or biases "
                  "(only x)");
    }
    out.push_back(quantized_matmul(cot[0], primals[1], primals[2], biases_in(primals, p_, 3), !transpose_,
                                   p_.group_size, p_.bits, quant_mode_name(p_.mode)));
  }
  return out;
}
std::vector<array> QuantizedMatmul::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                                        const std::vector<int>& argnums) {
  detail::RuleStreamScope scope(stream());
  for (int k : argnums) {
    if (k != 0) {
      throw Error("[QuantizedMatmul] no derivative with respect to the quantized weights, scales or biases "
                  "(only x)");
    }
  }
  return {quantized_matmul(tan[0], primals[1], primals[2], biases_in(primals, p_, 3), transpose_, p_.group_size,
                           p_.bits, quant_mode_name(p_.mode))};
}
std::pair<std::vector<array>, std::vector<int>> QuantizedMatmul::vmap(const std::vector<array>& inputs,
                                                                      const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  int n = detail::batch_size(inputs, axes);
  const char* mode = quant_mode_name(p_.mode);
  bool w_mapped = false;
  for (size_t i = 1; i < inputs.size(); ++i) w_mapped = w_mapped || axes[i] >= 0;
  if (!w_mapped) {
    array x = detail::move_axis(inputs[0], axes[0], 0);
    return {{quantized_matmul(x, inputs[1], inputs[2], biases_in(inputs, p_, 3), transpose_, p_.group_size, p_.bits,
                              mode)},
            {0}};
  }
  // A mapped w: every operand leads with the mapped axis; x gets a row
  // axis when it has none, and w singleton axes up to x's batch rank.
  array x = detail::batch_first(inputs[0], axes[0], n);
  bool vector_x = x.ndim() == 2;
  if (vector_x) x = expand_dims(x, 1);
  std::vector<array> q;
  for (size_t i = 1; i < inputs.size(); ++i) {
    array a = detail::batch_first(inputs[i], axes[i], n);
    while (a.ndim() < x.ndim()) a = expand_dims(a, 1);
    q.push_back(a);
  }
  array out = quantized_matmul(x, q[0], q[1], biases_in(q, p_, 2), transpose_, p_.group_size, p_.bits, mode);
  return {{vector_x ? squeeze(out, 1) : out}, {0}};
}

std::vector<array> GatherQMM::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                                  const std::vector<int>& argnums, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  const size_t li_pos = primals.size() - 2, ri_pos = primals.size() - 1;
  std::vector<array> out;
  for (int k : argnums) {
    if (k != 0) {
      throw Error("[GatherQMM] no derivative with respect to the quantized weights, scales, biases or indices "
                  "(only x)");
    }
    // Each output block came from x_flat[lhs[i]]: the product with the
    // other orientation of its expert, summed back into x's batch entries.
    const array& x = primals[0];
    int M = x.shape(-2), K = x.shape(-1);
    array g = gather_qmm(cot[0], primals[1], primals[2], biases_in(primals, p_, 3), std::nullopt, primals[ri_pos],
                         !transpose_, p_.group_size, p_.bits, quant_mode_name(p_.mode));
    int nb = static_cast<int>(shape_size(batch_of(x)));
    array gi = reshape(g, {-1, M * K});
    array li = reshape(primals[li_pos], {-1, 1});
    array acc = zeros({nb, M * K}, x.dtype());
    acc = scatter_add_axis(acc, broadcast_to(li, gi.shape()), gi, 0);
    out.push_back(reshape(acc, x.shape()));
  }
  return out;
}
std::vector<array> GatherQMM::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                                  const std::vector<int>& argnums) {
  detail::RuleStreamScope scope(stream());
  for (int k : argnums) {
    if (k != 0) throw Error("[GatherQMM] no derivative with respect to the quantized weights, scales, biases or indices");
  }
  const size_t li_pos = primals.size() - 2, ri_pos = primals.size() - 1;
  return {gather_qmm(tan[0], primals[1], primals[2], biases_in(primals, p_, 3), primals[li_pos], primals[ri_pos],
                     transpose_, p_.group_size, p_.bits, quant_mode_name(p_.mode))};
}
// The mapped axis joins the gathered batch: a mapped x (or w, scales,
// biases) is flattened to [n * count, ...] and example b's indices move by
// b * count; unmapped operands keep their shape and indices.
std::pair<std::vector<array>, std::vector<int>> GatherQMM::vmap(const std::vector<array>& inputs,
                                                                const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  int n = detail::batch_size(inputs, axes);
  const size_t li_pos = inputs.size() - 2, ri_pos = inputs.size() - 1;
  // [n * count, r, c] and the count of matrices per example.
  auto flatten_batch = [n](const array& a, int axis) {
    array b = detail::batch_first(a, axis, n);
    int count = static_cast<int>(shape_size(batch_of(b)) / n);
    return std::pair{reshape(b, {-1, b.shape(-2), b.shape(-1)}), count};
  };
  auto shifted = [n](const array& idx, int axis, int count, bool operand_mapped) {
    array i = detail::batch_first(idx, axis, n);
    if (!operand_mapped) return i;
    Shape steps(i.ndim(), 1);
    steps[0] = n;
    array offsets = reshape(astype(arange(0, n, 1), uint32) * static_cast<uint32_t>(count), steps);
    return i + offsets;
  };
  bool x_mapped = axes[0] >= 0, w_mapped = false;
  for (size_t i = 1; i < li_pos; ++i) w_mapped = w_mapped || axes[i] >= 0;
  std::vector<array> q(inputs.begin(), inputs.begin() + li_pos);
  int x_count = 0, w_count = 0;
  if (x_mapped) std::tie(q[0], x_count) = flatten_batch(q[0], axes[0]);
  if (w_mapped) {
    std::tie(q[1], w_count) = flatten_batch(q[1], axes[1]);
    for (size_t i = 2; i < li_pos; ++i) q[i] = flatten_batch(q[i], axes[i]).first;
  }
  array lhs = shifted(inputs[li_pos], axes[li_pos], x_count, x_mapped);
  array rhs = shifted(inputs[ri_pos], axes[ri_pos], w_count, w_mapped);
  return {{gather_qmm(q[0], q[1], q[2], biases_in(q, p_, 3), lhs, rhs, transpose_, p_.group_size, p_.bits,
                      quant_mode_name(p_.mode))},
          {0}};
}

}  // namespace kiln
