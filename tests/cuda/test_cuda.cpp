// The GPU suite (CTest label `cuda`): every op family evaluated on
// Device::gpu against the same graph on the CPU, on random, odd-sized,
// non-contiguous and broadcast inputs. Skips where no GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <tuple>

#include "kiln/kiln.h"
#include "test_util.h"
#ifdef KILN_HAS_CUDA
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/gemv.h"
#endif

namespace kiln::test {
namespace {

using Fn = std::function<array(StreamOrDevice)>;

class Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!is_available(Device::gpu)) {
      GTEST_SKIP() << "no GPU available for the cuda suite (" << (gpu_build() ? "no CUDA device found" : "built without CUDA")
                   << ")";
    }
  }
  static bool gpu_build() {
#ifdef KILN_HAS_CUDA
    return true;
#else
    return false;
#endif
  }
};

// Evaluates fn on both devices and compares elementwise (relative to the
// magnitude of the CPU result, NaNs must match).
void expect_same(const Fn& fn, double tol, const std::string& what) {
  array c = fn(Device::cpu);
  array g = fn(Device::gpu);
  eval(c, g);
  ASSERT_EQ(c.shape(), g.shape()) << what;
  ASSERT_EQ(c.dtype(), g.dtype()) << what;
  auto vc = to_double(c);
  auto vg = to_double(g);
  int bad = 0;
  for (size_t i = 0; i < vc.size() && bad < 5; ++i) {
    double x = vc[i], y = vg[i];
    if (std::isnan(x) || std::isnan(y)) {
      if (std::isnan(x) != std::isnan(y)) {
        ADD_FAILURE() << what << ": element " << i << " cpu " << x << " gpu " << y;
        ++bad;
      }
      continue;
    }
    if (std::isinf(x) || std::isinf(y)) {
      if (x != y) {
        ADD_FAILURE() << what << ": element " << i << " cpu " << x << " gpu " << y;
        ++bad;
      }
      continue;
    }
    if (std::abs(x - y) > tol * std::max(1.0, std::abs(x))) {
      // Both sides again, one at a time: tells a wrong kernel from a
      // result that was overwritten after it was computed.
      const double cpu_again = to_double(fn(Device::cpu))[i], gpu_again = to_double(fn(Device::gpu))[i];
      ADD_FAILURE() << what << ": element " << i << " cpu " << x << " gpu " << y << " (again alone: cpu "
                    << cpu_again << " gpu " << gpu_again << ")";
      ++bad;
    }
  }
}

double tol_for(Dtype t) {
  switch (t) {
    case float16: return 4e-3;
    case bfloat16: return 2e-2;
    case float32: return 2e-5;
    case float64: return 1e-12;
    default: return 0.0;
  }
}

const Dtype kFloat[] = {float32, bfloat16, float16, float64};
const Dtype kAll[] = {bool_, uint8, uint16, uint32, uint64, int8, int16, int32, int64, float16, bfloat16, float32, float64};

// Layout variants of one logical [rows, cols] input: contiguous, transposed
// view, strided slice, broadcast row.
std::vector<std::pair<std::string, array>> layouts(int rows, int cols, Dtype t, double lo = -2, double hi = 2) {
  std::vector<std::pair<std::string, array>> v;
  v.push_back({"contiguous", random_array({rows, cols}, t, lo, hi)});
  v.push_back({"transposed", transpose(random_array({cols, rows}, t, lo, hi))});
  v.push_back({"sliced", slice(random_array({rows * 2, cols + 3}, t, lo, hi), {0, 1}, {rows * 2, cols + 1}, {2, 1})});
  v.push_back({"broadcast", broadcast_to(random_array({1, cols}, t, lo, hi), {rows, cols})});
  return v;
}

TEST_F(Gpu, UnaryFloat) {
  using U = array (*)(const array&, StreamOrDevice);
  std::vector<std::pair<const char*, U>> ops = {
      {"abs", abs}, {"negative", negative}, {"sign", sign}, {"exp", exp}, {"expm1", expm1}, {"sin", sin},
      {"cos", cos}, {"tanh", tanh}, {"sigmoid", sigmoid}, {"erf", erf}, {"floor", floor}, {"ceil", ceil},
      {"round", round}, {"relu", relu}, {"gelu", gelu}, {"gelu_approx", gelu_approx}, {"silu", silu},
      {"square", square}};
  for (Dtype t : kFloat) {
    for (auto& [lname, x] : layouts(37, 129, t)) {
      for (auto& [name, op] : ops) {
        expect_same([&, op = op](StreamOrDevice s) { return op(x, s); }, tol_for(t) * 4,
                    std::string(name) + " " + dtype_name(t) + " " + lname);
      }
    }
    array pos = random_array({1001}, t, 0.05, 3.0);
    for (auto [name, op] : std::vector<std::pair<const char*, U>>{{"log", log}, {"log1p", log1p}, {"sqrt", sqrt}, {"rsqrt", rsqrt}}) {
      expect_same([&, op = op](StreamOrDevice s) { return op(pos, s); }, tol_for(t) * 4, std::string(name) + " " + dtype_name(t));
    }
    array unit = random_array({999}, t, -0.95, 0.95);
    expect_same([&](StreamOrDevice s) { return erfinv(unit, s); }, tol_for(t) * 8, std::string("erfinv ") + dtype_name(t));
  }
}

TEST_F(Gpu, UnaryInteger) {
  for (Dtype t : {int8, int16, int32, int64, uint8, uint16, uint32, uint64, bool_}) {
    for (auto& [lname, x] : layouts(19, 67, t, -50, 50)) {
      expect_same([&](StreamOrDevice s) { return abs(x, s); }, 0, std::string("abs ") + dtype_name(t) + lname);
      if (t != bool_) {  // negative of bool throws (MLX)
        expect_same([&](StreamOrDevice s) { return negative(x, s); }, 0, std::string("negative ") + dtype_name(t) + lname);
      }
      expect_same([&](StreamOrDevice s) { return square(x, s); }, 0, std::string("square ") + dtype_name(t) + lname);
      expect_same([&](StreamOrDevice s) { return sign(x, s); }, 0, std::string("sign ") + dtype_name(t) + lname);
      expect_same([&](StreamOrDevice s) { return logical_not(x, s); }, 0, std::string("not ") + dtype_name(t) + lname);
    }
  }
}

TEST_F(Gpu, Binary) {
  using B = array (*)(const array&, const array&, StreamOrDevice);
  std::vector<std::pair<const char*, B>> ops = {
      {"add", add}, {"subtract", subtract}, {"multiply", multiply}, {"maximum", maximum}, {"minimum", minimum},
      {"equal", equal}, {"not_equal", not_equal}, {"less", less}, {"less_equal", less_equal}, {"greater", greater},
      {"greater_equal", greater_equal}, {"logical_and", logical_and}, {"logical_or", logical_or}};
  for (Dtype t : kAll) {
    auto la = layouts(23, 131, t, -20, 20);
    auto lb = layouts(23, 131, t, -20, 20);
    array scalar = random_array({}, t, 1, 5);
    array col = random_array({23, 1}, t, -20, 20);
    for (size_t i = 0; i < la.size(); ++i) {
      const array& a = la[i].second;
      const array& b = lb[(i + 1) % lb.size()].second;
      for (auto& [name, op] : ops) {
        std::string nm = name;
        if (t == bool_ && (nm == "subtract")) continue;  // not defined for bool
        std::string what = std::string(name) + " " + dtype_name(t) + " " + la[i].first;
        expect_same([&, op = op](StreamOrDevice s) { return op(a, b, s); }, tol_for(t), what);
        expect_same([&, op = op](StreamOrDevice s) { return op(a, scalar, s); }, tol_for(t), what + " scalar");
        expect_same([&, op = op](StreamOrDevice s) { return op(col, a, s); }, tol_for(t), what + " column");
      }
      if (t != bool_) {
        expect_same([&](StreamOrDevice s) { return remainder(a, scalar, s); }, tol_for(t), "remainder " + std::string(dtype_name(t)));
      }
      if (is_floating_point(t)) {
        expect_same([&](StreamOrDevice s) { return divide(a, b, s); }, tol_for(t) * 2, "divide " + std::string(dtype_name(t)));
        expect_same([&](StreamOrDevice s) { return power(abs(a, s), scalar, s); }, tol_for(t) * 8, "power " + std::string(dtype_name(t)));
      }
    }
  }
  // Large contiguous (vector path) with an odd tail.
  array x = random_array({1 << 20 | 7}), y = random_array({1 << 20 | 7});
  expect_same([&](StreamOrDevice s) { return add(x, y, s); }, 1e-6, "add large");
  array c = greater(x, y);
  expect_same([&](StreamOrDevice s) { return where(c, x, y, s); }, 0, "where");
  array c2 = transpose(greater(random_array({5, 9}), array(0.f))), y2 = random_array({9, 1});
  expect_same([&](StreamOrDevice s) { return where(c2, array(1.f), y2, s); }, 0, "where broadcast");
}

// The op kinds of issue 9: inverse trig and hyperbolic functions, log2/10,
// arctan2, floor division, bitwise ops and shifts (out-of-range counts too).
TEST_F(Gpu, MathAndBitwiseOps) {
  using U = array (*)(const array&, StreamOrDevice);
  std::vector<std::tuple<const char*, U, double, double>> unary = {
      {"tan", tan, -1.3, 1.3},        {"arcsin", arcsin, -0.99, 0.99}, {"arccos", arccos, -0.99, 0.99},
      {"arctan", arctan, -4, 4},       {"sinh", sinh, -3, 3},            {"cosh", cosh, -3, 3},
      {"arcsinh", arcsinh, -4, 4},     {"arccosh", arccosh, 1.05, 6},   {"arctanh", arctanh, -0.95, 0.95},
      {"log2", log2, 0.05, 40},        {"log10", log10, 0.05, 40}};
  for (Dtype t : kFloat) {
    for (auto& [name, op, lo, hi] : unary) {
      for (auto& [lname, x] : layouts(37, 129, t, lo, hi)) {
        expect_same([&, op = op](StreamOrDevice s) { return op(x, s); }, tol_for(t) * 4,
                    std::string(name) + " " + dtype_name(t) + " " + lname);
      }
    }
    auto la = layouts(23, 131, t, -3, 3);
    array b = random_array({23, 131}, t, 0.5, 3);
    for (auto& [lname, a] : la) {
      expect_same([&](StreamOrDevice s) { return arctan2(a, b, s); }, tol_for(t) * 4, std::string("arctan2 ") + lname);
      expect_same([&](StreamOrDevice s) { return floor_divide(a, b, s); }, tol_for(t), std::string("floor_divide ") + lname);
    }
  }
  for (Dtype t : {int8, int32, int64, uint8, uint32}) {
    bool uns = t == uint8 || t == uint32;
    int bits = static_cast<int>(size_of(t) * 8);
    array n = random_array({1, 131}, t, uns ? 0 : -2, bits + 3);
    array b = random_array({23, 131}, t, uns ? 0 : -9, 9);
    for (auto& [lname, a] : layouts(23, 131, t, uns ? 0 : -100, 100)) {
      std::string what = std::string(dtype_name(t)) + " " + lname;
      expect_same([&](StreamOrDevice s) { return bitwise_and(a, b, s); }, 0, "and " + what);
      expect_same([&](StreamOrDevice s) { return bitwise_or(a, b, s); }, 0, "or " + what);
      expect_same([&](StreamOrDevice s) { return bitwise_xor(a, b, s); }, 0, "xor " + what);
      expect_same([&](StreamOrDevice s) { return bitwise_invert(a, s); }, 0, "invert " + what);
      expect_same([&](StreamOrDevice s) { return left_shift(a, n, s); }, 0, "left_shift " + what);
      expect_same([&](StreamOrDevice s) { return right_shift(a, n, s); }, 0, "right_shift " + what);
      expect_same([&](StreamOrDevice s) { return floor_divide(a, b, s); }, 0, "floor_divide " + what);
    }
  }
  array p = random_array({7, 9}, bool_), q = random_array({7, 9}, bool_);
  expect_same([&](StreamOrDevice s) { return bitwise_xor(p, q, s); }, 0, "xor bool");
  expect_same([&](StreamOrDevice s) { return bitwise_and(p, q, s); }, 0, "and bool");
  expect_same([&](StreamOrDevice s) { return bitwise_or(p, q, s); }, 0, "or bool");
}

// Two-dim binary paths: broadcast rows and per-row values with 16-byte
// loads (wide rows, strided rows), and transposed inputs through tiles
// (several tiles, ragged edges), to every output dtype.
TEST_F(Gpu, BinaryTwoDimPaths) {
  for (Dtype t : {float32, bfloat16, float64, int8, int32}) {
    array a = random_array({37, 256}, t, -20, 20);
    array row = random_array({256}, t, -20, 20);
    array col = random_array({37, 1}, t, -20, 20);
    array wide = slice(random_array({37, 272}, t, -20, 20), {0, 0}, {37, 256});
    array tr = transpose(random_array({256, 37}, t, -20, 20));
    array big = random_array({100, 300}, t, -20, 20);
    array big_t = transpose(random_array({300, 100}, t, -20, 20));
    array big_t2 = transpose(slice(random_array({300, 112}, t, -20, 20), {0, 0}, {300, 100}));
    const std::string d = dtype_name(t);
    const double tol = tol_for(t);
    expect_same([&](StreamOrDevice s) { return add(a, row, s); }, tol, "add row broadcast " + d);
    expect_same([&](StreamOrDevice s) { return subtract(col, a, s); }, tol, "subtract per-row value " + d);
    expect_same([&](StreamOrDevice s) { return multiply(wide, row, s); }, tol, "multiply strided rows " + d);
    expect_same([&](StreamOrDevice s) { return greater(a, row, s); }, 0, "greater row broadcast " + d);
    expect_same([&](StreamOrDevice s) { return add(a, tr, s); }, tol, "add transposed " + d);
    expect_same([&](StreamOrDevice s) { return maximum(tr, wide, s); }, tol, "maximum transposed first " + d);
    expect_same([&](StreamOrDevice s) { return add(big, big_t, s); }, tol, "add transposed tiles " + d);
    expect_same([&](StreamOrDevice s) { return less(big_t, big, s); }, 0, "less transposed tiles " + d);
    expect_same([&](StreamOrDevice s) { return subtract(big_t, big_t2, s); }, tol, "two transposed tiles " + d);
    expect_same([&](StreamOrDevice s) { return contiguous(big_t, s); }, 0, "transpose copy " + d);
    expect_same([&](StreamOrDevice s) { return contiguous(transpose(wide), s); }, 0, "transpose copy strided " + d);
    // Dims and strides in whole 16-byte groups: binary.cu's vector tile kernel
    // (ragged 64-tiles at both edges, a staged input with a padded row, a
    // broadcast row beside a transposed input, a bool result).
    array v = random_array({112, 336}, t, -20, 20);
    array v_t = transpose(random_array({336, 112}, t, -20, 20));
    array v_t2 = transpose(slice(random_array({336, 128}, t, -20, 20), {0, 0}, {336, 112}));
    array v_row = random_array({336}, t, -20, 20);
    expect_same([&](StreamOrDevice s) { return add(v, v_t, s); }, tol, "add transposed vector tiles " + d);
    expect_same([&](StreamOrDevice s) { return multiply(v_t2, v, s); }, tol, "multiply transposed first " + d);
    expect_same([&](StreamOrDevice s) { return subtract(v_t, v_t2, s); }, tol, "two transposed vector tiles " + d);
    expect_same([&](StreamOrDevice s) { return greater_equal(v_t, v, s); }, 0, "greater_equal vector tiles " + d);
    expect_same([&](StreamOrDevice s) { return maximum(v_t, v_row, s); }, tol, "transposed and a row " + d);
    expect_same([&](StreamOrDevice s) { return contiguous(v_t, s); }, 0, "transpose copy, 16-byte groups " + d);
    expect_same([&](StreamOrDevice s) { return contiguous(v_t2, s); }, 0, "transpose copy, padded rows " + d);
  }
}

TEST_F(Gpu, CopyCastAndViews) {
  for (Dtype from : kAll) {
    for (auto& [lname, x] : layouts(29, 65, from, -300, 300)) {
      for (Dtype to : kAll) {
        expect_same([&](StreamOrDevice s) { return astype(x, to, s); }, tol_for(to), std::string("astype ") + dtype_name(from) + "->" + dtype_name(to) + " " + lname);
      }
      expect_same([&](StreamOrDevice s) { return copy(x, s); }, 0, std::string("copy ") + lname);
      expect_same([&](StreamOrDevice s) { return reshape(x, {-1}, s); }, 0, std::string("reshape ") + lname);
      expect_same([&](StreamOrDevice s) { return flip(x, s); }, 0, std::string("flip ") + lname);
    }
  }
  array big = random_array({3, 257, 129});
  expect_same([&](StreamOrDevice s) { return contiguous(transpose(big, {2, 0, 1}, s), s); }, 0, "transpose 3d");
  array upd = random_array({3, 10, 1}), small = random_array({7, 5});
  expect_same([&](StreamOrDevice s) { return slice_update(big, upd, {0, 5, 3}, {3, 25, 103}, {1, 2, 10}, s); }, 0,
              "slice_update");
  expect_same([&](StreamOrDevice s) { return pad(small, 2, array(1.5f), s); }, 0, "pad");
}

TEST_F(Gpu, Reductions) {
  Shape shapes[] = {{1}, {7}, {100003}, {33, 1000}, {1000, 33}, {4, 5000, 3}, {3, 65, 131}, {2, 3, 4, 5}};
  for (Dtype t : {float32, bfloat16, float16, float64, int32, int8, uint8, int16, uint16, uint64, bool_}) {
    for (const Shape& sh : shapes) {
      array x = random_array(sh, t, -3, 3);
      int nd = static_cast<int>(sh.size());
      std::vector<std::vector<int>> axes_sets = {{}};
      for (int a = 0; a < nd; ++a) axes_sets.push_back({a});
      if (nd >= 3) axes_sets.push_back({0, 2});
      for (auto& axes : axes_sets) {
        std::string what = std::string(dtype_name(t)) + " shape " + std::to_string(sh.size()) + "d axes " + std::to_string(axes.size());
        double tol = is_floating_point(t) ? tol_for(t) * 10 : 0;
        auto pick = [&](auto op) {
          return [&, op](StreamOrDevice s) { return axes.empty() ? op(x, std::vector<int>{}, s) : op(x, axes, s); };
        };
        if (axes.empty()) {
          expect_same([&](StreamOrDevice s) { return sum(x, false, s); }, tol, "sum all " + what);
          expect_same([&](StreamOrDevice s) { return max(x, false, s); }, 0, "max all " + what);
          continue;
        }
        expect_same([&](StreamOrDevice s) { return sum(x, axes, false, s); }, tol, "sum " + what);
        expect_same([&](StreamOrDevice s) { return max(x, axes, false, s); }, 0, "max " + what);
        expect_same([&](StreamOrDevice s) { return min(x, axes, false, s); }, 0, "min " + what);
        expect_same([&](StreamOrDevice s) { return any(x, axes, false, s); }, 0, "any " + what);
        expect_same([&](StreamOrDevice s) { return all(x, axes, false, s); }, 0, "all " + what);
        (void)pick;
      }
      if (nd >= 1 && t != bool_) {
        expect_same([&](StreamOrDevice s) { return argmax(x, nd - 1, false, s); }, 0, "argmax " + std::string(dtype_name(t)));
        expect_same([&](StreamOrDevice s) { return argmin(x, 0, false, s); }, 0, "argmin " + std::string(dtype_name(t)));
      }
    }
  }
  // Few long rows (a vocabulary's logits): split over blocks, then merged;
  // NaNs and ties keep the first index.
  for (Dtype t : {float32, bfloat16, float64, int32}) {
    for (const Shape& sh : {Shape{128256}, Shape{3, 40001}, Shape{2, 16384}}) {
      array x = random_array(sh, t, -3, 3);
      const std::string what = std::string(dtype_name(t)) + " long rows " + std::to_string(sh.back());
      expect_same([&](StreamOrDevice s) { return argmax(x, -1, false, s); }, 0, "argmax " + what);
      expect_same([&](StreamOrDevice s) { return argmin(x, -1, false, s); }, 0, "argmin " + what);
      // A tie for the maximum in two splits (the first one wins); a NaN.
      const int n = sh.back();
      const array pos = arange(0, n, 1);
      auto put = [&](const array& a, int i, float v) { return where(equal(pos, array(i)), astype(array(v), a.dtype()), a); };
      array tied = put(put(x, 1, 9.0f), n - 2, 9.0f);
      expect_same([&](StreamOrDevice s) { return argmax(tied, -1, false, s); }, 0, "argmax tie " + what);
      if (is_floating_point(t)) {
        array nan = put(x, n - 7, NAN);
        expect_same([&](StreamOrDevice s) { return argmax(nan, -1, false, s); }, 0, "argmax nan " + what);
        expect_same([&](StreamOrDevice s) { return argmin(nan, -1, false, s); }, 0, "argmin nan " + what);
      }
    }
  }
  // Long columns (split across blocks, second pass), batched, vector and
  // scalar widths; many short rows (a few lanes per row).
  for (Dtype t : {float32, bfloat16, int32, float64}) {
    const std::string d = dtype_name(t);
    const double tol = t == bfloat16 ? 2e-2 : 1e-4;
    array cols = random_array({1000, 200}, t, -2, 2);
    expect_same([&](StreamOrDevice s) { return sum(cols, 0, false, s); }, tol, "sum long columns " + d);
    expect_same([&](StreamOrDevice s) { return max(cols, 0, false, s); }, 0, "max long columns " + d);
    array odd = random_array({3, 700, 131}, t, -2, 2);
    expect_same([&](StreamOrDevice s) { return sum(odd, 1, false, s); }, tol, "sum batched columns " + d);
    array short_rows = random_array({5000, 64}, t, -2, 2);
    expect_same([&](StreamOrDevice s) { return sum(short_rows, 1, false, s); }, tol, "sum short rows " + d);
    array short_part = random_array({4099, 36}, t, -2, 2);  // fewer vectors than lanes
    expect_same([&](StreamOrDevice s) { return sum(short_part, 1, false, s); }, tol, "sum short rows 36 " + d);
    expect_same([&](StreamOrDevice s) { return max(short_rows, 1, false, s); }, 0, "max short rows " + d);
    array shorter = random_array({3001, 7}, t, -2, 2);
    expect_same([&](StreamOrDevice s) { return min(shorter, 1, false, s); }, 0, "min short rows " + d);
    expect_same([&](StreamOrDevice s) { return sum(shorter, 1, false, s); }, tol, "sum odd short rows " + d);
  }
  array small = random_array({17, 9}, float32, 0.5, 1.5);
  expect_same([&](StreamOrDevice s) { return prod(small, 1, false, s); }, 1e-5, "prod");
  array tall = random_array({300, 70});
  expect_same([&](StreamOrDevice s) { return sum(transpose(tall), 1, false, s); }, 1e-4, "sum transposed");
  for (Dtype t : kFloat) {
    // Register-cached rows (1 to 8 vectors a thread, a partial last one) and
    // the three-pass fallback (odd or very long rows).
    for (Shape sh : {Shape{5, 7}, Shape{3, 4097}, Shape{64, 1000}, Shape{9, 64}, Shape{7, 4096}, Shape{5, 2056},
                     Shape{3, 16384}, Shape{2, 20000}}) {
      array x = random_array(sh, t, -5, 5);
      expect_same([&](StreamOrDevice s) { return softmax(x, -1, s); }, tol_for(t) * 4, std::string("softmax ") + dtype_name(t));
      expect_same([&](StreamOrDevice s) { return softmax(transpose(x), -1, s); }, tol_for(t) * 4, std::string("softmax T ") + dtype_name(t));
    }
  }
}

TEST_F(Gpu, Indexing) {
  for (Dtype t : {float32, bfloat16, int64, uint8}) {
    array a = random_array({13, 17, 5}, t);
    array idx = array({3, 0, -1, 12, 7, 7}, int32);
    expect_same([&](StreamOrDevice s) { return take(a, idx, 0, s); }, 0, "take 0");
    expect_same([&](StreamOrDevice s) { return take(transpose(a), astype(idx, int64), 2, s); }, 0, "take T");
    expect_same([&](StreamOrDevice s) { return take(a, reshape(array({1, 4, -2, 16}, int32), {2, 2}), 1, s); }, 0, "take 1");
    expect_same([&](StreamOrDevice s) { return take(a, array({5, 100, 2}, int32), s); }, 0, "take flat");
    array along = astype(random_array({13, 4, 5}, float32, 0, 16.9), int32);
    expect_same([&](StreamOrDevice s) { return take_along_axis(a, along, 1, s); }, 0, "take_along_axis");
    array other = random_array({5, 3, 13}, t);
    expect_same([&](StreamOrDevice s) { return concatenate({a, transpose(other, {2, 1, 0})}, 1, s); }, 0, "concatenate");
    expect_same([&](StreamOrDevice s) { return stack({a, a}, 3, s); }, 0, "stack");
  }
  // Out-of-range indices: the GPU reports the CPU's error (deferred to the
  // eval that waits on the gather), and the stream goes on working.
  array a = random_array({13, 17});
  for (auto [bad, what] : {std::pair{13, "13"}, std::pair{-14, "-14"}}) {
    array idx = array({1, bad, 2}, int32);
    try {
      eval(take(a, idx, 0, Device::gpu));
      ADD_FAILURE() << "take with index " << bad << " did not throw on the GPU";
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("[take] index " + std::string(what) + " is out of range for an axis of size 13"), std::string::npos) << m;
    }
  }
  try {
    eval(take_along_axis(a, full({13, 2}, 17, int32), 1, Device::gpu));
    ADD_FAILURE() << "take_along_axis with index 17 did not throw on the GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[take_along_axis] index 17"), std::string::npos) << e.what();
  }
  expect_same([&](StreamOrDevice s) { return take(a, array({12, -13}, int32), 0, s); }, 0, "take after errors");
}

TEST_F(Gpu, RandomAndArange) {
  array k = random::key(42);
  for (Shape sh : {Shape{1}, Shape{5}, Shape{1023, 3}}) {
    expect_same([&](StreamOrDevice s) { return random::bits(sh, k, s); }, 0, "bits");
    expect_same([&](StreamOrDevice s) { return random::uniform(sh, float32, k, s); }, 0, "uniform");
    expect_same([&](StreamOrDevice s) { return random::normal(sh, bfloat16, 0.f, 1.f, k, s); }, 1e-2, "normal");  // one bf16 ulp: libm vs CUDA erfinv
  }
  for (Dtype t : kAll) {
    if (t == bool_) continue;
    expect_same([&](StreamOrDevice s) { return arange(-3.0, 97.0, 0.5, t, s); }, tol_for(t), std::string("arange ") + dtype_name(t));
  }
}

TEST_F(Gpu, Matmul) {
  struct Case { int b, m, n, k; };
  for (Dtype t : kFloat) {
    for (Case c : {Case{1, 1, 1, 1}, Case{1, 17, 33, 65}, Case{3, 64, 48, 129}, Case{2, 5, 300, 77}, Case{1, 1, 4096, 512}}) {
      array a = random_array({c.b, c.m, c.k}, t, -1, 1);
      array w = random_array({c.b, c.k, c.n}, t, -1, 1);
      array wt = random_array({c.b, c.n, c.k}, t, -1, 1);
      double tol = t == float32 ? 1e-4 : tol_for(t) * 4;
      std::string what = std::string(dtype_name(t)) + " " + std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k);
      expect_same([&](StreamOrDevice s) { return matmul(a, w, s); }, tol, "matmul " + what);
      expect_same([&](StreamOrDevice s) { return matmul(a, swapaxes(wt, 1, 2), s); }, tol, "matmul wT " + what);
      expect_same([&](StreamOrDevice s) { return matmul(swapaxes(swapaxes(a, 1, 2), 1, 2), slice(w, {0, 0, 0}, {c.b, c.k, c.n}), s); }, tol, "matmul view " + what);
    }
    // Broadcast batch and the decode shapes of the GEMV.
    array a = random_array({4, 1, 3, 40}, t, -1, 1);
    array w = random_array({5, 40, 24}, t, -1, 1);
    expect_same([&](StreamOrDevice s) { return matmul(a, w, s); }, t == float32 ? 1e-4 : tol_for(t) * 4, "matmul broadcast batch");
    for (int m = 1; m <= 8; ++m) {
      array x = random_array({m, 1000}, t, -1, 1);
      array W = random_array({777, 1000}, t, -1, 1);
      expect_same([&](StreamOrDevice s) { return matmul(x, transpose(W), s); }, t == float32 ? 1e-4 : tol_for(t) * 4, "gemv m=" + std::to_string(m));
    }
  }
  for (Dtype t : {int32, int8, int64}) {
    array a = random_array({2, 9, 13}, t, -5, 5), b = random_array({2, 13, 7}, t, -5, 5);
    expect_same([&](StreamOrDevice s) { return matmul(a, b, s); }, 0, "int matmul");
  }
}

// The decode GEMV's tensor-core path (bf16, fp16), forced (matmul otherwise
// takes the faster of the GEMV and cuBLASLt): every M up to 8, K that ends
// mid-chunk, N that ends mid-tile, x rows with a stride beyond K, and K % 8
// != 0 (which leaves the GEMV for cuBLASLt).
TEST_F(Gpu, GemvDecode) {
  struct Case { int k, n; };
#ifdef KILN_HAS_CUDA
  struct Reset {
    ~Reset() { cuda::set_small_m_override(-1); }
  } reset;
  cuda::set_small_m_override(1);
#endif
  {
    for (Dtype t : {bfloat16, float16}) {
      for (Case c : {Case{8, 1}, Case{24, 17}, Case{4104, 4100}, Case{2056, 33}, Case{1001, 40}}) {
        array W = random_array({c.n, c.k}, t, -1, 1);
        for (int m = 1; m <= 8; ++m) {
          array x = random_array({m, c.k}, t, -1, 1);
          array xs = slice(random_array({m, c.k + 8}, t, -1, 1), {0, 0}, {m, c.k});
          const std::string what = std::string(dtype_name(t)) + " m=" + std::to_string(m) +
                                   " k=" + std::to_string(c.k) + " n=" + std::to_string(c.n);
          const double tol = tol_for(t) * 4;
          expect_same([&](StreamOrDevice s) { return matmul(x, transpose(W), s); }, tol, "gemv " + what);
          expect_same([&](StreamOrDevice s) { return matmul(xs, transpose(W), s); }, tol, "gemv strided x " + what);
        }
      }
    }
  }
}

#ifdef KILN_HAS_CUDA
TEST_F(Gpu, MatmulTf32) {
  array a = random_array({300, 257}, float32, -1, 1), b = random_array({257, 129}, float32, -1, 1);
  cuda::set_tf32_matmul(true);
  array g = matmul(a, b, Device::gpu);
  g.eval();
  cuda::set_tf32_matmul(false);
  array c = matmul(a, b, Device::cpu);
  auto vg = to_double(g), vc = to_double(c);
  double max_diff = 0;
  for (size_t i = 0; i < vc.size(); ++i) max_diff = std::max(max_diff, std::abs(vg[i] - vc[i]));
  // tf32 keeps 10 mantissa bits: sums of 257 products in [-1, 1] land within a few 1e-2.
  EXPECT_LT(max_diff, 5e-2);
  EXPECT_GT(max_diff, 2e-4);  // tf32 really ran: plain fp32 would match to about 1e-5
}
#endif

TEST_F(Gpu, ScatterAxis) {
  array a = random_array({37, 9});
  array idx = astype(random_array({37, 5}, float32, 0, 9), int32);
  array v = random_array({37, 5});
  expect_same([&](StreamOrDevice s) { return scatter_add_axis(a, idx, v, 1, s); }, 1e-5, "scatter_add_axis");
  array idx0 = astype(random_array({4, 9}, float32, 0, 37), int32);
  array v0 = random_array({4, 9});
  expect_same([&](StreamOrDevice s) { return scatter_add_axis(a, idx0, v0, 0, s); }, 1e-5, "scatter_add_axis axis 0");
  // put_along_axis with distinct indices per line: deterministic.
  array perm = reshape(astype(arange(0, 9, 1, int32), int32), {1, 9});
  array v9 = random_array({37, 9});
  expect_same([&](StreamOrDevice s) { return put_along_axis(a, broadcast_to(perm, {37, 9}), v9, 1, s); }, 0,
              "put_along_axis");
}

TEST_F(Gpu, GradientsRunOnTheGpu) {
  array w = random_array({16, 8}), x = random_array({5, 16});
  array idx = array({3, 0, 3, 7}, int32);
  auto loss = [&](StreamOrDevice s) {
    return [&, s](const std::vector<array>& p) {
      array h = softmax(matmul(p[1], p[0], s), -1, s);
      return sum(multiply(take(h, idx, 1, s), take(h, idx, 1, s), s), false, s);
    };
  };
  for (int arg = 0; arg < 2; ++arg) {
    expect_same([&](StreamOrDevice s) { return grad(loss(s), std::vector<int>{0, 1})({w, x})[arg]; }, 1e-4,
                "grad of matmul/softmax/take");
  }
  expect_same([&](StreamOrDevice s) {
    return vmap([s](const array& r) { return softmax(exp(r, s), -1, s); }, 1, 0)(x);
  }, 1e-5, "vmap over axis 1");
}

TEST_F(Gpu, MemoryAndStreams) {
  // A GPU result read on the host, fed to a CPU op and to another GPU stream.
  array x = random_array({1000, 37});
  Stream g1 = new_stream(Device::gpu), g2 = new_stream(Device::gpu);
  array y = exp(x, g1);
  array z = sum(y, 1, false, g2);
  array w = add(z, array(1.f), Device::cpu);
  array ref = add(sum(exp(x, Device::cpu), 1, false, Device::cpu), array(1.f), Device::cpu);
  eval(w, ref);
  auto a = to_double(w), b = to_double(ref);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4 * std::abs(b[i]));
  // Memory counters include device memory; a limit makes a device OOM an Error.
  // Buffers still held by in-flight records of earlier work are released first.
  for (Stream s : {g1, g2, default_stream(Device::gpu)}) synchronize(s);
  size_t before = get_active_memory();
  array big = exp(random_array({1 << 20}), Device::gpu);
  eval(big);
  EXPECT_GE(get_active_memory(), before + (size_t{4} << 20));
  array src = random_array({1 << 22});
  eval(src);
  size_t old = set_memory_limit(get_active_memory() + (1 << 20));
  EXPECT_THROW(eval(exp(src, Device::gpu)), Error);
  set_memory_limit(old);
  synchronize();
}

// ---- numerics of issue 13 (CPU twins: test_reduce_precision.cpp,
// test_numerics.cpp, test_dtype.cpp) ----

// Long float sums within 2 ulps x log2(n) of the exact sum: long rows (a
// block per row, split rows), long columns, all axes, mean, softmax's sum.
TEST_F(Gpu, LongSumsArePrecise) {
  auto within = [](double got, long double want, int64_t n) {
    const double bound = 2 * 1.1920928955078125e-7 * std::log2(static_cast<double>(n));
    return std::fabs(static_cast<long double>(got) - want) <= bound * std::fabs(want);
  };
  for (int64_t n : {int64_t{10000000}, int64_t{30000000}}) {
    array x = full({static_cast<int>(n)}, array(0.1f), Device::gpu);
    const long double want = static_cast<long double>(n) * 0.1f;
    EXPECT_TRUE(within(sum(x, false, Device::gpu).item<float>(), want, n)) << n;
    EXPECT_TRUE(within(mean(x, false, Device::gpu).item<float>(), want / n, n)) << n;
    array rows = reshape(x, {4, static_cast<int>(n / 4)});
    for (double got : to_double(sum(rows, 1, false, Device::gpu))) EXPECT_TRUE(within(got, want / 4, n / 4)) << n;
  }
  const int rows = 600001, cols = 17;
  array x = random::uniform({rows, cols}, float32, random::key(3));
  std::vector<double> v = to_double(x);
  std::vector<long double> want(cols, 0.0L);
  for (int64_t i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) want[j] += v[i * cols + j];
  }
  std::vector<double> got = to_double(sum(x, 0, false, Device::gpu));
  for (int j = 0; j < cols; ++j) EXPECT_TRUE(within(got[j], want[j], rows)) << "column " << j;
  got = to_double(sum(transpose(x), 1, false, Device::gpu));
  for (int j = 0; j < cols; ++j) EXPECT_TRUE(within(got[j], want[j], rows)) << "row " << j;
  const int len = 4000000;
  array r = random::uniform(array(-1.0f), array(1.0f), {1, len}, float32, random::key(9));
  expect_same([&](StreamOrDevice s) { return softmax(r, -1, s); }, 1e-6, "softmax of a long row");
  std::vector<float> with_inf(100003, 1.0f);
  with_inf[777] = INFINITY;
  EXPECT_EQ(sum(array(with_inf, {100003}), false, Device::gpu).item<float>(), INFINITY);
}

// Casts to 16-bit floats round once, as on the CPU (bit for bit).
TEST_F(Gpu, CastsToHalfRoundOnce) {
  EXPECT_EQ(astype(array(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -30)), float16, Device::gpu).item<float>(),
            1.0009765625f);
  EXPECT_EQ(astype(array(16842753), bfloat16, Device::gpu).item<float>(), 16908288.0f);
  for (Dtype to : {float16, bfloat16}) {
    for (Dtype from : {float64, int32, uint32, int64, uint64}) {
      array x = from == float64 ? random_array({100003}, float64, -70000, 70000)
                                : astype(random::bits({100003}, random::key(4)), from);
      if (from == int64) x = x * array(int64_t{1} << 31, int64) + x;
      if (from == uint64) x = x * array(uint64_t{1} << 32, uint64) + x;
      expect_same([&](StreamOrDevice s) { return astype(x, to, s); }, 0,
                  std::string(dtype_name(from)) + " -> " + dtype_name(to));
    }
  }
}

TEST_F(Gpu, SignedZerosTanhAndIntegerPowers) {
  auto signs = [](const array& a) {
    std::vector<bool> out;
    for (double d : to_double(a)) out.push_back(std::signbit(d));
    return out;
  };
  for (Dtype t : kFloat) {
    array x = array({-0.0, 0.0, -4.0, 4.0}, {4}, t);
    array y = array({2.0, 2.0, 2.0, -2.0}, {4}, t);
    EXPECT_EQ(signs(abs(x, Device::gpu)), (std::vector<bool>{false, false, false, false})) << dtype_name(t);
    EXPECT_EQ(signs(negative(x, Device::gpu)), (std::vector<bool>{false, true, false, true})) << dtype_name(t);
    EXPECT_EQ(signs(remainder(x, y, Device::gpu)), (std::vector<bool>{false, false, false, true})) << dtype_name(t);
    const double inf = INFINITY;
    // 9.02 is where float32's tanh rounds to 1; float64 gets there later.
    const double edge = t == float64 ? 20.0 : 9.02;
    array big = array({edge, -edge, inf, -inf, 30.0}, {5}, t);
    EXPECT_TRUE(all_close(tanh(big, Device::gpu), {1.0, -1.0, 1.0, -1.0, 1.0}, 0.0)) << dtype_name(t);
  }
  array base = array({2, 3, -1}, {3});
  array e = subtract(array({1, 2, 2}, {3}), array(3), Device::gpu);
  EXPECT_TRUE(throws_error([&] { power(base, e, Device::gpu).eval(); }, {"[power]", "negative"}));
  EXPECT_TRUE(throws_error([&] { power(base, array(-2), Device::gpu); }, {"[power]", "-2"}));
  array ok = subtract(array({3, 3, 3}, {3}), array(1), Device::gpu);
  EXPECT_TRUE(all_close(power(base, ok, Device::gpu), {4.0, 9.0, 1.0}, 0.0));
}

}  // namespace
}  // namespace kiln::test

