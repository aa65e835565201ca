// Cases of scaled_matmul (fp8 operands, per-tensor or block scales): the
// case's float inputs are rounded to fp8 inside fn, so every layout of the
// operands and of the scales reaches the op; the reference is a float64
// loop over the rounded values. No vjp or vmap (the op has neither).
#include <cmath>

#include "harness/harness.h"

namespace kiln::harness {
namespace {

RefFn scaled_mm_ref(Dtype ta, Dtype tb, bool block) {
  return [=](const Arrays& x) {
    const int M = x[0].shape(0), K = x[0].shape(1), N = x[1].shape(1);
    const int kb = (K + 127) / 128, nb = (N + 127) / 128;
    auto a = values(astype(x[0], ta)), b = values(astype(x[1], tb)), sa = values(x[2]), sb = values(x[3]);
    std::vector<double> out(static_cast<size_t>(M) * N);
    for (int m = 0; m < M; ++m) {
      for (int n = 0; n < N; ++n) {
        double acc = 0;
        for (int k = 0; k < K; ++k) {
          double fa = block ? sa[m * kb + k / 128] : sa[0];
          double fb = block ? sb[(k / 128) * nb + n / 128] : sb[0];
          acc += (a[m * K + k] * fa) * (b[k * N + n] * fb);
        }
        out[m * N + n] = acc;
      }
    }
    return std::vector<std::vector<double>>{out};
  };
}

}  // namespace

void register_fp8() {
  add({.op = "scaled_matmul",
       .primitive = "ScaledMatmul",
       .name = "(6,200)x(200,20) e4m3 block scales",
       .fn = [](const Arrays& x) {
         return Arrays{scaled_matmul(astype(x[0], float8_e4m3fn), astype(x[1], float8_e4m3fn), x[2], x[3], float32)};
       },
       .inputs = {in({6, 200}, -4, 4), in({200, 20}, -4, 4), fixed({6, 2}, float32, 0.5, 2),
                  fixed({2, 1}, float32, 0.5, 2)},
       .dtypes = {float32},
       .ref = scaled_mm_ref(float8_e4m3fn, float8_e4m3fn, true),
       .vmap = false});
  add({.op = "scaled_matmul",
       .primitive = "ScaledMatmul",
       .name = "(5,130)x(130,9) e4m3 x e5m2 per tensor",
       .fn = [](const Arrays& x) {
         return Arrays{scaled_matmul(astype(x[0], float8_e4m3fn), astype(x[1], float8_e5m2), x[2], x[3], float32)};
       },
       .inputs = {in({5, 130}, -4, 4), in({130, 9}, -4, 4), fixed({1}, float32, 0.5, 2), fixed({1}, float32, 0.5, 2)},
       .dtypes = {float32},
       .ref = scaled_mm_ref(float8_e4m3fn, float8_e5m2, false),
       .vmap = false});
}

}  // namespace kiln::harness
