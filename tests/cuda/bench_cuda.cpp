// Quick GPU timings for the CUDA backend (not a test): device-to-device copy
// as the bandwidth ceiling, then elementwise, reductions, softmax and the
// decode GEMV against cuBLASLt, each as GB/s and a fraction of the copy.
// Each op's eval_gpu is called directly on this thread (the scheduler's
// per-node cost stays out) and timed with CUDA events over many
// repetitions, rotating input sets that together exceed the L2.
#include <cuda_runtime.h>

#include <cstdio>
#include <functional>
#include <vector>

#include "backend/cuda/cuda_common.h"
#include "core/primitive.h"
#include "core/scheduler.h"
#include "kiln/kiln.h"

using namespace kiln;

namespace {

Stream g_stream{0, Device::gpu};

float time_ms(const std::function<void(int)>& body, int iters) {
  cudaStream_t s = cuda::current_stream();
  for (int i = 0; i < 3; ++i) body(i);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a, s);
  for (int i = 0; i < iters; ++i) body(i);
  cudaEventRecord(b, s);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / iters;
}

// Times re-running the primitive of each node (inputs already on the GPU).
float time_nodes(std::vector<array>& nodes, int iters) {
  for (auto& n : nodes) {
    for (const auto& in : n.inputs()) in.eval();  // lazy views (reshape, transpose) of the inputs
  }
  synchronize();
  return time_ms([&](int i) {
    array& n = nodes[i % nodes.size()];
    gpu_begin_node(g_stream);
    n.primitive()->eval_gpu(n.inputs(), n);
  }, iters);
}

array on_gpu(array x) {
  array y = add(x, array(0, x.dtype()), Device::gpu);  // materialize on the device
  eval(y);
  return y;
}

double copy_gbs = 0;

void report(const char* name, double bytes, float ms) {
  double gbs = bytes / (ms * 1e-3) / 1e9;
  std::printf("%-44s %9.3f ms %9.1f GB/s  %5.1f%% of copy\n", name, ms, gbs, copy_gbs > 0 ? 100 * gbs / copy_gbs : 0.0);
}

}  // namespace

int main() {
  if (!is_available(Device::gpu)) {
    std::printf("no GPU: %s\n", "skipping the CUDA bench");
    return 0;
  }
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  g_stream = default_stream(Device::gpu);
  gpu_begin_node(g_stream);
  {
    size_t bytes = size_t{1} << 30;
    void *src, *dst;
    cudaMalloc(&src, bytes);
    cudaMalloc(&dst, bytes);
    cudaMemset(src, 1, bytes);
    float ms = time_ms([&](int) { cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda::current_stream()); }, 20);
    copy_gbs = 2.0 * bytes / (ms * 1e-3) / 1e9;
    report("d2d copy 1 GiB (read+write)", 2.0 * bytes, ms);
    cudaFree(src);
    cudaFree(dst);
  }
  const int n = 64 << 20;  // 64 Mi elements
  for (Dtype t : {float32, bfloat16}) {
    array x = on_gpu(random::uniform({n}, t)), y = on_gpu(random::uniform({n}, t));
    std::vector<array> nodes = {add(x, y, Device::gpu)};
    double b = 3.0 * n * size_of(t);
    char name[96];
    std::snprintf(name, sizeof name, "add %s [64Mi] contiguous", dtype_name(t));
    report(name, b, time_nodes(nodes, 20));
    nodes = {gelu_approx(x, Device::gpu)};
    std::snprintf(name, sizeof name, "gelu_approx %s [64Mi]", dtype_name(t));
    report(name, 2.0 * n * size_of(t), time_nodes(nodes, 20));
    array x2 = reshape(x, {8192, n / 8192}), y2 = reshape(y, {n / 8192, 8192});
    nodes = {add(x2, transpose(y2), Device::gpu)};
    std::snprintf(name, sizeof name, "add %s [8192,8192] + transposed (strided)", dtype_name(t));
    report(name, b, time_nodes(nodes, 10));
    nodes = {add(x2, slice(y2, {0, 0}, {1, 8192}), Device::gpu)};
    std::snprintf(name, sizeof name, "add %s [8192,8192] + row broadcast", dtype_name(t));
    report(name, 2.0 * n * size_of(t), time_nodes(nodes, 10));
    nodes = {sum(x2, 1, false, Device::gpu)};
    std::snprintf(name, sizeof name, "sum rows %s [8192,8192]", dtype_name(t));
    report(name, 1.0 * n * size_of(t), time_nodes(nodes, 20));
    nodes = {sum(x2, 0, false, Device::gpu)};
    std::snprintf(name, sizeof name, "sum columns %s [8192,8192]", dtype_name(t));
    report(name, 1.0 * n * size_of(t), time_nodes(nodes, 20));
    nodes = {softmax(x2, -1, Device::gpu)};
    std::snprintf(name, sizeof name, "softmax %s [8192,8192]", dtype_name(t));
    report(name, 2.0 * n * size_of(t), time_nodes(nodes, 20));
  }
  struct Shape2 { int k, n; };
  for (Shape2 sh : {Shape2{4096, 4096}, Shape2{4096, 14336}, Shape2{8192, 8192}}) {
    for (int m : {1, 4, 8}) {
      std::vector<array> ours, lt;
      array x = on_gpu(random::uniform({m, sh.k}, bfloat16));
      for (int r = 0; r < 4; ++r) {
        array w = on_gpu(random::uniform({sh.n, sh.k}, bfloat16));  // [N, K]: the GEMV layout
        ours.push_back(matmul(x, transpose(w), Device::gpu));
        array wk = on_gpu(random::uniform({sh.k, sh.n}, bfloat16));  // [K, N]: goes to cuBLASLt
        lt.push_back(matmul(x, wk, Device::gpu));
      }
      double bytes = 2.0 * sh.k * sh.n;
      char name[96];
      std::snprintf(name, sizeof name, "gemv bf16 m=%d [%d]x[%d,%d] kiln", m, sh.k, sh.k, sh.n);
      report(name, bytes, time_nodes(ours, 50));
      std::snprintf(name, sizeof name, "gemv bf16 m=%d [%d]x[%d,%d] cuBLASLt", m, sh.k, sh.k, sh.n);
      report(name, bytes, time_nodes(lt, 50));
    }
  }
  return 0;
}
