// Array creation: constructors, zeros/ones/full, arange, linspace, eye,
// *_like, item/data accessors, sizes, copy and contiguous.
#include <cmath>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using namespace kiln;        // NOLINT
using namespace kiln::test;  // NOLINT
using kiln::array;

const std::vector<Dtype> kAllDtypes = {bool_, uint8, uint16, uint32, uint64, int8, int16, int32, int64, float16, bfloat16, float32, float64};

std::vector<double> filled(size_t n, double v) { return std::vector<double>(n, v); }

TEST(CreationTest, ZerosOnesEveryDtype) {
  for (Dtype t : kAllDtypes) {
    SCOPED_TRACE(dtype_name(t));
    array z = zeros({3, 5, 7}, t);
    EXPECT_EQ(z.dtype(), t);
    EXPECT_EQ(z.shape(), (Shape{3, 5, 7}));
    EXPECT_TRUE(all_close(z, filled(105, 0.0), 0.0));
    array o = ones({4, 1, 3}, t);
    EXPECT_EQ(o.dtype(), t);
    EXPECT_EQ(o.shape(), (Shape{4, 1, 3}));
    EXPECT_TRUE(all_close(o, filled(12, 1.0), 0.0));
  }
  EXPECT_EQ(zeros({2}).dtype(), float32);
  EXPECT_EQ(ones({2}).dtype(), float32);
  // 0-d and empty shapes.
  EXPECT_EQ(zeros({}).ndim(), 0);
  EXPECT_EQ(zeros({}).size(), 1u);
  EXPECT_EQ(ones({}).item<float>(), 1.0f);
  array e = zeros({0, 3});
  EXPECT_EQ(e.size(), 0u);
  EXPECT_EQ(e.shape(), (Shape{0, 3}));
  e.eval();
  EXPECT_TRUE(to_double(e).empty());
}

TEST(CreationTest, Full) {
  array a = full({2, 3}, 3.5f);
  EXPECT_EQ(a.dtype(), float32);
  EXPECT_TRUE(all_close(a, filled(6, 3.5), 0.0));
  array b = full({2, 2}, 7, int8);
  EXPECT_EQ(b.dtype(), int8);
  EXPECT_TRUE(all_close(b, filled(4, 7), 0.0));
  array c = full({3}, 2.7, int32);  // cast truncates
  EXPECT_EQ(c.dtype(), int32);
  EXPECT_TRUE(all_close(c, filled(3, 2.0), 0.0));
  array d = full({4}, 0.1, bfloat16);
  EXPECT_EQ(d.dtype(), bfloat16);
  EXPECT_TRUE(all_close(d, filled(4, static_cast<float>(bfloat16_t(0.1f))), 0.0));
  EXPECT_EQ(full({2}, int64_t{5}).dtype(), int64);
  EXPECT_EQ(full({2}, 1.0).dtype(), float64);
  // An array of values broadcasts over the shape.
  array row({1, 2, 3});
  array e = full({2, 3}, row);
  EXPECT_EQ(e.dtype(), int32);
  EXPECT_TRUE(all_close(e, {1, 2, 3, 1, 2, 3}, 0.0));
  array col(std::vector<float>{1.5f, -2.5f}, {2, 1});
  array f = full({2, 3}, col, float16);
  EXPECT_EQ(f.dtype(), float16);
  EXPECT_TRUE(all_close(f, {1.5, 1.5, 1.5, -2.5, -2.5, -2.5}, 0.0));
  EXPECT_TRUE(throws_error([&] { full({2, 3}, array({1, 2})); }, {}));
}

TEST(CreationTest, ZerosLikeOnesLike) {
  for (Dtype t : {bfloat16, int8, float64, bool_}) {
    array x = random_array({3, 4}, t);
    array z = zeros_like(x);
    array o = ones_like(transpose(x));
    EXPECT_EQ(z.dtype(), t);
    EXPECT_EQ(o.dtype(), t);
    EXPECT_EQ(z.shape(), (Shape{3, 4}));
    EXPECT_EQ(o.shape(), (Shape{4, 3}));
    EXPECT_TRUE(all_close(z, filled(12, 0), 0.0));
    EXPECT_TRUE(all_close(o, filled(12, 1), 0.0));
  }
}

TEST(CreationTest, ArangeFloat) {
  array a = arange(0.0, 1.0, 0.25);
  EXPECT_EQ(a.dtype(), float32);
  EXPECT_TRUE(all_close(a, {0, 0.25, 0.5, 0.75}, 0.0));
  array b = arange(5.0);
  EXPECT_EQ(b.dtype(), float32);
  EXPECT_TRUE(all_close(b, {0, 1, 2, 3, 4}, 0.0));
  array c = arange(1.0, 0.0, -0.3);
  EXPECT_EQ(c.shape(), Shape{4});
  EXPECT_TRUE(all_close(c, {1.0, 0.7, 0.4, 0.1}, 1e-6, 1e-7));
  array d = arange(0.0, 1.0, 0.1, float64);
  EXPECT_EQ(d.shape(), Shape{10});
  std::vector<double> want;
  for (int i = 0; i < 10; ++i) want.push_back(i * 0.1);
  EXPECT_TRUE(all_close(d, want, 1e-15, 1e-15));
  array e = arange(-3.0, 3.0, 1.5, int64);  // -3, -1.5, 0, 1.5 cast to int64
  EXPECT_EQ(e.dtype(), int64);
  EXPECT_EQ(e.shape(), Shape{4});
  array f = arange(2.0, 7.0, float16);
  EXPECT_EQ(f.dtype(), float16);
  EXPECT_TRUE(all_close(f, {2, 3, 4, 5, 6}, 0.0));
  // Empty ranges.
  EXPECT_EQ(arange(1.0, 0.0, 0.5).size(), 0u);
  EXPECT_EQ(arange(0.0, 1.0, -0.5).size(), 0u);
  // Many elements stay accurate.
  array g = arange(0.0, 100000.0, 1.0);
  std::vector<double> gv = to_double(g);
  ASSERT_EQ(gv.size(), 100000u);
  EXPECT_EQ(gv[99999], 99999.0);
  EXPECT_EQ(gv[12345], 12345.0);
}

TEST(CreationTest, ArangeInt) {
  array a = arange(5);
  EXPECT_EQ(a.dtype(), int32);
  EXPECT_TRUE(all_close(a, {0, 1, 2, 3, 4}, 0.0));
  array b = arange(2, 8);
  EXPECT_EQ(b.dtype(), int32);
  EXPECT_TRUE(all_close(b, {2, 3, 4, 5, 6, 7}, 0.0));
  array c = arange(10, 0, -3);
  EXPECT_EQ(c.dtype(), int32);
  EXPECT_TRUE(all_close(c, {10, 7, 4, 1}, 0.0));
  array d = arange(-5, 5, 4);
  EXPECT_TRUE(all_close(d, {-5, -1, 3}, 0.0));
  EXPECT_TRUE(all_close(arange(-1, -10, -4), {-1, -5, -9}, 0.0));
  EXPECT_EQ(arange(5, 0).size(), 0u);
  EXPECT_EQ(arange(0).size(), 0u);
  EXPECT_EQ(arange(0).shape(), Shape{0});
  EXPECT_TRUE(throws_error([] { arange(0, 10, 0); }, {}));
  EXPECT_TRUE(throws_error([] { arange(0.0, 1.0, 0.0); }, {}));
}

TEST(CreationTest, Linspace) {
  array a = linspace(0, 1, 5);
  EXPECT_EQ(a.dtype(), float32);
  EXPECT_TRUE(all_close(a, {0, 0.25, 0.5, 0.75, 1.0}, 0.0));
  array b = linspace(1, -1, 3);
  EXPECT_TRUE(all_close(b, {1, 0, -1}, 0.0, 1e-7));
  array c = linspace(0, 1);
  ASSERT_EQ(c.shape(), Shape{50});
  std::vector<double> cv = to_double(c);
  EXPECT_EQ(cv.front(), 0.0);
  EXPECT_NEAR(cv.back(), 1.0, 1e-7);
  for (int i = 0; i < 50; ++i) EXPECT_NEAR(cv[i], i / 49.0, 1e-6);
  array d = linspace(-2.5, 7.5, 11, float64);
  EXPECT_EQ(d.dtype(), float64);
  EXPECT_TRUE(all_close(d, {-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5}, 1e-15, 1e-15));
  EXPECT_TRUE(all_close(linspace(3, 9, 1), {3}, 0.0));
  EXPECT_EQ(linspace(3, 9, 0).size(), 0u);
  EXPECT_TRUE(all_close(linspace(0, 10, 6, int32), {0, 2, 4, 6, 8, 10}, 0.0));
  EXPECT_TRUE(throws_error([] { linspace(0, 1, -1); }, {}));
}

TEST(CreationTest, Eye) {
  auto eye_ref = [](int n, int m, int k) {
    std::vector<double> v(static_cast<size_t>(n) * m, 0.0);
    for (int i = 0; i < n; ++i)
      if (i + k >= 0 && i + k < m) v[static_cast<size_t>(i) * m + i + k] = 1.0;
    return v;
  };
  array i3 = eye(3);
  EXPECT_EQ(i3.dtype(), float32);
  EXPECT_EQ(i3.shape(), (Shape{3, 3}));
  EXPECT_TRUE(all_close(i3, eye_ref(3, 3, 0), 0.0));
  EXPECT_TRUE(all_close(eye(3, int32), eye_ref(3, 3, 0), 0.0));
  EXPECT_EQ(eye(3, int32).dtype(), int32);
  struct Case {
    int n, m, k;
  };
  for (auto c : {Case{3, 4, 1}, Case{4, 3, -1}, Case{3, 5, 2}, Case{5, 3, -2}, Case{2, 3, 5}, Case{3, 2, -4},
                 Case{1, 7, 0}, Case{6, 6, -5}}) {
    array e = eye(c.n, c.m, c.k);
    EXPECT_EQ(e.shape(), (Shape{c.n, c.m}));
    EXPECT_TRUE(all_close(e, eye_ref(c.n, c.m, c.k), 0.0)) << c.n << "x" << c.m << " k=" << c.k;
  }
  array b = eye(4, 4, 0, bool_);
  EXPECT_EQ(b.dtype(), bool_);
  EXPECT_TRUE(all_close(b, eye_ref(4, 4, 0), 0.0));
  EXPECT_TRUE(all_close(eye(2, 3, 1, bfloat16), eye_ref(2, 3, 1), 0.0));
}

TEST(CreationTest, ScalarConstructors) {
  struct Case {
    array a;
    Dtype dtype;
    double value;
  };
  const Case cases[] = {
      {array(3.5f), float32, 3.5},
      {array(2.25), float64, 2.25},
      {array(7), int32, 7},
      {array(int64_t{1} << 40), int64, std::ldexp(1.0, 40)},
      {array(uint8_t{200}), uint8, 200},
      {array(uint32_t{4000000000u}), uint32, 4e9},
      {array(int8_t{-5}), int8, -5},
      {array(true), bool_, 1},
      {array(float16_t(1.5f)), float16, 1.5},
      {array(bfloat16_t(-0.75f)), bfloat16, -0.75},
      {array(2.5, float16), float16, 2.5},
      {array(3.9f, int32), int32, 3},
      {array(-2, float32), float32, -2},
      {array(0.1, bfloat16), bfloat16, static_cast<float>(bfloat16_t(0.1f))},
      {array(5, bool_), bool_, 1},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(c.a.dtype(), c.dtype);
    EXPECT_EQ(c.a.ndim(), 0);
    EXPECT_EQ(c.a.size(), 1u);
    EXPECT_TRUE(c.a.shape().empty());
    EXPECT_TRUE(all_close(c.a, {c.value}, 0.0)) << dtype_name(c.dtype);
  }
}

TEST(CreationTest, ListAndVectorConstructors) {
  array a({1, 2, 3});
  EXPECT_EQ(a.dtype(), int32);
  EXPECT_EQ(a.shape(), Shape{3});
  EXPECT_TRUE(all_close(a, {1, 2, 3}, 0.0));
  array b({1.5f, 2.5f});
  EXPECT_EQ(b.dtype(), float32);
  array c({1, 2, 3}, float16);
  EXPECT_EQ(c.dtype(), float16);
  EXPECT_TRUE(all_close(c, {1, 2, 3}, 0.0));
  array d({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  EXPECT_EQ(d.shape(), (Shape{2, 3}));
  EXPECT_TRUE(all_close(d, {1, 2, 3, 4, 5, 6}, 0.0));
  array e(std::vector<double>{0.5, 1.5, 2.5, 3.5}, {2, 1, 2}, bfloat16);
  EXPECT_EQ(e.dtype(), bfloat16);
  EXPECT_EQ(e.shape(), (Shape{2, 1, 2}));
  EXPECT_TRUE(all_close(e, {0.5, 1.5, 2.5, 3.5}, 0.0));
  array f(std::vector<int64_t>{250, 2}, {2}, uint8);
  EXPECT_EQ(f.dtype(), uint8);
  EXPECT_TRUE(all_close(f, {250, 2}, 0.0));
  array g(std::vector<float>{4.0f}, {});
  EXPECT_EQ(g.ndim(), 0);
  EXPECT_EQ(g.item<float>(), 4.0f);
  array h({true, false});
  EXPECT_EQ(h.dtype(), bool_);
  // A 1-element list is 1-d, not 0-d.
  EXPECT_EQ(array({5}).shape(), Shape{1});

  // The data must fill the shape exactly.
  EXPECT_TRUE(throws_error([] { array(std::vector<float>(5), {2, 3}); }, {}));
  EXPECT_TRUE(throws_error([] { array(std::vector<float>(7), {2, 3}); }, {}));
  EXPECT_TRUE(throws_error([] { array({1, 2, 3}, Shape{2, 2}); }, {}));
  EXPECT_TRUE(throws_error([] { array(std::vector<int>{}, {1}); }, {}));
  // The source data is copied: changing it later does not change the array.
  std::vector<float> src = {1, 2, 3};
  array s(src, {3});
  src[0] = 100;
  EXPECT_TRUE(all_close(s, {1, 2, 3}, 0.0));
}

TEST(CreationTest, ItemAndData) {
  array a(2.5f);
  EXPECT_EQ(a.item<float>(), 2.5f);
  EXPECT_EQ(a.item<double>(), 2.5);
  EXPECT_EQ(a.item<int32_t>(), 2);
  EXPECT_EQ(array(-3.75).item<int64_t>(), -3);
  EXPECT_EQ(array(float16_t(0.5f)).item<float>(), 0.5f);
  EXPECT_EQ(array(1.5f).item<float16_t>().bits, float16_t(1.5f).bits);
  EXPECT_EQ(array(200, uint8).item<int>(), 200);
  EXPECT_TRUE(array(3).item<bool>());
  EXPECT_FALSE(array(0.0f).item<bool>());
  // A lazy result evaluates on item.
  EXPECT_EQ((array(2) + array(3)).item<int>(), 5);
  // A single element of a higher-dimensional array.
  EXPECT_EQ(array(std::vector<int>{9}, {1, 1}).item<int>(), 9);
  EXPECT_TRUE(throws_error([] { array({1, 2, 3}).item<int>(); }, {}));

  array v(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  const float* p = v.data<float>();
  ASSERT_NE(p, nullptr);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(p[i], i + 1.0f);
  EXPECT_EQ(v.strides(), (Strides{3, 1}));
  EXPECT_TRUE(v.is_row_contiguous());
  EXPECT_TRUE(throws_error([&] { v.data<int32_t>(); }, {}));
  EXPECT_TRUE(throws_error([&] { v.data<double>(); }, {}));
  EXPECT_TRUE(throws_error([&] { v.data<float16_t>(); }, {}));
  EXPECT_TRUE(throws_error([] { array({1, 2}).data<uint32_t>(); }, {}));
  EXPECT_TRUE(throws_error([] { array(1.0f, bfloat16).data<float16_t>(); }, {}));
  array hb = astype(v, bfloat16);
  EXPECT_EQ(static_cast<float>(hb.data<bfloat16_t>()[4]), 5.0f);
  // Writing through the mutable pointer of an evaluated array is visible.
  array w = copy(v);
  w.eval();
  w.data<float>()[0] = 42.0f;
  EXPECT_EQ(to_double(w)[0], 42.0);
}

TEST(CreationTest, SizesAndShape) {
  array a = zeros({2, 3, 4}, float16);
  EXPECT_EQ(a.size(), 24u);
  EXPECT_EQ(a.ndim(), 3);
  EXPECT_EQ(a.itemsize(), 2u);
  EXPECT_EQ(a.nbytes(), 48u);
  EXPECT_EQ(a.shape(0), 2);
  EXPECT_EQ(a.shape(2), 4);
  EXPECT_EQ(a.shape(-1), 4);
  EXPECT_EQ(a.shape(-3), 2);
  for (Dtype t : {bool_, uint8, uint16, uint32, uint64, int8, int16, int32, int64, float16, bfloat16, float32, float64}) {
    array x = zeros({5, 7}, t);
    EXPECT_EQ(x.itemsize(), size_of(t));
    EXPECT_EQ(x.nbytes(), 35 * size_of(t));
  }
  array s(1.0);
  EXPECT_EQ(s.size(), 1u);
  EXPECT_EQ(s.ndim(), 0);
  EXPECT_EQ(s.nbytes(), 8u);
  EXPECT_EQ(zeros({4, 0, 3}).nbytes(), 0u);
}

TEST(CreationTest, CopyMakesANewBuffer) {
  array a(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  array c = copy(a);
  EXPECT_NE(c.id(), a.id());
  EXPECT_EQ(c.shape(), a.shape());
  EXPECT_EQ(c.dtype(), float32);
  EXPECT_TRUE(all_close(c, {1, 2, 3, 4, 5, 6}, 0.0));
  EXPECT_NE(c.data<float>(), a.data<float>());
  // Copy of a transposed view is row-major.
  array t = copy(transpose(a));
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_TRUE(t.is_row_contiguous());
  EXPECT_EQ(t.strides(), (Strides{2, 1}));
  EXPECT_TRUE(all_close(t, {1, 4, 2, 5, 3, 6}, 0.0));
  const float* tp = t.data<float>();
  EXPECT_EQ(tp[1], 4.0f);
  // Copy of a broadcast view materializes it.
  array b = copy(broadcast_to(array({7, 8}), {3, 2}));
  EXPECT_TRUE(b.is_row_contiguous());
  EXPECT_TRUE(all_close(b, {7, 8, 7, 8, 7, 8}, 0.0));
  EXPECT_EQ(copy(array(2.5)).item<double>(), 2.5);
  EXPECT_EQ(copy(astype(a, int8)).dtype(), int8);
}

TEST(CreationTest, Contiguous) {
  array a(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  array c = contiguous(a);
  EXPECT_TRUE(c.is_row_contiguous());
  EXPECT_TRUE(all_close(c, {1, 2, 3, 4, 5, 6}, 0.0));
  EXPECT_EQ(c.data<float>(), a.data<float>());  // already contiguous: a view
  array t = transpose(a);
  array ct = contiguous(t);
  EXPECT_TRUE(ct.is_row_contiguous());
  EXPECT_EQ(ct.strides(), (Strides{2, 1}));
  EXPECT_TRUE(all_close(ct, {1, 4, 2, 5, 3, 6}, 0.0));
  const float* p = ct.data<float>();
  for (int i = 0; i < 6; ++i) EXPECT_EQ(p[i], (std::vector<float>{1, 4, 2, 5, 3, 6}[i]));
  array f = contiguous(slice(flip(a, {1}), {0, 0}, {2, 3}, {1, 2}));
  EXPECT_TRUE(f.is_row_contiguous());
  EXPECT_EQ(f.shape(), (Shape{2, 2}));
  EXPECT_TRUE(all_close(f, {3, 1, 6, 4}, 0.0));
  const float* fp = f.data<float>();
  EXPECT_EQ(fp[0], 3.0f);
  EXPECT_EQ(fp[3], 4.0f);
}

}  // namespace
