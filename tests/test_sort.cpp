// sort, argsort, partition, argpartition, topk, searchsorted: against
// numpy-style references in double on random data with ties and NaNs,
// sizes 0 to 100000, every axis, non-contiguous and broadcast inputs, every
// dtype; errors; gradients through the permutation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "test_layouts.h"
#include "test_util.h"

namespace kiln {
namespace {

using test::to_double;
const double kNaN = std::numeric_limits<double>::quiet_NaN();

bool nan_last_less(double a, double b) { return a < b || (std::isnan(b) && !std::isnan(a)); }

// Rows of x (row-major, shape s) along axis: the stable sorting permutation.
std::vector<std::vector<int64_t>> orders(const std::vector<double>& x, const Shape& s, int axis,
                                         std::vector<std::vector<int64_t>>* positions = nullptr) {
  int64_t outer = 1, inner = 1, n = s[axis];
  for (int d = 0; d < axis; ++d) outer *= s[d];
  for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  std::vector<std::vector<int64_t>> out;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      std::vector<int64_t> idx(n), pos(n);
      std::iota(idx.begin(), idx.end(), 0);
      for (int64_t k = 0; k < n; ++k) pos[k] = (o * n + k) * inner + i;
      std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return nan_last_less(x[pos[a]], x[pos[b]]); });
      out.push_back(idx);
      if (positions) positions->push_back(pos);
    }
  return out;
}

std::string format_shape(const Shape& s) { return test::fmt(std::vector<int>(s.begin(), s.end())); }

// Checks sort and argsort of a along axis against the stable reference.
void check_sort(const array& a, int axis) {
  int ax = axis < 0 ? axis + a.ndim() : axis;
  auto x = to_double(a);
  std::vector<std::vector<int64_t>> pos;
  auto ord = orders(x, a.shape(), ax, &pos);
  auto vs = to_double(sort(a, axis));
  auto is = to_double(argsort(a, axis));
  for (size_t r = 0; r < ord.size(); ++r)
    for (size_t k = 0; k < ord[r].size(); ++k) {
      double want = x[pos[r][ord[r][k]]];
      double got = vs[pos[r][k]];
      ASSERT_TRUE((std::isnan(want) && std::isnan(got)) || got == want)
          << "sort row " << r << " position " << k << ": got " << got << " want " << want << " " << format_shape(a.shape())
          << " " << dtype_name(a.dtype()) << " axis " << axis;
      ASSERT_EQ(is[pos[r][k]], static_cast<double>(ord[r][k]))
          << "argsort row " << r << " position " << k << " " << dtype_name(a.dtype()) << " axis " << axis;
    }
}

// Random values with many ties (and NaNs for floats).
array tied(const Shape& shape, Dtype t) {
  array v = test::random_array(shape, float64, -4, 4);
  array f = floor(v);
  if (is_floating_point(t)) {
    // About one in eight is NaN, one in sixteen is -0.0.
    array u = test::random_array(shape, float64, 0, 1);
    f = where(u < 0.125, array(kNaN), where(u < 0.1875, array(-0.0), f / 2.0));
  }
  if (t == bool_) f = f > 0.0;
  if (is_integral(t) && !is_signed(t)) f = abs(f);
  return astype(f, t);
}

TEST(Sort, EveryDtypeWithTiesAndNaNs) {
  for (Dtype t : {bool_, uint8, uint16, uint32, uint64, int8, int16, int32, int64, float16, bfloat16, float32, float64}) {
    check_sort(tied({5, 37}, t), 1);
    check_sort(tied({5, 37}, t), 0);
  }
}

TEST(Sort, SizesAndAxes) {
  for (int n : {0, 1, 7, 1025}) check_sort(tied({3, n}, float32), -1);
  check_sort(tied({100000}, float32), 0);
  check_sort(tied({3, 4, 5}, int32), 1);
  check_sort(tied({3, 4, 5}, float16), -3);
  // A large random row without ties: the CPU's sort against the reference.
  check_sort(test::random_array({1, 100000}), 1);
}

TEST(Sort, NonContiguousAndBroadcastInputs) {
  for (auto layout : test::kLayouts) {
    array a = test::make_input({6, 9}, layout, [](const Shape& s) { return tied(s, float32); });
    check_sort(a, 0);
    check_sort(a, 1);
  }
}

TEST(Sort, FlattenedAndNaNLast) {
  array a = array({3.0, kNaN, -1.0, 2.0, kNaN, -0.0, 0.0}, {7}, float64);
  auto v = to_double(sort(reshape(a, {7, 1})));
  EXPECT_EQ(v[0], -1.0);
  EXPECT_TRUE(std::isnan(v[5]) && std::isnan(v[6]));
  // -0.0 and 0.0 are equal: stable order keeps -0.0 (index 5) first.
  auto i = to_double(argsort(a));
  EXPECT_EQ(i, (std::vector<double>{2, 5, 6, 3, 0, 1, 4}));
  EXPECT_EQ(argsort(a).dtype(), uint32);
  EXPECT_TRUE(std::signbit(v[1]));
}

// A valid partition: position kth holds the sorted value, nothing larger
// before it, nothing smaller after it, and the values are a permutation.
void check_partition(const array& a, int kth, int axis) {
  int ax = axis < 0 ? axis + a.ndim() : axis;
  int n = a.shape(ax);
  int k = kth < 0 ? kth + n : kth;
  auto x = to_double(a);
  std::vector<std::vector<int64_t>> pos;
  auto ord = orders(x, a.shape(), ax, &pos);
  auto p = to_double(partition(a, kth, axis));
  auto ip = to_double(argpartition(a, kth, axis));
  for (size_t r = 0; r < ord.size(); ++r) {
    double want = x[pos[r][ord[r][k]]];
    double got = p[pos[r][k]];
    ASSERT_TRUE((std::isnan(want) && std::isnan(got)) || got == want) << "row " << r << " kth " << kth;
    std::vector<double> row, taken;
    for (int j = 0; j < n; ++j) {
      double v = p[pos[r][j]];
      if (j < k) {
        ASSERT_FALSE(nan_last_less(want, v)) << "row " << r << " position " << j;
      }
      if (j > k) {
        ASSERT_FALSE(nan_last_less(v, want)) << "row " << r << " position " << j;
      }
      // argpartition indexes the same permutation.
      double via = x[pos[r][static_cast<int64_t>(ip[pos[r][j]])]];
      ASSERT_TRUE((std::isnan(v) && std::isnan(via)) || v == via) << "argpartition row " << r << " position " << j;
      row.push_back(x[pos[r][j]]);
      taken.push_back(v);
    }
    std::sort(row.begin(), row.end(), nan_last_less);
    std::sort(taken.begin(), taken.end(), nan_last_less);
    for (int j = 0; j < n; ++j) {
      ASSERT_TRUE((std::isnan(row[j]) && std::isnan(taken[j])) || row[j] == taken[j]) << "not a permutation";
    }
  }
}

TEST(Partition, ValidPartitions) {
  for (Dtype t : {bool_, uint8, int8, int32, int64, float16, bfloat16, float32, float64}) {
    check_partition(tied({4, 33}, t), 5, 1);
    check_partition(tied({4, 33}, t), -1, 0);
  }
  for (int n : {1, 7, 1025}) check_partition(tied({2, n}, float32), n / 2, 1);
  check_partition(tied({100000}, float32), 50000, 0);
  for (auto layout : test::kLayouts) {
    check_partition(test::make_input({6, 9}, layout, [](const Shape& s) { return tied(s, float32); }), 4, 0);
  }
  array a = tied({3, 4, 5}, float64);
  auto flat = to_double(partition(a, 7));
  EXPECT_EQ(partition(a, 7).shape(), Shape{60});
  auto want = to_double(sort(a));
  EXPECT_TRUE(flat[7] == want[7] || (std::isnan(flat[7]) && std::isnan(want[7])));
}

TEST(TopK, MatchesMLXSemantics) {
  array a = test::random_array({4, 10});
  // The last k of partition(a, -k), unsorted: as a multiset, the k largest.
  array top = topk(a, 3, 1);
  EXPECT_EQ(top.shape(), (Shape{4, 3}));
  auto got = to_double(sort(top, 1));
  auto all = to_double(sort(a, 1));
  for (int r = 0; r < 4; ++r)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(got[r * 3 + j], all[r * 10 + 7 + j]);
  EXPECT_EQ(topk(a, 0, 1).shape(), (Shape{4, 0}));
  EXPECT_EQ(to_double(topk(a, 10, 1)), to_double(a));  // the whole input, as is
  EXPECT_EQ(topk(a, 2).shape(), Shape{2});
  EXPECT_EQ(to_double(topk(a, 1))[0], *std::max_element(all.begin(), all.end()));
}

TEST(SearchSorted, LeftRightNaNAndVmap) {
  array seq = array({-1.0, 0.0, 0.0, 2.5, kNaN}, {5}, float64);
  array v = array({-2.0, 0.0, 1.0, 2.5, 3.0, kNaN}, {2, 3}, float64);
  EXPECT_EQ(to_double(searchsorted(seq, v)), (std::vector<double>{0, 1, 3, 3, 4, 4}));
  EXPECT_EQ(to_double(searchsorted(seq, v, "right")), (std::vector<double>{0, 3, 3, 4, 4, 5}));
  EXPECT_EQ(searchsorted(seq, v).dtype(), uint32);
  EXPECT_EQ(searchsorted(seq, v).shape(), (Shape{2, 3}));
  // Promotion: int sequence, float values.
  array iseq = array({1, 3, 5}, {3}, int32);
  EXPECT_EQ(to_double(searchsorted(iseq, array({2.5f, 3.0f}, {2}))), (std::vector<double>{1, 1}));
  // Random, strided values against std::lower_bound.
  array s = sort(test::random_array({1000}));
  array q = transpose(test::random_array({50, 40}));
  auto sv = to_double(s), qv = to_double(q), got = to_double(searchsorted(s, q, "left"));
  for (size_t i = 0; i < qv.size(); ++i) {
    EXPECT_EQ(got[i], std::lower_bound(sv.begin(), sv.end(), qv[i]) - sv.begin());
  }
  // vmap over the values, not over the sequence (MLX).
  auto f = vmap([&](const array& x) { return searchsorted(s, x); });
  EXPECT_EQ(to_double(f(q)), got);
  auto g = vmap([&](const array& x) { return searchsorted(x, q); });
  EXPECT_TRUE(test::throws_error([&] { g(reshape(s, {10, 100})).eval(); }, {"[searchsorted]", "sorted sequence"}));
  EXPECT_EQ(to_double(searchsorted(zeros({0}), q)), std::vector<double>(q.size(), 0.0));
}

TEST(Sort, Errors) {
  array a = test::random_array({3, 4});
  EXPECT_TRUE(test::throws_error([&] { sort(a, 2); }, {"[sort]", "axis 2", "(3,4) float32"}));
  EXPECT_TRUE(test::throws_error([&] { argsort(a, -3); }, {"[argsort]", "axis -3"}));
  EXPECT_TRUE(test::throws_error([&] { partition(a, 4, 1); }, {"[partition]", "kth 4", "size 4"}));
  EXPECT_TRUE(test::throws_error([&] { argpartition(a, -4, 0); }, {"[argpartition]", "kth -4"}));
  EXPECT_TRUE(test::throws_error([&] { topk(a, 5, 1); }, {"[topk]", "k 5"}));
  EXPECT_TRUE(test::throws_error([&] { topk(a, -1); }, {"[topk]", "k -1"}));
  EXPECT_TRUE(test::throws_error([&] { searchsorted(a, a); }, {"[searchsorted]", "1-d"}));
  EXPECT_TRUE(test::throws_error([&] { searchsorted(reshape(a, {-1}), a, "middle"); }, {"[searchsorted]", "middle"}));
  EXPECT_TRUE(test::throws_error([&] { sort(array(1.0f), 0); }, {"[sort]"}));
  EXPECT_EQ(sort(array(1.0f)).shape(), Shape{1});
}

TEST(Sort, GradientsScatterThroughThePermutation) {
  array x = test::random_array({4, 7}, float64);
  array w = test::random_array({4, 7}, float64);
  for (int axis : {0, 1}) {
    auto f = [&](const array& v) { return sum(sort(v, axis) * w); };
    // d/dx_j sum_k w_k sort(x)_k = w at the rank of x_j.
    auto g = to_double(grad(f)(x));
    auto idx = to_double(argsort(x, axis));
    auto wv = to_double(w);
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 7; ++c) {
        int pos = r * 7 + c;
        int src = axis == 1 ? r * 7 + static_cast<int>(idx[pos]) : static_cast<int>(idx[pos]) * 7 + c;
        EXPECT_NEAR(g[src], wv[pos], 1e-12);
      }
    // jvp gathers the tangent through the same permutation.
    auto [out, tan] = jvp([&](const array& v) { return sort(v, axis); }, x, w);
    EXPECT_EQ(to_double(tan), to_double(take_along_axis(w, argsort(x, axis), axis)));
  }
  // Partition moves the cotangent with its permutation too.
  auto fp = [&](const array& v) { return sum(partition(v, 3, 1) * w); };
  auto gp = to_double(grad(fp)(x));
  auto ip = to_double(argpartition(x, 3, 1));
  auto wv = to_double(w);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 7; ++c) EXPECT_NEAR(gp[r * 7 + static_cast<int>(ip[r * 7 + c])], wv[r * 7 + c], 1e-12);
  // The indices have zero derivative.
  auto fa = [&](const array& v) { return sum(astype(argsort(v, 1), float64) * v); };
  EXPECT_TRUE(test::all_close(grad(fa)(x), to_double(astype(argsort(x, 1), float64)), 1e-12));
}

TEST(Sort, VmapMatchesALoop) {
  array x = test::random_array({3, 5, 6});
  for (int in_axis : {0, 1, 2}) {
    auto f = vmap([](const array& v) { return sort(v, 0); }, in_axis);
    auto g = vmap([](const array& v) { return argpartition(v, 2, -1); }, in_axis);
    array y = f(x), z = g(x);
    for (int b = 0; b < x.shape(in_axis); ++b) {
      Shape start(3, 0), stop = x.shape();
      start[in_axis] = b;
      stop[in_axis] = b + 1;
      array xb = squeeze(slice(x, start, stop), in_axis);
      EXPECT_EQ(to_double(take(y, array(b), 0)), to_double(sort(xb, 0)));
      EXPECT_EQ(to_double(take(z, array(b), 0)), to_double(argpartition(xb, 2, -1)));
    }
  }
}

TEST(Unstack, ShapesValuesAndErrors) {
  array a = test::random_array({3, 4, 2});
  auto parts = unstack(a, -2);
  ASSERT_EQ(parts.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(parts[i].shape(), (Shape{3, 2}));
    EXPECT_EQ(to_double(parts[i]), to_double(take(a, array(i), 1)));
  }
  EXPECT_EQ(unstack(a).size(), 3u);
  EXPECT_TRUE(unstack(zeros({0, 3})).empty());
  EXPECT_TRUE(test::throws_error([&] { unstack(a, 3); }, {"[unstack]", "axis 3"}));
}

}  // namespace
}  // namespace kiln
