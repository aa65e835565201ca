// fast::cuda_kernel on the GPU (CTest label `cuda`): user-written kernels
// compiled by NVRTC (backend/cuda/jit.cpp) and launched inside the
// stream's CUDA graphs, checked against the same computation in plain ops
// on the CPU: an elementwise kernel, a block-per-row reduction in dynamic
// shared memory, strided reads, init_value with two outputs, repeated
// launches (cached graphs), and a compile error's NVRTC log.
#include <algorithm>

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln::test {
namespace {

class CudaCustomKernel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!is_available(Device::gpu)) GTEST_SKIP() << "no GPU available for the cuda suite";
  }
};

// The docs' elementwise example: out = exp(a) * Scale + b.
const char* kScaledExp = R"(
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= Size) return;
    out[i] = static_cast<T>(expf(static_cast<float>(a[i])) * Scale + static_cast<float>(b[i]));
)";

TEST_F(CudaCustomKernel, ElementwiseMatchesPlainOps) {
  auto k = fast::cuda_kernel("scaled_exp", {"a", "b"}, {"out"}, kScaledExp);
  for (Dtype t : {float32, float16, bfloat16, float64}) {
    array a = random_array({37, 129}, t);
    array b = transpose(random_array({129, 37}, t));  // copied to row-major first
    const int n = static_cast<int>(a.size());
    array got = k({a, b}, {a.shape()}, {t}, {n, 1, 1}, {256, 1, 1}, {{"T", t}, {"Scale", 3}, {"Size", n}},
                  std::nullopt, false, Device::gpu)[0];
    // The kernel computes in float (expf, possibly fused into an fma) and
    // rounds once to T: so does the reference; T's rounding of a result near
    // zero (exp(a) * 3 cancelling b) is covered by an absolute tolerance.
    array af = astype(a, float32, Device::cpu), bf = astype(b, float32, Device::cpu);
    array want = astype(add(multiply(exp(af, Device::cpu), array(3.0f), Device::cpu), bf, Device::cpu), t, Device::cpu);
    EXPECT_EQ(got.dtype(), t);
    const double tol = std::max(2 * tolerance(t), 1e-6);
    EXPECT_TRUE(all_close(got, to_double(want), tol, 8 * tol)) << dtype_name(t);
  }
}

TEST_F(CudaCustomKernel, CooperativeGroupsAsInMlxDocs) {
  auto k = fast::cuda_kernel("myexp", {"inp"}, {"out"}, R"(
    auto elem = cg::this_grid().thread_rank();
    T tmp = inp[elem];
    out[elem] = expf(tmp);
  )");
  array x = random_array({4, 16});
  array got = k({x}, {x.shape()}, {float32}, {64, 1, 1}, {32, 1, 1}, {{"T", float32}}, std::nullopt, false, Device::gpu)[0];
  EXPECT_TRUE(all_close(got, to_double(exp(x, Device::cpu)), 1e-6));
}

// The docs' row reduction: a block per row, a tree in dynamic shared memory.
const char* kRowSum = R"(
    extern __shared__ unsigned char smem[];
    Acc* part = reinterpret_cast<Acc*>(smem);
    const int64_t row = blockIdx.x;
    const int n = x_shape[x_ndim - 1];
    Acc acc = 0;
    for (int j = threadIdx.x; j < n; j += blockDim.x) acc += static_cast<Acc>(x[row * n + j]);
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
      __syncthreads();
    }
    if (threadIdx.x == 0) out[row] = static_cast<T>(part[0]);
)";

TEST_F(CudaCustomKernel, RowReductionMatchesSum) {
  auto k = fast::cuda_kernel("row_sum", {"x"}, {"out"}, kRowSum, "", true, 256 * 8);
  for (int d : {1, 100, 4099}) {
    array x = random_array({3, 41, d});
    array got = k({x}, {{3, 41}}, {float32}, {3 * 41 * 256, 1, 1}, {256, 1, 1}, {{"T", float32}, {"Acc", float64}},
                  std::nullopt, false, Device::gpu)[0];
    // Float64 partial sums in a tree against the CPU's float32 blocked sum:
    // the CPU's rounding over up to 4099 terms of N(0,1) is the error bound.
    EXPECT_TRUE(all_close(got, to_double(sum(x, -1, false, Device::cpu)), 1e-5, 2e-4)) << d;
  }
}

TEST_F(CudaCustomKernel, StridedReadsInitValueAndTwoOutputs) {
  auto k = fast::cuda_kernel("evens", {"x"}, {"y", "mask"}, R"(
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= Size || i % 2 == 1) return;
    y[i] = x[kiln::elem_to_loc(i, x_shape, x_strides, x_ndim)] * 2;
    mask[i] = false;
  )",
                             "", false);
  array x = transpose(random_array({7, 5, 3}), {2, 0, 1});
  const int n = static_cast<int>(x.size());
  auto outs = k({x}, {x.shape(), x.shape()}, {float32, bool_}, {n, 1, 1}, {32, 1, 1}, {{"Size", n}}, -7.5f, false,
                Device::gpu);
  std::vector<double> xs = to_double(x), want_y, want_m;
  for (int i = 0; i < n; ++i) {
    want_y.push_back(i % 2 ? -7.5 : 2 * xs[i]);
    want_m.push_back(i % 2 ? 1.0 : 0.0);
  }
  EXPECT_TRUE(all_close(outs[0], want_y, 0.0));
  EXPECT_TRUE(all_close(outs[1], want_m, 0.0));
}

TEST_F(CudaCustomKernel, RepeatedStepsReuseTheKernel) {
  // The same graph each step (a cached CUDA graph), new data each time.
  auto k = fast::cuda_kernel("axpy", {"x", "y"}, {"out"}, R"(
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < 1000) out[i] = 2.5f * x[i] + y[i];
  )");
  for (int step = 0; step < 4; ++step) {
    array x = random_array({1000});
    array y = random_array({1000});
    array z = k({x, y}, {{1000}}, {float32}, {1000, 1, 1}, {128, 1, 1}, {}, std::nullopt, false, Device::gpu)[0];
    array w = multiply(z, array(2.0f), Device::gpu);
    array want = multiply(add(multiply(x, array(2.5f), Device::cpu), y, Device::cpu), array(2.0f), Device::cpu);
    // nvrtc contracts 2.5f * x + y into one fma; the CPU rounds twice.
    EXPECT_TRUE(all_close(w, to_double(want), 1e-5, 1e-6)) << step;
  }
}

TEST_F(CudaCustomKernel, CompileErrorsCarryTheNvrtcLog) {
  auto k = fast::cuda_kernel("broken", {"x"}, {"out"}, "out[0] = undeclared_thing_42 + x[0];");
  array x = random_array({4});
  array y = k({x}, {{1}}, {float32}, {1, 1, 1}, {1, 1, 1}, {}, std::nullopt, false, Device::gpu)[0];
  EXPECT_TRUE(throws_error([&] { y.eval(); }, {"fast::cuda_kernel", "custom_kernel_broken", "undeclared_thing_42"}));
  EXPECT_TRUE(throws_error([&] { k({x}, {{1}}, {float32}, {4096, 1, 1}, {2048, 1, 1}, {}, std::nullopt, false, Device::gpu); },
                           {"fast::cuda_kernel", "1024"}));
}

}  // namespace
}  // namespace kiln::test
