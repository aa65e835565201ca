// kiln::linalg and einsum with a GPU present (label `cuda`): the
// decompositions refuse GPU streams with advice to use a CPU stream (no
// cuSOLVER path yet), run on a CPU stream over data made on the GPU, and
// einsum (ordinary ops) on the GPU matches the CPU. Skips without a GPU.
#include <gtest/gtest.h>

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

array well(const array& x) { return add(x, multiply(eye(x.shape(-1), x.dtype()), array(8.0f, x.dtype()))); }

TEST_F(GpuLinalg, GpuStreamsAreRefusedClearly) {
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
