// gather / scatter family, dynamic slices, as_strided and view: semantics
// (tests/gather_scatter_checks.h, shared with the GPU twin), argument
// errors, and the transformations the harness does not reach.
#include "gather_scatter_checks.h"

namespace kiln {
namespace {

using test::throws_error;

TEST(GatherScatter, Semantics) {
  test::check_gather_semantics(Device::cpu);
  test::check_scatter_semantics(Device::cpu);
  test::check_index_errors(Device::cpu);
  test::check_dynamic_slices(Device::cpu);
  test::check_views(Device::cpu);
}

TEST(GatherScatter, ArgumentErrors) {
  array a = zeros({4, 5});
  array i = array({0, 1});
  EXPECT_TRUE(throws_error([&] { gather(a, {i, i, i}, {0, 1, 0}, {1, 1}); }, {"[gather]", "index arrays"}));
  EXPECT_TRUE(throws_error([&] { gather(a, {i}, {0, 1}, {1, 1}); }, {"[gather]", "axes"}));
  EXPECT_TRUE(throws_error([&] { gather(a, {i, i}, {1, 1}, {1, 1}); }, {"[gather]", "repeated"}));
  EXPECT_TRUE(throws_error([&] { gather(a, {i}, {2}, {1, 1}); }, {"[gather]", "out of range"}));
  EXPECT_TRUE(throws_error([&] { gather(a, {array({0.5f})}, {0}, {1, 1}); }, {"[gather]", "integers"}));
  EXPECT_TRUE(throws_error([&] { gather(a, {array({true})}, {0}, {1, 1}); }, {"[gather]", "integers"}));
  EXPECT_TRUE(throws_error([&] { gather(a, i, 0, {1}); }, {"[gather]", "slice sizes"}));
  EXPECT_TRUE(throws_error([&] { gather(a, i, 0, {1, 6}); }, {"[gather]", "(4,5)"}));
  EXPECT_TRUE(throws_error([&] { gather(a, {i, array({0, 1, 2})}, {0, 1}, {1, 1}); }, {"[gather]", "broadcast"}));
  EXPECT_TRUE(throws_error([&] { scatter(a, i, zeros({2, 5}), 0); }, {"[scatter]", "dimensions"}));
  EXPECT_TRUE(throws_error([&] { scatter_add(a, i, zeros({3, 1, 5}), 0); }, {"[scatter_add]", "indices' shape"}));
  EXPECT_TRUE(throws_error([&] { scatter_max(a, i, zeros({2, 1, 6}), 0); }, {"[scatter_max]", "too large"}));
  EXPECT_TRUE(throws_error([&] { scatter_min(a, {i}, zeros({2, 1, 5}), {3}); }, {"[scatter_min]", "out of range"}));
  EXPECT_TRUE(throws_error([&] { scatter_prod(a, array({0.5f}), zeros({1, 1, 5}), 0); }, {"[scatter_prod]", "integers"}));
  array st = array({1});
  EXPECT_TRUE(throws_error([&] { slice(a, st, {0}, {2}); }, {"[slice]", "slice size"}));
  EXPECT_TRUE(throws_error([&] { slice(a, st, {0}, {5, 1}); }, {"[slice]", "does not fit"}));
  EXPECT_TRUE(throws_error([&] { slice(a, st, {0, 1}, {1, 1}); }, {"[slice]", "start values"}));
  EXPECT_TRUE(throws_error([&] { slice(a, array({1.f}), {0}, {1, 1}); }, {"[slice]", "integer"}));
  EXPECT_TRUE(throws_error([&] { slice(a, zeros({1, 1}, int32), {0}, {1, 1}); }, {"[slice]", "1-d"}));
  EXPECT_TRUE(throws_error([&] { slice(a, st, {2}, {1, 1}); }, {"[slice]", "out of range"}));
  EXPECT_TRUE(throws_error([&] { slice_update(a, zeros({2, 6}), st, {0}); }, {"[slice_update]", "does not fit"}));
  EXPECT_TRUE(throws_error([&] { slice_update(a, zeros({1, 1, 1}), st, {0}); }, {"[slice_update]", "dimensions"}));
  EXPECT_TRUE(throws_error([&] { as_strided(a, {-1}, {1}, 0); }, {"[as_strided]", "negative"}));
  EXPECT_TRUE(throws_error([&] { as_strided(a, {2}, {1, 1}, 0); }, {"[as_strided]", "strides"}));
  EXPECT_TRUE(throws_error([&] { as_strided(a, {5}, {5}, 0); }, {"[as_strided]", "outside"}));
  EXPECT_TRUE(throws_error([&] { as_strided(a, {2}, {-1}, 0); }, {"[as_strided]", "outside"}));
  EXPECT_TRUE(throws_error([&] { view(zeros({3}), float64); }, {"[view]", "multiple"}));
  EXPECT_TRUE(throws_error([&] { view(array(1.f), uint8); }, {"[view]", "scalar"}));
  EXPECT_EQ(view(zeros({3, 4}, int8), int32).shape(), (Shape{3, 1}));
  EXPECT_EQ(view(zeros({3}), uint8).shape(), (Shape{12}));
}

TEST(GatherScatter, BatchedStartsUnderVmap) {
  // vmap over the start of a dynamic slice / update: one slice per batch.
  array a = reshape(arange(0, 12, 1, float32), {3, 4});
  array starts = array({0, 2, 9}, {3, 1});
  std::function<std::vector<array>(const std::vector<array>&)> f = [](const std::vector<array>& x) {
    return std::vector<array>{slice(x[0], x[1], {0}, {2})};
  };
  array out = vmap(f, {0, 0})({a, starts})[0];
  EXPECT_EQ(test::to_double(out), (std::vector<double>{0, 1, 6, 7, 10, 11}));
  std::function<std::vector<array>(const std::vector<array>&)> g = [](const std::vector<array>& x) {
    return std::vector<array>{slice_update(x[0], full({2}, -1.f), x[1], {0})};
  };
  array upd = vmap(g, {-1, 0})({arange(0, 4, 1, float32), starts})[0];
  EXPECT_EQ(test::to_double(upd), (std::vector<double>{-1, -1, 2, 3, 0, 1, -1, -1, 0, 1, -1, -1}));
}

TEST(GatherScatter, ViewHasNoDerivative) {
  std::function<array(const array&)> f = [](const array& x) { return sum(astype(view(x, int32), float32)); };
  EXPECT_TRUE(throws_error([&] { eval(grad(f)(zeros({2}))); }, {"[View]"}));
}

}  // namespace
}  // namespace kiln
