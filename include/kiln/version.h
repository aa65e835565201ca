#pragma once
namespace kiln {
// Version of the library and the options it was built with.
const char* version();
const char* build_options();
// The SIMD instruction set the CPU kernels dispatch to on this machine.
const char* cpu_simd_target();
}  // namespace kiln
