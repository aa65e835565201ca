#pragma once
// compile's second CPU backend: a fused region becomes one C++ loop, built
// by the host compiler into a shared object, cached on disk and loaded with
// dlopen. codegen_emit.cpp writes the source, compiled_codegen.cpp builds,
// caches and runs it.
//
// A generated kernel covers the output as rows of `inner` elements; each
// input is read in one of four ways, one letter per input in the kernel's
// layout string:
//   'c' contiguous, same order as the output     p[i]
//   's' a single element (scalar broadcast)      p[0]
//   'r' a row broadcast over the outer dims      p[i % inner]
//   'k' a column broadcast over the inner dims   p[i / inner]
#include <cstdint>
#include <string>
#include <vector>

#include "core/compiled.h"

namespace kiln::cpu::codegen {

// extern "C" signature of every generated kernel: elements [begin, end) of
// the output, which is `inner` elements a row.
using KernelFn = void (*)(const void* const* inputs, void* out, int64_t begin, int64_t end, int64_t inner);
inline constexpr const char* kKernelSymbol = "kiln_fused_kernel";

// The complete, self-contained source of the kernel for `c` and the input
// layouts, or "" when the generated code does not cover one of its ops or
// dtypes (the interpreter runs those).
std::string kernel_source(const Compiled& c, const std::string& layouts);

// The CPU JIT service, shared by compile and fast::cpu_kernel: builds the
// self-contained C++ `source` into a shared object (cached in memory and on
// disk by the source and the compiler's command line) and returns the
// address of its extern "C" `symbol`; null when it cannot be built, with
// the reason (a compile error: the compiler's log) in *why.
void* jit_symbol(const std::string& source, const char* symbol, std::string* why);
// The directory of the on-disk kernel caches ($KILN_CACHE_DIR, else
// $XDG_CACHE_HOME/kiln, else ~/.cache/kiln; "" when none is set), also
// used by the CUDA JIT service.
std::string jit_cache_dir();

// Runs `c` on inputs into out (already allocated) through a generated
// kernel; false when the layouts are not covered or no kernel could be
// built, and the caller runs the interpreter.
bool run(Compiled& c, const std::vector<array>& inputs, array& out);

}  // namespace kiln::cpu::codegen
