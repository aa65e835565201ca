// The GPU twin of tests/test_gather_scatter.cpp: the same semantic checks
// (exact values, repeated-index accumulation through the atomics, clamped
// dynamic starts read on the device, views and bitcasts) on Device::gpu.
// The op harness covers the random cases (test_cuda_harness.cpp).
#include <cmath>

#include "gather_scatter_checks.h"

namespace kiln {
namespace {

TEST(CudaGatherScatter, Semantics) {
  if (!is_available(Device::gpu)) GTEST_SKIP() << "no GPU available";
  test::check_gather_semantics(Device::gpu);
  test::check_scatter_semantics(Device::gpu);
  test::check_index_errors(Device::gpu);
  test::check_dynamic_slices(Device::gpu);
  test::check_views(Device::gpu);
}

TEST(CudaGatherScatter, ManyAtomicUpdatesMatchTheCpu) {
  if (!is_available(Device::gpu)) GTEST_SKIP() << "no GPU available";
  // Embedding-gradient shape: many repeated rows; integer sums are exact.
  array a = zeros({64, 96}, int32);
  array idx = astype(random::randint(0, 64, {5000}), int32);
  array upd = astype(random::randint(-5, 5, {5000, 1, 96}), int32);
  using Scatter = array (*)(const array&, const std::vector<array>&, const array&, const std::vector<int>&,
                            StreamOrDevice);
  for (Scatter f : {static_cast<Scatter>(scatter_add), static_cast<Scatter>(scatter_max),
                    static_cast<Scatter>(scatter_min)}) {
    array want = f(a, std::vector<array>{idx}, upd, std::vector<int>{0}, Device::cpu);
    array have = f(a, std::vector<array>{idx}, upd, std::vector<int>{0}, Device::gpu);
    EXPECT_EQ(test::to_double(have), test::to_double(want));
  }
  array fa = ones({8, 3}, float64);
  array fu = astype(random::uniform(0.9, 1.1, {400, 1, 3}), float64);
  array fi = astype(random::randint(0, 8, {400}), int32);
  array pw = scatter_prod(fa, fi, fu, 0, Device::cpu), ph = scatter_prod(fa, fi, fu, 0, Device::gpu);
  auto w = test::to_double(pw), h = test::to_double(ph);
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(h[i], w[i], 1e-12 * std::abs(w[i]));
}

}  // namespace
}  // namespace kiln
