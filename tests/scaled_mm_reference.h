#pragma once
// A float64 reference for scaled_matmul, shared by the CPU test
// (tests/test_scaled_mm.cpp) and the GPU one (tests/cuda/test_cuda_fp8.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln::test {

struct SmmProblem {
  array a, b, sa, sb;
  bool block;
};

// Random fp8 operands (values over several binades) and positive scales of
// varied magnitude.
inline SmmProblem make_smm_problem(int M, int K, int N, Dtype ta, Dtype tb, bool block) {
  array a = astype(random_array({M, K}, float32, -6, 6), ta);
  array b = astype(random_array({K, N}, float32, -6, 6), tb);
  const int kb = (K + 127) / 128, nb = (N + 127) / 128;
  if (block) {
    return {a, b, exp(random_array({M, kb}, float32, -3, 3)), exp(random_array({kb, nb}, float32, -3, 3)), true};
  }
  return {a, b, array(0.37f), array(2.5f), false};
}

// out[m, n] in float64 and, per element, the sum of |terms| (the scale of
// the float32 rounding error).
inline void smm_reference(const SmmProblem& p, std::vector<double>& out, std::vector<double>& mag) {
  const int M = p.a.shape(0), K = p.a.shape(1), N = p.b.shape(1);
  const int kb = (K + 127) / 128, nb = (N + 127) / 128;
  std::vector<double> a = to_double(p.a), b = to_double(p.b), sa = to_double(p.sa), sb = to_double(p.sb);
  out.assign(static_cast<size_t>(M) * N, 0.0);
  mag.assign(out.size(), 0.0);
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      double acc = 0, s = 0;
      for (int k = 0; k < K; ++k) {
        double fa = p.block ? sa[m * kb + k / 128] : sa[0];
        double fb = p.block ? sb[(k / 128) * nb + n / 128] : sb[0];
        double t = (a[m * K + k] * fa) * (b[k * N + n] * fb);
        acc += t;
        s += std::fabs(t);
      }
      out[m * N + n] = acc;
      mag[m * N + n] = s;
    }
  }
}

inline ::testing::AssertionResult smm_matches_reference(const array& got, const SmmProblem& p, double sum_rtol = 1e-5) {
  std::vector<double> want, mag;
  smm_reference(p, want, mag);
  std::vector<double> g = to_double(got);
  // float32 products and sums: a few ulps of the terms' magnitude; a
  // bfloat16 output adds its one rounding.
  const double out_rtol = got.dtype() == bfloat16 ? std::ldexp(1.0, -8) : 0.0;
  for (size_t i = 0; i < g.size(); ++i) {
    double tol = out_rtol * std::fabs(want[i]) + sum_rtol * mag[i] + 1e-30;
    if (!(std::fabs(g[i] - want[i]) <= tol)) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << g[i] << ", want " << want[i]
                                           << " (tol " << tol << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace kiln::test
