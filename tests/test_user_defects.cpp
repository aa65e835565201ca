// Defects a new user hit when trying Kiln as an MLX user would (issue 8):
// each test failed before its fix.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "core/primitive.h"
#include "test_layouts.h"
#include "test_util.h"

namespace kiln::test {
namespace {

// Sum over `axis` of a [rows, cols] double matrix.
std::vector<double> reduce_ref(const std::vector<double>& v, int rows, int cols, int axis, bool product) {
  std::vector<double> out(axis == 0 ? cols : rows, product ? 1.0 : 0.0);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      double& o = out[axis == 0 ? c : r];
      o = product ? o * v[r * cols + c] : o + v[r * cols + c];
    }
  }
  return out;
}

TEST(UserDefects, SumOfSmallUnsignedWidensToUint32) {
  // 9e6 * 255 exceeds INT32_MAX but fits uint32: MLX sums uint8 in uint32.
  const int n = 9'000'000;
  array big = full({n}, array(uint8_t{255}));
  array total = sum(big);
  EXPECT_EQ(total.dtype(), uint32);
  EXPECT_EQ(total.item<uint32_t>(), 255u * static_cast<uint32_t>(n));
  // 255^4 exceeds INT32_MAX too.
  array p = prod(array({uint8_t{255}, uint8_t{255}, uint8_t{255}, uint8_t{255}}));
  EXPECT_EQ(p.dtype(), uint32);
  EXPECT_EQ(p.item<uint32_t>(), 255u * 255u * 255u * 255u);

  EXPECT_EQ(sum(array({int8_t{1}})).dtype(), int32);
  EXPECT_EQ(sum(array({true, false})).dtype(), int32);
  EXPECT_EQ(sum(array({1u, 2u})).dtype(), uint32);
  EXPECT_EQ(prod(array({int64_t{1}})).dtype(), int64);
  EXPECT_EQ(prod(array({int8_t{1}})).dtype(), int32);

  // Random uint8 data in every layout, odd sizes, both axes.
  for (Layout layout : kLayouts) {
    array x = make_input({37, 53}, layout, [](const Shape& s) { return random_array(s, uint8, 0, 256); });
    std::vector<double> v = to_double(x);
    for (int axis : {0, 1}) {
      array s = sum(x, axis);
      EXPECT_EQ(s.dtype(), uint32);
      EXPECT_TRUE(all_close(s, reduce_ref(v, 37, 53, axis, false), 0.0)) << layout_name(layout) << " axis " << axis;
    }
  }
}

TEST(UserDefects, SplitWithDecreasingIndicesFollowsNumpy) {
  std::vector<array> parts = split(arange(6), {4, 2}, 0);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].shape(), Shape{4});
  EXPECT_EQ(parts[1].shape(), Shape{0});
  EXPECT_EQ(parts[2].shape(), Shape{4});
  EXPECT_TRUE(all_close(parts[2], {2, 3, 4, 5}, 0.0));
  // Negative indices count from the end; the axis defaults to 0.
  parts = split(reshape(arange(12), {6, 2}), Shape{-2});
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].shape(), (Shape{4, 2}));
  EXPECT_TRUE(all_close(parts[1], {8, 9, 10, 11}, 0.0));
}

TEST(UserDefects, IntegerArangeStepsInTheOutputType) {
  EXPECT_TRUE(all_close(arange(0., 5., 1.5, int32), {0, 1, 2, 3}, 0.0));
  // numpy: np.arange(-3, 3, 0.5, dtype=int) steps by int(-2.5) - (-3) = 1.
  EXPECT_TRUE(all_close(arange(-3., 3., 0.5, int32), {-3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8}, 0.0));
  EXPECT_TRUE(all_close(arange(1., 10., 2.5, uint8), {1, 3, 5, 7}, 0.0));
  // Floating dtypes are unchanged.
  EXPECT_TRUE(all_close(arange(0., 5., 1.5, float32), {0, 1.5, 3, 4.5}, 0.0));
  EXPECT_TRUE(throws_error([] { arange(10, bool_); }, {"[arange]", "bool"}));
  EXPECT_TRUE(throws_error([] { arange(0., 5., 1., bool_); }, {"[arange]", "bool"}));
}

TEST(UserDefects, BoolArraysFromListsAndVectors) {
  array a({true, false, true, false}, {2, 2});
  EXPECT_EQ(a.dtype(), bool_);
  EXPECT_EQ(a.shape(), (Shape{2, 2}));
  EXPECT_TRUE(all_close(a, {1, 0, 1, 0}, 0.0));
  std::vector<bool> v{false, true, true};
  array b(v, {3, 1});
  EXPECT_EQ(b.dtype(), bool_);
  EXPECT_TRUE(all_close(b, {0, 1, 1}, 0.0));
  array c(v, {3}, float32);
  EXPECT_EQ(c.dtype(), float32);
  EXPECT_TRUE(all_close(c, {0, 1, 1}, 0.0));
  EXPECT_TRUE(throws_error([&] { array(v, {2}); }, {"[array]", "3 values"}));
}

TEST(UserDefects, PowerOnBoolMatchesZeroOnePower) {
  // Broadcast [4,1] ** [1,3] and a transposed operand, against 0/1 powers.
  array a = random_array({4, 1}, bool_);
  array b = transpose(random_array({3, 1}, bool_));
  array r = power(a, b);
  EXPECT_EQ(r.dtype(), bool_);
  std::vector<double> va = to_double(a), vb = to_double(b), want;
  for (double x : va) {
    for (double y : vb) want.push_back(std::pow(x, y));
  }
  EXPECT_TRUE(all_close(r, want, 0.0));
  EXPECT_TRUE(all_close(power(array({false, false, true, true}), array({false, true, false, true})), {1, 0, 1, 1}, 0.0));
  EXPECT_TRUE(throws_error([] { power(array({true, false}), array({true, false, true})); }, {"[power]"}));
}

TEST(UserDefects, BoolMisuseThrowsAndBoolRandintWorks) {
  EXPECT_TRUE(throws_error([] { negative(array({true})); }, {"[negative]", "bool"}));
  EXPECT_TRUE(throws_error([] { -array({true}); }, {"[negative]", "bool"}));
  EXPECT_TRUE(throws_error([] { random::bernoulli(array({1, 0}, int32)); }, {"bernoulli", "int32"}));

  array r = random::randint(0, 2, {1000}, bool_, random::key(3));
  EXPECT_EQ(r.dtype(), bool_);
  int trues = sum(r).item<int>();
  EXPECT_GT(trues, 400);
  EXPECT_LT(trues, 600);

  EXPECT_TRUE(throws_error([] { compile(nullptr); }, {"[compile]"}));
  EXPECT_TRUE(throws_error([] { compile(ArrayFn{}); }, {"[compile]"}));
}

TEST(UserDefects, FlattenClampsAxesLikeMlx) {
  array x = random_array({2, 3, 4});
  EXPECT_EQ(flatten(x, 1, 3).shape(), (Shape{2, 12}));
  EXPECT_EQ(flatten(x, -7, 1).shape(), (Shape{6, 4}));
  EXPECT_TRUE(all_close(flatten(x, 1, 3), to_double(x), 0.0));
  EXPECT_TRUE(throws_error([&] { flatten(x, 3, 5); }, {"[flatten]"}));
  EXPECT_TRUE(throws_error([&] { flatten(x, 0, -5); }, {"[flatten]"}));
  EXPECT_TRUE(throws_error([&] { flatten(x, 2, 1); }, {"[flatten]"}));
}

TEST(UserDefects, HalfTypesCompareAndComputeLikeFloat) {
  float16_t h1(1.5f), h2(1.5f), h3(2.0f);
  EXPECT_TRUE(h1 == h2);
  EXPECT_TRUE(h1 != h3);
  EXPECT_TRUE(h1 < h3 && h3 > h1 && h1 <= h2 && h1 >= h2);
  EXPECT_TRUE(h1 == 1.5f && 2.0 == h3 && h3 == 2);
  EXPECT_EQ(h1 + h3, 3.5f);
  EXPECT_EQ(h3 * h3 - h1, 2.5f);
  EXPECT_EQ(-h1, -1.5f);
  bfloat16_t b1(0.5f), b2(0.5f);
  EXPECT_TRUE(b1 == b2 && !(b1 != b2));
  EXPECT_EQ(b1 / b2, 1.0f);
  EXPECT_TRUE(h1 > b1);
}

TEST(UserDefects, EmptyBroadcastIsRowContiguous) {
  EXPECT_TRUE(broadcast_to(array(1.f), {1, 0}).is_row_contiguous());
  EXPECT_TRUE(broadcast_to(array({1.f, 2.f}), {0, 2}).is_row_contiguous());
}

TEST(UserDefects, MlxOverloadsExist) {
  array k = random::key(7);
  EXPECT_TRUE(all_close(random::normal({5}, k), to_double(random::normal({5}, float32, k)), 0.0));
  EXPECT_TRUE(all_close(random::uniform({5}, k), to_double(random::uniform({5}, float32, k)), 0.0));
  // Array loc and scale broadcast against the samples.
  array z = random::normal({5}, float32, std::nullopt, std::nullopt, k);
  array n2 = random::normal({5}, float32, array(3.0f), array(2.0f), k);
  std::vector<double> want;
  for (double v : to_double(z)) want.push_back(3.0 + 2.0 * v);
  EXPECT_TRUE(all_close(n2, want, 1e-6));
  EXPECT_TRUE(all_close(random::normal({5}, 3.0f, 2.0f, k), want, 1e-6));
  EXPECT_EQ(random::uniform(0.0f, 10.0, {3}).shape(), Shape{3});
  EXPECT_EQ(random::bernoulli(0.5f, {3, 2}).shape(), (Shape{3, 2}));
  EXPECT_EQ(random::bernoulli().dtype(), bool_);

  array x = random_array({3, 5});
  Stream cpu = default_stream(Device::cpu);
  EXPECT_TRUE(all_close(sum(x, cpu), {sum(x).item<double>()}, 0.0));
  EXPECT_EQ(mean(x, cpu).ndim(), 0);
  EXPECT_EQ(max(x, cpu).ndim(), 0);
  EXPECT_EQ(min(x, cpu).ndim(), 0);
  EXPECT_EQ(prod(x, cpu).ndim(), 0);
  EXPECT_EQ(all(x, cpu).ndim(), 0);
  EXPECT_EQ(any(x, cpu).ndim(), 0);
  EXPECT_EQ(var(x, cpu).ndim(), 0);
  EXPECT_EQ(logsumexp(x, cpu).ndim(), 0);
  EXPECT_EQ(argmax(x, cpu).ndim(), 0);
  EXPECT_EQ(argmin(x, cpu).ndim(), 0);
  EXPECT_EQ(flatten(x, cpu).shape(), Shape{15});
  EXPECT_TRUE(all_close(flip(x, 1), to_double(flip(x, std::vector<int>{1})), 0.0));

  array zi = zeros_like(x, int32);
  EXPECT_EQ(zi.dtype(), int32);
  EXPECT_TRUE(all_close(zi, std::vector<double>(15, 0.0), 0.0));
  array oh = ones_like(x, float16);
  EXPECT_EQ(oh.dtype(), float16);
  EXPECT_TRUE(all_close(oh, std::vector<double>(15, 1.0), 0.0));
  EXPECT_EQ(full_like(x, 2.5f).dtype(), float32);
  array fd = full_like(x, 2.5, float64);
  EXPECT_EQ(fd.dtype(), float64);
  EXPECT_TRUE(all_close(fd, std::vector<double>(15, 2.5), 0.0));
  EXPECT_EQ(zeros({2}, cpu).dtype(), float32);
  EXPECT_EQ(eye(2, 3, cpu).shape(), (Shape{2, 3}));

  EXPECT_TRUE(all_close(linspace(0.0, 1.0, 5, false), {0, 0.2, 0.4, 0.6, 0.8}, 1e-7));
  EXPECT_TRUE(all_close(linspace(0.0, 1.0, 5, true), {0, 0.25, 0.5, 0.75, 1.0}, 1e-7));
  EXPECT_TRUE(all_close(linspace(2.0, 4.0, 3, float64), {2, 3, 4}, 0.0));
  EXPECT_TRUE(all_close(arange(0.0, 1.0, 0.25, cpu), {0, 0.25, 0.5, 0.75}, 0.0));
}

TEST(UserDefects, DevicesAndStreamsOrderAndScope) {
  Device cpu = Device::cpu;
  EXPECT_TRUE(cpu == Device::cpu);
  EXPECT_TRUE(Device(Device::cpu, 0) < Device(Device::cpu, 1));
  EXPECT_TRUE(Device(Device::cpu, 3) < Device(Device::gpu, 0));
  Stream s0 = default_stream(cpu);
  Stream s1 = new_stream(cpu);
  std::set<Stream> streams{s1, s0, s1};
  EXPECT_EQ(streams.size(), 2u);
  std::map<Device, int> by_device{{Device(Device::gpu), 1}, {cpu, 0}};
  EXPECT_EQ(by_device.begin()->first, cpu);

  {
    StreamContext ctx(s1);
    EXPECT_EQ(to_stream({}), s1);
    EXPECT_EQ(default_stream(cpu), s1);
    array y = add(random_array({3}), array(1.0f));
    EXPECT_EQ(y.primitive()->stream(), s1);
    EXPECT_TRUE(all_close(sum(ones({4})), {4.0}, 0.0));
  }
  EXPECT_EQ(to_stream({}), s0);
  EXPECT_EQ(default_stream(cpu), s0);
  EXPECT_TRUE(throws_error([] { StreamContext ctx{StreamOrDevice{}}; }, {"[StreamContext]"}));
}

}  // namespace
}  // namespace kiln::test
