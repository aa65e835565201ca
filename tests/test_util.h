#pragma once
// Shared helpers for the test suite: random inputs, a double-precision view
// of any array (honouring its strides), and comparisons.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::test {

inline std::mt19937_64& rng() {
  static std::mt19937_64 gen(12345);
  return gen;
}

inline int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int d : s) n *= d;
  return n;
}

// Random values in [lo, hi) of the given dtype (integers are rounded; never
// all zeros).
inline array random_array(const Shape& shape, Dtype dtype = float32, double lo = -2.0, double hi = 2.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(numel(shape));
  for (auto& x : v) {
    x = dist(rng());
    if (is_integral(dtype)) x = std::floor(x);
    if (dtype == bool_) x = dist(rng()) > (lo + hi) / 2 ? 1.0 : 0.0;
  }
  return astype(array(v, shape, float64), dtype);
}

// Elements in row-major logical order, as doubles (reads through strides).
inline std::vector<double> to_double(const array& a) {
  array c = astype(a, float64);
  c.eval();
  const double* p = c.data<double>();
  const Strides& st = c.strides();
  const Shape& sh = c.shape();
  std::vector<double> out(c.size());
  std::vector<int> idx(sh.size(), 0);
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < sh.size(); ++d) off += idx[d] * st[d];
    out[i] = p[off];
    for (int d = static_cast<int>(sh.size()) - 1; d >= 0; --d) {
      if (++idx[d] < sh[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

// Row-major multi-index of flat position i in shape.
inline std::vector<int> unravel(int64_t i, const Shape& shape) {
  std::vector<int> idx(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = static_cast<int>(i % shape[d]);
    i /= shape[d];
  }
  return idx;
}

// Relative tolerance that fits a dtype's precision.
inline double tolerance(Dtype t) {
  switch (t) {
    case float16: return 2e-3;
    case bfloat16: return 1.6e-2;
    case float32: return 2e-5;
    case float64: return 1e-12;
    case float8_e4m3fn: return 6.25e-2;
    case float8_e5m2: return 0.125;
    default: return 0.0;
  }
}

// Checks got against want elementwise: |got - want| <= atol + rtol * |want|,
// with NaNs matching NaNs.
inline ::testing::AssertionResult all_close(const std::vector<double>& got, const std::vector<double>& want,
                                            double rtol, double atol = 0.0) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) && std::isnan(got[i])) continue;
    if (std::isinf(want[i]) && got[i] == want[i]) continue;
    double err = std::fabs(got[i] - want[i]);
    if (!(err <= atol + rtol * std::fabs(want[i]))) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want " << want[i]
                                           << " (rtol " << rtol << ", atol " << atol << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult all_close(const array& got, const std::vector<double>& want, double rtol,
                                            double atol = 0.0) {
  return all_close(to_double(got), want, rtol, atol);
}

// Expects `fn` to throw kiln::Error whose message contains every fragment.
template <typename Fn>
::testing::AssertionResult throws_error(Fn&& fn, const std::vector<std::string>& fragments) {
  try {
    fn();
  } catch (const kiln::Error& e) {
    std::string msg = e.what();
    for (const auto& f : fragments) {
      if (msg.find(f) == std::string::npos) {
        return ::testing::AssertionFailure() << "message \"" << msg << "\" lacks \"" << f << "\"";
      }
    }
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-kiln exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

}  // namespace kiln::test
