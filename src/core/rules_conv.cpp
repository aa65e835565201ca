// Transformation rules of Convolution. A convolution is linear in each
// operand, and both of its derivatives are convolutions again:
//   - the input's cotangent convolves the output's cotangent (dilated by the
//     stride) with the kernel flipped and its channels swapped within each
//     group: the forward's input dilation becomes the stride, the forward's
//     stride the input dilation, and the padding makes the result exactly
//     the input's size;
//   - the weight's cotangent correlates the input with the output's
//     cotangent used as a kernel, with the batch axis as the reduction
//     (channel) axis: the forward's kernel dilation becomes the stride and
//     the forward's stride the kernel dilation.
// With I' = (I - 1) * input_dilation + 1, K' = (K - 1) * kernel_dilation + 1
// and G' = (P - 1) * stride + 1 (the dilated sizes of input, kernel and
// output) the paddings below follow from the output sizes; they can be
// negative, which the primitive supports.
#include <numeric>
#include <optional>

#include "core/ops_util.h"
#include "core/primitives_conv.h"
#include "core/transform_util.h"
#include "kiln/ops.h"

namespace kiln {

namespace {

int64_t dilated(int size, int dilation) { return (static_cast<int64_t>(size) - 1) * dilation + 1; }

// w [O, K.., Cg] -> [C, K.., Og]: within each group, input and output
// channels trade places.
array swap_weight_channels(const array& w, int groups) {
  int nd = static_cast<int>(w.ndim());
  Shape s = w.shape();
  int O = s[0], Cg = s.back();
  Shape split = s;
  split[0] = O / groups;
  split.insert(split.begin(), groups);  // [G, Og, K.., Cg]
  array r = swapaxes(reshape(w, split), 1, nd);
  Shape out = s;
  out[0] = groups * Cg;
  out.back() = O / groups;
  return reshape(r, out);
}

// x [N, S.., C] -> [Cg, S.., G * N]: the batch becomes the channels (of
// each group), a group's input channels the batch.
array batch_to_channels(const array& x, int groups) {
  int nd = static_cast<int>(x.ndim());
  Shape s = x.shape();
  int N = s[0], C = s.back();
  Shape split(s.begin(), s.end() - 1);
  split.push_back(groups);
  split.push_back(C / groups);  // [N, S.., G, Cg]
  std::vector<int> axes{nd};
  for (int d = 1; d < nd - 1; ++d) axes.push_back(d);
  axes.push_back(nd - 1);
  axes.push_back(0);  // [Cg, S.., G, N]
  Shape out{C / groups};
  out.insert(out.end(), s.begin() + 1, s.end() - 1);
  out.push_back(groups * N);
  return reshape(transpose(reshape(x, split), axes), out);
}

}  // namespace

std::vector<array> Convolution::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                                    const std::vector<int>& argnums, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  const array& x = primals[0];
  const array& w = primals[1];
  const array& g = cot[0];
  const int spatial = static_cast<int>(x.ndim()) - 2;
  std::vector<array> out;
  for (int a : argnums) {
    std::vector<int> lo(spatial), hi(spatial);
    if (a == 0) {
      for (int d = 0; d < spatial; ++d) {
        int64_t in = dilated(x.shape(1 + d), input_dilation_[d]);
        int64_t k = dilated(w.shape(1 + d), kernel_dilation_[d]);
        int64_t o = dilated(g.shape(1 + d), stride_[d]);
        lo[d] = static_cast<int>(k - 1 - padding_lo_[d]);
        hi[d] = static_cast<int>(in + padding_lo_[d] - o);
      }
      out.push_back(detail::conv_node(g, swap_weight_channels(w, groups_), input_dilation_, lo, hi,
                                      kernel_dilation_, stride_, groups_, !flip_, stream()));
    } else {
      for (int d = 0; d < spatial; ++d) {
        int64_t in = dilated(x.shape(1 + d), input_dilation_[d]);
        int64_t k = dilated(w.shape(1 + d), kernel_dilation_[d]);
        int64_t o = dilated(g.shape(1 + d), stride_[d]);
        lo[d] = padding_lo_[d];
        hi[d] = static_cast<int>(k + o - 1 - in - padding_lo_[d]);
      }
      // [Cg, K.., O], taps in the order of the unflipped kernel.
      array r = detail::conv_node(batch_to_channels(x, groups_), swapaxes(g, 0, -1), kernel_dilation_, lo, hi,
                                  stride_, input_dilation_, groups_, false, stream());
      if (flip_) {
        std::vector<int> axes(spatial);
        std::iota(axes.begin(), axes.end(), 1);
        r = kiln::flip(r, axes);
      }
      out.push_back(swapaxes(r, 0, -1));
    }
  }
  return out;
}

std::vector<array> Convolution::jvp(const std::vector<array>& primals, const std::vector<array>& tan,
                                    const std::vector<int>& argnums) {
  detail::RuleStreamScope scope(stream());
  auto conv = [&](const array& x, const array& w) {
    return detail::conv_node(x, w, stride_, padding_lo_, padding_hi_, kernel_dilation_, input_dilation_, groups_,
                             flip_, stream());
  };
  std::optional<array> sum;
  for (size_t i = 0; i < argnums.size(); ++i) {
    array term = argnums[i] == 0 ? conv(tan[i], primals[1]) : conv(primals[0], tan[i]);
    sum = sum ? add(*sum, term) : term;
  }
  return {*sum};
}

std::pair<std::vector<array>, std::vector<int>> Convolution::vmap(const std::vector<array>& inputs,
                                                                  const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  const int B = detail::batch_size(inputs, axes);
  auto conv = [&](const array& x, const array& w, int groups) {
    return detail::conv_node(x, w, stride_, padding_lo_, padding_hi_, kernel_dilation_, input_dilation_, groups,
                             flip_, stream());
  };
  if (axes[0] < 0 && axes[1] < 0) return {{conv(inputs[0], inputs[1], groups_)}, {-1}};
  if (axes[1] < 0) {
    // The batch joins N.
    array x = detail::move_axis(inputs[0], axes[0], 0);
    array out = conv(flatten(x, 0, 1), inputs[1], groups_);
    return {{unflatten(out, 0, {B, x.shape(1)})}, {0}};
  }
  array w = detail::move_axis(inputs[1], axes[1], 0);  // [B, O, K.., Cg]
  const int O = w.shape(1), Og = O / groups_;
  if (axes[0] < 0) {
    // The batch joins the output channels, inside each group: [G, B, Og].
    Shape split = w.shape();
    split[1] = Og;
    split.insert(split.begin() + 1, groups_);  // [B, G, Og, K.., Cg]
    array wg = flatten(swapaxes(reshape(w, split), 0, 1), 0, 2);
    array out = conv(inputs[0], wg, groups_);  // [N, P.., G * B * Og]
    out = swapaxes(unflatten(out, -1, {groups_, B, Og}), -3, -2);
    return {{flatten(out, -2, -1)}, {static_cast<int>(out.ndim()) - 3}};
  }
  // Both batched: each batch entry is a group of its own (times groups).
  array x = detail::move_axis(inputs[0], axes[0], static_cast<int>(inputs[0].ndim()) - 2);  // [N, S.., B, C]
  array out = conv(flatten(x, -2, -1), flatten(w, 0, 1), groups_ * B);
  out = unflatten(out, -1, {B, O});
  return {{out}, {static_cast<int>(out.ndim()) - 2}};
}

std::vector<Shape> Convolution::output_shapes(const std::vector<array>& inputs) {
  return {detail::conv_output_shape("conv", inputs[0], inputs[1], stride_, padding_lo_, padding_hi_,
                                    kernel_dilation_, input_dilation_)};
}

bool Convolution::is_equivalent(const Primitive& o) const {
  auto* p = dynamic_cast<const Convolution*>(&o);
  return p && p->stride_ == stride_ && p->padding_lo_ == padding_lo_ && p->padding_hi_ == padding_hi_ &&
         p->kernel_dilation_ == kernel_dilation_ && p->input_dilation_ == input_dilation_ &&
         p->groups_ == groups_ && p->flip_ == flip_;
}

std::string Convolution::describe() const {
  auto list = [](const std::vector<int>& v) {
    std::string s = "(";
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) s += ",";
      s += std::to_string(v[i]);
    }
    return s + ")";
  };
  return std::string("Convolution(stride ") + list(stride_) + ", padding " + list(padding_lo_) + "/" +
         list(padding_hi_) + ", kernel dilation " + list(kernel_dilation_) + ", input dilation " +
         list(input_dilation_) + ", groups " + std::to_string(groups_) + (flip_ ? ", flip" : "") + ")";
}

}  // namespace kiln
