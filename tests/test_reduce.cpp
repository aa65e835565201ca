// Reductions (sum mean max min prod all any logsumexp var argmax argmin
// softmax) against naive double-precision references, over contiguous,
// transposed, strided, flipped and broadcast inputs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/copy.h"
#include "test_layouts.h"
#include "test_util.h"

namespace kiln::test {
namespace {

constexpr double kF32Eps = 1.1920928955078125e-7;  // float32 machine epsilon


// ---- input layouts: every layout produces the same logical shape ----


std::vector<double> uniform_values(int64_t n, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(rng());
  return v;
}

// Floats in [lo, hi) (integers: rounded down) in the given dtype.
Gen uniform_gen(Dtype dt, double lo, double hi) {
  return [=](const Shape& s) { return random_array(s, dt, lo, hi); };
}

// Values whose products over a group of n stay within e^+-8 even when one
// value fills the whole group (broadcast inputs): random sign, magnitude
// exp(u) with |u| <= min(0.2, 8/n). Integers: +-1, and +-2 in small groups.
Gen product_gen(Dtype dt, int64_t n) {
  const double r = std::min(0.2, 8.0 / static_cast<double>(n));
  return [=](const Shape& s) {
    std::vector<double> v = uniform_values(numel(s), -r, r);
    std::uniform_real_distribution<double> dist(0.0, 1.0);
    for (auto& x : v) {
      double sign = dist(rng()) < 0.5 ? -1.0 : 1.0;
      x = is_integral(dt) ? sign * (n <= 20 && dist(rng()) < 0.2 ? 2.0 : 1.0) : sign * std::exp(x);
    }
    return array(v, s, dt);
  };
}

// Booleans that are true with probability p.
Gen bool_gen(double p) {
  return [=](const Shape& s) {
    std::vector<double> v = uniform_values(numel(s), 0.0, 1.0);
    std::vector<uint8_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = v[i] < p;
    return array(b, s, bool_);
  };
}

// ---- reference grouping ----

std::vector<int> normalize_axes(const std::vector<int>& axes, int ndim) {
  std::vector<int> out;
  for (int a : axes) out.push_back(a < 0 ? a + ndim : a);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int> all_axes(int ndim) {
  std::vector<int> out(ndim);
  for (int i = 0; i < ndim; ++i) out[i] = i;
  return out;
}

struct Groups {
  Shape out_shape;                          // shape of the reduced array
  std::vector<std::vector<double>> values;  // per output element, in order along the reduced axes
  std::vector<int64_t> member;              // group of each input element
};

Groups group_by(const std::vector<double>& x, const Shape& shape, const std::vector<int>& axes, bool keepdims) {
  std::vector<bool> reduced(shape.size(), false);
  for (int a : axes) reduced[a] = true;
  Shape kept = shape;
  for (int a : axes) kept[a] = 1;
  Groups g;
  g.values.resize(numel(kept));
  g.member.resize(x.size());
  std::vector<int> idx(shape.size(), 0);  // unravel(i, shape), advanced incrementally
  for (size_t i = 0; i < x.size(); ++i) {
    int64_t o = 0;
    for (size_t d = 0; d < shape.size(); ++d) o = o * kept[d] + (reduced[d] ? 0 : idx[d]);
    g.values[o].push_back(x[i]);
    g.member[i] = o;
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0 && ++idx[d] == shape[d]; --d) idx[d] = 0;
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (keepdims || !reduced[d]) g.out_shape.push_back(kept[d]);
  }
  return g;
}

::testing::AssertionResult within(const std::vector<double>& got, const std::vector<double>& want,
                                  const std::vector<double>& bound) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) && std::isnan(got[i])) continue;
    if (std::isinf(want[i]) && got[i] == want[i]) continue;
    if (!(std::fabs(got[i] - want[i]) <= bound[i])) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want " << want[i]
                                           << " (allowed error " << bound[i] << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// Rounding error allowed for summing n values in float32.
double acc_eps(size_t n) { return (2.0 + 2.0 * std::sqrt(static_cast<double>(n))) * kF32Eps; }

double abs_sum(const std::vector<double>& g) {
  double s = 0;
  for (double x : g) s += std::fabs(x);
  return s;
}

double ref_sum(const std::vector<double>& g) {
  double s = 0;
  for (double x : g) s += x;
  return s;
}

double ref_var(const std::vector<double>& g, int ddof) {
  double m = ref_sum(g) / g.size();
  double s = 0;
  for (double x : g) s += (x - m) * (x - m);
  return s / (static_cast<double>(g.size()) - ddof);
}

double ref_logsumexp(const std::vector<double>& g) {
  double m = *std::max_element(g.begin(), g.end());
  double s = 0;
  for (double x : g) s += std::exp(x - m);
  return m + std::log(s);
}

// ---- the table of reductions ----

enum class Form { kVector, kInt, kAll };  // which overload is called

struct ReduceCase {
  Shape shape;
  std::vector<int> axes;  // for kAll: unused
  Form form;
};

const std::vector<ReduceCase>& reduce_cases() {
  static const std::vector<ReduceCase> cases = {
      {{7, 13}, {}, Form::kAll},
      {{7, 13}, {0}, Form::kInt},
      {{7, 13}, {1}, Form::kVector},
      {{7, 13}, {-1}, Form::kInt},
      {{7, 13}, {-2}, Form::kVector},
      {{7, 13}, {0, 1}, Form::kVector},
      {{5, 3, 17}, {}, Form::kAll},
      {{5, 3, 17}, {1}, Form::kInt},
      {{5, 3, 17}, {-1}, Form::kInt},
      {{5, 3, 17}, {2, 0}, Form::kVector},
      {{5, 3, 17}, {-3, -2}, Form::kVector},
      {{2, 3, 4, 5}, {}, Form::kAll},
      {{2, 3, 4, 5}, {3}, Form::kInt},
      {{2, 3, 4, 5}, {1, 3}, Form::kVector},
      {{2, 3, 4, 5}, {0, 2, 3}, Form::kVector},
      {{2, 3, 4, 5}, {-2, -1}, Form::kVector},
      {{2, 3, 4, 5}, {0, 1, 2, 3}, Form::kVector},
      {{64, 1001}, {1}, Form::kInt},
      {{64, 1001}, {-1}, Form::kVector},
      {{1001, 33}, {0}, Form::kInt},
      // Around the vector kernels' blocks: 16-lane vectors, 64-element row
      // steps, groups of 16 rows, columns combined 4 rows at a time.
      {{1, 65}, {1}, Form::kInt},
      {{33, 63}, {-1}, Form::kInt},
      {{17, 64}, {0}, Form::kInt},
      {{3, 21, 65}, {1}, Form::kInt},
      {{3, 21, 65}, {1}, Form::kVector},
      {{300, 33}, {1}, Form::kInt},  // many short rows: read as several ranges at once
  };
  return cases;
}

struct ReduceOp {
  std::string name;
  std::function<array(const array&, const std::vector<int>&, bool)> by_axes;
  std::function<array(const array&, int, bool)> by_axis;
  std::function<array(const array&, bool)> by_all;
  std::function<double(const std::vector<double>&)> ref;
  // Allowed |got - want| for a group, given the output dtype.
  std::function<double(const std::vector<double>&, double, Dtype)> bound;
  std::function<Dtype(Dtype)> out_dtype;
  std::vector<Dtype> dtypes;
  std::function<Gen(Dtype, int64_t)> gen;  // inputs for a dtype and a group size
};

#define KILN_REDUCE_OVERLOADS(OP)                                                          \
  [](const array& a, const std::vector<int>& ax, bool k) { return OP(a, ax, k); },        \
      [](const array& a, int ax, bool k) { return OP(a, ax, k); }, [](const array& a, bool k) { \
        return OP(a, k);                                                                   \
      }

Dtype same_dtype(Dtype t) { return t; }
Dtype float_dtype(Dtype t) { return is_floating_point(t) ? t : float32; }

const std::vector<Dtype> kNumericDtypes = {float32, float16, bfloat16, int32};

double sum_bound(const std::vector<double>& g, double want, Dtype out) {
  if (is_integral(out)) return 0.0;
  return tolerance(out) * std::fabs(want) + acc_eps(g.size()) * abs_sum(g);
}

const ReduceOp& reduce_op(const std::string& name) {
  static const std::vector<ReduceOp> ops = [] {
    std::vector<ReduceOp> v;
    auto exact = [](const std::vector<double>&, double, Dtype) { return 0.0; };
    auto default_gen = [](Dtype dt, int64_t) { return is_integral(dt) ? uniform_gen(dt, -5, 5) : uniform_gen(dt, -2, 2); };
    v.push_back({"sum", KILN_REDUCE_OVERLOADS(sum), ref_sum, sum_bound, same_dtype, kNumericDtypes, default_gen});
    v.push_back({"mean", KILN_REDUCE_OVERLOADS(mean),
                 [](const std::vector<double>& g) { return ref_sum(g) / g.size(); },
                 [](const std::vector<double>& g, double want, Dtype out) {
                   return tolerance(out) * std::fabs(want) + acc_eps(g.size()) * abs_sum(g) / g.size();
                 },
                 float_dtype, kNumericDtypes, default_gen});
    v.push_back({"max", KILN_REDUCE_OVERLOADS(max),
                 [](const std::vector<double>& g) { return *std::max_element(g.begin(), g.end()); }, exact,
                 same_dtype, kNumericDtypes, default_gen});
    v.push_back({"min", KILN_REDUCE_OVERLOADS(min),
                 [](const std::vector<double>& g) { return *std::min_element(g.begin(), g.end()); }, exact,
                 same_dtype, kNumericDtypes, default_gen});
    v.push_back({"prod", KILN_REDUCE_OVERLOADS(prod),
                 [](const std::vector<double>& g) {
                   double p = 1;
                   for (double x : g) p *= x;
                   return p;
                 },
                 [](const std::vector<double>& g, double want, Dtype out) {
                   if (is_integral(out)) return 0.0;
                   return (tolerance(out) + 2.0 * g.size() * kF32Eps) * std::fabs(want);
                 },
                 same_dtype, kNumericDtypes, product_gen});
    v.push_back({"logsumexp", KILN_REDUCE_OVERLOADS(logsumexp), ref_logsumexp,
                 [](const std::vector<double>& g, double want, Dtype out) {
                   return tolerance(out) * (std::fabs(want) + 1.0) + acc_eps(g.size());
                 },
                 float_dtype, kNumericDtypes, default_gen});
    for (int ddof : {0, 1}) {
      v.push_back({ddof ? "var_ddof1" : "var",
                   [ddof](const array& a, const std::vector<int>& ax, bool k) { return var(a, ax, k, ddof); },
                   [ddof](const array& a, int ax, bool k) { return var(a, ax, k, ddof); },
                   [ddof](const array& a, bool k) { return var(a, k, ddof); },
                   [ddof](const std::vector<double>& g) { return ref_var(g, ddof); },
                   [](const std::vector<double>& g, double want, Dtype out) {
                     double sq = 0;
                     for (double x : g) sq += x * x;
                     return tolerance(out) * std::fabs(want) + 4.0 * acc_eps(g.size()) * sq / (g.size() - 1.0);
                   },
                   float_dtype, kNumericDtypes, default_gen});
      // std = sqrt(var): var's error over 2 std, plus the rounding of the result.
      v.push_back({ddof ? "std_ddof1" : "std",
                   [ddof](const array& a, const std::vector<int>& ax, bool k) { return kiln::std(a, ax, k, ddof); },
                   [ddof](const array& a, int ax, bool k) { return kiln::std(a, ax, k, ddof); },
                   [ddof](const array& a, bool k) { return kiln::std(a, k, ddof); },
                   [ddof](const std::vector<double>& g) { return std::sqrt(ref_var(g, ddof)); },
                   [](const std::vector<double>& g, double want, Dtype out) {
                     double sq = 0;
                     for (double x : g) sq += x * x;
                     const double var_err = 4.0 * acc_eps(g.size()) * sq / (g.size() - 1.0);
                     return tolerance(out) * std::fabs(want) + var_err / (2.0 * std::max(want, 1e-3)) + var_err;
                   },
                   float_dtype, kNumericDtypes, default_gen});
    }
    return v;
  }();
  for (const auto& op : ops) {
    if (op.name == name) return op;
  }
  throw std::runtime_error("no reduce op " + name);
}

array call(const ReduceOp& op, const array& x, const ReduceCase& c, bool keepdims) {
  switch (c.form) {
    case Form::kAll: return op.by_all(x, keepdims);
    case Form::kInt: return op.by_axis(x, c.axes[0], keepdims);
    case Form::kVector: return op.by_axes(x, c.axes, keepdims);
  }
  return x;
}

void check_reduce_op(const std::string& name) {
  const ReduceOp& op = reduce_op(name);
  for (Dtype dt : op.dtypes) {
    const auto& cases = reduce_cases();
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const ReduceCase& c = cases[ci];
      const int nd = static_cast<int>(c.shape.size());
      const std::vector<int> axes = c.form == Form::kAll ? all_axes(nd) : normalize_axes(c.axes, nd);
      int64_t group = 1;
      for (int a : axes) group *= c.shape[a];
      Gen gen = op.gen(dt, group);
      for (Layout layout : kLayouts) {
        for (bool keepdims : {false, true}) {
          // Both keepdims for contiguous inputs; one (alternating) for the rest.
          if (layout != Layout::kContiguous && keepdims != ((ci + static_cast<int>(layout)) % 2 == 1)) continue;
          SCOPED_TRACE(op.name + " " + dtype_name(dt) + " shape " + fmt(c.shape) + " axes " +
                       (c.form == Form::kAll ? std::string("all") : fmt(c.axes)) + " " + layout_name(layout) +
                       " keepdims=" + std::to_string(keepdims));
          array x = make_input(c.shape, layout, gen);
          std::vector<double> xv = to_double(x);
          Groups g = group_by(xv, c.shape, axes, keepdims);
          array y = call(op, x, c, keepdims);
          EXPECT_STREQ(dtype_name(y.dtype()), dtype_name(op.out_dtype(dt)));
          ASSERT_EQ(y.shape(), g.out_shape);
          std::vector<double> want, bound;
          for (const auto& grp : g.values) {
            want.push_back(op.ref(grp));
            bound.push_back(op.bound(grp, want.back(), y.dtype()));
          }
          EXPECT_TRUE(within(to_double(y), want, bound));
        }
      }
    }
  }
}

// all / any of one long row split across the threads: the chunks' partial
// results were a std::vector<bool>, whose bits two threads wrote in the same
// byte, so all() of an all-true array came out false now and then. Many
// rounds, since a race shows only in some of them.
TEST(ReduceTest, AllAnyOfLongRowsAcrossThreads) {
  array t = full({(1 << 18) + 3}, true);
  array f = full({(1 << 18) + 3}, false);
  array one = where(arange((1 << 18) + 3) == array(200000), array(true), f);
  for (int round = 0; round < 200; ++round) {
    ASSERT_TRUE(all(t).item<bool>()) << round;
    ASSERT_FALSE(any(f).item<bool>()) << round;
    ASSERT_TRUE(any(one).item<bool>()) << round;
    ASSERT_FALSE(all(one == array(false)).item<bool>()) << round;
  }
}

TEST(ReduceTest, Sum) { check_reduce_op("sum"); }
TEST(ReduceTest, Mean) { check_reduce_op("mean"); }
TEST(ReduceTest, Max) { check_reduce_op("max"); }
TEST(ReduceTest, Min) { check_reduce_op("min"); }
TEST(ReduceTest, Prod) { check_reduce_op("prod"); }
TEST(ReduceTest, Logsumexp) { check_reduce_op("logsumexp"); }
TEST(ReduceTest, Var) { check_reduce_op("var"); }
TEST(ReduceTest, VarDdof1) { check_reduce_op("var_ddof1"); }
TEST(ReduceTest, Std) { check_reduce_op("std"); }
TEST(ReduceTest, StdDdof1) { check_reduce_op("std_ddof1"); }

// MLX's std: sqrt(var) for every overload, numpy's values (np.std).
TEST(ReduceTest, StdMatchesNumpy) {
  array x = array(std::vector<float>{1, 2, 3, 4, 10, 20}, Shape{2, 3});
  EXPECT_TRUE(all_close(kiln::std(x), {6.6248690}, 1e-6));                    // np.std(x)
  EXPECT_TRUE(all_close(kiln::std(x, 0), {1.5, 4.0, 8.5}, 1e-6));             // np.std(x, 0)
  EXPECT_TRUE(all_close(kiln::std(x, 1, false, 1), {1.0, 8.0829038}, 1e-6));  // ddof=1
  array k = kiln::std(x, std::vector<int>{1}, true);
  EXPECT_EQ(k.shape(), (Shape{2, 1}));
  EXPECT_TRUE(all_close(k, {0.81649658, 6.5996633}, 1e-5));
  array i = kiln::std(array(std::vector<int32_t>{1, 3}, Shape{2}), false, 0);
  EXPECT_EQ(i.dtype(), float32);
  EXPECT_TRUE(all_close(i, {1.0}, 1e-6));
  // ddof >= the count: numpy gives inf (nan for a zero sum of squares).
  array one = kiln::std(array(std::vector<float>{2.0f, 4.0f}, Shape{2}), false, 2);
  EXPECT_TRUE(std::isinf(one.item<float>()));
}

TEST(ReduceTest, IntegerDtypes) {
  array a = array(std::vector<int32_t>{1, 2, 4, 7}, Shape{2, 2});
  array s = sum(a);
  EXPECT_STREQ(dtype_name(s.dtype()), dtype_name(int32));
  EXPECT_EQ(s.item<int32_t>(), 14);
  array m = mean(a, 1);
  EXPECT_STREQ(dtype_name(m.dtype()), dtype_name(float32));
  EXPECT_TRUE(all_close(m, {1.5, 5.5}, 0.0));
  EXPECT_STREQ(dtype_name(mean(a).dtype()), dtype_name(float32));
  EXPECT_FLOAT_EQ(mean(a).item<float>(), 3.5f);
  EXPECT_STREQ(dtype_name(max(a).dtype()), dtype_name(int32));
  EXPECT_EQ(prod(a).item<int32_t>(), 56);
}

// A mean that is not representable in the input dtype: the variance must be
// computed from the exact (float) mean, not from one rounded to the input dtype.
TEST(ReduceTest, VarLowPrecisionAccumulatesInFloat) {
  struct C {
    Dtype dt;
    double lo, hi;  // neighbours in dt; their mean is not representable
  };
  for (const C& c : {C{bfloat16, 100.0, 100.5}, C{float16, 1000.0, 1000.5}}) {
    SCOPED_TRACE(dtype_name(c.dt));
    array x(std::vector<double>{c.lo, c.hi, c.lo, c.hi}, Shape{4}, c.dt);
    double mu = (c.lo + c.hi) / 2, v0 = (c.hi - c.lo) * (c.hi - c.lo) / 4;
    EXPECT_TRUE(all_close(mean(x), {mu}, tolerance(c.dt)));
    EXPECT_TRUE(all_close(var(x), {v0}, tolerance(c.dt)));
    EXPECT_TRUE(all_close(var(x, 0, false, 1), {v0 * 4 / 3}, tolerance(c.dt)));
  }
}

TEST(ReduceTest, EmptyAxesListIsNoReduction) {
  array x = random_array({3, 5});
  std::vector<double> xv = to_double(x);
  for (const char* name : {"sum", "mean", "max", "min", "prod", "logsumexp"}) {
    SCOPED_TRACE(name);
    const ReduceOp& op = reduce_op(name);
    array y = op.by_axes(x, std::vector<int>{}, false);
    EXPECT_EQ(y.shape(), (Shape{3, 5}));
    EXPECT_TRUE(all_close(y, xv, tolerance(float32), 1e-6));
  }
}

TEST(ReduceTest, AllAny) {
  struct BoolOp {
    const char* name;
    std::function<array(const array&, const ReduceCase&, bool)> fn;
    bool is_all;
  };
  const BoolOp ops[] = {
      {"all",
       [](const array& a, const ReduceCase& c, bool k) {
         return c.form == Form::kAll ? all(a, k) : c.form == Form::kInt ? all(a, c.axes[0], k) : all(a, c.axes, k);
       },
       true},
      {"any",
       [](const array& a, const ReduceCase& c, bool k) {
         return c.form == Form::kAll ? any(a, k) : c.form == Form::kInt ? any(a, c.axes[0], k) : any(a, c.axes, k);
       },
       false},
  };
  const auto& cases = reduce_cases();
  for (const auto& op : ops) {
    for (double p : {0.02, 0.5, 0.98}) {
      for (size_t ci = 0; ci < cases.size(); ++ci) {
        const ReduceCase& c = cases[ci];
        for (Layout layout : kLayouts) {
          bool keepdims = (ci + static_cast<int>(layout)) % 2 == 1;
          SCOPED_TRACE(std::string(op.name) + " p=" + std::to_string(p) + " shape " + fmt(c.shape) + " axes " +
                       (c.form == Form::kAll ? std::string("all") : fmt(c.axes)) + " " + layout_name(layout));
          array x = make_input(c.shape, layout, bool_gen(p));
          int nd = static_cast<int>(c.shape.size());
          Groups g = group_by(to_double(x), c.shape,
                              c.form == Form::kAll ? all_axes(nd) : normalize_axes(c.axes, nd), keepdims);
          array y = op.fn(x, c, keepdims);
          EXPECT_STREQ(dtype_name(y.dtype()), dtype_name(bool_));
          ASSERT_EQ(y.shape(), g.out_shape);
          std::vector<double> want;
          for (const auto& grp : g.values) {
            bool r = op.is_all;
            for (double v : grp) r = op.is_all ? (r && v != 0) : (r || v != 0);
            want.push_back(r);
          }
          EXPECT_TRUE(all_close(y, want, 0.0));
        }
      }
    }
  }
  // Non-bool inputs: nonzero is true.
  array f = array({1.5f, 0.0f, -2.0f, 3.0f}, Shape{2, 2});
  EXPECT_TRUE(all_close(all(f, 1), {0, 1}, 0.0));
  EXPECT_TRUE(all_close(any(f, 0), {1, 1}, 0.0));
  EXPECT_FALSE(all(f).item<bool>());
  EXPECT_TRUE(any(astype(f, int32)).item<bool>());
}

// ---- argmax / argmin ----

TEST(ReduceTest, ArgmaxArgmin) {
  constexpr int kFlat = std::numeric_limits<int>::min();
  struct Case {
    Shape shape;
    int axis;  // kFlat: over the flattened array
  };
  const Case cases[] = {{{7, 13}, 0},    {{7, 13}, 1},     {{7, 13}, -1},      {{7, 13}, kFlat},
                        {{5, 3, 17}, 0}, {{5, 3, 17}, 1},  {{5, 3, 17}, -2},   {{5, 3, 17}, 2},
                        {{5, 3, 17}, kFlat}, {{2, 3, 4, 5}, 3}, {{2, 3, 4, 5}, 1}, {{64, 1001}, 1},
                        {{1001, 33}, 0}};
  for (bool is_max : {true, false}) {
    for (Dtype dt : {float32, float16, bfloat16, int32}) {
      // Narrow ranges make ties likely (bfloat16, int32): the first index must win.
      Gen gen = is_integral(dt) ? uniform_gen(dt, -3, 3) : uniform_gen(dt, -2, 2);
      for (size_t ci = 0; ci < std::size(cases); ++ci) {
        const Case& c = cases[ci];
        for (Layout layout : kLayouts) {
          bool keepdims = (ci + static_cast<int>(layout)) % 2 == 1;
          SCOPED_TRACE(std::string(is_max ? "argmax " : "argmin ") + dtype_name(dt) + " shape " + fmt(c.shape) +
                       " axis " + (c.axis == kFlat ? std::string("flat") : std::to_string(c.axis)) + " " +
                       layout_name(layout) + " keepdims=" + std::to_string(keepdims));
          array x = make_input(c.shape, layout, gen);
          int nd = static_cast<int>(c.shape.size());
          std::vector<int> axes = c.axis == kFlat ? all_axes(nd) : normalize_axes({c.axis}, nd);
          Groups g = group_by(to_double(x), c.shape, axes, keepdims);
          array y = c.axis == kFlat ? (is_max ? argmax(x, keepdims) : argmin(x, keepdims))
                                    : (is_max ? argmax(x, c.axis, keepdims) : argmin(x, c.axis, keepdims));
          EXPECT_STREQ(dtype_name(y.dtype()), dtype_name(uint32));
          ASSERT_EQ(y.shape(), g.out_shape);
          std::vector<double> want;
          for (const auto& grp : g.values) {
            size_t best = 0;
            for (size_t i = 1; i < grp.size(); ++i) {
              if (is_max ? grp[i] > grp[best] : grp[i] < grp[best]) best = i;
            }
            want.push_back(static_cast<double>(best));
          }
          EXPECT_TRUE(all_close(y, want, 0.0));
        }
      }
    }
  }
}

TEST(ReduceTest, ArgmaxArgminExplicitTies) {
  const std::vector<double> v = {3, 1, 3, 0, 0, 0, 2, 5, 5};
  for (Dtype dt : {float32, bfloat16, int32, uint8}) {
    SCOPED_TRACE(dtype_name(dt));
    array a(v, Shape{3, 3}, dt);
    EXPECT_TRUE(all_close(argmax(a, 1), {0, 0, 1}, 0.0));
    EXPECT_TRUE(all_close(argmax(a, 0), {0, 2, 2}, 0.0));
    EXPECT_TRUE(all_close(argmin(a, 1), {1, 0, 0}, 0.0));
    EXPECT_TRUE(all_close(argmin(a, 0), {1, 1, 1}, 0.0));
    EXPECT_EQ(argmax(a).item<uint32_t>(), 7u);
    EXPECT_EQ(argmin(a).item<uint32_t>(), 3u);
    EXPECT_TRUE(all_close(argmax(a, 1, true), {0, 0, 1}, 0.0));
    EXPECT_EQ(argmax(a, 1, true).shape(), (Shape{3, 1}));
    // Views: the first index in logical order, whatever the strides.
    EXPECT_TRUE(all_close(argmax(flip(a, {1}), 1), {0, 0, 0}, 0.0));
    EXPECT_TRUE(all_close(argmax(slice(a, {0, 2}, {3, -4}, {1, -1}), 1), {0, 0, 0}, 0.0));
    EXPECT_TRUE(all_close(argmax(transpose(a), 1), {0, 2, 2}, 0.0));
    EXPECT_TRUE(all_close(argmin(broadcast_to(slice(a, {2, 0}, {3, 3}), {4, 3}), 0), {0, 0, 0}, 0.0));
  }
}

// ---- softmax ----

TEST(ReduceTest, Softmax) {
  struct Case {
    Shape shape;
    std::vector<int> axes;
    Form form;
  };
  const Case cases[] = {{{7, 13}, {-1}, Form::kInt},         {{7, 13}, {0}, Form::kInt},
                        {{7, 13}, {}, Form::kAll},           {{5, 3, 17}, {0, 2}, Form::kVector},
                        {{5, 3, 17}, {1}, Form::kVector},    {{2, 3, 4, 5}, {1, 3}, Form::kVector},
                        {{2, 3, 4, 5}, {-1}, Form::kInt},    {{64, 1001}, {1}, Form::kInt},
                        {{1001, 33}, {0}, Form::kInt}};
  for (Dtype dt : {float32, float16, bfloat16}) {
    for (const Case& c : cases) {
      for (Layout layout : kLayouts) {
        SCOPED_TRACE(std::string("softmax ") + dtype_name(dt) + " shape " + fmt(c.shape) + " axes " +
                     (c.form == Form::kAll ? std::string("all") : fmt(c.axes)) + " " + layout_name(layout));
        array x = make_input(c.shape, layout, uniform_gen(dt, -2, 2));
        std::vector<double> xv = to_double(x);
        int nd = static_cast<int>(c.shape.size());
        Groups g = group_by(xv, c.shape, c.form == Form::kAll ? all_axes(nd) : normalize_axes(c.axes, nd), true);
        std::vector<double> gmax, gsum;
        for (const auto& grp : g.values) {
          double m = *std::max_element(grp.begin(), grp.end()), s = 0;
          for (double v : grp) s += std::exp(v - m);
          gmax.push_back(m);
          gsum.push_back(s);
        }
        std::vector<double> want(xv.size());
        for (size_t i = 0; i < xv.size(); ++i) want[i] = std::exp(xv[i] - gmax[g.member[i]]) / gsum[g.member[i]];
        array y = c.form == Form::kAll  ? softmax(x)
                  : c.form == Form::kInt ? softmax(x, c.axes[0])
                                         : softmax(x, c.axes);
        EXPECT_STREQ(dtype_name(y.dtype()), dtype_name(dt));
        ASSERT_EQ(y.shape(), c.shape);
        EXPECT_TRUE(all_close(y, want, tolerance(dt), 1e-7));
      }
    }
  }
  // Widely spread bfloat16 logits: exp(x - max) must be taken in float (not
  // of a difference rounded to bfloat16), over any axis.
  {
    std::vector<double> v;
    for (int k = 0; k < 16; ++k) v.push_back(-20.0 + 2.53 * k);
    array x(v, Shape{16}, bfloat16);
    std::vector<double> xv = to_double(x), want;
    double s = 0;
    for (double e : xv) s += std::exp(e - xv.back());
    for (double e : xv) want.push_back(std::exp(e - xv.back()) / s);
    EXPECT_TRUE(all_close(softmax(reshape(x, {1, 16}), 1), want, tolerance(bfloat16))) << "axis 1 of [1,16]";
    EXPECT_TRUE(all_close(softmax(reshape(x, {16, 1}), 0), want, tolerance(bfloat16))) << "axis 0 of [16,1]";
    EXPECT_TRUE(all_close(softmax(reshape(x, {2, 8}), {0, 1}), want, tolerance(bfloat16))) << "axes {0,1} of [2,8]";
  }
  // Large logits must not overflow.
  array big = array({1000.0f, 1001.0f, 999.0f});
  double e1 = std::exp(-1.0), e2 = std::exp(-2.0);
  EXPECT_TRUE(all_close(softmax(big), {e1 / (1 + e1 + e2), 1 / (1 + e1 + e2), e2 / (1 + e1 + e2)}, 1e-5));
}

// ---- large inputs (multithreaded kernels) ----

TEST(ReduceTest, LargeMultithreaded) {
  const Shape shape = {512, 4099};
  const int rows = shape[0], cols = shape[1];
  std::vector<double> v = uniform_values(numel(shape), -2, 2);
  // Ties for argmax: row r holds its maximum 3.0 at two places, far apart.
  std::vector<double> first_max(rows);
  for (int r = 0; r < rows; ++r) {
    int a = (r * 37 + 11) % 2000, b = 4098 - (r * 13) % 2000;
    v[static_cast<int64_t>(r) * cols + a] = 3.0;
    v[static_cast<int64_t>(r) * cols + b] = 3.0;
    first_max[r] = std::min(a, b);
  }
  // The global minimum appears twice; the first one is in row 5.
  v[5 * cols + 7] = -3.0;
  v[400 * cols + 1] = -3.0;
  array x(v, shape, float32);
  x.eval();
  std::vector<double> xv = to_double(x);

  auto check = [&](const std::string& name, const array& y, const std::vector<int>& axes, bool keepdims,
                   const std::function<double(const std::vector<double>&)>& ref,
                   const std::function<double(const std::vector<double>&, double)>& bound) {
    SCOPED_TRACE(name);
    Groups g = group_by(xv, shape, axes, keepdims);
    ASSERT_EQ(y.shape(), g.out_shape);
    std::vector<double> want, bnd;
    for (const auto& grp : g.values) {
      want.push_back(ref(grp));
      bnd.push_back(bound(grp, want.back()));
    }
    EXPECT_TRUE(within(to_double(y), want, bnd));
  };
  auto sum_b = [](const std::vector<double>& g, double w) { return sum_bound(g, w, float32); };
  auto exact = [](const std::vector<double>&, double) { return 0.0; };
  auto vmax = [](const std::vector<double>& g) { return *std::max_element(g.begin(), g.end()); };
  auto vmin = [](const std::vector<double>& g) { return *std::min_element(g.begin(), g.end()); };
  check("sum axis 1", sum(x, 1), {1}, false, ref_sum, sum_b);
  check("sum axis 0", sum(x, 0, true), {0}, true, ref_sum, sum_b);
  check("sum all", sum(x), {0, 1}, false, ref_sum, sum_b);
  check("mean all", mean(x), {0, 1}, false, [](const std::vector<double>& g) { return ref_sum(g) / g.size(); },
        [](const std::vector<double>& g, double w) {
          return tolerance(float32) * std::fabs(w) + acc_eps(g.size()) * abs_sum(g) / g.size();
        });
  check("max axis 1", max(x, 1), {1}, false, vmax, exact);
  check("min axis 0", min(x, 0), {0}, false, vmin, exact);
  check("logsumexp axis 1", logsumexp(x, -1), {1}, false, ref_logsumexp,
        [](const std::vector<double>& g, double w) { return tolerance(float32) * (std::fabs(w) + 1) + acc_eps(g.size()); });
  check("var axis 0", var(x, 0), {0}, false, [](const std::vector<double>& g) { return ref_var(g, 0); },
        [](const std::vector<double>& g, double w) { return tolerance(float32) * std::fabs(w) + 16 * acc_eps(g.size()); });

  // bfloat16 data, float accumulation across threads.
  array xb = astype(x, bfloat16);
  std::vector<double> xbv = to_double(xb);
  {
    SCOPED_TRACE("bfloat16 sum axis 1");
    Groups g = group_by(xbv, shape, {1}, false);
    std::vector<double> want, bnd;
    for (const auto& grp : g.values) {
      want.push_back(ref_sum(grp));
      bnd.push_back(sum_bound(grp, want.back(), bfloat16));
    }
    EXPECT_TRUE(within(to_double(sum(xb, 1)), want, bnd));
  }

  // Column sums of the transposed view (a strided walk over the whole array).
  {
    SCOPED_TRACE("sum of transposed, axis 1");
    array xt = transpose(x);
    Groups g = group_by(xv, shape, {0}, false);
    std::vector<double> want, bnd;
    for (const auto& grp : g.values) {
      want.push_back(ref_sum(grp));
      bnd.push_back(sum_bound(grp, want.back(), float32));
    }
    EXPECT_TRUE(within(to_double(sum(xt, 1)), want, bnd));
  }

  array am = argmax(x, 1);
  EXPECT_STREQ(dtype_name(am.dtype()), dtype_name(uint32));
  EXPECT_TRUE(all_close(am, first_max, 0.0));
  EXPECT_EQ(argmin(x).item<uint32_t>(), static_cast<uint32_t>(5 * cols + 7));
  EXPECT_EQ(argmax(x).item<uint32_t>(), static_cast<uint32_t>(first_max[0]));

  {
    SCOPED_TRACE("softmax axis -1");
    Groups g = group_by(xv, shape, {1}, true);
    std::vector<double> want(xv.size());
    for (size_t r = 0; r < g.values.size(); ++r) {
      double m = vmax(g.values[r]), s = 0;
      for (double e : g.values[r]) s += std::exp(e - m);
      for (int c = 0; c < cols; ++c) {
        size_t i = r * cols + c;
        want[i] = std::exp(xv[i] - m) / s;
      }
    }
    EXPECT_TRUE(all_close(softmax(x, -1), want, tolerance(float32), 1e-9));
  }
}

// A NaN anywhere in a group makes max and min NaN, wherever it falls in the
// vector kernels' blocks (first lane, the masked tail, a leftover row).
TEST(ReduceTest, MaxMinPropagateNan) {
  const Shape shape = {19, 70};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> v = uniform_values(numel(shape), -2, 2);
  const std::vector<std::pair<int, int>> nans = {{0, 0}, {3, 69}, {18, 35}};
  for (auto [r, c] : nans) v[r * 70 + c] = nan;
  for (Dtype dt : {float32, bfloat16, float16}) {
    SCOPED_TRACE(dtype_name(dt));
    array x(v, shape, dt);
    std::vector<double> xv = to_double(x);
    for (bool is_max : {true, false}) {
      SCOPED_TRACE(is_max ? "max" : "min");
      auto pick = [&](double a, double b) {
        return std::isnan(a) || std::isnan(b) ? nan : is_max ? std::max(a, b) : std::min(a, b);
      };
      std::vector<double> rows(19, is_max ? -INFINITY : INFINITY), cols(70, is_max ? -INFINITY : INFINITY);
      for (int r = 0; r < 19; ++r) {
        for (int c = 0; c < 70; ++c) {
          rows[r] = pick(rows[r], xv[r * 70 + c]);
          cols[c] = pick(cols[c], xv[r * 70 + c]);
        }
      }
      EXPECT_TRUE(all_close(is_max ? max(x, 1) : min(x, 1), rows, 0.0));
      EXPECT_TRUE(all_close(is_max ? max(x, 0) : min(x, 0), cols, 0.0));
      EXPECT_TRUE(std::isnan(to_double(is_max ? max(x) : min(x))[0]));
    }
  }
}

// Fewer rows than threads: each row is cut into pieces reduced in parallel.
TEST(ReduceTest, FewLongRows) {
  const Shape shape = {3, 140001};
  std::vector<double> v = uniform_values(numel(shape), -2, 2);
  for (Dtype dt : {float32, bfloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    array x(v, shape, dt);
    std::vector<double> xv = to_double(x);
    Groups g = group_by(xv, shape, {1}, false);
    std::vector<double> want_sum, bound, want_max, want_min;
    for (const auto& grp : g.values) {
      want_sum.push_back(ref_sum(grp));
      bound.push_back(sum_bound(grp, want_sum.back(), dt));
      want_max.push_back(*std::max_element(grp.begin(), grp.end()));
      want_min.push_back(*std::min_element(grp.begin(), grp.end()));
    }
    EXPECT_TRUE(within(to_double(sum(x, 1)), want_sum, bound));
    EXPECT_TRUE(all_close(max(x, 1), want_max, 0.0));
    EXPECT_TRUE(all_close(min(x, -1), want_min, 0.0));
  }
}

// Softmax with streaming stores forced on (and off) for small outputs, rows
// that do not start on a 64-byte boundary among them.
TEST(ReduceTest, SoftmaxStreamedOutput) {
  for (size_t threshold : {size_t{0}, SIZE_MAX}) {
    cpu::set_streaming_threshold(threshold);
    for (Shape shape : {Shape{37, 1001}, Shape{5, 4096}, Shape{3, 7}}) {
      SCOPED_TRACE(fmt(shape) + (threshold == 0 ? " streamed" : ""));
      const int rows = shape[0], cols = shape[1];
      array x = random_array(shape, float32, -6, 6);
      std::vector<double> xv = to_double(x), want(xv.size());
      for (int r = 0; r < rows; ++r) {
        const double* row = xv.data() + static_cast<int64_t>(r) * cols;
        double m = *std::max_element(row, row + cols), s = 0;
        for (int c = 0; c < cols; ++c) s += std::exp(row[c] - m);
        for (int c = 0; c < cols; ++c) want[static_cast<int64_t>(r) * cols + c] = std::exp(row[c] - m) / s;
      }
      EXPECT_TRUE(all_close(softmax(x, -1), want, tolerance(float32), 1e-9));
    }
  }
  cpu::set_streaming_threshold(SIZE_MAX);
}

// ---- argument errors ----

TEST(ReduceTest, BadAxesThrow) {
  array a = random_array({3, 4});
  struct Op {
    const char* name;
    std::function<array(const array&, const std::vector<int>&)> by_axes;
    std::function<array(const array&, int)> by_axis;
  };
#define KILN_OP(OP) \
  {#OP, [](const array& x, const std::vector<int>& ax) { return OP(x, ax); }, [](const array& x, int ax) { return OP(x, ax); }}
  const Op ops[] = {KILN_OP(sum), KILN_OP(mean), KILN_OP(max),       KILN_OP(min), KILN_OP(prod),
                    KILN_OP(all), KILN_OP(any),  KILN_OP(logsumexp), KILN_OP(var), KILN_OP(softmax)};
#undef KILN_OP
  for (const Op& op : ops) {
    SCOPED_TRACE(op.name);
    for (const std::vector<int>& axes : std::vector<std::vector<int>>{{5}, {-3}, {0, 0}, {1, -1}, {0, 2}}) {
      SCOPED_TRACE(fmt(axes));
      EXPECT_TRUE(throws_error([&] { op.by_axes(a, axes).eval(); }, {op.name, "(3,4)"}));
    }
    EXPECT_TRUE(throws_error([&] { op.by_axis(a, 2).eval(); }, {op.name, "(3,4)"}));
    EXPECT_TRUE(throws_error([&] { op.by_axis(a, -3).eval(); }, {op.name, "(3,4)"}));
  }
  for (int axis : {2, 5, -3}) {
    EXPECT_TRUE(throws_error([&] { argmax(a, axis).eval(); }, {"argmax", "(3,4)"}));
    EXPECT_TRUE(throws_error([&] { argmin(a, axis, true).eval(); }, {"argmin", "(3,4)"}));
  }
}

}  // namespace
}  // namespace kiln::test
