// Matrix-building, contraction and rearranging ops of issue 9 (tri, tril,
// triu, diag, diagonal, trace, identity, tensordot, outer, inner, kron,
// addmm, atleast_nd, moveaxis, unflatten, roll, meshgrid) against naive
// double-precision references on random data, odd sizes and
// non-contiguous inputs.
#include <gtest/gtest.h>

#include <cmath>

#include "test_layouts.h"
#include "test_util.h"

namespace kiln::test {
namespace {

// Value of a row-major [.., rows, cols] array at (batch, i, j).
struct Mat {
  std::vector<double> v;
  int rows, cols;
  double at(int b, int i, int j) const { return v[(static_cast<size_t>(b) * rows + i) * cols + j]; }
};

Mat mat(const array& a) { return {to_double(a), a.shape(-2), a.shape(-1)}; }

TEST(OpsMatrix, TriTrilTriu) {
  for (int k : {-2, 0, 1, 4}) {
    array t = tri(5, 7, k, float32);
    std::vector<double> want;
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 7; ++j) want.push_back(j <= i + k);
    EXPECT_TRUE(all_close(t, want, 0.0)) << "k " << k;
  }
  EXPECT_EQ(tri(3, int32).dtype(), int32);
  EXPECT_TRUE(all_close(tri(3, bool_), {1, 0, 0, 1, 1, 0, 1, 1, 1}, 0.0));

  for (Layout layout : kLayouts) {
    array x = make_input({3, 5, 6}, layout, [](const Shape& s) { return random_array(s, float32); });
    Mat m = mat(x);
    for (int k : {-1, 0, 2}) {
      std::vector<double> lo, up;
      for (int b = 0; b < 3; ++b)
        for (int i = 0; i < 5; ++i)
          for (int j = 0; j < 6; ++j) {
            lo.push_back(j <= i + k ? m.at(b, i, j) : 0.0);
            up.push_back(j >= i + k ? m.at(b, i, j) : 0.0);
          }
      EXPECT_TRUE(all_close(tril(x, k), lo, 0.0)) << layout_name(layout) << " k " << k;
      EXPECT_TRUE(all_close(triu(x, k), up, 0.0)) << layout_name(layout) << " k " << k;
    }
  }
  EXPECT_EQ(tril(random_array({4, 4}, int8)).dtype(), int8);
  EXPECT_TRUE(throws_error([] { tril(random_array({4})); }, {"[tril]", "(4)"}));
  EXPECT_TRUE(throws_error([] { triu(random_array({})); }, {"[triu]"}));
}

TEST(OpsMatrix, DiagonalDiagTraceIdentity) {
  // Diagonal of the (0, 2) planes of a transposed 3-d array, several offsets.
  array x = transpose(random_array({6, 4, 5}), {1, 2, 0});  // shape [4, 5, 6]
  std::vector<double> v = to_double(x);
  auto at = [&](int i, int j, int k) { return v[(i * 5 + j) * 6 + k]; };
  for (int off : {-2, 0, 3, 7}) {
    int off0 = std::max(-off, 0), off2 = std::max(off, 0);
    int n = std::max(0, std::min(4 - off0, 6 - off2));
    array d = diagonal(x, off, 0, 2);
    ASSERT_EQ(d.shape(), (Shape{5, n})) << off;
    std::vector<double> want;
    for (int j = 0; j < 5; ++j)
      for (int t = 0; t < n; ++t) want.push_back(at(off0 + t, j, off2 + t));
    EXPECT_TRUE(all_close(d, want, 0.0)) << "offset " << off;
    // trace sums the same elements over the last axis.
    std::vector<double> tr(5, 0.0);
    for (int j = 0; j < 5; ++j)
      for (int t = 0; t < n; ++t) tr[j] += at(off0 + t, j, off2 + t);
    EXPECT_TRUE(all_close(trace(x, off, 0, -1), tr, 1e-6, 1e-6)) << "offset " << off;
  }
  // Axes in reverse order read the transposed planes.
  array m = random_array({4, 7});
  EXPECT_TRUE(all_close(diagonal(m, 1, 1, 0), to_double(diagonal(transpose(m), 1)), 0.0));
  EXPECT_TRUE(all_close(diag(m, -1), to_double(diagonal(m, -1)), 0.0));

  // diag of a vector builds a matrix with it on diagonal k.
  array vec = random_array({3}, int32, -9, 9);
  std::vector<double> vv = to_double(vec);
  for (int k : {0, 2, -1}) {
    int n = 3 + std::abs(k);
    std::vector<double> want(n * n, 0.0);
    for (int t = 0; t < 3; ++t) want[(t + std::max(-k, 0)) * n + t + std::max(k, 0)] = vv[t];
    array d = diag(vec, k);
    EXPECT_EQ(d.dtype(), int32);
    EXPECT_EQ(d.shape(), (Shape{n, n}));
    EXPECT_TRUE(all_close(d, want, 0.0)) << "k " << k;
  }
  EXPECT_EQ(diag(array(std::vector<float>{}, {0})).shape(), (Shape{0, 0}));

  array mi = random_array({3, 3}, int8, -5, 5);
  std::vector<double> vm = to_double(mi);
  EXPECT_EQ(trace(mi).dtype(), int32);  // widened as sum widens int8
  EXPECT_TRUE(all_close(trace(mi), {vm[0] + vm[4] + vm[8]}, 0.0));
  EXPECT_EQ(trace(mi, 0, 0, 1, float32).dtype(), float32);
  EXPECT_TRUE(all_close(identity(3), {1, 0, 0, 0, 1, 0, 0, 0, 1}, 0.0));
  EXPECT_EQ(identity(2, int32).dtype(), int32);
  EXPECT_TRUE(throws_error([&] { diagonal(m, 0, 1, 1); }, {"[diagonal]", "same axis"}));
  EXPECT_TRUE(throws_error([&] { diagonal(random_array({3})); }, {"[diagonal]"}));
  EXPECT_TRUE(throws_error([&] { diag(random_array({2, 2, 2})); }, {"[diag]"}));
  EXPECT_TRUE(throws_error([&] { trace(m, 0, 0, 3); }, {"[trace]"}));
}

// sum over k of a[free_a..., k...] b[k..., free_b...] for tensordot's
// default: a [2,3,4,5] with b [4,5,6] over a's last two axes.
TEST(OpsMatrix, TensordotOuterInner) {
  array a = random_array({2, 3, 4, 5});
  array b = transpose(random_array({6, 5, 4}));  // [4, 5, 6], non-contiguous
  std::vector<double> va = to_double(a), vb = to_double(b), want;
  for (int i = 0; i < 6; ++i) {
    for (int c = 0; c < 6; ++c) {
      double s = 0;
      for (int k = 0; k < 20; ++k) s += va[i * 20 + k] * vb[k * 6 + c];
      want.push_back(s);
    }
  }
  array r = tensordot(a, b);
  EXPECT_EQ(r.shape(), (Shape{2, 3, 6}));
  EXPECT_TRUE(all_close(r, want, 1e-5, 1e-5));
  // The same contraction named by axes, in another order: a's axis 3 with
  // b's axis 1 and a's axis 2 with b's axis 0.
  EXPECT_TRUE(all_close(tensordot(a, b, {3, 2}, {1, 0}), want, 1e-5, 1e-5));
  EXPECT_TRUE(all_close(tensordot(a, b, {-1, -2}, {-2, -3}), want, 1e-5, 1e-5));
  // axis 0 is the outer product.
  EXPECT_EQ(tensordot(random_array({2}), random_array({3}), 0).shape(), (Shape{2, 3}));
  EXPECT_TRUE(throws_error([&] { tensordot(a, b, {0}, {0}); }, {"[tensordot]", "differ"}));
  EXPECT_TRUE(throws_error([&] { tensordot(a, b, {0, 1}, {0}); }, {"[tensordot]"}));
  EXPECT_TRUE(throws_error([&] { tensordot(a, b, 5); }, {"[tensordot]"}));

  array u = random_array({2, 2}), w = random_array({3}, int32, -5, 5);
  std::vector<double> vu = to_double(u), vw = to_double(w), o;
  for (double p : vu)
    for (double q : vw) o.push_back(p * q);
  EXPECT_EQ(outer(u, w).shape(), (Shape{4, 3}));
  EXPECT_TRUE(all_close(outer(u, w), o, 1e-6));

  array p = random_array({3, 4}), q = random_array({2, 4}, int32, -5, 5);
  std::vector<double> vp = to_double(p), vq = to_double(q), in;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) {
      double s = 0;
      for (int k = 0; k < 4; ++k) s += vp[i * 4 + k] * vq[j * 4 + k];
      in.push_back(s);
    }
  EXPECT_TRUE(all_close(inner(p, q), in, 1e-5, 1e-5));
  EXPECT_TRUE(all_close(inner(array(2.0f), p), to_double(multiply(p, array(2.0f))), 0.0));
  EXPECT_TRUE(throws_error([&] { inner(p, random_array({3})); }, {"[inner]"}));
}

TEST(OpsMatrix, Kron) {
  array a = random_array({2, 3}, int32, -4, 4);
  array b = transpose(random_array({2, 4, 1}), {2, 1, 0});  // [1, 4, 2]
  std::vector<double> va = to_double(a), vb = to_double(b), want(1 * 8 * 6);
  // Result [1, 2*4, 3*2]: out[0, i*4+k, j*2+l] = a[i, j] * b[0, k, l].
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k)
        for (int l = 0; l < 2; ++l) want[(i * 4 + k) * 6 + j * 2 + l] = va[i * 3 + j] * vb[k * 2 + l];
  array r = kron(a, b);
  EXPECT_EQ(r.shape(), (Shape{1, 8, 6}));
  EXPECT_EQ(r.dtype(), float32);
  EXPECT_TRUE(all_close(r, want, 1e-6));
  EXPECT_TRUE(all_close(kron(array({1, 2}, int32), array({1, 10}, int32)), {1, 10, 2, 20}, 0.0));
  EXPECT_TRUE(throws_error([] { kron(zeros({0}), ones({2})); }, {"[kron]", "empty"}));
}

TEST(OpsMatrix, Addmm) {
  array a = random_array({2, 3, 4}), b = transpose(random_array({5, 4})), c = random_array({5});
  std::vector<double> va = to_double(a), vb = to_double(b), vc = to_double(c), want;
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 5; ++j) {
      double s = 0;
      for (int k = 0; k < 4; ++k) s += va[i * 4 + k] * vb[k * 5 + j];
      want.push_back(0.5 * s - 2.0 * vc[j]);
    }
  array r = addmm(c, a, b, 0.5f, -2.0f);
  EXPECT_EQ(r.shape(), (Shape{2, 3, 5}));
  EXPECT_TRUE(all_close(r, want, 1e-5, 1e-5));
  // Defaults alpha = beta = 1; a 1-d a; bfloat16 promotes with float32.
  array v = random_array({4}, bfloat16), m = random_array({4, 3}), c1 = random_array({3});
  std::vector<double> vv = to_double(v), vm = to_double(m), vc1 = to_double(c1), w1;
  for (int j = 0; j < 3; ++j) {
    double s = vc1[j];
    for (int k = 0; k < 4; ++k) s += vv[k] * vm[k * 3 + j];
    w1.push_back(s);
  }
  array r1 = addmm(c1, v, m);
  EXPECT_EQ(r1.dtype(), float32);
  EXPECT_TRUE(all_close(r1, w1, 1e-5, 1e-5));
  EXPECT_TRUE(throws_error([&] { addmm(c, a, random_array({3, 5})); }, {"[addmm]", "inner"}));
  EXPECT_TRUE(throws_error([&] { addmm(random_array({7}), a, b); }, {"[addmm]"}));
  EXPECT_TRUE(throws_error([] { addmm(array({1}, int32), array({1}, int32), array({1}, int32)); }, {"[addmm]"}));
}

TEST(OpsMatrix, AtleastMoveaxisUnflatten) {
  array s = array(3.0f), v = random_array({4}), m = random_array({2, 3}), t = random_array({2, 3, 4});
  EXPECT_EQ(atleast_1d(s).shape(), Shape{1});
  EXPECT_EQ(atleast_2d(s).shape(), (Shape{1, 1}));
  EXPECT_EQ(atleast_2d(v).shape(), (Shape{1, 4}));
  EXPECT_EQ(atleast_3d(v).shape(), (Shape{1, 4, 1}));
  EXPECT_EQ(atleast_3d(m).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(atleast_3d(t).id(), t.id());
  std::vector<array> many = atleast_2d(std::vector<array>{s, v, t});
  EXPECT_EQ(many[0].shape(), (Shape{1, 1}));
  EXPECT_EQ(many[1].shape(), (Shape{1, 4}));
  EXPECT_EQ(many[2].shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(atleast_1d(std::vector<array>{s})[0].shape(), Shape{1});
  EXPECT_EQ(atleast_3d(std::vector<array>{s})[0].shape(), (Shape{1, 1, 1}));
  EXPECT_TRUE(all_close(atleast_3d(v), to_double(v), 0.0));

  array mv = moveaxis(t, 0, -1);
  EXPECT_EQ(mv.shape(), (Shape{3, 4, 2}));
  EXPECT_TRUE(all_close(mv, to_double(transpose(t, {1, 2, 0})), 0.0));
  EXPECT_TRUE(all_close(moveaxis(t, 2, 0), to_double(transpose(t, {2, 0, 1})), 0.0));
  EXPECT_TRUE(throws_error([&] { moveaxis(t, 3, 0); }, {"[moveaxis]"}));

  array x = transpose(random_array({12, 5}));  // [5, 12]
  array u = unflatten(x, 1, {2, -1, 3});
  EXPECT_EQ(u.shape(), (Shape{5, 2, 2, 3}));
  EXPECT_TRUE(all_close(u, to_double(x), 0.0));
  EXPECT_EQ(unflatten(x, -2, {5}).shape(), (Shape{5, 12}));
  EXPECT_TRUE(throws_error([&] { unflatten(x, 1, {5, -1}); }, {"[unflatten]", "12"}));
  EXPECT_TRUE(throws_error([&] { unflatten(x, 1, {-1, -1}); }, {"[unflatten]"}));
  EXPECT_TRUE(throws_error([&] { unflatten(x, 1, {}); }, {"[unflatten]"}));
}

// np.roll along one axis.
std::vector<double> roll_ref(const std::vector<double>& v, const Shape& shape, int axis, int shift) {
  std::vector<double> out(v.size());
  int n = shape[axis];
  int64_t inner = 1;
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t pos = (static_cast<int64_t>(i) / inner) % n;
    int64_t dst = ((pos + shift) % n + n) % n;
    out[i + (dst - pos) * inner] = v[i];
  }
  return out;
}

TEST(OpsMatrix, RollEveryOverload) {
  for (Layout layout : kLayouts) {
    array x = make_input({3, 5, 4}, layout, [](const Shape& s) { return random_array(s, int32, -50, 50); });
    std::vector<double> v = to_double(x);
    Shape sh = x.shape();
    for (int shift : {1, -2, 7, 0, -13}) {
      EXPECT_TRUE(all_close(roll(x, shift, 1), roll_ref(v, sh, 1, shift), 0.0)) << layout_name(layout) << shift;
      std::vector<double> flat = roll_ref(v, {60}, 0, shift);
      EXPECT_TRUE(all_close(roll(x, shift), flat, 0.0)) << layout_name(layout) << shift;
      EXPECT_TRUE(all_close(roll(x, shift, std::vector<int>{0, -1}), roll_ref(roll_ref(v, sh, 0, shift), sh, 2, shift), 0.0));
    }
    EXPECT_TRUE(all_close(roll(x, Shape{2, -1}, std::vector<int>{2, 0}), roll_ref(roll_ref(v, sh, 2, 2), sh, 0, -1), 0.0));
    EXPECT_TRUE(all_close(roll(x, Shape{2, 3}, 1), roll_ref(v, sh, 1, 5), 0.0));
    EXPECT_TRUE(all_close(roll(x, Shape{2, 3}), roll_ref(v, {60}, 0, 5), 0.0));
  }
  EXPECT_EQ(roll(zeros({0, 3}), 2, 0).shape(), (Shape{0, 3}));
  EXPECT_TRUE(throws_error([] { roll(zeros({2}), Shape{1}, std::vector<int>{0, 0}); }, {"[roll]"}));
  EXPECT_TRUE(throws_error([] { roll(zeros({2}), 1, 1); }, {"[roll]"}));
}

TEST(OpsMatrix, Meshgrid) {
  array x = array({1.f, 2.f, 3.f}), y = array({10, 20}, int32);
  std::vector<array> xy = meshgrid({x, y});
  ASSERT_EQ(xy.size(), 2u);
  EXPECT_EQ(xy[0].shape(), (Shape{2, 3}));
  EXPECT_TRUE(all_close(xy[0], {1, 2, 3, 1, 2, 3}, 0.0));
  EXPECT_TRUE(all_close(xy[1], {10, 10, 10, 20, 20, 20}, 0.0));
  EXPECT_EQ(xy[1].dtype(), int32);
  std::vector<array> ij = meshgrid({x, y}, false, "ij");
  EXPECT_EQ(ij[0].shape(), (Shape{3, 2}));
  EXPECT_TRUE(all_close(ij[0], {1, 1, 2, 2, 3, 3}, 0.0));
  EXPECT_TRUE(all_close(ij[1], {10, 20, 10, 20, 10, 20}, 0.0));
  array z = array({5.f, 6.f, 7.f, 8.f});
  std::vector<array> sp = meshgrid({x, y, z}, true);
  EXPECT_EQ(sp[0].shape(), (Shape{1, 3, 1}));
  EXPECT_EQ(sp[1].shape(), (Shape{2, 1, 1}));
  EXPECT_EQ(sp[2].shape(), (Shape{1, 1, 4}));
  EXPECT_EQ(meshgrid({x, y, z})[2].shape(), (Shape{2, 3, 4}));
  EXPECT_TRUE(throws_error([&] { meshgrid({x}, false, "xz"); }, {"[meshgrid]", "xz"}));
}

}  // namespace
}  // namespace kiln::test
