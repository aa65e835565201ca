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

}  // namespace kiln::random
