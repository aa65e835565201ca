// Keeps the OpenBLAS peer honest. OpenBLAS built with DYNAMIC_ARCH picks its
// kernels from the CPU's family and model; a CPU it does not know (a newer
// Xeon, or a VM that hides the model, as on the bench machine) falls back to
// "Prescott", i.e. SSE3 kernels, and sgemm runs about 5x below what the same
// library does with its AVX-512 kernels. Beating that would prove nothing.
// OpenBLAS reads OPENBLAS_CORETYPE when it is loaded, before main, so the
// only way to change the choice from inside is to run ourselves again with
// the variable set.
#include <cblas.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <string>

#include "bench.h"

namespace kiln::bench {
namespace {

constexpr const char* kOverrideMarker = "KILN_OPENBLAS_DETECTED_CORE";

// OpenBLAS cores without AVX2: a sign the detection fell back.
bool is_pre_avx2_core(const std::string& core) {
  static const std::set<std::string> old = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem",
                                            "Sandybridge", "Atom", "Katmai", "Coppermine", "Northwood"};
  return old.count(core) > 0;
}

// The best OpenBLAS 0.3.21 core whose instructions this CPU has.
const char* best_core_for_this_cpu() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512bf16")) return "Cooperlake";
  if (__builtin_cpu_supports("avx512f")) return "SkylakeX";
  if (__builtin_cpu_supports("avx2")) return "Haswell";
  return nullptr;
}

}  // namespace

void ensure_openblas_core_fits_cpu(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") || std::getenv(kOverrideMarker)) return;  // the user's choice, or done
  const std::string detected = openblas_get_corename();
  const char* better = best_core_for_this_cpu();
  if (!better || !is_pre_avx2_core(detected)) return;
  setenv("OPENBLAS_CORETYPE", better, 1);
  setenv(kOverrideMarker, detected.c_str(), 1);
  execv("/proc/self/exe", argv);
  // exec failed: carry on with the slow kernels; openblas_core_note says so.
  unsetenv(kOverrideMarker);
}

std::string openblas_core_note() {
  std::string note = std::string("OpenBLAS core ") + openblas_get_corename();
  if (const char* detected = std::getenv(kOverrideMarker))
    note += std::string(" (set by kiln: OpenBLAS did not recognise this CPU and picked ") + detected +
            "; OPENBLAS_CORETYPE overrides)";
  else if (is_pre_avx2_core(openblas_get_corename()) && best_core_for_this_cpu())
    note += " (slower than this CPU allows: set OPENBLAS_CORETYPE)";
  return note;
}

}  // namespace kiln::bench
