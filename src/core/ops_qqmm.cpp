// qqmm and gather_qqmm (MLX's products of operands rounded on the fly to a
// microscaling mode; include/kiln/ops.h has the semantics).
//
// The definition is a graph of Kiln's ops: QuantizeDequantize rounds x (and
// an unquantized w) group by group (the one math text of
// backend/common/fp_quant.h, on both backends), then quantized_matmul (a
// quantized w: its QMV / QMM kernels read the packed words) or matmul (a
// rounded float w), with nvfp4's global scales applied to the float32
// product. qqmm's result is a QQMatmul node over that graph: it shares the
// graph's output buffer and carries MLX's derivative, which quantizes the
// backward products too (a straight-through estimate, not the derivative
// of the rounding).
#include <string>

#include "core/array_desc.h"
#include "core/ops_util.h"
#include "core/primitives.h"
#include "core/quantize_checks.h"
#include "core/transform_util.h"
#include "kiln/ops.h"
#include "kiln/transforms.h"

namespace kiln {

// The qqmm node: inputs x [M, K], w, (scales), (global_scale_x,
// global_scale_w), then the definition's result, whose buffer it shares.
class QQMatmul : public Primitive {
 public:
  QQMatmul(Stream s, QuantParams p, bool w_quantized, bool global)
      : Primitive(s), p_(p), w_quantized_(w_quantized), global_(global) {}
  using Primitive::eval_cpu;
  using Primitive::eval_gpu;
  void eval_cpu(const std::vector<array>& inputs, array& out) override { forward(inputs, out); }
  void eval_gpu(const std::vector<array>& inputs, array& out) override { forward(inputs, out); }
  const char* name() const override { return "QQMatmul"; }
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override {
    auto* q = dynamic_cast<const QQMatmul*>(&o);
    return q && q->p_ == p_ && q->w_quantized_ == w_quantized_ && q->global_ == global_;
  }

 private:
  void forward(const std::vector<array>& inputs, array& out) {
    const array& src = inputs.back();
    detail::share_buffer(out, src, src.desc()->strides, src.desc()->offset);
  }
  // The operands without the trailing result.
  std::vector<array> args(const std::vector<array>& inputs) const { return {inputs.begin(), inputs.end() - 1}; }
  std::optional<array> global_x(const std::vector<array>& a) const {
    if (!global_) return std::nullopt;
    return a[w_quantized_ ? 3 : 2];
  }
  std::optional<array> global_w(const std::vector<array>& a) const {
    if (!global_) return std::nullopt;
    return a[w_quantized_ ? 4 : 3];
  }
  // w as a float matrix (a quantized one dequantized, global scale included).
  array w_values(const std::vector<array>& a, Dtype t) const;
  // A scale for rounding a cotangent or tangent: its max |value| (nvfp4 with global scales only).
  std::optional<array> amax_of(const array& v) const {
    if (!global_) return std::nullopt;
    return astype(max(abs(v)), float32);
  }
  // a zero-padded along its last axis to whole groups (the backward products
  // round along N and M, which need not be multiples of the group size).
  array pad_groups(const array& a) const;

  QuantParams p_;
  bool w_quantized_, global_;
};

namespace {

constexpr const char* kOp = "qqmm";

// QuantizeDequantize of an operand (nvfp4 with a global scale: without the
// factor global / 2688, which the product takes).
array round_operand(const array& a, QuantParams p, const std::optional<array>& global, Stream st) {
  std::vector<array> in{a};
  if (global) in.push_back(*global);
  return make_node<QuantizeDequantize>(a.shape(), a.dtype(), std::move(in), st, p);
}

// (global_x / 2688) (global_w / 2688) as a float32 scalar.
array global_factor(const array& gx, const array& gw, Stream st) {
  array k(1.0f / 2688.0f);
  return multiply(multiply(reshape(gx, {}, st), k, st), multiply(reshape(gw, {}, st), k, st), st);
}

struct QqmmArgs {
  QuantParams p;
  bool w_quantized = false;
  int K = 0, N = 0;
};

// MLX's checks of qqmm / gather_qqmm, with its messages where it has them.
QqmmArgs check_qqmm(const char* op, const array& x, const array& w, const std::optional<array>& scales,
                    std::optional<int> group_size, std::optional<int> bits, const std::string& mode,
                    const std::optional<array>& gx, const std::optional<array>& gw) {
  std::vector<array> in{x, w};
  if (scales) in.push_back(*scales);
  QqmmArgs a;
  a.p = detail::quant_mode_params(op, mode, group_size, bits, in);
  if (a.p.affine()) {
    fail(op, "mode '" + mode + "' is not a microscaling mode: qqmm rounds with 'nvfp4', 'mxfp8' or 'mxfp4'", in);
  }
  // Deliberate difference: float64 works (MLX refuses it); it rounds in float32 too.
  auto float_operand = [&](const array& v, const char* which) {
    if (!detail::is_real_float(v.dtype())) {
      fail(op,
           std::string("Only real floating types are supported but ") + which +
               " argument dtype == " + dtype_name(v.dtype()) + ".",
           in);
    }
  };
  float_operand(x, "first");
  a.w_quantized = w.dtype() == uint32;
  if (a.w_quantized) {
    if (!scales) fail(op, "Scales must be provided if second argument is quantized.", in);
    detail::check_quant_packed(op, w, *scales, std::nullopt, a.p);
    a.K = static_cast<int>(static_cast<int64_t>(w.shape(-1)) * 32 / a.p.bits);
  } else {
    float_operand(w, "second");
    if (scales) fail(op, "scales were given for a w that is not quantized (uint32 words)", in);
    a.K = w.shape(-1);
  }
  a.N = w.shape(-2);
  if (x.ndim() < 1 || x.shape(-1) != a.K) {
    fail(op, "the last axis of x must be " + std::to_string(a.K) + ", the inner size of w", in);
  }
  if (a.K % a.p.group_size != 0) {
    fail(op,
         "the inner size " + std::to_string(a.K) + " is not a multiple of the group size " +
             std::to_string(a.p.group_size),
         in);
  }
  detail::check_quant_global_scale(op, a.p, gx, in);
  detail::check_quant_global_scale(op, a.p, gw, in);
  if (a.p.mode == QuantMode::nvfp4 && gx.has_value() != gw.has_value()) {
    fail(op, "For nvfp4 mode, either both global_scale_x and global_scale_w must be provided, or neither.", in);
  }
  return a;
}

// The definition: x [..., K] rounded, times w^T (w [..., N, K]) through
// `product` (quantized_matmul, matmul or their gathered forms).
template <typename Product>
array qqmm_definition(const array& x, const array& w, const std::optional<array>& scales, QuantParams p,
                      const std::optional<array>& gx, const std::optional<array>& gw, Stream st, Product product) {
  array xr = round_operand(x, p, gx, st);
  std::optional<array> wr;
  if (w.dtype() != uint32) wr = round_operand(w, p, gw, st);
  if (!gx) {
    array out = product(xr, wr ? swapaxes(*wr, -1, -2, st) : w, scales);
    return out.dtype() == x.dtype() ? out : astype(out, x.dtype(), st);
  }
  // nvfp4 with global scales: the product in float32, scaled, rounded once.
  array out = product(astype(xr, float32, st), wr ? swapaxes(astype(*wr, float32, st), -1, -2, st) : w, scales);
  return astype(multiply(out, global_factor(*gx, *gw, st), st), x.dtype(), st);
}

// qqmm's graph on operands already checked: x [M, K].
std::vector<array> qqmm_graph(const std::vector<array>& a, QuantParams p, bool w_quantized, bool global, Stream st) {
  std::optional<array> scales, gx, gw;
  size_t next = 2;
  if (w_quantized) scales = a[next++];
  if (global) gx = a[next], gw = a[next + 1];
  const char* mode = quant_mode_name(p.mode);
  auto product = [&](const array& xr, const array& wt, const std::optional<array>& s) {
    if (s) return quantized_matmul(xr, wt, *s, std::nullopt, true, p.group_size, p.bits, mode, st);
    return matmul(xr, wt, st);
  };
  return {qqmm_definition(a[0], a[1], scales, p, gx, gw, st, product)};
}

}  // namespace

array QQMatmul::w_values(const std::vector<array>& a, Dtype t) const {
  if (!w_quantized_) return a[1];
  return dequantize(a[1], a[2], std::nullopt, p_.group_size, p_.bits, quant_mode_name(p_.mode), global_w(a), t);
}

array QQMatmul::pad_groups(const array& a) const {
  const int rest = a.shape(-1) % p_.group_size;
  if (rest == 0) return a;
  std::vector<std::pair<int, int>> widths(a.ndim(), {0, 0});
  widths.back().second = p_.group_size - rest;
  return pad(a, widths);
}

std::vector<array> QQMatmul::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                                 const std::vector<int>& argnums, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  std::vector<array> a = args(primals);
  const array& x = a[0];
  const char* mode = quant_mode_name(p_.mode);
  std::vector<array> out;
  for (int k : argnums) {
    if (k == 0) {
      // [M, N] times [N, K]: the contraction runs along N.
      array wt = swapaxes(w_values(a, x.dtype()), -1, -2);
      out.push_back(qqmm(pad_groups(cot[0]), pad_groups(wt), std::nullopt, p_.group_size, p_.bits, mode,
                         amax_of(cot[0]), global_w(a)));
    } else if (k == 1 && !w_quantized_) {
      // [N, M] times [M, K]: along the rows of x.
      array g = qqmm(pad_groups(swapaxes(cot[0], -1, -2)), pad_groups(swapaxes(x, -1, -2)), std::nullopt, p_.group_size,
                     p_.bits, mode, amax_of(cot[0]), global_x(a));
      out.push_back(astype(g, a[1].dtype()));
    } else {
      // A quantized w's words and scales, the global scales, the definition's result.
      out.push_back(zeros_like(primals[k]));
    }
  }
  return out;
}

std::vector<array> QQMatmul::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                                 const std::vector<int>& argnums) {
  detail::RuleStreamScope scope(stream());
  std::vector<array> a = args(primals);
  const char* mode = quant_mode_name(p_.mode);
  std::optional<array> out;
  for (size_t i = 0; i < argnums.size(); ++i) {
    const int k = argnums[i];
    std::optional<array> term;
    if (k == 0) {
      term = qqmm(tan[i], w_values(a, a[0].dtype()), std::nullopt, p_.group_size, p_.bits, mode, amax_of(tan[i]),
                  global_w(a));
    } else if (k == 1 && !w_quantized_) {
      term = qqmm(a[0], tan[i], std::nullopt, p_.group_size, p_.bits, mode, global_x(a), amax_of(tan[i]));
    }
    if (term) out = out ? *out + *term : *term;
  }
  if (!out) return {zeros_like(primals.back())};
  return {*out};
}

std::pair<std::vector<array>, std::vector<int>> QQMatmul::vmap(const std::vector<array>& inputs,
                                                               const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  const QuantParams p = p_;
  const bool wq = w_quantized_, global = global_;
  const Stream st = stream();
  auto fun = [p, wq, global, st](const std::vector<array>& a) { return qqmm_graph(a, p, wq, global, st); };
  std::vector<int> arg_axes(axes.begin(), axes.end() - 1);
  return {kiln::vmap(fun, arg_axes, {0})(args(inputs)), {0}};
}

std::vector<Shape> QQMatmul::output_shapes(const std::vector<array>& inputs) { return {inputs.back().shape()}; }

array qqmm(const array& in_x, const array& w, const std::optional<array>& w_scales, std::optional<int> group_size,
           std::optional<int> bits, const std::string& mode, const std::optional<array>& global_scale_x,
           const std::optional<array>& global_scale_w, StreamOrDevice s) {
  if (in_x.ndim() < 1 || w.ndim() != 2) {
    fail(kOp, "x needs at least 1 dimension and w exactly 2 (MLX's qqmm is 2-d)", {&in_x, &w});
  }
  QqmmArgs a = check_qqmm(kOp, in_x, w, w_scales, group_size, bits, mode, global_scale_x, global_scale_w);
  Stream st = to_stream(s);
  // x as rows [M, K]: a vector is one row, batch axes fold into M.
  array x = reshape(in_x, {-1, a.K}, st);
  std::vector<array> ops{x, w};
  if (a.w_quantized) ops.push_back(*w_scales);
  const bool global = global_scale_x.has_value();
  if (global) ops.push_back(*global_scale_x), ops.push_back(*global_scale_w);
  array def = qqmm_graph(ops, a.p, a.w_quantized, global, st)[0];
  ops.push_back(stop_gradient(def, st));
  array out = make_node<QQMatmul>(def.shape(), def.dtype(), std::move(ops), st, a.p, a.w_quantized, global);
  Shape shape = in_x.shape();
  shape.back() = a.N;
  return reshape(out, shape, st);
}

array gather_qqmm(const array& x, const array& w, const std::optional<array>& scales_w,
                  const std::optional<array>& lhs_indices, const std::optional<array>& rhs_indices,
                  std::optional<int> group_size, std::optional<int> bits, const std::string& mode,
                  const std::optional<array>& global_scale_x, const std::optional<array>& global_scale_w,
                  bool sorted_indices, StreamOrDevice s) {
  const char* op = "gather_qqmm";
  if (x.ndim() < 2 || w.ndim() < 2) fail(op, "x and w need at least 2 dimensions", {&x, &w});
  QqmmArgs a = check_qqmm(op, x, w, scales_w, group_size, bits, mode, global_scale_x, global_scale_w);
  for (const auto* idx : {&lhs_indices, &rhs_indices}) {
    if (*idx && (!is_integral((*idx)->dtype()) || (*idx)->dtype() == bool_)) {
      fail(op, "indices must be integers", {&x, &w, &**idx});
    }
  }
  Stream st = to_stream(s);
  const char* m = quant_mode_name(a.p.mode);
  auto product = [&](const array& xr, const array& wt, const std::optional<array>& sc) {
    if (sc) {
      return gather_qmm(xr, wt, *sc, std::nullopt, lhs_indices, rhs_indices, true, a.p.group_size, a.p.bits, m,
                        sorted_indices, st);
    }
    return gather_mm(xr, wt, lhs_indices, rhs_indices, sorted_indices, st);
  };
  return qqmm_definition(x, w, scales_w, a.p, global_scale_x, global_scale_w, st, product);
}

// ---- QuantizeDequantize's rules ----

constexpr const char* kNoDerivative =
    "[QuantizeDequantize] the rounding of qqmm's operands has no derivative (qqmm carries MLX's rule; gather_qqmm "
    "has none, as in MLX)";

bool QuantizeDequantize::is_equivalent(const Primitive& o) const {
  auto* q = dynamic_cast<const QuantizeDequantize*>(&o);
  return q && q->p_ == p_;
}
std::vector<Shape> QuantizeDequantize::output_shapes(const std::vector<array>& inputs) { return {inputs[0].shape()}; }
std::vector<array> QuantizeDequantize::vjp(const std::vector<array>&, const std::vector<array>&,
                                           const std::vector<int>&, const std::vector<array>&) {
  throw Error(kNoDerivative);
}
std::vector<array> QuantizeDequantize::jvp(const std::vector<array>&, const std::vector<array>&,
                                           const std::vector<int>&) {
  throw Error(kNoDerivative);
}
// Groups run along the last axis of each example: the mapped axis leads.
std::pair<std::vector<array>, std::vector<int>> QuantizeDequantize::vmap(const std::vector<array>& inputs,
                                                                         const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  if (axes.size() > 1 && axes[1] >= 0) throw Error("[qqmm] vmap over a global scale is not supported");
  std::optional<array> global;
  if (inputs.size() > 1) global = inputs[1];
  return {{round_operand(detail::move_axis(inputs[0], axes[0], 0), p_, global, stream())}, {0}};
}

}  // namespace kiln
