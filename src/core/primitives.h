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

enum class UnaryOp : uint8_t {
  abs, negative, sign, exp, expm1, log, log1p, sqrt, rsqrt, square, sin, cos, tanh, sigmoid, erf,
  erfinv, floor, ceil, round, relu, gelu, gelu_approx, silu, logical_not, tan, arcsin, arccos, arctan, sinh,
  cosh, arcsinh, arccosh, arctanh, log2, log10, bitwise_invert,
};
const char* unary_op_name(UnaryOp op);
// The number of enum values (the op harness checks each has a case); a
// static_assert next to the names keeps it in step with the enum.
inline constexpr int kUnaryOpCount = static_cast<int>(UnaryOp::bitwise_invert) + 1;

// Ops whose result has the input type come before `equal`; comparisons and
// logical ops (bool results) from `equal` on.
enum class BinaryOp : uint8_t {
  add, subtract, multiply, divide, power, maximum, minimum, remainder, arctan2, floor_divide, bitwise_and,
  bitwise_or, bitwise_xor, left_shift, right_shift, equal, not_equal, less, less_equal, greater, greater_equal,
  logical_and, logical_or,
};
const char* binary_op_name(BinaryOp op);
inline constexpr int kBinaryOpCount = static_cast<int>(BinaryOp::logical_or) + 1;
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
  Transpose(Stream s, std::vector<int> axes) : Primitive(s), axes_(std::move(axes)) {}
  KILN_PRIMITIVE_BODY(Transpose)
  KILN_TRANSFORM_RULES
  const std::vector<int>& axes() const { return axes_; }

 private:
  std::vector<int> axes_;
};

class Broadcast : public Primitive {
 public:
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
  Slice(Stream s, Shape start, Shape step, Shape shape)
      : Primitive(s), start_(std::move(start)), step_(std::move(step)), shape_(std::move(shape)) {}
  KILN_PRIMITIVE_BODY(Slice)
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
  SliceUpdate(Stream s, Shape start, Shape step)
      : Primitive(s), start_(std::move(start)), step_(std::move(step)) {}
  KILN_PRIMITIVE_BODY(SliceUpdate)
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
  KILN_TRANSFORM_RULES
};

// inputs: a, b with shapes [..., M, K] and [..., K, N] (batch dims already
// broadcast to the output's).
class Matmul : public Primitive {
 public:
  using Primitive::Primitive;
  KILN_PRIMITIVE_BODY(Matmul)
  KILN_TRANSFORM_RULES
};

// take: inputs a, indices; output a.shape[:axis] + indices.shape + a.shape[axis+1:].
class Gather : public Primitive {
 public:
  Gather(Stream s, int axis) : Primitive(s), axis_(axis) {}
  KILN_PRIMITIVE_BODY(Gather)
  KILN_TRANSFORM_RULES
  int axis() const { return axis_; }

 private:
  int axis_;
};

// take_along_axis: inputs a, indices broadcast against a except on axis.
class GatherAxis : public Primitive {
 public:
  GatherAxis(Stream s, int axis) : Primitive(s), axis_(axis) {}
  KILN_PRIMITIVE_BODY(GatherAxis)
  KILN_TRANSFORM_RULES
  int axis() const { return axis_; }

 private:
  int axis_;
};

class Concatenate : public Primitive {
 public:
  Concatenate(Stream s, int axis) : Primitive(s), axis_(axis) {}
  KILN_PRIMITIVE_BODY(Concatenate)
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
  using Primitive::Primitive;
  KILN_PRIMITIVE_BODY(StopGradient)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
};

#define KILN_FOR_EACH_PRIMITIVE(X) \
  X(Unary) X(Binary) X(Select) X(Copy) X(Arange) X(Reshape) X(Transpose) X(Broadcast) X(Slice) \
  X(SliceUpdate) X(Reduce) X(ArgReduce) X(Softmax) X(Matmul) X(Gather) X(GatherAxis) X(Concatenate) X(RandomBits) \
  X(ScatterAxis) X(RMSNorm) X(LayerNorm) X(RoPE)

}  // namespace kiln

// The fast ops' primitives (their classes need the macros above).
#include "core/primitives_fast_norm.h"
