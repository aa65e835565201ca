// Convolutions (MLX's conv1d/2d/3d, conv_transpose1d/2d/3d, conv_general):
// argument checks, dtype promotion and the output shape; every form builds
// one Convolution node (core/primitives_conv.h). A transposed convolution is
// the convolution that computes the gradient of the forward one with
// respect to its input: the input dilated by the stride, padded by
// dilation * (K - 1) - padding, and the kernel flipped.
#include <cstdint>
#include <string>

#include "core/ops_util.h"
#include "core/primitives_conv.h"
#include "kiln/ops.h"

namespace kiln {

namespace {

std::string list(const std::vector<int>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(v[i]);
  }
  return s + ")";
}

// One entry per spatial axis: an empty vector gives `fallback` everywhere,
// a single entry is repeated.
std::vector<int> per_axis(const char* op, const char* what, std::vector<int> v, int spatial, int fallback,
                          const array& x, const array& w) {
  if (v.empty()) return std::vector<int>(spatial, fallback);
  if (v.size() == 1) return std::vector<int>(spatial, v[0]);
  if (static_cast<int>(v.size()) != spatial) {
    fail(op, std::string(what) + " " + list(v) + " needs 1 or " + std::to_string(spatial) + " entries for a " +
                 std::to_string(spatial) + "-d convolution",
         {&x, &w});
  }
  return v;
}

void check_positive(const char* op, const char* what, const std::vector<int>& v, const array& x, const array& w) {
  for (int e : v) {
    if (e <= 0) fail(op, std::string(what) + " must be positive, got " + list(v), {&x, &w});
  }
}

// Checks ranks, dtypes and channels; returns the number of spatial axes.
int check_operands(const char* op, const array& x, const array& w, int groups, int expected_spatial) {
  int spatial = static_cast<int>(x.ndim()) - 2;
  if (expected_spatial > 0 && spatial != expected_spatial) {
    fail(op, "the input must have " + std::to_string(expected_spatial + 2) + " dimensions [N, " +
                 (expected_spatial == 1 ? "W" : expected_spatial == 2 ? "H, W" : "D, H, W") + ", C_in], got " +
                 std::to_string(x.ndim()),
         {&x, &w});
  }
  if (spatial < 1 || spatial > 3) {
    fail(op, "the input must be [N, spatial.., C_in] with 1 to 3 spatial dimensions, got " +
                 std::to_string(x.ndim()) + " dimensions",
         {&x, &w});
  }
  if (w.ndim() != x.ndim()) {
    fail(op, "the weight must be [C_out, kernel.., C_in / groups] with " + std::to_string(x.ndim()) +
                 " dimensions like the input, got " + std::to_string(w.ndim()),
         {&x, &w});
  }
  if (!is_floating_point(x.dtype()) || !is_floating_point(promote_types(x.dtype(), w.dtype()))) {
    fail(op, "needs floating-point operands", {&x, &w});
  }
  if (groups < 1) fail(op, "groups must be positive, got " + std::to_string(groups), {&x, &w});
  int c_in = x.shape().back();
  if (c_in % groups != 0) {
    fail(op, "the input channels (" + std::to_string(c_in) + ") must be divisible by groups (" +
                 std::to_string(groups) + ")",
         {&x, &w});
  }
  if (w.shape(0) % groups != 0) {
    fail(op, "the output channels (" + std::to_string(w.shape(0)) + ") must be divisible by groups (" +
                 std::to_string(groups) + ")",
         {&x, &w});
  }
  if (w.shape().back() * groups != c_in) {
    fail(op, "the weight's input channels (" + std::to_string(w.shape().back()) + ") times groups (" +
                 std::to_string(groups) + ") must equal the input's channels (" + std::to_string(c_in) + ")",
         {&x, &w});
  }
  return spatial;
}

array conv_impl(const char* op, array x, array w, std::vector<int> stride, std::vector<int> padding_lo,
                std::vector<int> padding_hi, std::vector<int> kernel_dilation, std::vector<int> input_dilation,
                int groups, bool flip, int expected_spatial, StreamOrDevice s) {
  int spatial = check_operands(op, x, w, groups, expected_spatial);
  stride = per_axis(op, "stride", std::move(stride), spatial, 1, x, w);
  padding_lo = per_axis(op, "padding", std::move(padding_lo), spatial, 0, x, w);
  padding_hi = per_axis(op, "padding", std::move(padding_hi), spatial, 0, x, w);
  kernel_dilation = per_axis(op, "kernel dilation", std::move(kernel_dilation), spatial, 1, x, w);
  input_dilation = per_axis(op, "input dilation", std::move(input_dilation), spatial, 1, x, w);
  check_positive(op, "stride", stride, x, w);
  check_positive(op, "kernel dilation", kernel_dilation, x, w);
  check_positive(op, "input dilation", input_dilation, x, w);
  detail::conv_output_shape(op, x, w, stride, padding_lo, padding_hi, kernel_dilation, input_dilation);
  Stream st = to_stream(s);
  Dtype t = promote_types(x.dtype(), w.dtype());
  return detail::conv_node(astype(x, t, st), astype(w, t, st), stride, padding_lo, padding_hi, kernel_dilation,
                           input_dilation, groups, flip, st);
}

array conv_transpose_impl(const char* op, const array& x, const array& w, std::vector<int> stride,
                          std::vector<int> padding, std::vector<int> dilation, std::vector<int> output_padding,
                          int groups, StreamOrDevice s) {
  int spatial = static_cast<int>(stride.size());
  check_operands(op, x, w, groups, spatial);
  check_positive(op, "stride", stride, x, w);
  check_positive(op, "dilation", dilation, x, w);
  std::vector<int> lo(spatial), hi(spatial);
  for (int d = 0; d < spatial; ++d) {
    int64_t span = static_cast<int64_t>(dilation[d]) * (w.shape(1 + d) - 1);
    lo[d] = static_cast<int>(span - padding[d]);
    hi[d] = static_cast<int>(span - padding[d] + output_padding[d]);
  }
  return conv_impl(op, x, w, std::vector<int>(spatial, 1), lo, hi, dilation, stride, groups, true, spatial, s);
}

}  // namespace

namespace detail {

Shape conv_output_shape(const char* op, const array& x, const array& w, const std::vector<int>& stride,
                        const std::vector<int>& padding_lo, const std::vector<int>& padding_hi,
                        const std::vector<int>& kernel_dilation, const std::vector<int>& input_dilation) {
  int spatial = static_cast<int>(x.ndim()) - 2;
  Shape out(x.ndim());
  out[0] = x.shape(0);
  out.back() = w.shape(0);
  for (int d = 0; d < spatial; ++d) {
    int64_t in = (static_cast<int64_t>(x.shape(1 + d)) - 1) * input_dilation[d] + 1;
    int64_t k = (static_cast<int64_t>(w.shape(1 + d)) - 1) * kernel_dilation[d] + 1;
    int64_t span = in + padding_lo[d] + padding_hi[d] - k;
    if (x.shape(1 + d) == 0 || w.shape(1 + d) == 0 || span < 0) {
      fail(op, "spatial axis " + std::to_string(d) + ": the input (" + std::to_string(x.shape(1 + d)) +
                   ", dilated " + std::to_string(in) + ", padded " + list(padding_lo) + " / " + list(padding_hi) +
                   ") is smaller than the dilated kernel (" + std::to_string(k) + "): no output",
           {&x, &w});
    }
    int64_t n = span / stride[d] + 1;
    if (n > INT32_MAX) fail(op, "spatial output size " + std::to_string(n) + " is too large", {&x, &w});
    out[1 + d] = static_cast<int>(n);
  }
  return out;
}

array conv_node(const array& x, const array& w, const std::vector<int>& stride, const std::vector<int>& padding_lo,
                const std::vector<int>& padding_hi, const std::vector<int>& kernel_dilation,
                const std::vector<int>& input_dilation, int groups, bool flip, Stream s) {
  Shape shape = conv_output_shape("conv", x, w, stride, padding_lo, padding_hi, kernel_dilation, input_dilation);
  return make_node<Convolution>(std::move(shape), x.dtype(), {x, w}, s, stride, padding_lo, padding_hi,
                                kernel_dilation, input_dilation, groups, flip);
}

}  // namespace detail

array conv1d(const array& input, const array& weight, int stride, int padding, int dilation, int groups,
             StreamOrDevice s) {
  return conv_impl("conv1d", input, weight, {stride}, {padding}, {padding}, {dilation}, {1}, groups, false, 1, s);
}

array conv2d(const array& input, const array& weight, const std::pair<int, int>& stride,
             const std::pair<int, int>& padding, const std::pair<int, int>& dilation, int groups, StreamOrDevice s) {
  return conv_impl("conv2d", input, weight, {stride.first, stride.second}, {padding.first, padding.second},
                   {padding.first, padding.second}, {dilation.first, dilation.second}, {1, 1}, groups, false, 2, s);
}

array conv3d(const array& input, const array& weight, const std::tuple<int, int, int>& stride,
             const std::tuple<int, int, int>& padding, const std::tuple<int, int, int>& dilation, int groups,
             StreamOrDevice s) {
  auto v = [](const std::tuple<int, int, int>& t) {
    return std::vector<int>{std::get<0>(t), std::get<1>(t), std::get<2>(t)};
  };
  return conv_impl("conv3d", input, weight, v(stride), v(padding), v(padding), v(dilation), {1, 1, 1}, groups, false,
                   3, s);
}

array conv_transpose1d(const array& input, const array& weight, int stride, int padding, int dilation,
                       int output_padding, int groups, StreamOrDevice s) {
  return conv_transpose_impl("conv_transpose1d", input, weight, {stride}, {padding}, {dilation}, {output_padding},
                             groups, s);
}

array conv_transpose2d(const array& input, const array& weight, const std::pair<int, int>& stride,
                       const std::pair<int, int>& padding, const std::pair<int, int>& dilation,
                       const std::pair<int, int>& output_padding, int groups, StreamOrDevice s) {
  return conv_transpose_impl("conv_transpose2d", input, weight, {stride.first, stride.second},
                             {padding.first, padding.second}, {dilation.first, dilation.second},
                             {output_padding.first, output_padding.second}, groups, s);
}

array conv_transpose3d(const array& input, const array& weight, const std::tuple<int, int, int>& stride,
                       const std::tuple<int, int, int>& padding, const std::tuple<int, int, int>& dilation,
                       const std::tuple<int, int, int>& output_padding, int groups, StreamOrDevice s) {
  auto v = [](const std::tuple<int, int, int>& t) {
    return std::vector<int>{std::get<0>(t), std::get<1>(t), std::get<2>(t)};
  };
  return conv_transpose_impl("conv_transpose3d", input, weight, v(stride), v(padding), v(dilation),
                             v(output_padding), groups, s);
}

array conv_general(array input, array weight, std::vector<int> stride, std::vector<int> padding_lo,
                   std::vector<int> padding_hi, std::vector<int> kernel_dilation, std::vector<int> input_dilation,
                   int groups, bool flip, StreamOrDevice s) {
  return conv_impl("conv_general", input, weight, std::move(stride), std::move(padding_lo), std::move(padding_hi),
                   std::move(kernel_dilation), std::move(input_dilation), groups, flip, 0, s);
}

}  // namespace kiln
