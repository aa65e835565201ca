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

// MLX's modes: disabled (compiled functions run uncompiled), no_simplify
// (fusion only), no_fuse (simplification only), enabled (both).
enum class CompileMode { disabled, no_simplify, no_fuse, enabled };

// shapeless: accepted for MLX's signature. Deliberate difference: Kiln
// traces once per input shapes either way (MLX's shapeless trace skips the
// retrace when only shapes change), so a function that depends on its
// inputs' shapes gives the right answer for every shape instead of the
// first shape's; a change of rank or dtype retraces in both.
ArrayFn compile(ArrayFn fn, bool shapeless = false);
// Turns compilation off globally (compiled functions then run uncompiled).
// The environment variable KILN_DISABLE_COMPILE (or MLX_DISABLE_COMPILE),
// set to anything, does the same at start-up; enable_compile overrides it.
void disable_compile();
void enable_compile();
void set_compile_mode(CompileMode mode);

}  // namespace kiln
