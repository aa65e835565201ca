#pragma once
// Fused "fast" ops (MLX's mlx/fast.h): each is a primitive that holds the
// fallback built from plain ops. The fused kernel runs where it applies; the
// transformations (vjp, jvp, vmap) and unsupported cases run the fallback,
// which is also the oracle of the tests.
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "kiln/array.h"

namespace kiln::fast {

// ---- norms and rotary embeddings ----

// ---- attention ----

}  // namespace kiln::fast
