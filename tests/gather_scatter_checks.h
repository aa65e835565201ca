#pragma once
// Semantic checks of the gather / scatter family, the dynamic slices,
// as_strided and view, run on a given device: tests/test_gather_scatter.cpp
// runs them on the CPU, tests/cuda/test_cuda_gather_scatter.cpp on the GPU.
#include <gtest/gtest.h>

#include "test_util.h"

namespace kiln::test {

inline std::vector<double> got(const array& a) { return to_double(a); }

inline void check_gather_semantics(Device d) {
  array a = reshape(arange(0, 20, 1), {4, 5});
  // Two index arrays broadcast together; slices of (1, 2); negative wrap.
  array i0 = array({0, -1, 2}, {3, 1});
  array i1 = array({1, 3}, {1, 2});
  array g = gather(a, {i0, i1}, {0, 1}, {1, 2}, d);
  EXPECT_EQ(g.shape(), (Shape{3, 2, 1, 2}));
  EXPECT_EQ(got(g), (std::vector<double>{1, 2, 3, 4, 16, 17, 18, 19, 11, 12, 13, 14}));
  // The single-array overload takes whole rows.
  array rows = gather(a, array({3, 0}), 0, {1, 5}, d);
  EXPECT_EQ(got(rows), (std::vector<double>{15, 16, 17, 18, 19, 0, 1, 2, 3, 4}));
}

inline void check_scatter_semantics(Device d) {
  array a = array({1.f, 2.f, 3.f, 4.f}, {4});
  array idx = array({1, 1, -1, 1}, {4});
  array upd = array({2.f, 3.f, 5.f, 0.5f}, {4, 1});
  EXPECT_EQ(got(scatter_add(a, idx, upd, 0, d)), (std::vector<double>{1, 7.5, 3, 9}));
  EXPECT_EQ(got(scatter_prod(a, idx, upd, 0, d)), (std::vector<double>{1, 6, 3, 20}));
  EXPECT_EQ(got(scatter_max(a, idx, upd, 0, d)), (std::vector<double>{1, 3, 3, 5}));
  EXPECT_EQ(got(scatter_min(a, idx, upd, 0, d)), (std::vector<double>{1, 0.5, 3, 4}));
  // Slices of two elements on the indexed axis overlap and accumulate.
  array b = zeros({2, 4}, int32);
  array u = ones({3, 1, 2}, int32);
  array s = scatter_add(b, {array({0, 0, 1}), array({0, 1, 2})}, u, {0, 1}, d);
  EXPECT_EQ(got(s), (std::vector<double>{1, 2, 1, 0, 0, 0, 1, 1}));
  // Small integer types go through the word-sized compare-and-swap on the GPU.
  array c = zeros({3}, uint8);
  array many = scatter_add(c, array(std::vector<int>(300, 2), {300}), ones({300, 1}, uint8), 0, d);
  EXPECT_EQ(got(many), (std::vector<double>{0, 0, 300 % 256}));
  array h = scatter_add(zeros({2}, float16), array({0, 0, 0, 1}), full({4, 1}, 0.25f, float16), 0, d);
  EXPECT_EQ(got(h), (std::vector<double>{0.75, 0.25}));
  // A plain scatter writes distinct positions.
  array p = scatter(zeros({2, 3}), array({1}), full({1, 1, 3}, 7.f), 0, d);
  EXPECT_EQ(got(p), (std::vector<double>{0, 0, 0, 7, 7, 7}));
}

inline void check_index_errors(Device d) {
  array a = zeros({4, 5});
  // Out of range at evaluation (a slice of 2 from 4 leaves starts 0..3).
  EXPECT_TRUE(throws_error([&] { eval(gather(a, array({4}), 1, {1, 2}, d)); }, {"[gather]", "out of range"}));
  EXPECT_TRUE(throws_error([&] { eval(scatter_add(a, array({9}), zeros({1, 1, 5}), 0, d)); },
                           {"[scatter_add]"}));
}

inline void check_dynamic_slices(Device d) {
  array a = reshape(arange(0, 30, 1), {5, 6});
  array s = slice(a, array({1, 2}), {0, 1}, {2, 3}, d);
  EXPECT_EQ(got(s), (std::vector<double>{8, 9, 10, 14, 15, 16}));
  // Clamped: a start past the end gives the last slice that fits; negative wraps.
  EXPECT_EQ(got(slice(a, array({9}), {1}, {1, 2}, d)), (std::vector<double>{4, 5}));
  EXPECT_EQ(got(slice(a, array({-2}), {0}, {1, 1}, d)), (std::vector<double>{18}));
  array u = slice_update(a, full({1, 2}, -1), array({4, 5}), {0, 1}, d);
  EXPECT_EQ(got(u)[28], -1);
  EXPECT_EQ(got(u)[29], -1);
  EXPECT_EQ(got(u)[27], 27);
  // The start can be computed on the device: no host read in between.
  array start = add(array({1}), array({1}), d);
  EXPECT_EQ(got(slice(arange(0, 10, 1), start, {0}, {3}, d)), (std::vector<double>{2, 3, 4}));
}

inline void check_views(Device d) {
  array a = reshape(arange(0, 12, 1), {3, 4});
  array w = as_strided(a, {3, 2}, {4, 1}, 2, d);
  EXPECT_EQ(got(w), (std::vector<double>{2, 3, 6, 7, 10, 11}));
  // A transposed input is copied to row-major first.
  EXPECT_EQ(got(as_strided(transpose(a), {2}, {1}, 1, d)), (std::vector<double>{4, 8}));
  array f = array({1.0f, -2.0f}, {2});
  array bits = view(f, int32, d);
  EXPECT_EQ(got(bits), (std::vector<double>{1065353216, -1073741824}));
  array bytes = view(array({0x01020304}, {1}, int32), uint8, d);
  EXPECT_EQ(got(bytes), (std::vector<double>{4, 3, 2, 1}));
  EXPECT_EQ(got(view(transpose(reshape(arange(0, 8, 1, int8), {4, 2})), int32, d)),
            (std::vector<double>{0x06040200, 0x07050301}));
}

}  // namespace kiln::test
