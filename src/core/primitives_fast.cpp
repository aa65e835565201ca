// The transformation rules every fast primitive inherits: those of its
// fallback (see core/primitives_fast.h).
#include "core/primitives_fast.h"

#include "kiln/ops.h"
#include "kiln/transforms.h"

namespace kiln {

std::vector<array> FastPrimitive::vjp(const std::vector<array>& primals, const std::vector<array>& cotangents,
                                      const std::vector<int>& argnums, const std::vector<array>&) {
  std::vector<array> all = kiln::vjp(fallback_, primals, cotangents).second;
  std::vector<array> out;
  out.reserve(argnums.size());
  for (int a : argnums) out.push_back(all[a]);
  return out;
}

std::vector<array> FastPrimitive::jvp(const std::vector<array>& primals, const std::vector<array>& tangents,
                                      const std::vector<int>& argnums) {
  // The inputs outside argnums are held constant: a zero tangent each.
  std::vector<array> all;
  all.reserve(primals.size());
  for (const auto& p : primals) all.push_back(zeros_like(p));
  for (size_t k = 0; k < argnums.size(); ++k) all[argnums[k]] = tangents[k];
  return kiln::jvp(fallback_, primals, all).second;
}

std::pair<std::vector<array>, std::vector<int>> FastPrimitive::vmap(const std::vector<array>& inputs,
                                                                    const std::vector<int>& axes) {
  std::vector<array> outs = kiln::vmap(fallback_, axes)(inputs);
  return {outs, std::vector<int>(outs.size(), 0)};
}

std::vector<Shape> FastPrimitive::output_shapes(const std::vector<array>& inputs) {
  std::vector<Shape> shapes;
  for (const auto& o : fallback_(inputs)) shapes.push_back(o.shape());
  return shapes;
}

}  // namespace kiln
