#pragma once
// Counter-based random numbers (Philox-4x32-10): a key and an element's
// position determine its value, so the same key gives the same numbers on
// every backend and for any thread count. Keys are uint32 arrays of shape [2].
#include <optional>

#include "kiln/array.h"

namespace kiln::random {

array key(uint64_t seed);
// Seeds the global key used when an op is given no key.
void seed(uint64_t seed);
// num new keys, shape [num, 2].
array split(const array& key, int num = 2, StreamOrDevice s = {});
// Raw uint32 bits of the given shape.
array bits(const Shape& shape, const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});
array uniform(const array& low, const array& high, const Shape& shape, Dtype dtype = float32,
              const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});
template <typename T, typename U>
array uniform(T low, U high, const Shape& shape, Dtype dtype = float32, const std::optional<array>& key = std::nullopt,
              StreamOrDevice s = {}) {
  return uniform(array(low), array(high), shape, dtype, key, s);
}
// Uniform in [0, 1).
array uniform(const Shape& shape, Dtype dtype, const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});
array uniform(const Shape& shape, const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});

// Normal with mean loc and standard deviation scale (0 and 1 when absent).
array normal(const Shape& shape, Dtype dtype, const std::optional<array>& loc, const std::optional<array>& scale,
             const std::optional<array>& key, StreamOrDevice s = {});
array normal(const Shape& shape, Dtype dtype, float loc, float scale, const std::optional<array>& key = std::nullopt,
             StreamOrDevice s = {});
array normal(const Shape& shape, float loc, float scale, const std::optional<array>& key = std::nullopt,
             StreamOrDevice s = {});
array normal(const Shape& shape, Dtype dtype, const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});
array normal(const Shape& shape, const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});

// Integers uniformly in [low, high); bool_ is allowed (MLX). An empty range throws when both
// bounds are already evaluated (MLX does not check).
array randint(const array& low, const array& high, const Shape& shape, Dtype dtype = int32,
              const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});
template <typename T, typename U>
array randint(T low, U high, const Shape& shape, Dtype dtype = int32, const std::optional<array>& key = std::nullopt,
              StreamOrDevice s = {}) {
  return randint(array(low), array(high), shape, dtype, key, s);
}

// true with probability p (a floating array, broadcast to shape).
array bernoulli(const array& p, const Shape& shape, const std::optional<array>& key = std::nullopt,
                StreamOrDevice s = {});
array bernoulli(const array& p, const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});
template <typename T>
array bernoulli(T p, const std::optional<array>& key = std::nullopt, StreamOrDevice s = {}) {
  return bernoulli(array(p), key, s);
}
template <typename T>
array bernoulli(T p, const Shape& shape, const std::optional<array>& key = std::nullopt, StreamOrDevice s = {}) {
  return bernoulli(array(p), shape, key, s);
}
// p = 0.5, one value.
array bernoulli(const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});


// Normal samples truncated to [lower, upper] (inverse CDF between erf of
// the bounds, then clipped), lower/upper broadcast to shape; the second
// form takes the broadcast shape of the bounds.
array truncated_normal(const array& lower, const array& upper, const Shape& shape, Dtype dtype = float32,
                       const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});
array truncated_normal(const array& lower, const array& upper, Dtype dtype = float32,
                       const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});
// Standard Gumbel samples, -log(-log(u)). Difference from MLX: u is drawn
// in (0, 1) instead of [0, 1), so no sample is -inf.
array gumbel(const Shape& shape, Dtype dtype = float32, const std::optional<array>& key = std::nullopt,
             StreamOrDevice s = {});
// Indices drawn from the categorical distribution of unnormalized log
// probabilities `logits` along axis (uint32, as MLX): one sample per
// position of the other axes, `shape` samples (which must be a broadcast of
// logits' shape without axis), or num_samples per position (a last axis).
array categorical(const array& logits, int axis, const Shape& shape, const std::optional<array>& key = std::nullopt,
                  StreamOrDevice s = {});
array categorical(const array& logits, int axis, int num_samples, const std::optional<array>& key = std::nullopt,
                  StreamOrDevice s = {});
array categorical(const array& logits, int axis = -1, const std::optional<array>& key = std::nullopt,
                  StreamOrDevice s = {});
// Laplace samples with location loc and scale (inverse CDF).
array laplace(const Shape& shape, Dtype dtype, float loc, float scale, const std::optional<array>& key = std::nullopt,
              StreamOrDevice s = {});
inline array laplace(const Shape& shape, float loc, float scale, const std::optional<array>& key = std::nullopt,
                     StreamOrDevice s = {}) {
  return laplace(shape, float32, loc, scale, key, s);
}
inline array laplace(const Shape& shape, Dtype dtype, const std::optional<array>& key = std::nullopt,
                     StreamOrDevice s = {}) {
  return laplace(shape, dtype, 0.0f, 1.0f, key, s);
}
inline array laplace(const Shape& shape, const std::optional<array>& key = std::nullopt, StreamOrDevice s = {}) {
  return laplace(shape, float32, 0.0f, 1.0f, key, s);
}
// x with its entries along axis randomly permuted; permutation(n) is a
// random permutation of arange(n) (uint32, as MLX).
array permutation(const array& x, int axis = 0, const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});
array permutation(int x, const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});
// Samples of the normal distribution with mean [..., n] and covariance
// cov [..., n, n] (symmetric positive semi-definite), of shape
// broadcast(shape, mean's and cov's batch shapes) + [n], through the SVD of
// cov (MLX's recipe; a CPU stream, as kiln::linalg). dtype float32 or
// float64 (MLX: float32 only).
array multivariate_normal(const array& mean, const array& cov, const Shape& shape, Dtype dtype,
                          const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});

}  // namespace kiln::random
