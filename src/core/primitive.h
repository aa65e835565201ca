#pragma once
// Primitive: one class per op family, the contract every op is built on.
//
// A node's primitive computes its outputs from its inputs on the CPU
// (eval_cpu, in src/backend/cpu) or on a GPU (eval_gpu, in src/backend/cuda
// or the stub that throws). A primitive may have several outputs: the
// arrays that share one node are siblings (array::siblings()), evaluated
// together by one call that receives all of them in order.
//
// The transformations (include/kiln/transforms.h) are built on three rules
// each primitive provides, written with ordinary ops so that they work on
// every backend and compose (grad of grad, vmap of grad):
//   vjp  - cotangents of the outputs -> cotangents of the inputs in argnums;
//   jvp  - tangents of the inputs in argnums -> tangents of the outputs;
//   vmap - inputs with a batch axis each (-1: not batched) -> outputs and
//          the batch axis of each output (a batched rule, not a loop).
// A primitive without a rule throws a kiln::Error naming itself.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/array.h"

namespace kiln {

class Primitive {
 public:
  explicit Primitive(Stream stream) : stream_(stream) {}
  virtual ~Primitive() = default;
  Primitive(const Primitive&) = delete;
  Primitive& operator=(const Primitive&) = delete;

  // Multi-output primitives override these; the default hands a single
  // output to the one-output form below.
  virtual void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs);
  virtual void eval_gpu(const std::vector<array>& inputs, std::vector<array>& outputs);
  // One-output primitives override these.
  virtual void eval_cpu(const std::vector<array>& inputs, array& out);
  virtual void eval_gpu(const std::vector<array>& inputs, array& out);

  virtual const char* name() const = 0;

  // The vector-Jacobian product: one cotangent per output (zeros where an
  // output has none), the primal inputs and outputs; returns one cotangent
  // per entry of argnums (indices into primals).
  virtual std::vector<array> vjp(const std::vector<array>& primals, const std::vector<array>& cotangents,
                                 const std::vector<int>& argnums, const std::vector<array>& outputs);
  // The Jacobian-vector product: one tangent per entry of argnums (the
  // other inputs are held constant); returns one tangent per output.
  virtual std::vector<array> jvp(const std::vector<array>& primals, const std::vector<array>& tangents,
                                 const std::vector<int>& argnums);
  // The batched rule: axes[i] is the batch axis of inputs[i] or -1.
  virtual std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& inputs,
                                                               const std::vector<int>& axes);
  // The shapes of the outputs for these inputs (used when a transform
  // rebuilds a node with other inputs).
  virtual std::vector<Shape> output_shapes(const std::vector<array>& inputs);

  // Same computation given the same inputs (used by compile's CSE).
  virtual bool is_equivalent(const Primitive& other) const { return false; }
  // Name with parameters, for messages and printing (default: name()).
  virtual std::string describe() const { return name(); }
  // Whether the primitive takes the fp8 dtypes (inputs or outputs): the
  // byte moves (copies, casts, views, gathers, concatenate) and
  // scaled_matmul do; every other primitive is refused when a graph node is
  // built on fp8 (array's constructor throws a kiln::Error naming the op,
  // the shapes and dtypes), so no kernel ever sees an fp8 it cannot read.
  virtual bool accepts_fp8() const { return false; }

  Stream stream() const { return stream_; }

 private:
  Stream stream_;
};

// Runs a node's primitive on the stream's backend with all its outputs.
void eval_primitive(Primitive& p, const Stream& s, const std::vector<array>& inputs, std::vector<array>& outputs);

}  // namespace kiln
