#pragma once
// The primitive families of the core. Ops in src/core build nodes with
// these; each backend implements eval_cpu / eval_gpu for every class.
#include <cstdint>
#include <vector>

#include "core/primitive.h"

namespace kiln {

#define KILN_PRIMITIVE_BODY(NAME)                                            \
  using Primitive::eval_cpu;                                                 \
  using Primitive::eval_gpu;                                                 \
  void eval_cpu(const std::vector<array>& inputs, array& out) override;     \
  void eval_gpu(const std::vector<array>& inputs, array& out) override;     \
  const char* name() const override { return #NAME; }

// The transformation rules and output shapes of a primitive (see
// core/primitive.h); defined in src/core/rules_*.cpp.
#define KILN_TRANSFORM_RULES                                                                          \
  std::vector<array> vjp(const std::vector<array>& primals, const std::vector<array>& cotangents,    \
                         const std::vector<int>& argnums, const std::vector<array>& outputs) override; \
  std::vector<array> jvp(const std::vector<array>& primals, const std::vector<array>& tangents,      \
                         const std::vector<int>& argnums) override;                                  \
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& inputs,             \
                                                       const std::vector<int>& axes) override;       \
  std::vector<Shape> output_shapes(const std::vector<array>& inputs) override;

// The elementwise ops, listed once: the enums, their names and every
// backend's dispatch switch are generated from these lists, and each entry
// needs its definition in src/backend/common/op_math.inc (`<name>_op`), so an
// op added here without one fails to compile on every backend.
#define KILN_UNARY_OPS(X)                                                                                 \
  X(abs) X(negative) X(sign) X(exp) X(expm1) X(log) X(log1p) X(sqrt) X(rsqrt) X(square) X(sin) X(cos)  \
  X(tanh) X(sigmoid) X(erf) X(erfinv) X(floor) X(ceil) X(round) X(relu) X(gelu) X(gelu_approx) X(silu)  \
  X(logical_not) X(tan) X(arcsin) X(arccos) X(arctan) X(sinh) X(cosh) X(arcsinh) X(arccosh) X(arctanh) \
  X(log2) X(log10) X(bitwise_invert) X(conjugate)
// Ops whose result has the input type come before `equal`; comparisons and
// logical ops (bool results) from `equal` on.
#define KILN_BINARY_OPS(X)                                                                                \
  X(add) X(subtract) X(multiply) X(divide) X(power) X(maximum) X(minimum) X(remainder) X(arctan2)        \
  X(floor_divide) X(bitwise_and) X(bitwise_or) X(bitwise_xor) X(left_shift) X(right_shift) X(equal)    \
  X(not_equal) X(less) X(less_equal) X(greater) X(greater_equal) X(logical_and) X(logical_or)
#define KILN_ENUM_ENTRY(name) name,
#define KILN_COUNT_ENTRY(name) +1

enum class UnaryOp : uint8_t { KILN_UNARY_OPS(KILN_ENUM_ENTRY) };
const char* unary_op_name(UnaryOp op);
// The number of enum values (the op harness checks each has a case).
inline constexpr int kUnaryOpCount = 0 KILN_UNARY_OPS(KILN_COUNT_ENTRY);

enum class BinaryOp : uint8_t { KILN_BINARY_OPS(KILN_ENUM_ENTRY) };
const char* binary_op_name(BinaryOp op);
inline constexpr int kBinaryOpCount = 0 KILN_BINARY_OPS(KILN_COUNT_ENTRY);
bool is_comparison(BinaryOp op);  // output is bool

enum class ReduceOp : uint8_t { sum, prod, max, min, all, any };
const char* reduce_op_name(ReduceOp op);
inline constexpr int kReduceOpCount = static_cast<int>(ReduceOp::any) + 1;

class Unary : public Primitive {
 public:
  Unary(Stream s, UnaryOp op) : Primitive(s), op_(op) {}
  KILN_PRIMITIVE_BODY(Unary)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  UnaryOp op() const { return op_; }

 private:
  UnaryOp op_;
};

class Binary : public Primitive {
 public:
  Binary(Stream s, BinaryOp op) : Primitive(s), op_(op) {}
  KILN_PRIMITIVE_BODY(Binary)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  BinaryOp op() const { return op_; }

 private:
  BinaryOp op_;
};

// where(condition, x, y); inputs are already broadcast to the output shape.
class Select : public Primitive {
 public:
  using Primitive::Primitive;
  KILN_PRIMITIVE_BODY(Select)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
};

// Materializes any layout (and casts) into a fresh row-major array.
// With view_if_contiguous (kiln::contiguous) a row-major input is shared.
class Copy : public Primitive {
 public:
  bool accepts_fp8() const override { return true; }
  explicit Copy(Stream s, bool view_if_contiguous = false) : Primitive(s), view_if_contiguous_(view_if_contiguous) {}
  KILN_PRIMITIVE_BODY(Copy)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  bool view_if_contiguous() const { return view_if_contiguous_; }

 private:
  bool view_if_contiguous_;
};

// start + i * step for i in [0, n), computed in double, cast to the dtype.
class Arange : public Primitive {
 public:
  Arange(Stream s, double start, double step, int num) : Primitive(s), start_(start), step_(step), num_(num) {}
  KILN_PRIMITIVE_BODY(Arange)
  bool is_equivalent(const Primitive& o) const override {
    auto* p = dynamic_cast<const Arange*>(&o);
    return p && p->start_ == start_ && p->step_ == step_ && p->num_ == num_;
  }
  KILN_TRANSFORM_RULES
  double start() const { return start_; }
  double step() const { return step_; }

 private:
  double start_, step_;
  int num_;
};

// Views: the output shares the input's buffer.
class Reshape : public Primitive {
 public:
  bool accepts_fp8() const override { return true; }
  Reshape(Stream s, Shape shape) : Primitive(s), shape_(std::move(shape)) {}
  KILN_PRIMITIVE_BODY(Reshape)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  const Shape& shape() const { return shape_; }

 private:
  Shape shape_;
};

class Transpose : public Primitive {
 public:
  bool accepts_fp8() const override { return true; }
  Transpose(Stream s, std::vector<int> axes) : Primitive(s), axes_(std::move(axes)) {}
  KILN_PRIMITIVE_BODY(Transpose)
  bool is_equivalent(const Primitive& o) const override {
    auto* p = dynamic_cast<const Transpose*>(&o);
    return p && p->axes_ == axes_;
  }
  KILN_TRANSFORM_RULES
  const std::vector<int>& axes() const { return axes_; }

 private:
  std::vector<int> axes_;
};

class Broadcast : public Primitive {
 public:
  bool accepts_fp8() const override { return true; }
  Broadcast(Stream s, Shape shape) : Primitive(s), shape_(std::move(shape)) {}
  KILN_PRIMITIVE_BODY(Broadcast)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  const Shape& shape() const { return shape_; }

 private:
  Shape shape_;
};

// Already-normalized start and step per axis (steps may be negative).
class Slice : public Primitive {
 public:
  bool accepts_fp8() const override { return true; }
  Slice(Stream s, Shape start, Shape step, Shape shape)
      : Primitive(s), start_(std::move(start)), step_(std::move(step)), shape_(std::move(shape)) {}
  KILN_PRIMITIVE_BODY(Slice)
  bool is_equivalent(const Primitive& o) const override {
    auto* p = dynamic_cast<const Slice*>(&o);
    return p && p->start_ == start_ && p->step_ == step_ && p->shape_ == shape_;
  }
  KILN_TRANSFORM_RULES
  const Shape& start() const { return start_; }
  const Shape& step() const { return step_; }
  const Shape& shape() const { return shape_; }

 private:
  Shape start_, step_, shape_;
};

// inputs: src, update (already broadcast to the slice's shape).
class SliceUpdate : public Primitive {
 public:
  bool accepts_fp8() const override { return true; }
  SliceUpdate(Stream s, Shape start, Shape step)
      : Primitive(s), start_(std::move(start)), step_(std::move(step)) {}
  KILN_PRIMITIVE_BODY(SliceUpdate)
  bool is_equivalent(const Primitive& o) const override {
    auto* p = dynamic_cast<const SliceUpdate*>(&o);
    return p && p->start_ == start_ && p->step_ == step_;
  }
  KILN_TRANSFORM_RULES
  const Shape& start() const { return start_; }
  const Shape& step() const { return step_; }

 private:
  Shape start_, step_;
};

// Output keeps the reduced axes with size 1; ops squeeze them afterwards.
class Reduce : public Primitive {
 public:
  Reduce(Stream s, ReduceOp op, std::vector<int> axes) : Primitive(s), op_(op), axes_(std::move(axes)) {}
  KILN_PRIMITIVE_BODY(Reduce)
  bool is_equivalent(const Primitive& o) const override {
    auto* p = dynamic_cast<const Reduce*>(&o);
    return p && p->op_ == op_ && p->axes_ == axes_;
  }
  KILN_TRANSFORM_RULES
  ReduceOp op() const { return op_; }
  const std::vector<int>& axes() const { return axes_; }

 private:
  ReduceOp op_;
  std::vector<int> axes_;
};

// argmax / argmin along one axis (kept with size 1), uint32 output.
class ArgReduce : public Primitive {
 public:
  ArgReduce(Stream s, bool is_max, int axis) : Primitive(s), is_max_(is_max), axis_(axis) {}
  KILN_PRIMITIVE_BODY(ArgReduce)
  bool is_equivalent(const Primitive& o) const override {
    auto* p = dynamic_cast<const ArgReduce*>(&o);
    return p && p->is_max_ == is_max_ && p->axis_ == axis_;
  }
  KILN_TRANSFORM_RULES
  bool is_max() const { return is_max_; }
  int axis() const { return axis_; }

 private:
  bool is_max_;
  int axis_;
};

// Softmax over the last axis, computed in float for half types.
class Softmax : public Primitive {
 public:
  using Primitive::Primitive;
  KILN_PRIMITIVE_BODY(Softmax)
  bool is_equivalent(const Primitive& o) const override {
    return dynamic_cast<const Softmax*>(&o) != nullptr;
  }
  KILN_TRANSFORM_RULES
};

// inputs: a, b with shapes [..., M, K] and [..., K, N] (batch dims already
// broadcast to the output's).
class Matmul : public Primitive {
 public:
  using Primitive::Primitive;
  KILN_PRIMITIVE_BODY(Matmul)
  bool is_equivalent(const Primitive& o) const override { return dynamic_cast<const Matmul*>(&o) != nullptr; }
  KILN_TRANSFORM_RULES
};

// take: inputs a, indices; output a.shape[:axis] + indices.shape + a.shape[axis+1:].
class Gather : public Primitive {
 public:
  bool accepts_fp8() const override { return true; }
  Gather(Stream s, int axis) : Primitive(s), axis_(axis) {}
  KILN_PRIMITIVE_BODY(Gather)
  bool is_equivalent(const Primitive& o) const override {
    auto* p = dynamic_cast<const Gather*>(&o);
    return p && p->axis_ == axis_;
  }
  KILN_TRANSFORM_RULES
  int axis() const { return axis_; }

 private:
  int axis_;
};

// take_along_axis: inputs a, indices broadcast against a except on axis.
class GatherAxis : public Primitive {
 public:
  bool accepts_fp8() const override { return true; }
  GatherAxis(Stream s, int axis) : Primitive(s), axis_(axis) {}
  KILN_PRIMITIVE_BODY(GatherAxis)
  bool is_equivalent(const Primitive& o) const override {
    auto* p = dynamic_cast<const GatherAxis*>(&o);
    return p && p->axis_ == axis_;
  }
  KILN_TRANSFORM_RULES
  int axis() const { return axis_; }

 private:
  int axis_;
};

class Concatenate : public Primitive {
 public:
  bool accepts_fp8() const override { return true; }
  Concatenate(Stream s, int axis) : Primitive(s), axis_(axis) {}
  KILN_PRIMITIVE_BODY(Concatenate)
  bool is_equivalent(const Primitive& o) const override {
    auto* p = dynamic_cast<const Concatenate*>(&o);
    return p && p->axis_ == axis_;
  }
  KILN_TRANSFORM_RULES
  int axis() const { return axis_; }

 private:
  int axis_;
};

// Philox-4x32-10 bits; input: a key of shape [2] (uint32).
class RandomBits : public Primitive {
 public:
  RandomBits(Stream s, Shape shape) : Primitive(s), shape_(std::move(shape)) {}
  KILN_PRIMITIVE_BODY(RandomBits)
  KILN_TRANSFORM_RULES
  const Shape& shape() const { return shape_; }

 private:
  Shape shape_;
};

// put_along_axis / scatter_add_axis: inputs a, indices, values, with
// indices and values of one shape (a's rank, any size on axis, broadcast
// against a elsewhere); out = a with values written (or added) at
// out[..., indices[..., j, ...], ...] along axis.
class ScatterAxis : public Primitive {
 public:
  enum class Reduce : uint8_t { none, sum };
  ScatterAxis(Stream s, Reduce reduce, int axis) : Primitive(s), reduce_(reduce), axis_(axis) {}
  KILN_PRIMITIVE_BODY(ScatterAxis)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  Reduce reduce() const { return reduce_; }
  int axis() const { return axis_; }

 private:
  Reduce reduce_;
  int axis_;
};

// The identity, with a zero derivative (kiln::stop_gradient): a view on
// every backend (its eval lives in core).
class StopGradient : public Primitive {
 public:
  bool accepts_fp8() const override { return true; }
  using Primitive::Primitive;
  KILN_PRIMITIVE_BODY(StopGradient)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
};

#define KILN_FOR_EACH_PRIMITIVE(X) \
  X(Unary) X(Binary) X(Select) X(Copy) X(Arange) X(Reshape) X(Transpose) X(Broadcast) X(Slice) \
  X(SliceUpdate) X(Reduce) X(ArgReduce) X(Softmax) X(Matmul) X(Gather) X(GatherAxis) X(Concatenate) X(RandomBits) \
  X(ScatterAxis) X(GatherSlices) X(Scatter) X(DynamicSlice) X(DynamicSliceUpdate) X(AsStrided) X(View) \
  X(Sort) X(ArgSort) X(Partition) X(ArgPartition) X(SearchSorted) X(Scan) \
  X(ScaledDotProductAttention) \
  X(Dequantize) X(QuantizedMatmul) X(GatherQMM) X(QuantizeDequantize) \
  X(BlockQuantize) X(BlockDequantize) X(BlockQuantizedMatmul) \
  X(RMSNorm) X(LayerNorm) X(RoPE) \
  X(Convolution) X(FFT)

// Primitives with several outputs: they override the vector forms of
// eval_cpu / eval_gpu (a build without CUDA stubs the GPU one).
#define KILN_FOR_EACH_MULTI_OUTPUT_PRIMITIVE(X) X(Quantize) X(AddRMSNorm) X(FusedBlockQMV)

}  // namespace kiln

// Families declared in their own headers (listed above).
#include "core/primitives_attention.h"  // NOLINT(build/include_order)
#include "core/primitives_quant.h"      // NOLINT(build/include_order)
#include "core/primitives_blocks.h"     // NOLINT(build/include_order)
#include "core/primitives_fast_norm.h"  // NOLINT(build/include_order)
#include "core/primitives_conv.h"       // NOLINT(build/include_order)
#include "core/primitives_complex.h"    // NOLINT(build/include_order)
