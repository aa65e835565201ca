#include "kiln/version.h"

#ifndef KILN_VERSION_STRING
#define KILN_VERSION_STRING "0.0.0"
#endif
#ifndef KILN_BUILD_OPTIONS
#define KILN_BUILD_OPTIONS ""
#endif

namespace kiln {
const char* version() { return KILN_VERSION_STRING; }
const char* build_options() { return KILN_BUILD_OPTIONS; }
}  // namespace kiln
