#pragma once
// oneDNN's matmul as the peer of the bf16 GEMM rows: PyTorch's CPU path for
// bf16 products, with AMX and AVX512-BF16 kernels (Debian 12: libdnnl-dev
// 2.6). Loaded at run time (no link dependency), through the oneDNN 2.x C
// API; where the library or its header is missing the rows keep their
// other peer or none.
#include <cstdint>
#include <memory>
#include <string>

namespace kiln::bench {

class OnednnMatmul {
 public:
  // C[m, n] (float32) = A[m, k] B[k, n], A and B row-major bf16 bits; the
  // buffers stay the caller's. Null where oneDNN is not available.
  static std::unique_ptr<OnednnMatmul> make(int64_t m, int64_t k, int64_t n, const uint16_t* a, const uint16_t* b,
                                            float* c);
  ~OnednnMatmul();
  void run();
  const std::string& implementation() const { return impl_; }

 private:
  struct State;
  std::unique_ptr<State> s_;
  std::string impl_;
};

}  // namespace kiln::bench
