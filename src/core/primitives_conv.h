#pragma once
// The convolution primitive behind conv1d/2d/3d, conv_transpose1d/2d/3d and
// conv_general (include/kiln/ops.h); kernels in src/backend/cpu/conv.cpp and
// src/backend/cuda/conv.cu, the index math both share in
// src/backend/common/conv_geometry.h.
#include <string>
#include <vector>

#include "core/primitives.h"

namespace kiln {

// One convolution, channels last (MLX's layout):
//   inputs: x [N, S1..Sd, C] and w [O, K1..Kd, C / groups], one float dtype;
//   out [N, P1..Pd, O] with, per spatial axis (S' = (S - 1) * input_dilation
//   + 1, K' = (K - 1) * kernel_dilation + 1),
//   P = (S' + padding_lo + padding_hi - K') / stride + 1 and
//   out[n, p, o] = sum over taps t and channels c of group g = o / (O / groups)
//     xd[n, p * stride + t' * kernel_dilation - padding_lo, g * C/groups + c] * w[o, t, c],
//   t' = K - 1 - t when flip (a true convolution), else t; xd is x with
//   input_dilation - 1 zeros between neighbours, and zero outside.
// Padding may be negative here (it crops the dilated input): the gradient
// rules produce such convolutions.
class Convolution : public Primitive {
 public:
  Convolution(Stream s, std::vector<int> stride, std::vector<int> padding_lo, std::vector<int> padding_hi,
              std::vector<int> kernel_dilation, std::vector<int> input_dilation, int groups, bool flip)
      : Primitive(s),
        stride_(std::move(stride)),
        padding_lo_(std::move(padding_lo)),
        padding_hi_(std::move(padding_hi)),
        kernel_dilation_(std::move(kernel_dilation)),
        input_dilation_(std::move(input_dilation)),
        groups_(groups),
        flip_(flip) {}
  KILN_PRIMITIVE_BODY(Convolution)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  std::string describe() const override;

  const std::vector<int>& stride() const { return stride_; }
  const std::vector<int>& padding_lo() const { return padding_lo_; }
  const std::vector<int>& padding_hi() const { return padding_hi_; }
  const std::vector<int>& kernel_dilation() const { return kernel_dilation_; }
  const std::vector<int>& input_dilation() const { return input_dilation_; }
  int groups() const { return groups_; }
  bool flip() const { return flip_; }

 private:
  std::vector<int> stride_, padding_lo_, padding_hi_, kernel_dilation_, input_dilation_;
  int groups_;
  bool flip_;
};

namespace detail {
// The output shape of a convolution (see Convolution); throws a
// kiln::Error naming `op` for an empty or negative spatial output.
Shape conv_output_shape(const char* op, const array& x, const array& w, const std::vector<int>& stride,
                        const std::vector<int>& padding_lo, const std::vector<int>& padding_hi,
                        const std::vector<int>& kernel_dilation, const std::vector<int>& input_dilation);
// A Convolution node on x and w (already checked and of one dtype).
array conv_node(const array& x, const array& w, const std::vector<int>& stride, const std::vector<int>& padding_lo,
                const std::vector<int>& padding_hi, const std::vector<int>& kernel_dilation,
                const std::vector<int>& input_dilation, int groups, bool flip, Stream s);
}  // namespace detail

}  // namespace kiln
