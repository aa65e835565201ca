// complex64's own ops: real and imag (views of every other float of the
// complex buffer, on any backend) and their rules. Cotangents of complex
// values follow MLX: the cotangent of z = a + ib is dL/da + i dL/db, so a
// vjp multiplies by the conjugate of the derivative (rules_elementwise.cpp).
#include "core/array_desc.h"
#include "core/ops_util.h"
#include "core/primitives.h"
#include "core/transform_util.h"
#include "kiln/ops.h"

namespace kiln {
namespace {

// out (float32) reads part `part` (0 real, 1 imaginary) of in (complex64).
void complex_part_view(const array& in, array& out, int part) {
  const auto& d = *in.desc();
  Strides st(d.strides.size());
  for (size_t i = 0; i < st.size(); ++i) st[i] = d.strides[i] * 2;
  detail::share_buffer(out, in, std::move(st), d.offset * 2 + part);
}

}  // namespace

array real(const array& a, StreamOrDevice s) {
  if (!is_complex(a.dtype())) return a;
  return make_node<Real>(a.shape(), float32, {a}, to_stream(s));
}

array imag(const array& a, StreamOrDevice s) {
  if (!is_complex(a.dtype())) return zeros_like(a, s);
  return make_node<Imag>(a.shape(), float32, {a}, to_stream(s));
}

void Real::eval_cpu(const std::vector<array>& inputs, array& out) { complex_part_view(inputs[0], out, 0); }
void Real::eval_gpu(const std::vector<array>& inputs, array& out) { complex_part_view(inputs[0], out, 0); }
void Imag::eval_cpu(const std::vector<array>& inputs, array& out) { complex_part_view(inputs[0], out, 1); }
void Imag::eval_gpu(const std::vector<array>& inputs, array& out) { complex_part_view(inputs[0], out, 1); }

std::vector<array> Real::vjp(const std::vector<array>&, const std::vector<array>& cot, const std::vector<int>&,
                             const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  return {astype(cot[0], complex64)};
}
std::vector<array> Real::jvp(const std::vector<array>&, const std::vector<array>& tan, const std::vector<int>&) {
  detail::RuleStreamScope scope(stream());
  return {real(tan[0])};
}
std::pair<std::vector<array>, std::vector<int>> Real::vmap(const std::vector<array>& inputs,
                                                           const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  return {{real(inputs[0])}, {axes[0]}};
}
std::vector<Shape> Real::output_shapes(const std::vector<array>& inputs) { return {inputs[0].shape()}; }

// d imag(z) = imag(dz): the cotangent u of the output comes back as i u.
std::vector<array> Imag::vjp(const std::vector<array>&, const std::vector<array>& cot, const std::vector<int>&,
                             const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  return {multiply(array(complex64_t(0.0f, 1.0f)), cot[0])};
}
std::vector<array> Imag::jvp(const std::vector<array>&, const std::vector<array>& tan, const std::vector<int>&) {
  detail::RuleStreamScope scope(stream());
  return {imag(tan[0])};
}
std::pair<std::vector<array>, std::vector<int>> Imag::vmap(const std::vector<array>& inputs,
                                                           const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  return {{imag(inputs[0])}, {axes[0]}};
}
std::vector<Shape> Imag::output_shapes(const std::vector<array>& inputs) { return {inputs[0].shape()}; }

}  // namespace kiln
