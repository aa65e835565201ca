// The defaults of the primitive contract: one-output primitives get the
// vector form for free; a missing transformation rule is a clear error
// that names the primitive.
#include "core/primitive.h"

#include "core/ops_util.h"

namespace kiln {

void Primitive::eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  if (outputs.size() != 1) {
    throw Error(std::string("[") + name() + "] has " + std::to_string(outputs.size()) +
                " outputs but no multi-output CPU kernel");
  }
  eval_cpu(inputs, outputs[0]);
}

void Primitive::eval_gpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  if (outputs.size() != 1) {
    throw Error(std::string("[") + name() + "] has " + std::to_string(outputs.size()) +
                " outputs but no multi-output GPU kernel");
  }
  eval_gpu(inputs, outputs[0]);
}

void Primitive::eval_cpu(const std::vector<array>&, array&) {
  throw Error(std::string("[") + name() + "] has no one-output CPU kernel");
}

void Primitive::eval_gpu(const std::vector<array>&, array&) {
  throw Error(std::string("[") + name() + "] has no one-output GPU kernel");
}

std::vector<array> Primitive::vjp(const std::vector<array>& primals, const std::vector<array>&,
                                  const std::vector<int>&, const std::vector<array>&) {
  fail(name(), "is not differentiable (no vjp rule)", primals);
}

std::vector<array> Primitive::jvp(const std::vector<array>& primals, const std::vector<array>&,
                                  const std::vector<int>&) {
  fail(name(), "is not differentiable (no jvp rule)", primals);
}

std::pair<std::vector<array>, std::vector<int>> Primitive::vmap(const std::vector<array>& inputs,
                                                                const std::vector<int>&) {
  fail(name(), "has no vmap rule", inputs);
}

std::vector<Shape> Primitive::output_shapes(const std::vector<array>& inputs) {
  fail(name(), "cannot infer its output shapes", inputs);
}

}  // namespace kiln
