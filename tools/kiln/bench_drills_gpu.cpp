// `kiln bench --device gpu`: the drills of DESIGN.md on the CUDA backend.
//
// Ceilings are measured in the same run: a 1 GiB device-to-device copy
// (cudaMemcpyAsync, bytes read plus written) is the bandwidth roof, and
// cuBLASLt's 8192^3 rate in bf16 (fp32 and tf32 too, for their rows) is the
// compute roof.
//
// Timing: each drill's graph is built once; its nodes (the tape, inputs
// before consumers) are then re-run directly on the GPU stream, many times
// back to back between two CUDA events, rotating input sets that together
// exceed the L2 where one set would fit. The number is the median over
// rounds of the mean time per run: the kernels' time plus Kiln's launch cost,
// without the scheduler's thread hand-off (the CUDA graph encoder is meant to
// remove that). After timing, the drill is evaluated once through the normal
// eval path and compared with the same graph on the CPU.
//
// D1's add+gelu runs both ways: two kernels (add writes x + z, gelu reads
// it back) and compile's one fused NVRTC kernel (backend/cuda/compiled.cpp).
// The HOST rows are a chain of 1,000 small ops (multiply, add, tanh) on a
// small vector, eager (a kernel per op) and compiled (a few fused
// kernels): their time is host cost, not bandwidth, so they are timed as a
// user runs a step: build the lazy graph, eval it (CUDA graphs, replayed
// from the cache when the step repeats), wall clock, median of runs.
#ifdef KILN_HAS_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <tuple>
#include <unordered_set>

#include "backend/cuda/cuda_common.h"
#include "bench.h"
#include "core/primitive.h"
#include "core/quantize_blocks.h"
#include "core/scheduler.h"

namespace kiln::bench {
namespace {

constexpr const char* kOp = "bench";

// One prepared GPU drill: input sets (rotated while timing) and the graph.
struct GpuCase {
  std::vector<std::vector<array>> input_sets;
  std::function<array(const std::vector<array>&)> make;
  double tolerance = 1e-5;  // against the CPU, largest |diff| / max |cpu|
  bool check = true;        // GEMMs are checked by tests/cuda, not here
  bool tf32 = false;
};

struct GpuDrill {
  std::string drill, name, dtype;  // dtype: a Kiln dtype name, or "tf32"
  std::vector<int64_t> shape;
  double bytes = 0, flops = 0;
  std::function<GpuCase()> prepare;
  // Timed through the public API (build the graph, eval it; wall clock)
  // instead of replaying its kernels: the HOST rows, whose time is host cost.
  bool public_eval = false;
};

struct GpuCeilings {
  std::string device_name;
  double copy_gbps = 0;
  std::map<std::string, double> gemm_gflops;  // by dtype label, 8192^3 through cuBLASLt
  double peak_for(const std::string& dtype) const {
    // fp8 rows (e4m3_tensor, e4m3_block) share the per-tensor FP8 rate.
    const std::string key = dtype == "float16" ? "bfloat16" : dtype.rfind("e4m3", 0) == 0 ? "e4m3" : dtype;
    auto it = gemm_gflops.find(key);
    return it == gemm_gflops.end() ? 0 : it->second;
  }
};

class CudaEvents {
 public:
  CudaEvents() {
    KILN_CUDA_CHECK(kOp, cudaEventCreate(&start_));
    KILN_CUDA_CHECK(kOp, cudaEventCreate(&stop_));
  }
  ~CudaEvents() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  // Milliseconds taken by the device work that body enqueues on s.
  template <typename F>
  float time(cudaStream_t s, F&& body) {
    KILN_CUDA_CHECK(kOp, cudaEventRecord(start_, s));
    body();
    KILN_CUDA_CHECK(kOp, cudaEventRecord(stop_, s));
    KILN_CUDA_CHECK(kOp, cudaEventSynchronize(stop_));
    float ms = 0;
    KILN_CUDA_CHECK(kOp, cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaEvent_t start_{}, stop_{};
};

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Stream gpu_stream() { return default_stream(Device::gpu); }

// Makes the GPU stream current on this thread; returns its cudaStream_t.
cudaStream_t bind_stream() {
  gpu_begin_node(gpu_stream());
  return cuda::current_stream();
}

// The nodes of y's graph still to compute, each after its inputs: one entry
// per node, holding all of its outputs (a multi-output node such as
// add_rms_norm's writes them in one kernel).
std::vector<std::vector<array>> tape_of(const array& y) {
  std::vector<std::vector<array>> order;
  std::unordered_set<uintptr_t> seen;
  std::unordered_set<const Primitive*> nodes;
  std::vector<std::pair<array, bool>> stack{{y, false}};
  while (!stack.empty()) {
    auto [a, inputs_done] = stack.back();
    stack.pop_back();
    if (inputs_done) {
      if (nodes.insert(a.primitive().get()).second) order.push_back(a.outputs());
      continue;
    }
    if (!a.has_primitive() || a.is_evaluated() || !seen.insert(a.id()).second) continue;
    stack.push_back({a, true});
    for (const array& in : a.inputs()) stack.push_back({in, false});
  }
  return order;
}

void replay(std::vector<std::vector<array>>& tape) {
  for (std::vector<array>& outputs : tape) {
    gpu_begin_node(gpu_stream());
    outputs[0].primitive()->eval_gpu(outputs[0].inputs(), outputs);
  }
}

// Median over rounds of the mean microseconds per run of `run(i)`, where a
// round is enough back-to-back runs to last about 2 ms (at least `min_runs`).
Timing time_on_stream(const std::function<void(int)>& run, int min_runs, int reps) {
  cudaStream_t s = bind_stream();
  CudaEvents ev;
  // Warm-up: cuBLASLt heuristics, the allocator's cache, module loading.
  ev.time(s, [&] { for (int i = 0; i < min_runs; ++i) run(i); });
  const double once_ms = ev.time(s, [&] { for (int i = 0; i < min_runs; ++i) run(i); }) / min_runs;
  int runs = std::clamp(static_cast<int>(2.0 / std::max(once_ms, 1e-4)), 1, 2000);
  runs = (std::max(runs, min_runs) + min_runs - 1) / min_runs * min_runs;
  std::vector<double> per_run_us;
  for (int r = 0; r < reps; ++r) {
    const float ms = ev.time(s, [&] { for (int i = 0; i < runs; ++i) run(i); });
    per_run_us.push_back(1e3 * ms / runs);
  }
  return {median_of(per_run_us), runs * reps};
}

array gpu_random(const Shape& shape, Dtype dtype, uint64_t seed) {
  return random_input(shape, dtype, seed);  // the default device is the GPU during the run
}

// Largest |gpu - cpu| over max |cpu| on up to 65536 evenly spaced elements.
double difference_from_cpu(const GpuCase& c) {
  array g = c.make(c.input_sets[0]);
  g.eval();
  set_default_device(Device::cpu);
  array want = contiguous(astype(c.make(c.input_sets[0]), float32));
  array got = contiguous(astype(g, float32));
  eval(want, got);
  set_default_device(Device::gpu);
  const float* pw = want.data<float>();
  const float* pg = got.data<float>();
  const size_t n = want.size();
  if (got.size() != n) return std::numeric_limits<double>::infinity();
  const size_t step = std::max<size_t>(1, n / 65536);
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < n; i += step) {
    const double d = std::fabs(static_cast<double>(pg[i]) - pw[i]);
    if (!std::isfinite(d)) return std::numeric_limits<double>::infinity();
    max_diff = std::max(max_diff, d);
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(pw[i])));
  }
  return max_diff / std::max(max_ref, 1e-30);
}

// ---- ceilings ----

double measure_copy_gbps() {
  const size_t bytes = size_t{1} << 30;
  void *src = nullptr, *dst = nullptr;
  KILN_CUDA_CHECK(kOp, cudaMalloc(&src, bytes));
  KILN_CUDA_CHECK(kOp, cudaMalloc(&dst, bytes));
  cudaStream_t s = bind_stream();
  KILN_CUDA_CHECK(kOp, cudaMemsetAsync(src, 0x3c, bytes, s));
  CudaEvents ev;
  std::vector<double> gbps;
  for (int r = 0; r < 12; ++r) {
    const float ms = ev.time(s, [&] {
      for (int i = 0; i < 5; ++i) KILN_CUDA_CHECK(kOp, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
    });
    if (r >= 2) gbps.push_back(2.0 * bytes * 5 / (ms * 1e-3) / 1e9);
  }
  KILN_CUDA_CHECK(kOp, cudaFree(src));
  KILN_CUDA_CHECK(kOp, cudaFree(dst));
  return median_of(gbps);
}

// ---- drills ----

std::vector<array> add_gelu(const std::vector<array>& in) { return {gelu_approx(in[0] + in[1])}; }

// User-written kernels (fast::cuda_kernel) for the D1 add+GELU and the D2
// row sum: what a custom kernel costs against the library's own kernels.
const char* kAddGeluKernel = R"(
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= Size) return;
    const float v = static_cast<float>(x[i]) + static_cast<float>(z[i]);
    out[i] = static_cast<T>(0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v))));
)";

// A block of 256 threads per row, a tree in shared memory.
const char* kRowSumKernel = R"(
    __shared__ float part[256];
    const int64_t row = blockIdx.x;
    const int n = x_shape[1];
    const float* p = x + row * n;
    float acc = 0;
    for (int j = threadIdx.x; j < n; j += 256) acc += p[j];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
      if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
      __syncthreads();
    }
    if (threadIdx.x == 0) out[row] = part[0];
)";

void add_unary_binary(std::vector<GpuDrill>& out, bool quick) {
  const int64_t n = quick ? int64_t{1} << 20 : int64_t{1} << 26;
  const double nd = static_cast<double>(n);
  const Shape shape{static_cast<int>(n)};
  out.push_back({"D1", "copy", "float32", {n}, 8 * nd, 0, [=] {
    GpuCase c{{{gpu_random(shape, float32, 1)}}, [](const std::vector<array>& in) { return kiln::copy(in[0]); }, 0};
    return c;
  }});
  for (Dtype t : {float32, bfloat16}) {
    const double item = static_cast<double>(size_of(t));
    const double tol = t == float32 ? 1e-5 : 2e-2;
    out.push_back({"D1", "add", dtype_name(t), {n}, 3 * item * nd, nd, [=] {
      GpuCase c{{{gpu_random(shape, t, 1), gpu_random(shape, t, 2)}},
                [](const std::vector<array>& in) { return in[0] + in[1]; }, tol};
      return c;
    }});
    // Two kernels: add writes x + z, gelu reads it back.
    out.push_back({"D1", "add_gelu_two_ops", dtype_name(t), {n}, 5 * item * nd, 10 * nd, [=] {
      GpuCase c{{{gpu_random(shape, t, 1), gpu_random(shape, t, 2)}},
                [](const std::vector<array>& in) { return gelu_approx(in[0] + in[1]); }, t == float32 ? 1e-5 : 3e-2};
      return c;
    }});
    // One fused kernel. A fresh compile per graph: a compiled function's
    // trace is per device, and the CPU check below calls make again.
    out.push_back({"D1", "add_gelu_fused", dtype_name(t), {n}, 3 * item * nd, 10 * nd, [=] {
      GpuCase c{{{gpu_random(shape, t, 1), gpu_random(shape, t, 2)}},
                [](const std::vector<array>& in) { return compile(add_gelu)(in)[0]; }, t == float32 ? 1e-5 : 3e-2};
      return c;
    }});
    // The same work as a user-written fast::cuda_kernel (an element per
    // thread, as docs/custom_kernels.md writes it); the CPU check runs the ops.
    out.push_back({"D1", "add_gelu_fused_cuda_kernel", dtype_name(t), {n}, 3 * item * nd, 10 * nd, [=] {
                     auto k = fast::cuda_kernel("bench_add_gelu", {"x", "z"}, {"out"}, kAddGeluKernel);
                     GpuCase c{{{gpu_random(shape, t, 1), gpu_random(shape, t, 2)}},
                               [k, t, n](const std::vector<array>& in) {
                                 if (default_device() != Device::gpu) return add_gelu(in)[0];
                                 return k(in, {in[0].shape()}, {t}, {static_cast<int>(n), 1, 1}, {256, 1, 1},
                                          {{"T", t}, {"Size", static_cast<int>(n)}}, std::nullopt, false, {})[0];
                               },
                               t == float32 ? 1e-5 : 3e-2};
                     return c;
                   }});
  }
  const int side = quick ? 1024 : 8192;
  const double elems = static_cast<double>(side) * side;
  const Shape sq{side, side};
  out.push_back({"DM", "broadcast_add", "float32", {side, side}, 4 * (2 * elems + side), elems, [=] {
    GpuCase c{{{gpu_random(sq, float32, 7), gpu_random({side}, float32, 8)}},
              [](const std::vector<array>& in) { return in[0] + in[1]; }, 1e-6};
    return c;
  }});
  out.push_back({"DM", "strided_add", "float32", {side, side}, 4 * 3 * elems, elems, [=] {
    GpuCase c{{{gpu_random(sq, float32, 9), gpu_random(sq, float32, 10)}},
              [](const std::vector<array>& in) { return in[0] + transpose(in[1]); }, 1e-6};
    return c;
  }});
  out.push_back({"DM", "transpose", "float32", {side, side}, 4 * 2 * elems, 0, [=] {
    GpuCase c{{{gpu_random(sq, float32, 6)}},
              [](const std::vector<array>& in) { return contiguous(transpose(in[0])); }, 0};
    return c;
  }});
}

// The chain of bench_drills_memory.cpp (host_chain); PyTorch's eager time on it:
// bench/peers/chain_torch.py; bytes: one read and one write of the vector.
void add_host_chain(std::vector<GpuDrill>& out) {
  const int n = 1024;
  for (bool compiled : {false, true}) {
    out.push_back({"HOST", compiled ? "chain_compiled" : "chain_eager", "float32", {1000, n}, 8.0 * n, 1000.0 * n,
                   [=] {
                     // compile'd once, as a user would, and called each step.
                     auto step = compiled ? compile(host_chain) : ArrayFn(host_chain);
                     GpuCase c{{{gpu_random({n}, float32, 5)}},
                               [step](const std::vector<array>& in) { return step(in)[0]; }, 1e-5};
                     return c;
                   },
                   true});
  }
}

void add_reductions(std::vector<GpuDrill>& out, bool quick) {
  auto reduction = [&](const std::string& name, int64_t m, int64_t k, int64_t outputs,
                       std::function<array(const array&)> op, double tol) {
    const double elems = static_cast<double>(m) * k;
    out.push_back({"D2", name, "float32", {m, k}, 4 * (elems + outputs), elems, [=] {
      GpuCase c{{{gpu_random({static_cast<int>(m), static_cast<int>(k)}, float32, 3)}},
                [op](const std::vector<array>& in) { return op(in[0]); }, tol};
      return c;
    }});
  };
  const auto row_sum = [](const array& x) { return kiln::sum(x, -1); };
  const std::vector<std::pair<int64_t, int64_t>> shapes =
      quick ? std::vector<std::pair<int64_t, int64_t>>{{1024, 1024}, {16384, 64}, {16, 65536}}
            : std::vector<std::pair<int64_t, int64_t>>{{8192, 8192}, {1 << 20, 64}, {16, 1 << 22}};
  for (auto [m, k] : shapes) reduction("row_sum", m, k, m, row_sum, 1e-5);
  {
    const int rows = quick ? 1024 : 8192, cols = rows;
    const double elems = static_cast<double>(rows) * cols;
    out.push_back(
        {"D2", "row_sum_cuda_kernel", "float32", {rows, cols}, 4 * (elems + rows), elems, [=] {
           auto k = fast::cuda_kernel("bench_row_sum", {"x"}, {"out"}, kRowSumKernel);
           GpuCase c{
               {{gpu_random({rows, cols}, float32, 3)}},
               [k, rows](const std::vector<array>& in) {
                 if (default_device() != Device::gpu) return kiln::sum(in[0], -1);
                 return k(in, {{rows}}, {float32}, {rows * 256, 1, 1}, {256, 1, 1}, {}, std::nullopt, false, {})[0];
               },
               1e-5};
           return c;
         }});
  }
  const int64_t side = quick ? 1024 : 8192;
  reduction("row_max", side, side, side, [](const array& x) { return kiln::max(x, -1); }, 0);
  reduction("col_sum", side, side, side, [](const array& x) { return kiln::sum(x, 0); }, 1e-5);
  // One sum of 2^26 terms: the CPU's float32 sum, in another order, is itself off by ~1e-4.
  reduction("sum_all", side, side, 1, [](const array& x) { return kiln::sum(x); }, 1e-3);
  const int64_t sm = quick ? 1024 : 4096;
  const double elems = static_cast<double>(sm) * sm;
  for (Dtype t : {float32, bfloat16}) {
    out.push_back({"D2", "softmax", dtype_name(t), {sm, sm}, 2.0 * size_of(t) * elems, 5 * elems, [=] {
      GpuCase c{{{gpu_random({static_cast<int>(sm), static_cast<int>(sm)}, t, 5)}},
                [](const std::vector<array>& in) { return kiln::softmax(in[0], -1); }, t == float32 ? 1e-5 : 2e-2};
      return c;
    }});
  }
  // The fast ops (src/backend/cuda/fast_norm.cu, rope.cu): one read of x and
  // one write (the weight and bias are noise). rope's [1, 32, 4096, 128] is
  // the [4096, 4096] of elements as heads x positions x head_dim.
  for (Dtype t : {float32, bfloat16}) {
    const double item = static_cast<double>(size_of(t));
    const int side = static_cast<int>(sm);
    const double tol = t == float32 ? 1e-5 : 2e-2;
    out.push_back({"D2", "rms_norm", dtype_name(t), {sm, sm}, item * (2 * elems + sm), 4 * elems, [=] {
      GpuCase c{{{gpu_random({side, side}, t, 6), gpu_random({side}, t, 7)}},
                [](const std::vector<array>& in) { return fast::rms_norm(in[0], in[1], 1e-5f); }, tol};
      return c;
    }});
    out.push_back({"D2", "layer_norm", dtype_name(t), {sm, sm}, item * (2 * elems + 2 * sm), 7 * elems, [=] {
      GpuCase c{{{gpu_random({side, side}, t, 8), gpu_random({side}, t, 9), gpu_random({side}, t, 10)}},
                [](const std::vector<array>& in) { return fast::layer_norm(in[0], in[1], in[2], 1e-5f); }, tol};
      return c;
    }});
    const int heads = 32, head_dim = 128, positions = static_cast<int>(elems / (heads * head_dim));
    out.push_back({"D2", "rope", dtype_name(t), {1, heads, positions, head_dim}, item * 2 * elems, 6 * elems, [=] {
      // Angles up to 4096 rad: the CPU (double) and the GPU (float) differ by ~4096 ulp of float.
      GpuCase c{{{gpu_random({1, heads, positions, head_dim}, t, 11)}},
                [](const std::vector<array>& in) { return fast::rope(in[0], 128, false, 10000.0f, 1.0f, 0); },
                t == float32 ? 2e-3 : 2e-2};
      return c;
    }});
  }
}

// Input sets for a product whose operands fit in the L2 (60 MB on an H200):
// enough sets that one pass over all of them is several times the L2.
int rotation_sets(double bytes_per_set) {
  return std::clamp(static_cast<int>(std::ceil(256e6 / bytes_per_set)), 1, 8);
}

void add_gemm(std::vector<GpuDrill>& out, const std::string& label, int64_t m, int64_t k, int64_t n) {
  const Dtype t = label == "bfloat16" ? bfloat16 : label == "float16" ? float16 : float32;  // tf32: float32 data
  const double item = static_cast<double>(size_of(t));
  const double bytes = item * (m * k + k * n + m * n);
  out.push_back({"D3", "matmul", label, {m, k, n}, bytes, 2.0 * m * k * n, [=] {
    GpuCase c;
    const int sets = rotation_sets(bytes);
    for (int i = 0; i < sets; ++i) {
      c.input_sets.push_back({gpu_random({static_cast<int>(m), static_cast<int>(k)}, t, 11 + 2 * i),
                              gpu_random({static_cast<int>(k), static_cast<int>(n)}, t, 12 + 2 * i)});
    }
    c.make = [](const std::vector<array>& in) { return matmul(in[0], in[1]); };
    c.check = false;
    c.tf32 = label == "tf32";
    return c;
  }});
}

// D3 conv2d: a ResNet stage's 3x3 convolution, channels last, padding 1
// (im2col + cuBLASLt, src/backend/cuda/conv.cu).
void add_conv2d(std::vector<GpuDrill>& out, const std::string& label, bool quick) {
  const Dtype t = label == "bfloat16" ? bfloat16 : float32;
  const int n = quick ? 2 : 32, hw = quick ? 14 : 56, ch = 64;
  const double rows = static_cast<double>(n) * hw * hw, item = static_cast<double>(size_of(t));
  const double bytes = item * (rows * ch + 9.0 * ch * ch + rows * ch);
  out.push_back({"D3", "conv2d_3x3", label, {n, hw, hw, ch, ch}, bytes, 2.0 * rows * 9 * ch * ch, [=] {
    GpuCase c;
    const int sets = rotation_sets(bytes);
    for (int i = 0; i < sets; ++i) {
      c.input_sets.push_back({gpu_random({n, hw, hw, ch}, t, 71 + 2 * i), gpu_random({ch, 3, 3, ch}, t, 72 + 2 * i)});
    }
    c.make = [](const std::vector<array>& in) { return conv2d(in[0], in[1], {1, 1}, {1, 1}); };
    c.tolerance = t == bfloat16 ? 2e-2 : 1e-4;
    return c;
  }});
}

// D5 attention (fast::scaled_dot_product_attention, bf16, head dim 128):
// prefill h32 s4096, causal and full, FLOPs 4 h s^2 d (the causal one
// counted as half, as torch and MLX report it); decode with 32 query heads
// over 8 KV heads, whose floor is the K/V bytes read once.
void add_attention(std::vector<GpuDrill>& out, bool quick) {
  const int seq = quick ? 512 : 4096, heads = quick ? 8 : 32, d = 128;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (bool causal : {true, false}) {
    const double flops = 4.0 * heads * seq * static_cast<double>(seq) * d * (causal ? 0.5 : 1.0);
    const double bytes = 4.0 * 2.0 * heads * seq * d;  // q, k, v and the output
    out.push_back({"D5", causal ? "sdpa_prefill_causal" : "sdpa_prefill", "bfloat16", {1, heads, seq, d}, bytes, flops,
                   [=] {
                     GpuCase c;
                     std::vector<array> set;
                     for (int i = 0; i < 3; ++i) set.push_back(random_input({1, heads, seq, d}, bfloat16, 31 + i, -1, 1));
                     c.input_sets.push_back(set);
                     c.make = [=](const std::vector<array>& in) {
                       return fast::scaled_dot_product_attention(in[0], in[1], in[2], scale, causal ? "causal" : "");
                     };
                     c.tolerance = 2e-2;
                     c.check = quick;  // the CPU takes minutes at full size; tests/cuda checks the kernel
                     return c;
                   }});
  }
  for (int kv : quick ? std::vector<int>{512, 2048} : std::vector<int>{4096, 32768}) {
    const double bytes = 2.0 * (2.0 * 8 * kv * d + 2.0 * 32 * d);  // K, V; q and the output
    out.push_back({"D5", "sdpa_decode_gqa", "bfloat16", {32, 8, kv, d}, bytes, 4.0 * 32 * kv * d, [=] {
      GpuCase c;
      const int sets = rotation_sets(bytes);
      for (int i = 0; i < sets; ++i) {
        c.input_sets.push_back({random_input({1, 32, 1, d}, bfloat16, 41 + i, -1, 1),
                                random_input({1, 8, kv, d}, bfloat16, 51 + i, -1, 1),
                                random_input({1, 8, kv, d}, bfloat16, 61 + i, -1, 1)});
      }
      c.make = [=](const std::vector<array>& in) { return fast::scaled_dot_product_attention(in[0], in[1], in[2], scale); };
      c.tolerance = 2e-2;
      return c;
    }});
  }
}

// D5 decoder_layer: one compiled decode step through a Llama-3-8B layer
// (bench.h says what it holds); on the GPU the compiled step replays as one
// cached CUDA graph. tests/cuda/test_cuda_llm.cpp checks the model's values.
void add_decoder_layer(std::vector<GpuDrill>& out, bool quick) {
  const int kv = quick ? 512 : 4096;
  double bytes = 0, flops = 0;
  decoder_layer_cost(kv, quick, bytes, flops);
  out.push_back({"D5", "decoder_layer", "bfloat16", decoder_layer_shape(kv, quick), bytes, flops, [=] {
    GpuCase c;
    auto d = std::make_shared<DecoderLayerCase>(make_decoder_layer(kv, quick));
    c.input_sets.push_back(d->inputs);
    c.make = [d](const std::vector<array>& in) { return d->step(in)[0]; };
    c.check = false;
    return c;
  }});
}

void add_linalg(std::vector<GpuDrill>& out, bool quick) {
  const std::vector<int64_t> squares = quick ? std::vector<int64_t>{256, 512} : std::vector<int64_t>{1024, 2048, 4096, 8192};
  for (const char* label : {"bfloat16", "float32"}) add_conv2d(out, label, quick);
  for (const char* label : {"bfloat16", "float16", "float32", "tf32"}) {
    for (int64_t s : squares) add_gemm(out, label, s, s, s);
    for (auto [k, n] : {std::pair<int64_t, int64_t>{4096, 4096}, {4096, 14336}}) {
      for (int64_t m : {1, 16, 128, 512}) add_gemm(out, label, m, quick ? k / 8 : k, quick ? n / 8 : n);
    }
  }
  // D5 decode GEMV: bf16 weights in the [N, K] layout of a linear layer.
  const std::vector<std::pair<int64_t, int64_t>> shapes =
      quick ? std::vector<std::pair<int64_t, int64_t>>{{512, 512}, {512, 1792}}
            : std::vector<std::pair<int64_t, int64_t>>{{4096, 4096}, {4096, 14336}, {8192, 8192}};
  for (auto [k, n] : shapes) {
    for (int64_t m : {1, 2, 4, 8}) {
      const double bytes = 2.0 * (m * k + k * n + m * n);
      out.push_back({"D5", "gemv", "bfloat16", {m, k, n}, bytes, 2.0 * m * k * n, [=] {
        GpuCase c;
        array x = gpu_random({static_cast<int>(m), static_cast<int>(k)}, bfloat16, 21);
        const int sets = rotation_sets(bytes);
        for (int i = 0; i < sets; ++i)
          c.input_sets.push_back({x, random_input({static_cast<int>(n), static_cast<int>(k)}, bfloat16, 22 + i, -0.05f, 0.05f)});
        c.make = [](const std::vector<array>& in) { return matmul(in[0], transpose(in[1])); };
        c.tolerance = 2e-2;
        return c;
      }});
    }
  }
}

// D4: affine-quantized weights (group 64, bf16 x, scales, biases) in the
// [N, K] layout of a linear layer: qmv rows are decode (bound by the packed
// bytes + scales + biases, the `bytes` here), qmm_affine4 is prefill at M = 512.
void add_quant(std::vector<GpuDrill>& out, bool quick) {
  const int64_t k = quick ? 512 : 4096, n = quick ? 1792 : 14336;
  struct Q {
    const char* name;
    int bits;
    int64_t m;
  };
  for (Q q : {Q{"qmv_affine4", 4, 1}, Q{"qmv_affine8", 8, 1}, Q{"qmm_affine4", 4, quick ? 64 : 512}}) {
    const double bytes = static_cast<double>(n) * k * q.bits / 8 + 2.0 * 2 * n * (k / 64);
    out.push_back({"D4", q.name, "bfloat16", {q.m, k, n}, bytes, 2.0 * q.m * k * n, [=] {
      GpuCase c;
      array x = gpu_random({static_cast<int>(q.m), static_cast<int>(k)}, bfloat16, 41);
      const int sets = rotation_sets(bytes);
      for (int i = 0; i < sets; ++i) {
        auto w = quantize(random_input({static_cast<int>(n), static_cast<int>(k)}, bfloat16, 42 + i, -0.05f, 0.05f),
                          64, q.bits, "affine", std::nullopt, Device::gpu);
        eval(w);
        c.input_sets.push_back({x, w[0], w[1], w[2]});
      }
      c.make = [bits = q.bits](const std::vector<array>& in) {
        return quantized_matmul(in[0], in[1], in[2], in[3], true, 64, bits);
      };
      c.tolerance = 2e-2;
      return c;
    }});
  }
}

// D4 fp8_gemm: scaled_matmul 8192^3 on e4m3 operands (b the transposed view
// of a row-major [N, K] weight: cuBLASLt's FP8 layout, scaled_mm.cpp), bf16
// out, per-tensor and 1x128 / 128x128 block scales; torch._scaled_mm is the
// peer (bench/peers/gpu_peers.py, same labels). tests/cuda checks the values.
void add_fp8(std::vector<GpuDrill>& out, bool quick) {
  const int side = quick ? 1024 : 8192, blocks = side / 128;
  for (bool block : {false, true}) {
    const double s = side;
    out.push_back({"D4", "fp8_gemm", block ? "e4m3_block" : "e4m3_tensor", {side, side, side}, 4.0 * s * s,
                   2.0 * s * s * s, [=] {
                     GpuCase c;
                     for (int i = 0; i < 2; ++i) {
                       array a = astype(random_input({side, side}, float32, 81 + 2 * i, -1, 1), float8_e4m3fn);
                       array w = astype(random_input({side, side}, float32, 82 + 2 * i, -1, 1), float8_e4m3fn);
                       array sa = block ? random_input({side, blocks}, float32, 91 + i, 0.5f, 2.0f) : array(0.5f);
                       array sb = block ? random_input({blocks, blocks}, float32, 93 + i, 0.5f, 2.0f) : array(2.0f);
                       eval({a, w, sa, sb});
                       c.input_sets.push_back({a, w, sa, sb});
                     }
                     c.make = [](const std::vector<array>& in) {
                       return scaled_matmul(in[0], transpose(in[1]), in[2], in[3], bfloat16);
                     };
                     c.check = false;
                     return c;
                   }});
  }
}

// D4: MLX's microscaling modes (quantized_fp.cu) in the same decode shape:
// bytes = packed codes + one e8m0 byte per 32 values.
void add_quant_fp(std::vector<GpuDrill>& out, bool quick) {
  const int64_t k = quick ? 512 : 4096, n = quick ? 1792 : 14336;
  for (auto [name, mode, bits] : {std::tuple{"qmv_mxfp4", "mxfp4", 4}, std::tuple{"qmv_mxfp8", "mxfp8", 8}}) {
    const double bytes = static_cast<double>(n) * k * bits / 8 + static_cast<double>(n) * (k / 32);
    out.push_back({"D4", name, "bfloat16", {1, k, n}, bytes, 2.0 * k * n, [=] {
      GpuCase c;
      array x = gpu_random({1, static_cast<int>(k)}, bfloat16, 43);
      const int sets = rotation_sets(bytes);
      for (int i = 0; i < sets; ++i) {
        auto w = quantize(random_input({static_cast<int>(n), static_cast<int>(k)}, bfloat16, 44 + i, -0.05f, 0.05f),
                          std::nullopt, std::nullopt, mode, std::nullopt, Device::gpu);
        eval(w);
        c.input_sets.push_back({x, w[0], w[1]});
      }
      c.make = [mode](const std::vector<array>& in) {
        return quantized_matmul(in[0], in[1], in[2], std::nullopt, true, std::nullopt, std::nullopt, mode);
      };
      c.tolerance = 2e-2;
      return c;
    }});
  }
}

// D4 QMV on llama.cpp blocks (quant_blocks.cu): y[M, N] = x[M, K] w^T with
// w [N, K] in blocks read once; bytes = the blocks plus x and y.
void add_quant_blocks(std::vector<GpuDrill>& out, bool quick) {
  const int64_t k0 = quick ? 1024 : 4096, n0 = quick ? 2048 : 14336;
  // The row every backend has, then (one row of x) the other shapes of a
  // Llama-3-8B decode step: q / o, q+k+v stacked, gate+up stacked, down.
  std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {{1, k0, n0}, {8, k0, n0}};
  if (!quick) shapes.insert(shapes.end(), {{1, 4096, 4096}, {1, 4096, 6144}, {1, 4096, 28672}, {1, 14336, 4096}});
  for (const char* mode : {"q4_0", "q8_0", "q4_k", "q6_k"}) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      const int64_t m = std::get<0>(shapes[i]), k = std::get<1>(shapes[i]), n = std::get<2>(shapes[i]);
      if (i >= 2 && std::string(mode) == "q6_k") continue;  // no Q6_K decode kernel of its own
      const int64_t w_bytes = random_block_weights(mode, 1, k, 1).shape(1) * n;
      const double bytes = static_cast<double>(w_bytes) + 2.0 * (m * k + m * n);
      out.push_back({"D4", std::string("qmv_") + mode, "bfloat16", {m, k, n}, bytes, 2.0 * m * k * n, [=] {
        GpuCase c;
        array x = gpu_random({static_cast<int>(m), static_cast<int>(k)}, bfloat16, 31);
        const int sets = rotation_sets(bytes);
        for (int i = 0; i < sets; ++i) c.input_sets.push_back({x, random_block_weights(mode, n, k, 32 + i)});
        c.make = [mode](const std::vector<array>& in) {
          return detail::block_quantized_matmul(in[0], in[1], true, mode, {});
        };
        c.tolerance = 2e-2;
        return c;
      }});
    }
  }
}

std::string describe(const GpuDrill& d) { return key_of(d.drill, d.name, d.dtype, d.shape); }

void score(BenchRow& row, const GpuCeilings& ceil) {
  if (!row.time_us) return;
  const double memory_floor = row.bytes / (ceil.copy_gbps * 1e9);
  const bool matrix = row.drill == "D3" || row.drill == "D4" || row.drill == "D5";
  const double peak = ceil.peak_for(row.dtype);
  const double compute_floor = matrix && peak > 0 ? row.flops / (peak * 1e9) : 0;
  row.bound = compute_floor > memory_floor ? "compute" : "memory";
  row.roof_fraction = std::max(memory_floor, compute_floor) / (*row.time_us * 1e-6);
}

BenchRow measure(const GpuDrill& d, const BenchOptions& opts) {
  BenchRow row;
  row.drill = d.drill;
  row.name = d.name;
  row.device = "gpu";
  row.dtype = d.dtype;
  row.shape = d.shape;
  row.bytes = d.bytes;
  row.flops = d.flops;
  try {
    GpuCase c = d.prepare();
    cuda::set_tf32_matmul(c.tf32);
    Timing t;
    if (d.public_eval) {
      // As a user runs a step (and as MLX's peer is timed): build, eval,
      // the previous output dropped first.
      std::optional<array> last;
      for (auto& in : c.input_sets) eval(in);
      t = time_median([&] {
        last.reset();
        array y = c.make(c.input_sets[0]);
        eval(y);
        last = std::move(y);
      }, std::max(opts.reps, 5), 15.0);
    } else {
      std::vector<std::vector<std::vector<array>>> tapes;
      for (const auto& in : c.input_sets) {
        tapes.push_back(tape_of(c.make(in)));
        if (tapes.back().empty()) throw Error("[bench] the drill's graph has nothing to compute");
      }
      const int sets = static_cast<int>(tapes.size());
      t = time_on_stream([&](int i) { replay(tapes[i % sets]); }, sets, std::max(opts.reps, 3));
    }
    row.time_us = t.median_us;
    row.reps = t.reps;
    synchronize(gpu_stream());
    if (c.check) {
      row.peer_difference = difference_from_cpu(c);
      row.peer_agrees = *row.peer_difference <= c.tolerance;
      if (!row.peer_agrees) row.error = "GPU output differs from the CPU's beyond " + std::to_string(c.tolerance);
    }
    cuda::set_tf32_matmul(false);
  } catch (const std::exception& e) {
    cuda::set_tf32_matmul(false);
    row.error = e.what();
  }
  if (row.time_us) {
    row.gbps = d.bytes / (*row.time_us * 1e-6) / 1e9;
    row.gflops = d.flops / (*row.time_us * 1e-6) / 1e9;
  }
  return row;
}


void print_gpu_ceilings(const GpuCeilings& c) {
  std::printf("Ceilings of this GPU (%s), measured in this run:\n", c.device_name.c_str());
  std::printf("  memory bandwidth  %.1f GB/s (1 GiB cudaMemcpyAsync device to device, read + write)\n", c.copy_gbps);
  for (const auto& [dtype, gflops] : c.gemm_gflops)
    std::printf("  %-8s matmul   %.1f TFLOP/s (cuBLASLt, 8192^3, random data)\n", dtype.c_str(), gflops / 1e3);
  std::printf("  float16 rows are measured against the bfloat16 rate\n");
  std::printf("time: mean per run over back-to-back runs on the GPU stream (CUDA events), median of rounds\n");
  std::printf("roof = max(bytes / copy bandwidth, flops / matmul rate) / time; peer/kiln > 1 means Kiln is faster\n");
  std::printf("HOST rows: 1,000 small ops, build + eval through the public API per run: host cost (roof is not meaningful there)\n\n");
}


}  // namespace

int run_gpu_bench(const BenchOptions& opts) {
  std::regex filter;
  if (!compile_filter(opts, &filter)) return 2;
  std::vector<GpuDrill> drills;
  add_unary_binary(drills, opts.quick);
  add_host_chain(drills);
  add_reductions(drills, opts.quick);
  add_linalg(drills, opts.quick);
  add_attention(drills, opts.quick);
  add_decoder_layer(drills, opts.quick);
  add_quant(drills, opts.quick);
  add_quant_fp(drills, opts.quick);
  add_fp8(drills, opts.quick);
  add_quant_blocks(drills, opts.quick);
  std::erase_if(drills, [&](const GpuDrill& d) { return !std::regex_search(describe(d), filter); });
  if (drills.empty()) {
    std::fprintf(stderr, "kiln bench: no GPU drill matches --filter '%s'\n", opts.filter.c_str());
    return 2;
  }

  GpuCeilings ceil;
  cudaDeviceProp prop{};
  KILN_CUDA_CHECK(kOp, cudaGetDeviceProperties(&prop, 0));
  ceil.device_name = prop.name;
  ceil.copy_gbps = measure_copy_gbps();
  const int64_t peak_side = opts.quick ? 1024 : 8192;
  for (const char* label : {"bfloat16", "float32", "tf32"}) {
    std::vector<GpuDrill> peak;
    add_gemm(peak, label, peak_side, peak_side, peak_side);
    BenchRow r = measure(peak[0], opts);
    if (!r.error.empty()) throw Error("measuring the " + std::string(label) + " matmul peak: " + r.error);
    ceil.gemm_gflops[label] = *r.gflops;
  }
  // The FP8 roof, measured only when an fp8 row runs: per-tensor scales
  // through cuBLASLt at the same size (so that row reads ~1.0 by design, and
  // the block-scaled row reads its cost against it).
  if (std::any_of(drills.begin(), drills.end(), [](const GpuDrill& d) { return d.dtype.rfind("e4m3", 0) == 0; })) {
    std::vector<GpuDrill> peak;
    add_fp8(peak, opts.quick);
    BenchRow r = measure(peak[0], opts);
    if (!r.error.empty()) throw Error("measuring the fp8 matmul peak: " + r.error);
    ceil.gemm_gflops["e4m3"] = *r.gflops;
  }
  print_gpu_ceilings(ceil);

  std::unique_ptr<MlxPeer> mlx = start_mlx_peer(opts);
  std::vector<BenchRow> rows;
  print_table_header(mlx != nullptr);
  for (const GpuDrill& d : drills) {
    rows.push_back(measure(d, opts));
    if (mlx) mlx->time_row(rows.back(), opts.reps, opts.quick ? kQuickSideBudgetSeconds : kSideBudgetSeconds);
    score(rows.back(), ceil);
    print_row(rows.back());
    clear_cache();
  }
  if (!opts.peers_path.empty()) {
    join_peers(rows, opts.peers_path);
    std::printf("\nWith the fastest peer of %s:\n", opts.peers_path.c_str());
    print_table_header(mlx != nullptr);
    for (const BenchRow& r : rows) print_row(r);
  }
  if (!opts.peers_path.empty() || mlx) print_peer_table(rows);

  int failed = 0;
  for (const BenchRow& r : rows) failed += !r.error.empty();
  if (failed) std::printf("%d drill(s) failed or disagreed with the CPU (see 'error').\n", failed);
  // The report's ceilings, in the CPU's fields: copy bandwidth and cuBLASLt rates.
  Ceilings c;
  c.copy_gbps = ceil.copy_gbps;
  c.bf16_gflops = ceil.peak_for("bfloat16");
  c.fp32_gflops = ceil.peak_for("float32");
  c.bf16_isa = "cuBLASLt bf16 8192^3";
  c.fp32_isa = "cuBLASLt fp32 8192^3";
  c.gpu_name = ceil.device_name;
  c.tf32_gflops = ceil.peak_for("tf32");
  if (!opts.json_path.empty()) write_json(opts.json_path, c, rows, opts);
  if (!opts.plot_path.empty())
    std::fprintf(stderr, "kiln bench: --plot draws the CPU's roofline only; no plot for --device gpu\n");
  return failed ? 1 : 0;
}

}  // namespace kiln::bench
#endif  // KILN_HAS_CUDA
