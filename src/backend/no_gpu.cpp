// The GPU side of a build without the CUDA backend: no device is
// available, and a primitive that reaches a GPU stream fails clearly.
#include "core/primitives.h"
#include "core/scheduler.h"
#include "kiln/error.h"

namespace kiln {

bool gpu_available() { return false; }
int gpu_count() { return 0; }
std::string device_unavailable_reason(const Device& d) {
  if (d.type == Device::cpu) return "cpu device " + std::to_string(d.index) + " does not exist (only cpu 0)";
  return "the gpu device is not available: this build of Kiln has no CUDA backend (configure with -DKILN_CUDA=ON "
         "on a machine with the CUDA toolkit)";
}

#define KILN_NO_GPU_EVAL(NAME)                                                    \
  void NAME::eval_gpu(const std::vector<array>&, array&) {                       \
    throw Error(std::string("[") + name() + "] " + device_unavailable_reason(Device::gpu)); \
  }
KILN_FOR_EACH_PRIMITIVE(KILN_NO_GPU_EVAL)
#undef KILN_NO_GPU_EVAL

}  // namespace kiln
