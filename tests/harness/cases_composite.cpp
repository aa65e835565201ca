// Cases of the composite ops: public ops written with other ops (no
// primitive of their own; primitive "composite" skips the graph check).
// The reference is the op itself on float64 inputs unless a closed form is
// simpler; the transformation checks (vjp/jvp against finite differences,
// vmap against a loop) are what these cases add.
#include <cmath>

#include "harness.h"

namespace kiln::harness {

void register_composite() {
  auto comp = [](std::string op, std::string name, OpFn fn, std::vector<Input> inputs, std::vector<int> diff = {},
                 std::vector<Dtype> dtypes = {float32, float16, bfloat16, float64}) {
    return add({.op = std::move(op),
                .primitive = "composite",
                .name = std::move(name),
                .fn = std::move(fn),
                .inputs = std::move(inputs),
                .dtypes = std::move(dtypes),
                .diff = std::move(diff)});
  };
  const std::vector<Dtype> f32_64 = {float32, float64};
  // Predicates and cleanup (no derivative).
  comp("isnan", "(3,5)", [](const Arrays& x) { return Arrays{isnan(log(x[0]))}; }, {in({3, 5}, -1, 2)});
  comp("isinf", "(3,5)", [](const Arrays& x) { return Arrays{isinf(divide(x[0], floor(x[0])))}; }, {in({3, 5}, -1, 2)});
  comp("isfinite", "(3,5)", [](const Arrays& x) { return Arrays{isfinite(log(x[0]))}; }, {in({3, 5}, -1, 2)});
  comp("isposinf", "(7)", [](const Arrays& x) { return Arrays{isposinf(divide(x[0], floor(x[0])))}; }, {in({7}, -1, 2)});
  comp("isneginf", "(7)", [](const Arrays& x) { return Arrays{isneginf(log(x[0]))}; }, {in({7}, -1, 2)}, {},
       f32_64);
  comp("nan_to_num", "(3,5)", [](const Arrays& x) { return Arrays{nan_to_num(log(x[0]), 0.5f, 9.0f, -9.0f)}; },
       {in({3, 5}, -1, 2)}, {}, f32_64);
  comp("isclose", "(3,5)x(5)", [](const Arrays& x) { return Arrays{isclose(x[0], x[1], 0.5, 0.1)}; },
       {in({3, 5}), in({5})});
  comp("allclose", "(3,5)x(3,5)", [](const Arrays& x) { return Arrays{allclose(x[0], x[0] + x[1] * 1e-7, 1e-3)}; },
       {in({3, 5}), in({3, 5})}, {}, f32_64);
  comp("array_equal", "(4,3)", [](const Arrays& x) { return Arrays{array_equal(x[0], x[0]), array_equal(x[0], x[1])}; },
       {in({4, 3}), in({4, 3})}, {}, f32_64);
  // Elementwise compositions (differentiable).
  comp("degrees", "(3,5)", [](const Arrays& x) { return Arrays{degrees(x[0])}; }, {in({3, 5})}, {0});
  comp("radians", "(3,5)", [](const Arrays& x) { return Arrays{radians(x[0])}; }, {in({3, 5})}, {0});
  comp("logaddexp", "(3,5)x(5)", [](const Arrays& x) { return Arrays{logaddexp(x[0], x[1])}; }, {in({3, 5}), in({5})},
       {0, 1});
  comp("divmod", "(3,5)x(5)", [](const Arrays& x) { return divmod(x[0], x[1]); }, {in({3, 5}, -5, 5), in({5}, 0.7, 2)},
       {}, f32_64);
  comp("full_like", "(3,4)", [](const Arrays& x) { return Arrays{full_like(x[0], 2.5f), full_like(x[0], x[1], x[0].dtype())}; },
       {in({3, 4}), in({4})}, {1}, f32_64);
  // Matrix building and products.
  comp("tri", "5x4 k 1", [](const Arrays& x) { return Arrays{multiply(x[0], tri(5, 4, 1, x[0].dtype()))}; },
       {in({5, 4})}, {0});
  comp("tril", "(4,5) k 1", [](const Arrays& x) { return Arrays{tril(x[0], 1)}; }, {in({4, 5})}, {0});
  comp("triu", "(2,4,5) k -1", [](const Arrays& x) { return Arrays{triu(x[0], -1)}; }, {in({2, 4, 5})}, {0});
  comp("identity", "4", [](const Arrays& x) { return Arrays{multiply(x[0], identity(4, x[0].dtype()))}; },
       {in({4, 4})}, {0});
  comp("diag", "vector k 1", [](const Arrays& x) { return Arrays{diag(x[0], 1)}; }, {in({4})}, {0});
  comp("diag", "matrix k -1", [](const Arrays& x) { return Arrays{diag(x[0], -1)}; }, {in({4, 5})}, {0});
  comp("diagonal", "(3,4,5) offset 1 axes 2,0", [](const Arrays& x) { return Arrays{diagonal(x[0], 1, 2, 0)}; },
       {in({3, 4, 5})}, {0});
  comp("trace", "(4,5) offset -1", [](const Arrays& x) { return Arrays{trace(x[0], -1, 0, 1)}; }, {in({4, 5})}, {0},
       f32_64);
  comp("tensordot", "(3,4,5)x(4,5,2) axis 2", [](const Arrays& x) { return Arrays{tensordot(x[0], x[1], 2)}; },
       {in({3, 4, 5}), in({4, 5, 2})}, {0, 1}, f32_64);
  comp("tensordot", "axes {0},{1}", [](const Arrays& x) { return Arrays{tensordot(x[0], x[1], {0}, {1})}; },
       {in({3, 4}), in({2, 3})}, {0, 1}, f32_64);
  comp("outer", "(3)x(4)", [](const Arrays& x) { return Arrays{outer(x[0], x[1])}; }, {in({3}), in({4})}, {0, 1});
  comp("inner", "(2,5)x(3,5)", [](const Arrays& x) { return Arrays{inner(x[0], x[1])}; }, {in({2, 5}), in({3, 5})},
       {0, 1}, f32_64);
  comp("kron", "(2,3)x(3,2)", [](const Arrays& x) { return Arrays{kron(x[0], x[1])}; }, {in({2, 3}), in({3, 2})},
       {0, 1}, f32_64);
  comp("addmm", "alpha 0.5 beta 2", [](const Arrays& x) { return Arrays{addmm(x[0], x[1], x[2], 0.5f, 2.0f)}; },
       {in({3, 2}), in({3, 4}), in({4, 2})}, {0, 1, 2}, f32_64);
  // Shapes.
  comp("atleast_1d", "()", [](const Arrays& x) { return Arrays{atleast_1d(x[0])}; }, {in({})}, {0});
  comp("atleast_2d", "(5) and ()", [](const Arrays& x) { return atleast_2d(Arrays{x[0], x[1]}); }, {in({5}), in({})},
       {0, 1});
  comp("atleast_3d", "(4,5)", [](const Arrays& x) { return Arrays{atleast_3d(x[0])}; }, {in({4, 5})}, {0});
  comp("moveaxis", "(2,3,4) 0->2", [](const Arrays& x) { return Arrays{moveaxis(x[0], 0, 2)}; }, {in({2, 3, 4})}, {0});
  comp("unflatten", "(2,12) axis 1", [](const Arrays& x) { return Arrays{unflatten(x[0], 1, {3, -1})}; },
       {in({2, 12})}, {0});
  comp("roll", "(3,5) shift 2", [](const Arrays& x) { return Arrays{roll(x[0], 2)}; }, {in({3, 5})}, {0});
  comp("roll", "(3,5) shifts axes", [](const Arrays& x) { return Arrays{roll(x[0], Shape{-1, 3}, std::vector<int>{0, 1})}; },
       {in({3, 5})}, {0});
  comp("meshgrid", "(3)x(4)", [](const Arrays& x) { return meshgrid(Arrays{x[0], x[1]}); }, {in({3}), in({4})},
       {0, 1});
}

}  // namespace kiln::harness
