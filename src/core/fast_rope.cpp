// fast::rope: argument checks, the plain-op fallback that defines it, and
// the fused node where a kernel applies.
#include <cmath>
#include <sstream>

#include "core/ops_util.h"
#include "core/primitives_fast_norm.h"
#include "kiln/fast.h"
#include "kiln/ops.h"

namespace kiln {
namespace {

// x1, x2: the two members of each rotated pair; cos/sin of the angle.
// Backward rotates by minus the angle.
std::pair<array, array> rotate(const array& x1, const array& x2, const array& c, const array& sn, bool forward,
                               Stream s) {
  if (forward) {
    return {subtract(multiply(x1, c, s), multiply(x2, sn, s), s), add(multiply(x1, sn, s), multiply(x2, c, s), s)};
  }
  return {add(multiply(x1, c, s), multiply(x2, sn, s), s), subtract(multiply(x2, c, s), multiply(x1, sn, s), s)};
}

// The definition of rope in plain ops; inputs: x, offset (int32, 0-d or
// [B]), and optionally freqs (float32 [dims/2]). Angles are computed in
// float32 and cos/sin cast to x's dtype, as MLX's fallback does (float64
// inputs: in float64).
std::vector<array> rope_fallback(const std::vector<array>& in, int dims, bool traditional, float base, float scale,
                                 bool forward, Stream s) {
  const array& x0 = in[0];
  const Shape shape = x0.shape();
  // [B, N, T, D]: the axes between the batch and the positions are heads.
  array x = reshape(x0, {shape[0], -1, shape[shape.size() - 2], shape.back()}, s);
  const int B = x.shape(0), N = x.shape(1), T = x.shape(2), D = x.shape(3);
  const int half = dims / 2;
  array offset = in[1];
  offset = offset.size() > 1 ? reshape(offset, {B, 1, 1}, s) : reshape(offset, {}, s);
  const Dtype at = x.dtype() == float64 ? float64 : float32;  // the angles' type
  array positions = multiply(add(arange(0.0, static_cast<double>(T), at, s), offset, s), array(scale, at), s);
  array inv_freqs = in.size() == 3 ? divide(array(1.0, at), astype(in[2], at, s), s)
                                   : exp(multiply(arange(0.0, static_cast<double>(-half), -1.0, at, s),
                                                  array(std::log(static_cast<double>(base)) / half, at), s),
                                         s);
  array theta = multiply(expand_dims(positions, -1, s), inv_freqs, s);
  array c = astype(cos(theta, s), x.dtype(), s);
  array sn = astype(sin(theta, s), x.dtype(), s);
  array rotated = x;
  if (traditional) {
    array x1 = slice(x, {0, 0, 0, 0}, {B, N, T, dims}, {1, 1, 1, 2}, s);
    array x2 = slice(x, {0, 0, 0, 1}, {B, N, T, dims}, {1, 1, 1, 2}, s);
    auto [o1, o2] = rotate(x1, x2, c, sn, forward, s);
    rotated = reshape(stack({o1, o2}, -1, s), {B, N, T, dims}, s);
  } else {
    array x1 = slice(x, {0, 0, 0, 0}, {B, N, T, half}, s);
    array x2 = slice(x, {0, 0, 0, half}, {B, N, T, dims}, s);
    auto [o1, o2] = rotate(x1, x2, c, sn, forward, s);
    rotated = concatenate({o1, o2}, -1, s);
  }
  if (dims < D) rotated = concatenate({rotated, slice(x, {0, 0, 0, dims}, {B, N, T, D}, s)}, -1, s);
  return {reshape(rotated, shape, s)};
}

array rope_node(std::vector<array> inputs, int dims, bool traditional, float base, float scale, bool forward,
                Stream s) {
  FastFallback fallback = [=](const std::vector<array>& in) {
    return rope_fallback(in, dims, traditional, base, scale, forward, s);
  };
  const array& x = inputs[0];
  Dtype t = x.dtype();
  if (x.size() == 0 || !(t == float32 || t == float16 || t == bfloat16)) return fallback(inputs)[0];
  Shape shape = x.shape();
  return array(std::move(shape), t,
               std::make_shared<RoPE>(s, std::move(fallback), dims, traditional, base, scale, forward),
               std::move(inputs));
}

}  // namespace

namespace fast {

array rope(const array& x, int dims, bool traditional, std::optional<float> base, float scale, const array& offset,
           const std::optional<array>& freqs, StreamOrDevice s_) {
  const char* op = "rope";
  if (x.ndim() < 3) fail(op, "needs an input with at least 3 dimensions ([B, ..., T, D])", {&x});
  if (!is_floating_point(x.dtype())) fail(op, "needs a floating input", {&x});
  if (offset.ndim() > 1) fail(op, "offset must be a scalar or 1-d", {&x, &offset});
  if (offset.size() != 1 && offset.size() != static_cast<size_t>(x.shape(0))) {
    fail(op, "offset must be a scalar or have one entry per batch element (" + std::to_string(x.shape(0)) + ")",
         {&x, &offset});
  }
  if (!is_integral(offset.dtype()) || offset.dtype() == bool_) {
    fail(op, "offset must be an integer array", {&x, &offset});
  }
  if (dims <= 0 || dims % 2 != 0 || dims > x.shape(-1)) {
    fail(op, "dims must be positive, even and at most the last dimension of x; got " + std::to_string(dims), {&x});
  }
  if (freqs && base) fail(op, "takes base or freqs, not both", {&x, &*freqs});
  if (!freqs && !base) fail(op, "needs base or freqs", {&x});
  if (freqs && (freqs->ndim() != 1 || freqs->shape(0) != dims / 2)) {
    fail(op, "freqs must be 1-d with dims / 2 (" + std::to_string(dims / 2) + ") entries", {&x, &*freqs});
  }
  Stream s = to_stream(s_);
  // The kernels read offsets and freqs as contiguous arrays.
  std::vector<array> inputs = {x, contiguous(astype(offset, int32, s), s)};
  // float32 frequencies (the kernels' type); float64 ones for float64 x,
  // which takes the fallback.
  if (freqs) inputs.push_back(contiguous(astype(*freqs, x.dtype() == float64 ? float64 : float32, s), s));
  return rope_node(std::move(inputs), dims, traditional, base.value_or(1.0f), scale, true, s);
}

array rope(const array& x, int dims, bool traditional, std::optional<float> base, float scale, int offset,
           const std::optional<array>& freqs, StreamOrDevice s) {
  return rope(x, dims, traditional, base, scale, array(offset, int32), freqs, s);
}

}  // namespace fast

std::vector<array> RoPE::vjp(const std::vector<array>& primals, const std::vector<array>& cotangents,
                             const std::vector<int>& argnums, const std::vector<array>& outputs) {
  std::vector<array> out;
  for (int a : argnums) {
    if (a == 0) {
      std::vector<array> in = primals;
      in[0] = cotangents[0];
      out.push_back(rope_node(std::move(in), dims_, traditional_, base_, scale_, !forward_, stream()));
    } else if (a == 1) {
      out.push_back(zeros_like(primals[1]));
    } else {
      out.push_back(FastPrimitive::vjp(primals, cotangents, {a}, outputs)[0]);
    }
  }
  return out;
}

bool RoPE::is_equivalent(const Primitive& o) const {
  auto* p = dynamic_cast<const RoPE*>(&o);
  return p && p->dims_ == dims_ && p->traditional_ == traditional_ && p->base_ == base_ && p->scale_ == scale_ &&
         p->forward_ == forward_;
}

std::string RoPE::describe() const {
  std::ostringstream m;
  m << "RoPE(dims=" << dims_ << ", traditional=" << traditional_ << ", base=" << base_ << ", scale=" << scale_
    << (forward_ ? "" : ", inverse") << ")";
  return m.str();
}

}  // namespace kiln
