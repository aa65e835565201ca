// matmul against a naive double-precision reference: 2-d, 1-d operands,
// batched with broadcast batch axes, non-contiguous operands, several dtypes
// and promotion; larger sizes once for the fast kernels.
#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "test_layouts.h"
#include "test_util.h"

namespace kiln::test {
namespace {


// ---- operand layouts (same logical shape) ----

// Matrices: integers in [-8, 8), floats in [-1, 1).
array gen(const Shape& s, Dtype dt) { return is_integral(dt) ? random_array(s, dt, -8, 8) : random_array(s, dt, -1, 1); }

array make_operand(const Shape& shape, Dtype dt, Layout layout) {
  const int nd = static_cast<int>(shape.size());
  switch (layout) {
    case Layout::kContiguous:
      return gen(shape, dt);
    case Layout::kTransposed: {  // the last two axes swapped (a column-major matrix)
      if (nd < 2) return gen(shape, dt);
      Shape base = shape;
      std::swap(base[nd - 1], base[nd - 2]);
      return swapaxes(gen(base, dt), -1, -2);
    }
    case Layout::kStrided: {
      Shape base, start, stop, step;
      for (int d : shape) {
        base.push_back(2 * d + 1);
        start.push_back(1);
        stop.push_back(2 * d + 1);
        step.push_back(2);
      }
      return slice(gen(base, dt), start, stop, step);
    }
    case Layout::kFlipped: {
      Shape start(nd, -1), stop, step(nd, -1);
      for (int d : shape) stop.push_back(-d - 1);
      return slice(gen(shape, dt), start, stop, step);
    }
    case Layout::kBroadcast: {  // a row (or batch) repeated with a zero stride
      Shape base = shape;
      base[0] = 1;
      return broadcast_to(gen(base, dt), shape);
    }
  }
  return gen(shape, dt);
}

// ---- reference ----

struct Ref {
  Shape shape;
  std::vector<double> val;  // the product
  std::vector<double> mag;  // sum over k of |a_ik * b_kj|, for error bounds
  int k = 0;
};

Ref ref_matmul(const std::vector<double>& a, Shape as, const std::vector<double>& b, Shape bs) {
  const bool a_vec = as.size() == 1, b_vec = bs.size() == 1;
  if (a_vec) as.insert(as.begin(), 1);
  if (b_vec) bs.push_back(1);
  const int M = as[as.size() - 2], K = as.back(), N = bs.back();
  Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const size_t nb = std::max(ab.size(), bb.size());
  ab.insert(ab.begin(), nb - ab.size(), 1);
  bb.insert(bb.begin(), nb - bb.size(), 1);
  Shape batch(nb);
  for (size_t d = 0; d < nb; ++d) batch[d] = std::max(ab[d], bb[d]);
  Ref r;
  r.k = K;
  const int64_t nbatch = numel(batch);
  r.val.assign(nbatch * M * N, 0.0);
  r.mag.assign(nbatch * M * N, 0.0);
  for (int64_t bi = 0; bi < nbatch; ++bi) {
    std::vector<int> idx = unravel(bi, batch);
    int64_t ai = 0, bj = 0;
    for (size_t d = 0; d < nb; ++d) {
      ai = ai * ab[d] + (ab[d] == 1 ? 0 : idx[d]);
      bj = bj * bb[d] + (bb[d] == 1 ? 0 : idx[d]);
    }
    const double* pa = a.data() + ai * M * K;
    const double* pb = b.data() + bj * K * N;
    double* pv = r.val.data() + bi * M * N;
    double* pm = r.mag.data() + bi * M * N;
    for (int i = 0; i < M; ++i) {
      for (int k = 0; k < K; ++k) {
        const double x = pa[i * K + k];
        for (int j = 0; j < N; ++j) {
          pv[i * N + j] += x * pb[k * N + j];
          pm[i * N + j] += std::fabs(x * pb[k * N + j]);
        }
      }
    }
  }
  r.shape = batch;
  if (!a_vec) r.shape.push_back(M);
  if (!b_vec) r.shape.push_back(N);
  return r;
}

double eps(Dtype t) {
  switch (t) {
    case float16: return 9.765625e-4;     // 2^-10
    case bfloat16: return 7.8125e-3;      // 2^-7
    case float32: return 1.1920929e-7;    // 2^-23
    case float64: return 2.220446e-16;    // 2^-52
    default: return 0.0;                  // integers: exact
  }
}

// |got - want| <= 2 sqrt(K) eps(out) sum_k |a_ik b_kj|.
::testing::AssertionResult matches(const array& got, const Ref& r) {
  if (got.shape() != r.shape) {
    return ::testing::AssertionFailure() << "shape " << fmt(got.shape()) << ", want " << fmt(r.shape);
  }
  std::vector<double> g = to_double(got);
  const double scale = 2.0 * std::sqrt(static_cast<double>(std::max(r.k, 1))) * eps(got.dtype());
  // A result in float16's subnormal range rounds to a spacing of 2^-24,
  // whatever its magnitude: half of it is the least error possible.
  const double floor = got.dtype() == float16 ? std::ldexp(1.0, -25) : 0.0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double bound = scale * r.mag[i] + floor;
    if (!(std::fabs(g[i] - r.val[i]) <= bound)) {
      return ::testing::AssertionFailure() << "element " << i << " of " << fmt(r.shape) << ": got " << g[i]
                                           << ", want " << r.val[i] << " (allowed error " << bound << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

void check(const array& a, const array& b, Dtype want_dtype) {
  std::vector<double> av = to_double(a), bv = to_double(b);
  array c = matmul(a, b);
  EXPECT_STREQ(dtype_name(c.dtype()), dtype_name(want_dtype));
  EXPECT_TRUE(matches(c, ref_matmul(av, a.shape(), bv, b.shape())));
}

const Dtype kDtypes[] = {float32, float64, bfloat16, float16, int32};

struct ShapePair {
  Shape a, b;
};

// Every (a layout, b layout) pair with at least one side contiguous, and one
// pair where both are non-contiguous.
void run_shapes(const std::vector<ShapePair>& shapes) {
  for (Dtype dt : kDtypes) {
    for (const ShapePair& sp : shapes) {
      for (Layout la : kLayouts) {
        for (Layout lb : kLayouts) {
          bool both = la != Layout::kContiguous && lb != Layout::kContiguous;
          if (both && !(la == Layout::kTransposed && lb == Layout::kFlipped)) continue;
          SCOPED_TRACE(std::string(dtype_name(dt)) + " " + fmt(sp.a) + " " + layout_name(la) + " x " + fmt(sp.b) +
                       " " + layout_name(lb));
          check(make_operand(sp.a, dt, la), make_operand(sp.b, dt, lb), dt);
        }
      }
    }
  }
}

TEST(MatmulTest, TwoDimensional) {
  run_shapes({{{17, 33}, {33, 9}},
              {{1, 65}, {65, 23}},
              {{19, 1}, {1, 11}},
              {{7, 13}, {13, 1}},
              {{1, 1}, {1, 1}},
              {{40, 37}, {37, 35}}});
}

TEST(MatmulTest, OneDimensionalOperands) {
  run_shapes({{{33}, {33, 9}}, {{17, 33}, {33}}, {{33}, {33}}, {{2, 17, 33}, {33}}, {{33}, {3, 33, 9}}});
  // Vector . vector is 0-d.
  array v = array({1.0f, 2.0f, 3.0f});
  array w = array({4.0f, -5.0f, 6.0f});
  array d = matmul(v, w);
  EXPECT_EQ(d.ndim(), 0);
  EXPECT_FLOAT_EQ(d.item<float>(), 12.0f);
}

TEST(MatmulTest, Batched) {
  run_shapes({{{3, 5, 7}, {3, 7, 4}},
              {{2, 1, 5, 7}, {3, 7, 4}},
              {{5, 7}, {3, 7, 4}},
              {{3, 5, 7}, {7, 4}},
              {{1, 5, 7}, {4, 7, 3}},
              {{2, 3, 1, 9}, {3, 9, 6}}});
  // Zero-stride batch operands.
  for (Dtype dt : {float32, bfloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    array a = broadcast_to(gen({1, 5, 7}, dt), {3, 5, 7});
    array b = broadcast_to(gen({7, 4}, dt), {2, 3, 7, 4});
    check(a, b, dt);
    check(gen({2, 3, 5, 7}, dt), broadcast_to(gen({1, 7, 4}, dt), {3, 7, 4}), dt);
    // A whole matrix broadcast from one row and one column.
    check(broadcast_to(gen({1, 13}, dt), {9, 13}), broadcast_to(gen({13, 1}, dt), {13, 6}), dt);
  }
}

TEST(MatmulTest, NonContiguousBatched) {
  for (Dtype dt : {float32, float16}) {
    SCOPED_TRACE(dtype_name(dt));
    // Batch axis last in memory: transpose(2, 0, 1) of a [5, 7, 3] array.
    array a = transpose(gen({5, 7, 3}, dt), {2, 0, 1});
    array b = slice(gen({3, 14, 9}, dt), {0, 13, 0}, {3, -100, 9}, {1, -2, 2});  // [3, 7, 5], negative stride
    check(a, b, dt);
  }
}

TEST(MatmulTest, Promotion) {
  struct P {
    Dtype a, b, out;
  };
  const P cases[] = {{int32, float32, float32},   {float32, int32, float32},   {float16, float32, float32},
                     {bfloat16, float16, float32}, {bfloat16, float32, float32}, {float32, float64, float64},
                     {int32, int32, int32},       {int32, float16, float16},    {int8, int32, int32}};
  for (const P& p : cases) {
    SCOPED_TRACE(std::string(dtype_name(p.a)) + " x " + dtype_name(p.b));
    check(gen({9, 17}, p.a), gen({17, 5}, p.b), p.out);
  }
}

TEST(MatmulTest, Large) {
  check(gen({257, 511}, float32), gen({511, 129}, float32), float32);
  check(gen({1, 4096}, float32), gen({4096, 1000}, float32), float32);
  // Weights stored transposed (x @ W^T), and bfloat16.
  check(gen({257, 511}, float32), transpose(gen({129, 511}, float32)), float32);
  check(gen({257, 511}, bfloat16), gen({511, 129}, bfloat16), bfloat16);
}

TEST(MatmulTest, Errors) {
  array a = random_array({3, 4});
  EXPECT_TRUE(throws_error([&] { matmul(a, random_array({5, 6})).eval(); }, {"matmul", "(3,4)", "(5,6)"}));
  EXPECT_TRUE(throws_error([&] { matmul(random_array({3}), random_array({4})).eval(); }, {"matmul", "(3", "(4"}));
  EXPECT_TRUE(throws_error([&] { matmul(a, random_array({3})).eval(); }, {"matmul", "(3,4)"}));
  EXPECT_TRUE(throws_error([&] { matmul(random_array({2, 3, 4}), random_array({3, 4, 5})).eval(); },
                           {"matmul", "(2,3,4)", "(3,4,5)"}));
  EXPECT_TRUE(throws_error([&] { matmul(array(2.0f), a).eval(); }, {"matmul"}));
  EXPECT_TRUE(throws_error([&] { matmul(a, array(2.0f)).eval(); }, {"matmul"}));
}

}  // namespace
}  // namespace kiln::test
