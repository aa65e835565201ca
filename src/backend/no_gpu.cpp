// The GPU side of a build without the CUDA backend: no device is
// available, and a primitive that reaches a GPU stream fails clearly.
#include "core/allocator.h"
#include "core/compiled.h"
#include "core/array_desc.h"
#include "core/primitives.h"
#include "core/primitives_linalg.h"
#include "core/primitives_scaled_mm.h"
#include "core/primitives_index.h"
#include "core/primitives_custom_kernel.h"
#include "core/primitives_sort.h"
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

void gpu_begin_node(const Stream&) {}
void gpu_end_node(const Stream&, std::vector<array>&&) {}
void gpu_evaluate_batch(std::vector<array>& nodes, const Stream& stream) {
  for (auto& n : nodes) {
    evaluate_node(n, stream);
    detail::release(n);
  }
}
void gpu_wait_ready(const array&) {}
void gpu_synchronize(const Stream&) {}

namespace gpu {
void* raw_device_malloc(size_t) { return nullptr; }
void raw_device_free(void*) {}
void copy_device_to_host(Buffer&, void*) {
  throw Error("[to_host] " + device_unavailable_reason(Device::gpu));
}
void synchronize_all() {}
}  // namespace gpu

#define KILN_NO_GPU_EVAL(NAME)                                                    \
  void NAME::eval_gpu(const std::vector<array>&, array&) {                       \
    throw Error(std::string("[") + name() + "] " + device_unavailable_reason(Device::gpu)); \
  }
KILN_FOR_EACH_PRIMITIVE(KILN_NO_GPU_EVAL)
KILN_FOR_EACH_FP8_PRIMITIVE(KILN_NO_GPU_EVAL)
KILN_NO_GPU_EVAL(Compiled)
#undef KILN_NO_GPU_EVAL
#define KILN_NO_GPU_EVAL_MULTI(NAME)                                              \
  void NAME::eval_gpu(const std::vector<array>&, std::vector<array>&) {          \
    throw Error(std::string("[") + name() + "] " + device_unavailable_reason(Device::gpu)); \
  }
KILN_FOR_EACH_MULTI_OUTPUT_PRIMITIVE(KILN_NO_GPU_EVAL_MULTI)
KILN_FOR_EACH_LINALG_PRIMITIVE(KILN_NO_GPU_EVAL_MULTI)
KILN_NO_GPU_EVAL_MULTI(CustomKernel)
#undef KILN_NO_GPU_EVAL_MULTI

namespace detail {
GpuJitCounters gpu_jit_counters() { return {}; }
}  // namespace detail

}  // namespace kiln
