// fast::rms_norm and fast::layer_norm: argument checks, the plain-op
// fallback that defines each, and the fused node where a kernel applies.
#include <sstream>

#include "core/ops_util.h"
#include "core/primitives_fast_norm.h"
#include "kiln/fast.h"
#include "kiln/ops.h"

namespace kiln {
namespace fast {
namespace {

// The fused kernels cover the float types a model runs in; float64 (and
// empty arrays) take the fallback.
bool fused_applies(const array& x, Dtype out) {
  return x.size() > 0 && (out == float32 || out == float16 || out == bfloat16);
}

// float64 inputs are normalized in float64; everything else in float32.
Dtype norm_compute_dtype(Dtype out) { return out == float64 ? float64 : float32; }

void check_affine(const char* op, const char* what, const array& x, const array& p) {
  if (p.ndim() != 1 || p.shape(0) != x.shape(-1)) {
    fail(op, std::string(what) + " must be 1-d with the last dimension of x (" + std::to_string(x.shape(-1)) + ")",
         {&x, &p});
  }
}

void check_floating(const char* op, Dtype out, std::initializer_list<const array*> inputs) {
  if (!is_floating_point(out)) {
    fail(op, std::string("needs floating inputs; the result type would be ") + dtype_name(out), inputs);
  }
}

}  // namespace

array rms_norm(const array& x, const std::optional<array>& weight, float eps, StreamOrDevice s_) {
  const char* op = "rms_norm";
  if (x.ndim() == 0) fail(op, "needs an input with at least 1 dimension", {&x});
  if (weight) check_affine(op, "weight", x, *weight);
  const Dtype out = weight ? promote_types(x.dtype(), weight->dtype()) : x.dtype();
  if (weight) check_floating(op, out, {&x, &*weight});
  else check_floating(op, out, {&x});
  Stream s = to_stream(s_);
  const bool has_weight = weight.has_value();
  const Dtype ct = norm_compute_dtype(out);
  FastFallback fallback = [has_weight, eps, out, ct, s](const std::vector<array>& in) {
    array xf = astype(in[0], ct, s);
    array y = multiply(xf, rsqrt(add(mean(square(xf, s), -1, true, s), array(eps, ct), s), s), s);
    y = astype(y, out, s);
    if (has_weight) y = multiply(y, in[1], s);
    return std::vector<array>{y};
  };
  array w = has_weight ? contiguous(astype(*weight, out, s), s) : array(1, out);
  if (!fused_applies(x, out)) return fallback({x, w})[0];
  return array(x.shape(), out, std::make_shared<RMSNorm>(s, std::move(fallback), eps), {astype(x, out, s), w});
}

std::pair<array, array> add_rms_norm(const array& x, const array& residual, const std::optional<array>& weight,
                                     float eps, StreamOrDevice s_) {
  const char* op = "add_rms_norm";
  if (x.ndim() == 0) fail(op, "needs an input with at least 1 dimension", {&x, &residual});
  if (broadcast_shapes(x.shape(), residual.shape(), op, {&x, &residual}) != x.shape()) {
    fail(op, "the residual must broadcast to x's shape", {&x, &residual});
  }
  Stream s = to_stream(s_);
  if (weight) check_affine(op, "weight", x, *weight);
  const Dtype hd = promote_types(x.dtype(), residual.dtype());  // add's result type
  const Dtype out = weight ? promote_types(hd, weight->dtype()) : hd;
  if (weight) check_floating(op, out, {&x, &residual, &*weight});
  else check_floating(op, out, {&x, &residual});
  // The fused kernel: x, residual and weight of one float type and shape.
  if (!fused_applies(x, out) || hd != out || residual.shape() != x.shape()) {
    array h = add(x, residual, s);
    return {h, rms_norm(h, weight, eps, s)};
  }
  const bool has_weight = weight.has_value();
  FastFallback fallback = [has_weight, eps, s](const std::vector<array>& in) {
    array sum = add(in[0], in[1], s);
    std::optional<array> w;
    if (has_weight) w = in[2];
    return std::vector<array>{sum, rms_norm(sum, w, eps, s)};
  };
  array w = has_weight ? contiguous(astype(*weight, out, s), s) : array(1, out);
  auto outs = array::make_arrays({x.shape(), x.shape()}, {out, out},
                                 std::make_shared<AddRMSNorm>(s, std::move(fallback), eps),
                                 {astype(x, out, s), astype(residual, out, s), w});
  return {outs[0], outs[1]};
}

array layer_norm(const array& x, const std::optional<array>& weight, const std::optional<array>& bias, float eps,
                 StreamOrDevice s_) {
  const char* op = "layer_norm";
  if (x.ndim() == 0) fail(op, "needs an input with at least 1 dimension", {&x});
  if (weight) check_affine(op, "weight", x, *weight);
  if (bias) check_affine(op, "bias", x, *bias);
  Dtype out = x.dtype();
  if (weight) out = promote_types(out, weight->dtype());
  if (bias) out = promote_types(out, bias->dtype());
  if (weight && bias) check_floating(op, out, {&x, &*weight, &*bias});
  else if (weight) check_floating(op, out, {&x, &*weight});
  else if (bias) check_floating(op, out, {&x, &*bias});
  else check_floating(op, out, {&x});
  Stream s = to_stream(s_);
  const bool has_weight = weight.has_value(), has_bias = bias.has_value();
  const Dtype ct = norm_compute_dtype(out);
  FastFallback fallback = [has_weight, has_bias, eps, out, ct, s](const std::vector<array>& in) {
    array xf = astype(in[0], ct, s);
    array xc = subtract(xf, mean(xf, -1, true, s), s);
    array var = mean(square(xc, s), -1, true, s);
    array y = astype(multiply(xc, rsqrt(add(var, array(eps, ct), s), s), s), out, s);
    if (has_weight) y = multiply(y, in[1], s);
    if (has_bias) y = add(y, in[2], s);
    return std::vector<array>{y};
  };
  array w = has_weight ? contiguous(astype(*weight, out, s), s) : array(1, out);
  array b = has_bias ? contiguous(astype(*bias, out, s), s) : array(0, out);
  if (!fused_applies(x, out)) return fallback({x, w, b})[0];
  return array(x.shape(), out, std::make_shared<LayerNorm>(s, std::move(fallback), eps), {astype(x, out, s), w, b});
}

}  // namespace fast

bool RMSNorm::is_equivalent(const Primitive& o) const {
  auto* p = dynamic_cast<const RMSNorm*>(&o);
  return p && p->eps_ == eps_;
}
std::string RMSNorm::describe() const {
  std::ostringstream m;
  m << "RMSNorm(eps=" << eps_ << ")";
  return m.str();
}
bool AddRMSNorm::is_equivalent(const Primitive& o) const {
  auto* p = dynamic_cast<const AddRMSNorm*>(&o);
  return p && p->eps_ == eps_;
}
std::string AddRMSNorm::describe() const {
  std::ostringstream m;
  m << "AddRMSNorm(eps=" << eps_ << ")";
  return m.str();
}
bool LayerNorm::is_equivalent(const Primitive& o) const {
  auto* p = dynamic_cast<const LayerNorm*>(&o);
  return p && p->eps_ == eps_;
}
std::string LayerNorm::describe() const {
  std::ostringstream m;
  m << "LayerNorm(eps=" << eps_ << ")";
  return m.str();
}

}  // namespace kiln
