#pragma once
// libcudnn.so.9 for the paths that use cuDNN (cudnn_conv.cpp,
// cudnn_attention.cpp): opened once, at run time, so that Kiln needs no
// cuDNN where it is absent.
#include <dlfcn.h>

#include <type_traits>

namespace kiln::cuda {

// The library's handle, or nullptr where it cannot be loaded or
// KILN_CUDA_CUDNN=0 turns cuDNN off. Opened on the first call.
void* cudnn_library();

// fn = the library's `name`; false when it has no such symbol.
template <typename F>
bool bind_cudnn(void* lib, F& fn, const char* name) {
  fn = reinterpret_cast<std::remove_reference_t<F>>(::dlsym(lib, name));
  return fn != nullptr;
}

}  // namespace kiln::cuda
