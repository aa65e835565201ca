#include "kiln/version.h"

#include "backend/cpu/cpu_features.h"

#ifndef KILN_VERSION_STRING
#define KILN_VERSION_STRING "0.0.0"
#endif
#ifndef KILN_BUILD_OPTIONS
#define KILN_BUILD_OPTIONS ""
#endif

namespace kiln {
const char* version() { return KILN_VERSION_STRING; }
const char* build_options() { return KILN_BUILD_OPTIONS; }
const char* cpu_simd_target() { return cpu::cpu_target_name(); }
}  // namespace kiln
