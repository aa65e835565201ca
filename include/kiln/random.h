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
array uniform(const Shape& shape, Dtype dtype = float32, const std::optional<array>& key = std::nullopt,
              StreamOrDevice s = {});
array normal(const Shape& shape, Dtype dtype = float32, float loc = 0.0f, float scale = 1.0f,
             const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});
// Integers uniformly in [low, high); an empty range throws (MLX does not check).
array randint(const array& low, const array& high, const Shape& shape, Dtype dtype = int32,
              const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});
array bernoulli(const array& p, const Shape& shape, const std::optional<array>& key = std::nullopt,
                StreamOrDevice s = {});
array bernoulli(const array& p, const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});

}  // namespace kiln::random
