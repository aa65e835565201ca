// kiln::linalg and einsum with a GPU present (label `cuda`): the
// decompositions run on GPU streams through cuSOLVER and must match the CPU
// (LAPACK) and fail as it does (with KILN_GPU_LINALG=0 they refuse GPU
// streams clearly);
// they run on a CPU stream over data made on the GPU; einsum (ordinary ops)
// on the GPU matches the CPU. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "test_util.h"

namespace kiln {
namespace {

using test::to_double;

class GpuLinalg : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!is_available(Device::gpu)) GTEST_SKIP() << "no GPU available for the linalg tests";
  }
};

bool cusolver_enabled() {
  const char* v = std::getenv("KILN_GPU_LINALG");
  return !(v && std::string(v) == "0");
}

array well(const array& x) { return add(x, multiply(eye(x.shape(-1), x.dtype()), array(8.0f, x.dtype()))); }

// With KILN_GPU_LINALG=0 GPU streams are refused with advice to use a CPU
// stream, as MLX's are.
TEST_F(GpuLinalg, GpuStreamsAreRefusedClearly) {
  if (cusolver_enabled()) GTEST_SKIP() << "GPU streams take the cuSOLVER path (KILN_GPU_LINALG=0 tests the refusal)";
  array a = well(test::random_array({4, 4}));
  for (auto f : {+[](const array& m) { linalg::inv(m, Device::gpu); },
                 +[](const array& m) { linalg::qr(m, Device::gpu); },
                 +[](const array& m) { linalg::svd(m, true, Device::gpu); },
                 +[](const array& m) { linalg::cholesky(m, false, Device::gpu); },
                 +[](const array& m) { linalg::eigh(m, "L", Device::gpu); },
                 +[](const array& m) { linalg::lu_factor(m, Device::gpu); }}) {
    try {
      f(a);
      ADD_FAILURE() << "a GPU stream was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("CPU stream"), std::string::npos) << e.what();
    }
  }
}

// The cuSOLVER path: every decomposition on a GPU stream against the CPU
// (LAPACK), batched, float32 and float64, through invariants where the
// factors are unique only up to signs; each case's GPU outputs are read in
// one batch (a multi-output node read by later nodes of its CUDA-graph
// batch hung the encoder until session 10). KILN_TEST_VERBOSE=1 names
// each case as it starts.
TEST_F(GpuLinalg, DecompositionsMatchTheCpu) {
  if (!cusolver_enabled()) GTEST_SKIP() << "KILN_GPU_LINALG=0: no cuSOLVER path";
  for (Dtype t : {float32, float64}) {
    array x = astype(test::random_array({3, 5, 5}), t);
    array wide = astype(test::random_array({2, 3, 6}), t), tall = astype(test::random_array({2, 6, 3}), t);
    array spd = add(matmul(x, swapaxes(x, -1, -2)), multiply(eye(5, t), array(0.5, t)));
    using Fn = std::function<std::vector<array>(Device)>;
    const std::vector<std::pair<const char*, Fn>> cases = {
        {"inv", [&](Device d) { return std::vector<array>{linalg::inv(well(x), d)}; }},
        {"tri_inv", [&](Device d) { return std::vector<array>{linalg::tri_inv(well(x), false, d)}; }},
        {"cholesky", [&](Device d) { return std::vector<array>{linalg::cholesky(spd, false, d)}; }},
        {"cholesky upper", [&](Device d) { return std::vector<array>{linalg::cholesky(spd, true, d)}; }},
        {"qr tall", [&](Device d) {
           auto [q, r] = linalg::qr(tall, d);
           return std::vector<array>{matmul(q, r, d), matmul(swapaxes(q, -1, -2), q, d), abs(r, d)};
         }},
        {"qr wide", [&](Device d) {
           auto [q, r] = linalg::qr(wide, d);
           return std::vector<array>{matmul(q, r, d), matmul(swapaxes(q, -1, -2), q, d), abs(r, d)};
         }},
        {"svd tall", [&](Device d) {
           auto usv = linalg::svd(tall, true, d);
           array us = multiply(slice(usv[0], {0, 0, 0}, {2, 6, 3}), expand_dims(usv[1], -2), d);
           return std::vector<array>{usv[1], matmul(us, usv[2], d), matmul(swapaxes(usv[0], -1, -2), usv[0], d)};
         }},
        {"svd wide", [&](Device d) {
           auto usv = linalg::svd(wide, true, d);
           array sv = multiply(expand_dims(usv[1], -1), slice(usv[2], {0, 0, 0}, {2, 3, 6}), d);
           return std::vector<array>{usv[1], matmul(usv[0], sv, d), matmul(usv[2], swapaxes(usv[2], -1, -2), d)};
         }},
        {"svd values", [&](Device d) { return linalg::svd(x, false, d); }},
        {"eigh", [&](Device d) {
           auto [w, v] = linalg::eigh(spd, "L", d);
           return std::vector<array>{w, matmul(multiply(v, expand_dims(w, -2), d), swapaxes(v, -1, -2), d)};
         }},
        {"eigvalsh U", [&](Device d) { return std::vector<array>{linalg::eigvalsh(x, "U", d)}; }},
        {"lu_factor", [&](Device d) { auto [lu, p] = linalg::lu_factor(tall, d); return std::vector<array>{lu, p}; }},
        {"lu", [&](Device d) { return linalg::lu(x, d); }},
        {"solve", [&](Device d) { return std::vector<array>{linalg::solve(well(x), x, d)}; }},
        {"eigvals sum", [&](Device d) {
           array w = linalg::eigvals(x, d);
           return std::vector<array>{real(sum(w, -1, false, d), d), real(prod(w, -1, false, d), d)};
         }},
        {"eig residual", [&](Device d) {
           auto [w, v] = linalg::eig(x, d);
           array a = astype(x, complex64, d);
           return std::vector<array>{abs(subtract(matmul(a, v, d), multiply(v, expand_dims(w, -2), d), d), d)};
         }},
    };
    for (const auto& [name, fn] : cases) {
      if (std::getenv("KILN_TEST_VERBOSE")) std::fprintf(stderr, "case %s %s\n", name, dtype_name(t));
      auto cpu = fn(Device::cpu), gpu = fn(Device::gpu);
      ASSERT_EQ(cpu.size(), gpu.size()) << name;
      for (size_t k = 0; k < cpu.size(); ++k) {
        auto a = to_double(cpu[k]), b = to_double(gpu[k]);
        ASSERT_EQ(a.size(), b.size()) << name << " output " << k;
        // By the output's dtype: eig's are complex64 (their residual float32) for float64 input too.
        const double tol = cpu[k].dtype() == float64 ? 1e-9 : 2e-4;
        for (size_t i = 0; i < a.size(); ++i) {
          EXPECT_NEAR(a[i], b[i], tol * 50 * (1 + std::fabs(a[i]))) << name << " " << dtype_name(t) << " output " << k
                                                                    << " element " << i;
        }
      }
    }
  }
}

// A singular or indefinite matrix is the CPU's kiln::Error on the GPU too.
TEST_F(GpuLinalg, FailuresAreErrorsNamingTheOp) {
  if (!cusolver_enabled()) GTEST_SKIP() << "KILN_GPU_LINALG=0: no cuSOLVER path";
  array singular = array({1.0f, 2.0f, 2.0f, 4.0f}, {2, 2});
  EXPECT_TRUE(test::throws_error([&] { linalg::inv(singular, Device::gpu).eval(); }, {"[linalg::inv]", "singular"}));
  array indefinite = array({1.0f, 2.0f, 2.0f, 1.0f}, {2, 2});
  EXPECT_TRUE(test::throws_error([&] { linalg::cholesky(indefinite, false, Device::gpu).eval(); },
                                 {"[linalg::cholesky]", "positive definite"}));
  EXPECT_TRUE(test::throws_error([&] { linalg::inv(astype(singular, float16), Device::gpu); },
                                 {"[linalg::inv]", "float16"}));
}

// A step that mixes a decomposition with ordinary ops, repeated: the
// cuSOLVER node makes its batch run outside a CUDA graph, with the right
// result every time.
TEST_F(GpuLinalg, RepeatedStepsWithOtherOps) {
  if (!cusolver_enabled()) GTEST_SKIP() << "KILN_GPU_LINALG=0: no cuSOLVER path";
  array x = test::random_array({4, 4});
  StreamContext ctx(Device::gpu);
  for (int i = 0; i < 5; ++i) {
    array a = well(multiply(x, array(static_cast<float>(i + 1))));
    array back = matmul(a, linalg::inv(a));
    auto v = to_double(back);
    for (size_t k = 0; k < v.size(); ++k) EXPECT_NEAR(v[k], k / 4 == k % 4 ? 1.0 : 0.0, 1e-4) << i << " " << k;
  }
}

TEST_F(GpuLinalg, CpuStreamOverGpuData) {
  array x = test::random_array({2, 5, 5});
  array on_gpu = well(multiply(x, array(1.0f), Device::gpu));
  array inv_cpu = linalg::inv(on_gpu, Device::cpu);
  array back = matmul(on_gpu, inv_cpu, Device::gpu);
  auto v = to_double(back);
  for (size_t i = 0; i < v.size(); ++i) {
    double want = (i % 25) / 5 == (i % 25) % 5 ? 1.0 : 0.0;
    EXPECT_NEAR(v[i], want, 1e-4) << i;
  }
}

TEST_F(GpuLinalg, EinsumMatchesTheCpu) {
  array a = test::random_array({3, 6, 7}), b = test::random_array({7, 5}), c = test::random_array({5, 4});
  for (const char* sub : {"bij,jk,kl->bil", "bii->bi", "...ij,jk"}) {
    std::vector<array> ops = std::string(sub) == "bii->bi" ? std::vector<array>{test::random_array({3, 6, 6})}
                             : std::string(sub) == "...ij,jk"
                                 ? std::vector<array>{a, b}
                                 : std::vector<array>{a, b, c};
    auto on = [&](Device d) {
      StreamContext ctx(d);
      array r = einsum(sub, ops);
      r.eval();
      return r;
    };
    auto x = to_double(on(Device::cpu)), y = to_double(on(Device::gpu));
    ASSERT_EQ(x.size(), y.size()) << sub;
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 1e-4 * (1 + std::fabs(x[i]))) << sub << " " << i;
  }
}

}  // namespace
}  // namespace kiln
