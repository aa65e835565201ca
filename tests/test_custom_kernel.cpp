// fast::cpu_kernel (include/kiln/fast.h): user-written kernels compiled by
// the host compiler through the CPU JIT service, checked against the same
// computation in plain ops. Kernels go to the binary's temporary cache
// directory (set by test_compile_codegen.cpp).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>

#include "core/compiled.h"
#include "kiln/fast.h"
#include "kiln/ops.h"
#include "kiln/transforms.h"
#include "test_util.h"

namespace kiln::test {
namespace {

// The docs' elementwise example: out = exp(a) * Scale + b.
const char* kScaledExp = R"(
    const int64_t i = thread_position_in_grid;
    if (i >= a_size) return;
    out[i] = static_cast<T>(std::exp(static_cast<float>(a[i])) * Scale + static_cast<float>(b[i]));
)";

std::vector<array> run_scaled_exp(const array& a, const array& b, int scale, int threads) {
  // a_size is the grid's size here: threads past the end return at once.
  auto k = fast::cpu_kernel("scaled_exp", {"a", "b"}, {"out"},
                            std::string("  const int64_t a_size = ") + std::to_string(a.size()) + ";\n" + kScaledExp);
  return k({a, b}, {a.shape()}, {a.dtype()}, {threads, 1, 1}, {64, 1, 1},
           {{"T", a.dtype()}, {"Scale", scale}}, std::nullopt, false, {});
}

TEST(CustomKernelCpu, ElementwiseInEveryFloatDtype) {
  for (Dtype t : {float32, float16, bfloat16, float64}) {
    array a = random_array({37, 129}, t);
    array b = random_array({37, 129}, t);
    array got = run_scaled_exp(a, b, 3, static_cast<int>(a.size()) + 5)[0];
    // The kernel computes in float and rounds once: compare with the
    // formula in double, within float's (or T's) rounding of terms up to
    // 3 e^2 ~ 22 in size.
    std::vector<double> xa = to_double(a), xb = to_double(b), want;
    for (size_t i = 0; i < xa.size(); ++i) want.push_back(std::exp(xa[i]) * 3 + xb[i]);
    const double tol = t == float64 ? tolerance(float32) : tolerance(t);
    EXPECT_EQ(got.dtype(), t);
    EXPECT_EQ(got.shape(), a.shape());
    EXPECT_TRUE(all_close(got, want, 2 * tol, 25 * tol)) << dtype_name(t);
  }
}

// kiln::math::exp / tanh in a body: the exp and tanh ops' values, bit for
// bit, over ordinary values, both ends of exp's range, infinities and NaN.
TEST(CustomKernelCpu, KilnMathIsTheOpsExpAndTanh) {
  std::vector<float> v = {0.0f, -0.0f, 1e-30f, 0.5f, -3.25f, 9.5f, 88.7f, 89.0f, -87.0f, -104.0f, 20.0f, -20.0f,
                          INFINITY, -INFINITY, NAN};
  for (int i = 0; i < 1000; ++i) v.push_back(-12.0f + 0.0241f * static_cast<float>(i));
  const int n = static_cast<int>(v.size());
  array x(v, {n});
  auto k = fast::cpu_kernel("kiln_math", {"x"}, {"e", "t"}, R"(
    const int64_t i = thread_position_in_grid;
    e[i] = kiln::math::exp(x[i]);
    t[i] = kiln::math::tanh(x[i]);
)");
  auto out = k({x}, {x.shape(), x.shape()}, {float32, float32}, {n, 1, 1}, {64, 1, 1}, {}, std::nullopt, false, {});
  array ops_e = exp(x), ops_t = tanh(x);
  eval({out[0], out[1], ops_e, ops_t});
  const float *e = out[0].data<float>(), *t = out[1].data<float>();
  const float *we = ops_e.data<float>(), *wt = ops_t.data<float>();
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(e[i]), std::bit_cast<uint32_t>(we[i])) << "exp(" << v[i] << ")";
    EXPECT_EQ(std::bit_cast<uint32_t>(t[i]), std::bit_cast<uint32_t>(wt[i])) << "tanh(" << v[i] << ")";
  }
  // And they are exp and tanh (the ops' own tests hold them to float's accuracy).
  EXPECT_NEAR(e[3], std::exp(0.5), 1e-6);
  EXPECT_NEAR(t[4], std::tanh(-3.25), 1e-6);
}

TEST(CustomKernelCpu, NonContiguousInputsAreCopiedToRowMajor) {
  array a = transpose(random_array({129, 37}));
  array b = broadcast_to(random_array({37, 1}), {37, 129});
  array got = run_scaled_exp(a, b, 2, 37 * 129)[0];
  EXPECT_TRUE(all_close(got, to_double(add(multiply(exp(a), array(2.0f)), b)), 1e-6, 1e-6));
}

// The docs' row reduction: one thread per row, accumulating in Acc.
const char* kRowSum = R"(
    const int64_t row = thread_position_in_grid;
    const int n = x_shape[x_ndim - 1];
    Acc acc = 0;
    for (int j = 0; j < n; ++j) acc += static_cast<Acc>(x[row * n + j]);
    out[row] = static_cast<T>(acc);
)";

TEST(CustomKernelCpu, RowReductionMatchesSum) {
  auto k = fast::cpu_kernel("row_sum", {"x"}, {"out"}, kRowSum);
  for (Dtype acc : {float32, float64}) {
    array x = random_array({3, 41, 257});
    array got = k({x}, {{3, 41}}, {float32}, {3 * 41, 1, 1}, {4, 1, 1}, {{"T", float32}, {"Acc", acc}}, std::nullopt,
                  false, {})[0];
    EXPECT_EQ(got.shape(), (Shape{3, 41}));
    // A float32 accumulator sums 257 terms one after another: its error grows
    // with the row (the data of other tests before this one found 1e-5 short).
    const double tol = acc == float32 ? 1e-4 : 1e-5;
    EXPECT_TRUE(all_close(got, to_double(sum(x, -1)), tol, tol)) << dtype_name(acc);
  }
}

TEST(CustomKernelCpu, StridesAndElemToLocWithoutCopies) {
  // ensure_row_contiguous = false: the kernel reads the transposed view.
  auto k = fast::cpu_kernel("strided_copy", {"x"}, {"out"}, R"(
    const int64_t i = thread_position_in_grid;
    out[i] = x[kiln::elem_to_loc(i, x_shape, x_strides, x_ndim)] + Offset;
  )",
                            "", false);
  array x = transpose(random_array({6, 5, 7}), {2, 0, 1});
  array got = k({x}, {x.shape()}, {float32}, {6 * 5 * 7, 1, 1}, {16, 1, 1}, {{"Offset", 1}}, std::nullopt, false, {})[0];
  EXPECT_TRUE(all_close(got, to_double(add(x, array(1.0f))), 0.0));
}

TEST(CustomKernelCpu, GridPositionHasThreeDimensions) {
  auto k = fast::cpu_kernel("grid_ids", {}, {"out"}, R"(
    const auto p = thread_position_in_grid;
    out[p] = static_cast<int32_t>(p.x + 100 * p.y + 10000 * p.z);
    if (p == 0) out[threads_per_grid] = static_cast<int32_t>(threads_per_grid.x * threads_per_grid.y * threads_per_grid.z);
  )");
  array got = k({}, {{3 * 4 * 5 + 1}}, {int32}, {3, 4, 5}, {2, 2, 1}, {}, std::nullopt, false, {})[0];
  std::vector<double> want;
  for (int z = 0; z < 5; ++z) {
    for (int y = 0; y < 4; ++y) {
      for (int x = 0; x < 3; ++x) want.push_back(x + 100 * y + 10000 * z);
    }
  }
  want.push_back(60);
  EXPECT_TRUE(all_close(got, want, 0.0));
}

TEST(CustomKernelCpu, InitValueAndSeveralOutputs) {
  // Only even elements are written: odd ones keep init_value; two outputs
  // of different dtypes.
  auto k = fast::cpu_kernel("evens", {"x"}, {"y", "mask"}, R"(
    const int64_t i = thread_position_in_grid;
    if (Skip && i % 2 == 1) return;
    y[i] = x[i] * 2;
    mask[i] = false;
  )");
  array x = random_array({101});
  auto outs = k({x}, {x.shape(), x.shape()}, {float32, bool_}, {101, 1, 1}, {8, 1, 1}, {{"Skip", true}}, -7.5f, false, {});
  ASSERT_EQ(outs.size(), 2u);
  std::vector<double> xs = to_double(x), want_y, want_m;
  for (size_t i = 0; i < xs.size(); ++i) {
    want_y.push_back(i % 2 ? -7.5 : 2 * xs[i]);
    want_m.push_back(i % 2 ? 1.0 : 0.0);  // -7.5 as bool is true
  }
  EXPECT_TRUE(all_close(outs[0], want_y, 0.0));
  EXPECT_TRUE(all_close(outs[1], want_m, 0.0));
  EXPECT_EQ(outs[1].dtype(), bool_);
}

TEST(CustomKernelCpu, OutputsJoinTheLazyGraph) {
  auto k = fast::cpu_kernel("square", {"x"}, {"out"}, "out[thread_position_in_grid] = x[thread_position_in_grid] * x[thread_position_in_grid];");
  array x = random_array({64});
  array y = k({x}, {{64}}, {float32}, {64, 1, 1}, {64, 1, 1}, {}, std::nullopt, false, {})[0];
  EXPECT_FALSE(y.is_evaluated());
  array z = sum(add(y, array(1.0f)));
  EXPECT_TRUE(all_close(z, to_double(sum(add(multiply(x, x), array(1.0f)))), 1e-5));
}

TEST(CustomKernelCpu, KernelsAreCachedInMemoryAndOnDisk) {
  auto k = fast::cpu_kernel("cached_twice", {"x"}, {"out"}, "out[thread_position_in_grid] = x[thread_position_in_grid] + 41;");
  array x = random_array({10});
  auto run = [&] { return k({x}, {{10}}, {float32}, {10, 1, 1}, {1, 1, 1}, {}, std::nullopt, false, {})[0]; };
  eval({run()});
  const detail::CodegenCounters before = detail::codegen_counters();
  array y = run();
  EXPECT_TRUE(all_close(y, to_double(add(x, array(41.0f))), 0.0));
  EXPECT_EQ(detail::codegen_counters().compiler_runs, before.compiler_runs);
  EXPECT_EQ(detail::codegen_counters().disk_loads, before.disk_loads);
  // A new process (here: a forgotten memory cache) loads the built object.
  detail::clear_codegen_memory_cache();
  array z = run();
  EXPECT_TRUE(all_close(z, to_double(add(x, array(41.0f))), 0.0));
  EXPECT_EQ(detail::codegen_counters().compiler_runs, before.compiler_runs);
  EXPECT_EQ(detail::codegen_counters().disk_loads, before.disk_loads + 1);
}

TEST(CustomKernelCpu, VerbosePrintsTheGeneratedSource) {
  auto k = fast::cpu_kernel("shown", {"x"}, {"out"}, "out[thread_position_in_grid] = x[thread_position_in_grid];");
  array x = random_array({4});
  testing::internal::CaptureStdout();
  auto y = k({x}, {{4}}, {float32}, {4, 1, 1}, {1, 1, 1}, {{"N", 3}}, std::nullopt, true, {});
  std::string printed = testing::internal::GetCapturedStdout();
  EXPECT_NE(printed.find("custom_kernel_shown_3"), std::string::npos) << printed;
  EXPECT_NE(printed.find("constexpr int N = 3;"), std::string::npos) << printed;
  EXPECT_NE(printed.find("const float* x"), std::string::npos) << printed;
}

TEST(CustomKernelCpu, CompileErrorsCarryTheCompilerLog) {
  auto k = fast::cpu_kernel("broken", {"x"}, {"out"}, "out[0] = undeclared_thing_42 + x[0];");
  array x = random_array({4});
  auto y = k({x}, {{1}}, {float32}, {1, 1, 1}, {1, 1, 1}, {}, std::nullopt, false, {})[0];
  EXPECT_TRUE(throws_error([&] { y.eval(); }, {"fast::cpu_kernel", "custom_kernel_broken", "undeclared_thing_42"}));
}

TEST(CustomKernelCpu, ArgumentErrors) {
  auto k = fast::cpu_kernel("args", {"x"}, {"out"}, "out[0] = x[0];");
  array x = random_array({4});
  auto call = [&](std::vector<array> in, std::vector<Shape> shapes, std::vector<Dtype> dtypes,
                  std::tuple<int, int, int> grid) {
    return k(in, shapes, dtypes, grid, {1, 1, 1}, {}, std::nullopt, false, {});
  };
  EXPECT_TRUE(throws_error([&] { call({}, {{1}}, {float32}, {1, 1, 1}); }, {"fast::cpu_kernel", "expected 1 inputs, got 0"}));
  EXPECT_TRUE(throws_error([&] { call({x}, {{1}, {1}}, {float32}, {1, 1, 1}); }, {"fast::cpu_kernel", "output shapes"}));
  EXPECT_TRUE(throws_error([&] { call({x}, {{-1}}, {float32}, {1, 1, 1}); }, {"fast::cpu_kernel", "negative", "(-1)"}));
  EXPECT_TRUE(throws_error([&] { call({x}, {{1}}, {float32}, {0, 1, 1}); }, {"fast::cpu_kernel", "grid (0, 1, 1)"}));
  EXPECT_TRUE(throws_error([] { fast::cpu_kernel("no_outputs", {"x"}, {}, ""); }, {"fast::cpu_kernel", "at least one output"}));
  EXPECT_TRUE(throws_error([] { fast::cpu_kernel("bad name", {"x"}, {"y"}, ""); }, {"fast::cpu_kernel", "bad name"}));
  EXPECT_TRUE(throws_error([] { fast::cpu_kernel("dup", {"x"}, {"x"}, ""); }, {"fast::cpu_kernel", "'x' is used twice"}));
  EXPECT_TRUE(throws_error([&] { k({x}, {{1}}, {float32}, {1, 1, 1}, {1, 1, 1}, {}, std::nullopt, false, Device::gpu); },
                           {"fast::cpu_kernel"}));
  auto gpu = fast::cuda_kernel("on_cpu", {"x"}, {"out"}, "out[0] = x[0];");
  EXPECT_TRUE(throws_error([&] { gpu({x}, {{1}}, {float32}, {1, 1, 1}, {1, 1, 1}, {}, std::nullopt, false, Device::cpu); },
                           {"fast::cuda_kernel", "GPU streams only"}));
}

TEST(CustomKernelCpu, TransformationsThrow) {
  auto k = fast::cpu_kernel("no_grad", {"x"}, {"out"}, "out[thread_position_in_grid] = 2 * x[thread_position_in_grid];");
  auto f = [&](const array& x) { return k({x}, {x.shape()}, {float32}, {static_cast<int>(x.size()), 1, 1}, {1, 1, 1}, {}, std::nullopt, false, {})[0]; };
  array x = random_array({5});
  EXPECT_TRUE(throws_error([&] { vjp(f, x, ones({5})); }, {"CustomKernel", "vjp"}));
  EXPECT_TRUE(throws_error([&] { jvp(f, x, ones({5})); }, {"CustomKernel", "jvp"}));
  EXPECT_TRUE(throws_error([&] { vmap(f)(random_array({3, 5})); }, {"CustomKernel", "vmap"}));
}

}  // namespace
}  // namespace kiln::test
