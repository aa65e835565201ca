// GPU side of kiln::linalg. The ops refuse GPU streams when the graph is
// built (as MLX does), so these run only for a node moved onto a GPU stream
// by hand; they fail with the same advice. A cuSOLVER path is future work.
#include <string>

#include "core/primitives_linalg.h"
#include "kiln/error.h"

namespace kiln {
namespace {
[[noreturn]] void no_gpu_linalg(const char* op) {
  throw Error(std::string("[") + op +
              "] is not supported on the GPU yet (no cuSOLVER path); pass a CPU stream, e.g. Device::cpu");
}
}  // namespace

void QRF::eval_gpu(const std::vector<array>&, std::vector<array>&) { no_gpu_linalg("linalg::qr"); }
void SVD::eval_gpu(const std::vector<array>&, std::vector<array>&) { no_gpu_linalg("linalg::svd"); }
void Inverse::eval_gpu(const std::vector<array>&, std::vector<array>&) {
  no_gpu_linalg(tri_ ? "linalg::tri_inv" : "linalg::inv");
}
void Cholesky::eval_gpu(const std::vector<array>&, std::vector<array>&) { no_gpu_linalg("linalg::cholesky"); }
void Eigh::eval_gpu(const std::vector<array>&, std::vector<array>&) {
  no_gpu_linalg(vectors_ ? "linalg::eigh" : "linalg::eigvalsh");
}
void LUF::eval_gpu(const std::vector<array>&, std::vector<array>&) { no_gpu_linalg("linalg::lu_factor"); }
void Eig::eval_gpu(const std::vector<array>&, std::vector<array>&) {
  no_gpu_linalg(vectors_ ? "linalg::eig" : "linalg::eigvals");
}

}  // namespace kiln
