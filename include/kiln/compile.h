#pragma once
// kiln::compile (MLX's mx.compile): traces a function of arrays once per
// input shapes and dtypes, simplifies the graph (common subexpressions,
// no-ops) and fuses chains of elementwise ops and broadcasts into single
// kernels that read each input once and write each output once.
#include <functional>
#include <vector>

#include "kiln/array.h"

namespace kiln {

using ArrayFn = std::function<std::vector<array>(const std::vector<array>&)>;

ArrayFn compile(ArrayFn fn);
// Turns compilation off globally (compiled functions then run uncompiled).
void disable_compile();
void enable_compile();

}  // namespace kiln
