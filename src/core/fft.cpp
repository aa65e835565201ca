// kiln::fft (include/kiln/fft.h): argument checks, padding or truncation to
// n, the norm's scale, and the rules of the one FFT primitive. The
// transforms are linear: jvp is the transform of the tangent and vjp its
// adjoint (MLX's complex cotangent convention, see ops_complex.cpp), built
// from the same primitive.
#include "kiln/fft.h"

#include <cmath>
#include <numeric>
#include <set>
#include <string>

#include "core/ops_util.h"
#include "core/primitives.h"
#include "core/transform_util.h"
#include "kiln/ops.h"

namespace kiln::fft {
namespace {

std::string format_ints(const std::vector<int>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + ")";
}

double scale_factor(const Shape& n, FFTNorm norm, bool inverse) {
  double total = std::accumulate(n.begin(), n.end(), 1.0, [](double a, int b) { return a * b; });
  switch (norm) {
    case FFTNorm::Backward: return 1.0;
    case FFTNorm::Ortho: return inverse ? std::sqrt(total) : 1.0 / std::sqrt(total);
    case FFTNorm::Forward: return inverse ? total : 1.0 / total;
  }
  return 1.0;
}

// The transform of `a` over normalized axes, `a` already of the shape the
// transform reads; n: the real axis length for real transforms.
array apply_fft(const array& a, const std::vector<int>& axes, bool inverse, bool real, int n, Stream st) {
  Shape out_shape = a.shape();
  if (real) out_shape[axes.back()] = inverse ? n : n / 2 + 1;
  Dtype in_type = real && !inverse ? float32 : complex64;
  Dtype out_type = real && inverse ? float32 : complex64;
  return make_node<FFT>(out_shape, out_type, {astype(a, in_type, st)}, st, axes, inverse, real, real ? n : 0);
}

array fft_impl(const char* op, const array& a, Shape n, const std::vector<int>& axes_in, bool real, bool inverse,
               FFTNorm norm, StreamOrDevice s) {
  if (a.ndim() < 1) fail(op, "needs an array with at least one dimension", {&a});
  if (n.size() != axes_in.size()) {
    fail(op, "got " + std::to_string(n.size()) + " sizes " + format_ints(n) + " for " + std::to_string(axes_in.size()) +
                 " axes " + format_ints(axes_in),
         {&a});
  }
  if (axes_in.empty()) return a;
  std::vector<int> axes;
  for (int ax : axes_in) {
    int v = ax < 0 ? ax + a.ndim() : ax;
    if (v < 0 || v >= a.ndim()) {
      fail(op, "axis " + std::to_string(ax) + " is out of range for " + std::to_string(a.ndim()) + " dimensions", {&a});
    }
    axes.push_back(v);
  }
  if (std::set<int>(axes.begin(), axes.end()).size() != axes.size()) fail(op, "repeated axes " + format_ints(axes_in), {&a});
  for (int k : n) {
    if (k <= 0) fail(op, "invalid number of points " + format_ints(n) + " (each must be positive)", {&a});
  }
  Stream st = to_stream(s);
  Shape in_shape = a.shape();
  for (size_t i = 0; i < axes.size(); ++i) in_shape[axes[i]] = n[i];
  if (real && inverse) in_shape[axes.back()] = n.back() / 2 + 1;
  // Truncate, then zero-pad, to the shape the transform reads.
  array in = a;
  Shape stop = a.shape();
  bool truncate = false, grow = false;
  std::vector<std::pair<int, int>> widths(a.ndim(), {0, 0});
  for (int d = 0; d < a.ndim(); ++d) {
    if (in_shape[d] < a.shape(d)) stop[d] = in_shape[d], truncate = true;
    if (in_shape[d] > a.shape(d)) widths[d].second = in_shape[d] - a.shape(d), grow = true;
  }
  if (truncate) in = slice(in, Shape(a.ndim(), 0), stop, st);
  if (grow) in = pad(in, widths, array(0, in.dtype()), st);
  array out = apply_fft(in, axes, inverse, real, real ? n.back() : 0, st);
  double scale = scale_factor(n, norm, inverse);
  return scale == 1.0 ? out : multiply(out, array(scale, out.dtype()), st);
}

// The default sizes: the input's along the axes (irfft: 2 * (m - 1)).
array fft_default(const char* op, const array& a, const std::vector<int>& axes, bool real, bool inverse, FFTNorm norm,
                  StreamOrDevice s) {
  if (a.ndim() < 1) fail(op, "needs an array with at least one dimension", {&a});
  Shape n;
  for (int ax : axes) {
    int v = ax < 0 ? ax + a.ndim() : ax;
    if (v < 0 || v >= a.ndim()) {
      fail(op, "axis " + std::to_string(ax) + " is out of range for " + std::to_string(a.ndim()) + " dimensions", {&a});
    }
    n.push_back(a.shape(v));
  }
  if (real && inverse && !n.empty()) n.back() = (n.back() - 1) * 2;
  return fft_impl(op, a, n, axes, real, inverse, norm, s);
}

std::vector<int> all_axes(const array& a) {
  std::vector<int> v(a.ndim());
  std::iota(v.begin(), v.end(), 0);
  return v;
}

array shift_impl(const char* op, const array& a, const std::vector<int>& axes, bool inverse, StreamOrDevice s) {
  if (axes.empty()) return a;
  Shape shifts;
  std::vector<int> norm_axes;
  for (int ax : axes) {
    int v = ax < 0 ? ax + a.ndim() : ax;
    if (v < 0 || v >= a.ndim()) {
      fail(op, "axis " + std::to_string(ax) + " is out of range for " + std::to_string(a.ndim()) + " dimensions", {&a});
    }
    int k = a.shape(v) / 2;
    shifts.push_back(inverse ? -k : k);
    norm_axes.push_back(v);
  }
  return roll(a, shifts, norm_axes, s);
}

}  // namespace

array fftn(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  return fft_impl("fftn", a, n, axes, false, false, norm, s);
}
array fftn(const array& a, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  return fft_default("fftn", a, axes, false, false, norm, s);
}
array fftn(const array& a, FFTNorm norm, StreamOrDevice s) { return fft_default("fftn", a, all_axes(a), false, false, norm, s); }
array ifftn(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  return fft_impl("ifftn", a, n, axes, false, true, norm, s);
}
array ifftn(const array& a, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  return fft_default("ifftn", a, axes, false, true, norm, s);
}
array ifftn(const array& a, FFTNorm norm, StreamOrDevice s) { return fft_default("ifftn", a, all_axes(a), false, true, norm, s); }

array fft(const array& a, int n, int axis, FFTNorm norm, StreamOrDevice s) {
  return fft_impl("fft", a, {n}, {axis}, false, false, norm, s);
}
array fft(const array& a, int axis, FFTNorm norm, StreamOrDevice s) { return fft_default("fft", a, {axis}, false, false, norm, s); }
array ifft(const array& a, int n, int axis, FFTNorm norm, StreamOrDevice s) {
  return fft_impl("ifft", a, {n}, {axis}, false, true, norm, s);
}
array ifft(const array& a, int axis, FFTNorm norm, StreamOrDevice s) { return fft_default("ifft", a, {axis}, false, true, norm, s); }

array fft2(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  return fft_impl("fft2", a, n, axes, false, false, norm, s);
}
array fft2(const array& a, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  return fft_default("fft2", a, axes, false, false, norm, s);
}
array ifft2(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  return fft_impl("ifft2", a, n, axes, false, true, norm, s);
}
array ifft2(const array& a, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  return fft_default("ifft2", a, axes, false, true, norm, s);
}

array rfftn(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  return fft_impl("rfftn", a, n, axes, true, false, norm, s);
}
array rfftn(const array& a, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  return fft_default("rfftn", a, axes, true, false, norm, s);
}
array rfftn(const array& a, FFTNorm norm, StreamOrDevice s) { return fft_default("rfftn", a, all_axes(a), true, false, norm, s); }
array irfftn(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  return fft_impl("irfftn", a, n, axes, true, true, norm, s);
}
array irfftn(const array& a, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  return fft_default("irfftn", a, axes, true, true, norm, s);
}
array irfftn(const array& a, FFTNorm norm, StreamOrDevice s) { return fft_default("irfftn", a, all_axes(a), true, true, norm, s); }

array rfft(const array& a, int n, int axis, FFTNorm norm, StreamOrDevice s) {
  return fft_impl("rfft", a, {n}, {axis}, true, false, norm, s);
}
array rfft(const array& a, int axis, FFTNorm norm, StreamOrDevice s) { return fft_default("rfft", a, {axis}, true, false, norm, s); }
array irfft(const array& a, int n, int axis, FFTNorm norm, StreamOrDevice s) {
  return fft_impl("irfft", a, {n}, {axis}, true, true, norm, s);
}
array irfft(const array& a, int axis, FFTNorm norm, StreamOrDevice s) { return fft_default("irfft", a, {axis}, true, true, norm, s); }

array rfft2(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  return fft_impl("rfft2", a, n, axes, true, false, norm, s);
}
array rfft2(const array& a, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  return fft_default("rfft2", a, axes, true, false, norm, s);
}
array irfft2(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  return fft_impl("irfft2", a, n, axes, true, true, norm, s);
}
array irfft2(const array& a, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  return fft_default("irfft2", a, axes, true, true, norm, s);
}

array fftfreq(int n, double d, StreamOrDevice s) {
  if (n <= 0) throw Error("[fftfreq] n must be positive, got " + std::to_string(n));
  if (d == 0.0) throw Error("[fftfreq] the sample spacing d must be non-zero");
  Stream st = to_stream(s);
  array k = concatenate({arange(0, (n + 1) / 2, st), arange(-(n / 2), 0, st)}, 0, st);
  return multiply(astype(k, float32, st), array(static_cast<float>(1.0 / (n * d))), st);
}
array rfftfreq(int n, double d, StreamOrDevice s) {
  if (n <= 0) throw Error("[rfftfreq] n must be positive, got " + std::to_string(n));
  if (d == 0.0) throw Error("[rfftfreq] the sample spacing d must be non-zero");
  Stream st = to_stream(s);
  return multiply(astype(arange(0, n / 2 + 1, st), float32, st), array(static_cast<float>(1.0 / (n * d))), st);
}

array fftshift(const array& a, const std::vector<int>& axes, StreamOrDevice s) {
  return shift_impl("fftshift", a, axes, false, s);
}
array fftshift(const array& a, StreamOrDevice s) { return shift_impl("fftshift", a, all_axes(a), false, s); }
array ifftshift(const array& a, const std::vector<int>& axes, StreamOrDevice s) {
  return shift_impl("ifftshift", a, axes, true, s);
}
array ifftshift(const array& a, StreamOrDevice s) { return shift_impl("ifftshift", a, all_axes(a), true, s); }

}  // namespace kiln::fft

namespace kiln {

bool FFT::is_equivalent(const Primitive& o) const {
  auto* f = dynamic_cast<const FFT*>(&o);
  return f && f->axes_ == axes_ && f->inverse_ == inverse_ && f->real_ == real_ && f->n_ == n_;
}

std::vector<Shape> FFT::output_shapes(const std::vector<array>& inputs) {
  Shape s = inputs[0].shape();
  if (real_) s[axes_.back()] = inverse_ ? n_ : n_ / 2 + 1;
  return {s};
}

std::vector<array> FFT::jvp(const std::vector<array>&, const std::vector<array>& tan, const std::vector<int>&) {
  detail::RuleStreamScope scope(stream());
  return {fft::apply_fft(tan[0], axes_, inverse_, real_, n_, stream())};
}

// The adjoint of each transform, with N the number of points over the axes:
// fft -> N ifft; ifft -> fft / N; rfft -> N irfft of the cotangent with its
// bins other than DC and Nyquist halved (they stand for two conjugate bins
// of the full spectrum); irfft -> rfft / N with those bins doubled.
std::vector<array> FFT::vjp(const std::vector<array>& primals, const std::vector<array>& cot, const std::vector<int>&,
                            const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  const array& x = primals[0];
  const array& c = cot[0];
  const Shape& spatial = inverse_ ? c.shape() : x.shape();  // the time-domain side
  double total = 1.0;
  for (int ax : axes_) total *= spatial[ax];
  if (!real_) {
    array t = fft::apply_fft(c, axes_, !inverse_, false, 0, stream());
    return {multiply(t, array(inverse_ ? 1.0 / total : total, complex64))};
  }
  // A mask over the bins of the real axis: `edge` at DC and Nyquist, `middle` elsewhere.
  int bins = n_ / 2 + 1;
  Shape mshape(x.ndim(), 1);
  mshape[axes_.back()] = bins;
  array k = reshape(arange(0, bins), mshape);
  int nyquist = n_ % 2 == 0 ? n_ / 2 : -1;
  array is_edge = logical_or(equal(k, array(0)), equal(k, array(nyquist)));
  if (!inverse_) {
    array mask = where(is_edge, array(1.0f), array(0.5f));
    array t = fft::apply_fft(multiply(c, mask), axes_, true, true, n_, stream());
    return {multiply(t, array(static_cast<float>(total)))};
  }
  array mask = where(is_edge, array(static_cast<float>(1.0 / total)), array(static_cast<float>(2.0 / total)));
  return {multiply(fft::apply_fft(c, axes_, false, true, n_, stream()), mask)};
}

std::pair<std::vector<array>, std::vector<int>> FFT::vmap(const std::vector<array>& inputs, const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  int b = axes[0];
  std::vector<int> shifted = axes_;
  if (b >= 0) {
    for (int& ax : shifted) ax += ax >= b ? 1 : 0;
  }
  return {{fft::apply_fft(inputs[0], shifted, inverse_, real_, n_, stream())}, {b}};
}

}  // namespace kiln
