// Quick GPU timings for the CUDA backend (not a test): device-to-device copy
// as the bandwidth ceiling, then elementwise, reductions, softmax and the
// decode GEMV against cuBLASLt, each as GB/s and a fraction of the copy,
// and the fp8_gemm rows (scaled_matmul 8192^3, per-tensor and block scales)
// as TFLOP/s and a fraction of the H200's dense FP8 peak.
//   kiln_cuda_bench [ROW]   runs the copy and the rows whose section name
//   (elementwise, gemv, fp8_gemm) contains ROW; all of them without one.
// Each op's eval_gpu is called directly on this thread (the scheduler's
// per-node cost stays out) and timed with CUDA events over many
// repetitions, rotating input sets that together exceed the L2.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
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

// NVIDIA's dense FP8 tensor-core peak for the H100 / H200 SXM (data sheet);
// torch._scaled_mm reaches ~1242 TFLOP/s of it on this shape.
constexpr double kFp8PeakTflops = 1979.0;

void report_tflops(const char* name, double flops, float ms) {
  double tf = flops / (ms * 1e-3) / 1e12;
  std::printf("%-44s %9.3f ms %9.1f TFLOP/s  %5.1f%% of FP8 peak\n", name, ms, tf, 100 * tf / kFp8PeakTflops);
}

// scaled_matmul, fp8 e4m3 [M, K] x [K, N] (b the transposed view of a
// row-major [N, K] weight), bf16 out: per-tensor and 1x128 / 128x128 block
// scales (both through cuBLASLt).
// Two input sets (128 MB each) so that the L2 holds neither.
void bench_fp8_gemm(int side) {
  const int M = side, K = side, N = side, kb = (K + 127) / 128, nb = (N + 127) / 128;
  for (bool block : {false, true}) {
    std::vector<array> nodes;
    for (int set = 0; set < 2; ++set) {
      array a = astype(random::uniform({M, K}, float32, std::nullopt, Device::gpu), float8_e4m3fn, Device::gpu);
      array w = astype(random::uniform({N, K}, float32, std::nullopt, Device::gpu), float8_e4m3fn, Device::gpu);
      array sa = block ? random::uniform({M, kb}, float32, std::nullopt, Device::gpu) : array(0.5f);
      array sb = block ? random::uniform({kb, nb}, float32, std::nullopt, Device::gpu) : array(2.0f);
      eval({a, w, sa, sb});
      nodes.push_back(scaled_matmul(a, transpose(w), sa, sb, bfloat16, Device::gpu));
    }
    char name[96];
    std::snprintf(name, sizeof name, "fp8_gemm e4m3 %d^3 %s -> bf16", side, block ? "block 1x128/128x128" : "per-tensor");
    report_tflops(name, 2.0 * M * N * K, time_nodes(nodes, 20));
  }
}

void report(const char* name, double bytes, float ms) {
  double gbs = bytes / (ms * 1e-3) / 1e9;
  std::printf("%-44s %9.3f ms %9.1f GB/s  %5.1f%% of copy\n", name, ms, gbs, copy_gbs > 0 ? 100 * gbs / copy_gbs : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";
  auto want = [&](const char* section) { return only.empty() || std::string(section).find(only) != std::string::npos; };
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
  if (want("fp8_gemm")) bench_fp8_gemm(8192);
  const int n = 64 << 20;  // 64 Mi elements
  for (Dtype t : {float32, bfloat16}) {
    if (!want("elementwise")) break;
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
    if (!want("gemv")) break;
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
