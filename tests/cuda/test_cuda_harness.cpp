// The op harness on the GPU (label `cuda`): every registered case computed
// on Device::gpu against the CPU on the same inputs (every dtype and
// layout), and the transformations (vjp, jvp, vmap, grad of grad) run on
// the GPU against finite differences. Skips where no GPU is present.
#include <gtest/gtest.h>

#include <iostream>

#include "harness/harness.h"

namespace kiln::harness {
namespace {

TEST(GpuOpHarness, EveryCaseGpuAgainstCpu) {
  if (!is_available(Device::gpu)) GTEST_SKIP() << "no GPU available for the op harness";
  register_all();
  const auto& cases = registry();
  std::vector<Result> results;
  RunOptions opts{.cpu = false, .gpu = true, .transforms = true, .transform_device = Device::gpu};
  for (const auto& c : cases) {
    results.push_back(run_case(c, opts));
    if (!c.known_failure.empty()) continue;
    for (const auto& f : results.back().failures) {
      ADD_FAILURE() << c.op << " [" << c.primitive << "] " << c.name << ": " << f;
    }
  }
  std::cout << coverage_table(cases, results);
}

}  // namespace
}  // namespace kiln::harness
