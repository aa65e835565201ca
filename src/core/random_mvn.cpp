// random::multivariate_normal: standard normal samples times a square root
// of the covariance (U sqrt(S) Vt from its SVD, as MLX does), plus the mean.
#include "core/ops_util.h"
#include "kiln/linalg.h"
#include "kiln/ops.h"
#include "kiln/random.h"

namespace kiln::random {

array multivariate_normal(const array& mean, const array& cov, const Shape& shape, Dtype dtype,
                          const std::optional<array>& key, StreamOrDevice s) {
  const char* op = "random.multivariate_normal";
  if (dtype != float32 && dtype != float64) {
    fail(op, std::string("dtype must be float32 or float64, got ") + dtype_name(dtype), {&mean, &cov});
  }
  if (mean.ndim() < 1) fail(op, "mean needs at least one dimension", {&mean, &cov});
  if (cov.ndim() < 2) fail(op, "cov needs at least two dimensions", {&mean, &cov});
  int n = mean.shape(-1);
  if (cov.shape(-1) != cov.shape(-2) || cov.shape(-1) != n) {
    fail(op, "cov must be [..., n, n] for a mean of [..., n]", {&mean, &cov});
  }
  Stream st = to_stream(s);
  Shape out = broadcast_shapes(Shape(cov.shape().begin(), cov.shape().end() - 2),
                               Shape(mean.shape().begin(), mean.shape().end() - 1), op, {&mean, &cov});
  out = broadcast_shapes(out, shape, op, {&mean, &cov});
  out.push_back(n);
  auto usv = linalg::svd(astype(cov, dtype, st), true, st);
  array root = matmul(multiply(usv[0], expand_dims(sqrt(usv[1], st), -2, st), st), usv[2], st);
  array z = normal(out, dtype, 0.0f, 1.0f, key, st);
  return add(astype(mean, dtype, st), squeeze(matmul(expand_dims(z, -2, st), root, st), -2, st), st);
}

}  // namespace kiln::random
