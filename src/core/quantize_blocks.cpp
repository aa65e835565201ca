// llama.cpp's block formats behind quantize / dequantize / quantized_matmul
// (core/quantize_blocks.h): argument checks, graph building and the
// transformation rules of the three block primitives.
//
// quantized_matmul on blocks is one primitive (BlockQuantizedMatmul) that
// reads the blocks once per product: a fused decode + dot product for few
// rows of x (decode, QMV) and decoded tiles fed to the GEMM for many rows on
// the CPU. On a GPU, more than kGpuQmvRows rows of x go to dequantize + the
// backend's matmul (cuBLASLt) instead: a first version of the prefill path.
#include "core/quantize_blocks.h"

#include <cstring>

#include "core/ops_util.h"
#include "core/primitives.h"
#include "core/transform_util.h"
#include "kiln/error.h"
#include "kiln/ops.h"

namespace kiln {
namespace {

constexpr int64_t kGpuQmvRows = 8;

bool parse_format(const std::string& mode, BlockFormat& f) {
  for (int i = 0; i < kBlockFormatCount; ++i) {
    if (mode == kBlockLayouts[i].name) {
      f = static_cast<BlockFormat>(i);
      return true;
    }
  }
  return false;
}

BlockFormat format_of(const std::string& mode, const char* op) {
  BlockFormat f;
  if (!parse_format(mode, f)) throw Error(std::string("[") + op + "] unknown mode '" + mode + "'");
  return f;
}

std::string mode_text(BlockFormat f) { return std::string("mode '") + block_layout(f).name + "'"; }

// The number of weights a row of `bytes` block bytes decodes to.
int64_t decoded_size(const array& w, BlockFormat f, const char* op) {
  const BlockLayout& l = block_layout(f);
  if (w.dtype() != uint8) fail(op, mode_text(f) + " needs uint8 block bytes for w", {&w});
  if (w.ndim() < 1) fail(op, mode_text(f) + " needs w with at least 1 dimension", {&w});
  int64_t bytes = w.shape(-1);
  if (bytes % l.bytes != 0) {
    fail(op, mode_text(f) + ": the last axis of w (" + std::to_string(bytes) + " bytes) is not a multiple of the " +
                 std::to_string(l.bytes) + "-byte block",
         {&w});
  }
  int64_t k = bytes / l.bytes * l.block;
  if (k > INT32_MAX) fail(op, "w decodes to more than 2^31-1 weights per row", {&w});
  return k;
}

array dequantize_node(const array& w, BlockFormat f, Dtype out, Stream st) {
  Shape shape = w.shape();
  shape.back() = static_cast<int>(w.shape(-1) / block_layout(f).bytes * block_layout(f).block);
  return make_node<BlockDequantize>(shape, out, {w}, st, f, out);
}

array qmm_node(const array& x, const array& w, BlockFormat f, Stream st) {
  Shape shape = x.shape();
  shape.back() = w.shape(0);
  return make_node<BlockQuantizedMatmul>(shape, x.dtype(), {x, w}, st, f);
}

// x [..., K] (float16 / bfloat16 / float32) times decoded w [N, K]^T.
array block_matmul(const array& x, const array& w, BlockFormat f, Stream st) {
  int64_t rows = x.shape(-1) == 0 ? 0 : static_cast<int64_t>(x.size()) / x.shape(-1);
  if (st.device.type == Device::gpu && rows > kGpuQmvRows) {
    return matmul(x, swapaxes(dequantize_node(w, f, x.dtype(), st), -1, -2, st), st);
  }
  return qmm_node(x, w, f, st);
}

}  // namespace

namespace detail {

bool is_block_format(const std::string& mode) {
  BlockFormat f;
  return parse_format(mode, f);
}

std::vector<array> block_quantize(const array& w, const std::string& mode, StreamOrDevice s) {
  BlockFormat f = format_of(mode, "quantize");
  const BlockLayout& l = block_layout(f);
  if (!is_floating_point(w.dtype())) fail("quantize", mode_text(f) + " needs a floating-point w", {&w});
  if (w.ndim() < 1) fail("quantize", mode_text(f) + " needs w with at least 1 dimension", {&w});
  if (w.shape(-1) % l.block != 0) {
    fail("quantize", mode_text(f) + ": the last axis of w (" + std::to_string(w.shape(-1)) +
                         ") is not a multiple of the block size " + std::to_string(l.block),
         {&w});
  }
  Stream st = to_stream(s);
  Shape shape = w.shape();
  shape.back() = w.shape(-1) / l.block * l.bytes;
  return {make_node<BlockQuantize>(shape, uint8, {w}, st, f)};
}

array block_dequantize(const array& w, const std::string& mode, Dtype out, StreamOrDevice s) {
  BlockFormat f = format_of(mode, "dequantize");
  decoded_size(w, f, "dequantize");
  if (!is_floating_point(out)) {
    fail("dequantize", mode_text(f) + " decodes to a floating-point dtype, not " + dtype_name(out), {&w});
  }
  return dequantize_node(w, f, out, to_stream(s));
}

array block_quantized_matmul(const array& x, const array& w, bool transpose, const std::string& mode,
                             StreamOrDevice s) {
  BlockFormat f = format_of(mode, "quantized_matmul");
  if (!transpose) {
    fail("quantized_matmul", mode_text(f) + " needs transpose=true (blocks run along the rows of w, x @ w.T)",
         {&x, &w});
  }
  int64_t k = decoded_size(w, f, "quantized_matmul");
  if (w.ndim() != 2) fail("quantized_matmul", mode_text(f) + " needs a 2-d w [N, K / block * bytes]", {&x, &w});
  if (!is_floating_point(x.dtype())) {
    fail("quantized_matmul", mode_text(f) + " needs a floating-point x", {&x, &w});
  }
  if (x.ndim() < 1 || x.shape(-1) != k) {
    fail("quantized_matmul", mode_text(f) + ": the last axis of x must be " + std::to_string(k) +
                                 " (the weights a row of w decodes to)",
         {&x, &w});
  }
  Stream st = to_stream(s);
  // float64 stays float64 (the decoded weights are exact in it): decode and
  // multiply, as the kernels accumulate in float32.
  if (x.dtype() == float64) return matmul(x, swapaxes(dequantize_node(w, f, float64, st), -1, -2, st), st);
  return block_matmul(x, w, f, st);
}

}  // namespace detail

// ---- rules ----

namespace {
[[noreturn]] void not_differentiable(const char* prim, const char* what) {
  throw Error(std::string("[") + prim + "] " + what);
}
}  // namespace

std::vector<array> BlockQuantize::vjp(const std::vector<array>&, const std::vector<array>&, const std::vector<int>&,
                                      const std::vector<array>&) {
  not_differentiable("quantize", "has no vjp: block quantization is piecewise constant with integer outputs");
}
std::vector<array> BlockQuantize::jvp(const std::vector<array>&, const std::vector<array>&, const std::vector<int>&) {
  not_differentiable("quantize", "has no jvp: block quantization is piecewise constant with integer outputs");
}
// Rows are independent: the mapped axis goes first (the last axis is the
// one that is blocked, whichever axis was mapped).
std::pair<std::vector<array>, std::vector<int>> BlockQuantize::vmap(const std::vector<array>& inputs,
                                                                    const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  array w = detail::move_axis(inputs[0], axes[0], 0);
  Shape shape = w.shape();
  shape.back() = shape.back() / block_layout(format_).block * block_layout(format_).bytes;
  return {{make_node<BlockQuantize>(shape, uint8, {w}, stream(), format_)}, {0}};
}
std::vector<Shape> BlockQuantize::output_shapes(const std::vector<array>& inputs) {
  Shape shape = inputs[0].shape();
  shape.back() = shape.back() / block_layout(format_).block * block_layout(format_).bytes;
  return {shape};
}
bool BlockQuantize::is_equivalent(const Primitive& o) const {
  auto* p = dynamic_cast<const BlockQuantize*>(&o);
  return p && p->format_ == format_;
}

std::vector<array> BlockDequantize::vjp(const std::vector<array>&, const std::vector<array>&, const std::vector<int>&,
                                        const std::vector<array>&) {
  not_differentiable("dequantize", "has no vjp with respect to the quantized weights (uint8 blocks)");
}
std::vector<array> BlockDequantize::jvp(const std::vector<array>&, const std::vector<array>&, const std::vector<int>&) {
  not_differentiable("dequantize", "has no jvp with respect to the quantized weights (uint8 blocks)");
}
std::pair<std::vector<array>, std::vector<int>> BlockDequantize::vmap(const std::vector<array>& inputs,
                                                                      const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  array w = detail::move_axis(inputs[0], axes[0], 0);
  return {{dequantize_node(w, format_, out_dtype(), stream())}, {0}};
}
std::vector<Shape> BlockDequantize::output_shapes(const std::vector<array>& inputs) {
  Shape shape = inputs[0].shape();
  shape.back() = shape.back() / block_layout(format_).bytes * block_layout(format_).block;
  return {shape};
}
bool BlockDequantize::is_equivalent(const Primitive& o) const {
  auto* p = dynamic_cast<const BlockDequantize*>(&o);
  return p && p->format_ == format_ && p->out_ == out_;
}

// d(x w^T)/dx: the cotangent times the decoded weights; the weights
// themselves are integers and get no cotangent.
std::vector<array> BlockQuantizedMatmul::vjp(const std::vector<array>& primals, const std::vector<array>& cot,
                                             const std::vector<int>& argnums, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  std::vector<array> out;
  for (int k : argnums) {
    if (k != 0) not_differentiable("quantized_matmul", "has no vjp with respect to the quantized weights");
    array wd = dequantize_node(primals[1], format_, cot[0].dtype(), stream());
    out.push_back(astype(matmul(cot[0], wd), primals[0].dtype()));
  }
  return out;
}
std::vector<array> BlockQuantizedMatmul::jvp(const std::vector<array>& primals, const std::vector<array>& tangents,
                                             const std::vector<int>& argnums) {
  detail::RuleStreamScope scope(stream());
  for (int k : argnums) {
    if (k != 0) not_differentiable("quantized_matmul", "has no jvp with respect to the quantized weights");
  }
  return {detail::block_quantized_matmul(astype(tangents[0], primals[0].dtype()), primals[1], true,
                                         block_layout(format_).name, stream())};
}
std::pair<std::vector<array>, std::vector<int>> BlockQuantizedMatmul::vmap(const std::vector<array>& inputs,
                                                                           const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  const array& w = inputs[1];
  if (axes[1] < 0) {
    // Only x is mapped: its rows are independent, the mapped axis goes first.
    return {{detail::block_quantized_matmul(detail::move_axis(inputs[0], axes[0], 0), w, true,
                                            block_layout(format_).name, stream())},
            {0}};
  }
  // Mapped weights: decode them and let matmul broadcast over the mapped
  // axis: x [B or 1, ..., K] against w^T [B, 1..., K, N].
  array wb = detail::move_axis(w, axes[1], 0);
  int b = wb.shape(0);
  array x = axes[0] >= 0 ? detail::move_axis(inputs[0], axes[0], 0) : expand_dims(inputs[0], 0);
  array wt = swapaxes(dequantize_node(wb, format_, x.dtype(), stream()), -1, -2);
  Shape ws = wt.shape();
  Shape target{b};
  for (int d = 1; d < x.ndim() - 2; ++d) target.push_back(1);
  target.push_back(ws[1]);
  target.push_back(ws[2]);
  bool vector_x = x.ndim() == 2;  // x [B, K]: a row vector per example
  if (vector_x) x = expand_dims(x, -2);
  if (x.ndim() > 3) wt = reshape(wt, target);
  array out = matmul(x, wt);
  if (vector_x) out = squeeze(out, -2);
  return {{out}, {0}};
}
std::vector<Shape> BlockQuantizedMatmul::output_shapes(const std::vector<array>& inputs) {
  Shape shape = inputs[0].shape();
  shape.back() = inputs[1].shape(0);
  return {shape};
}
bool BlockQuantizedMatmul::is_equivalent(const Primitive& o) const {
  auto* p = dynamic_cast<const BlockQuantizedMatmul*>(&o);
  return p && p->format_ == format_;
}

}  // namespace kiln
