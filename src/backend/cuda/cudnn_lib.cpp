#include "backend/cuda/cudnn_lib.h"

#include <cstdlib>
#include <string>

namespace kiln::cuda {

void* cudnn_library() {
  static void* const lib = []() -> void* {
    const char* e = std::getenv("KILN_CUDA_CUDNN");
    if (e && std::string(e) == "0") return nullptr;
    return ::dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
  }();
  return lib;
}

}  // namespace kiln::cuda
