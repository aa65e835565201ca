// The op harness on the CPU (tests/harness): every registered case against
// its float64 reference on every dtype and layout, its vjp / jvp against
// finite differences, vmap against a loop, grad of grad; a coverage table;
// and a test that fails when a primitive or an enum op has no case.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <regex>
#include <set>

#include "harness/harness.h"
#include "test_util.h"

namespace kiln::harness {
namespace {

TEST(OpHarness, EveryCaseOnCpu) {
  register_all();
  const auto& cases = registry();
  std::vector<Result> results;
  int known = 0;
  for (const auto& c : cases) {
    results.push_back(run_case(c, RunOptions{}));
    const auto& r = results.back();
    if (!c.known_failure.empty()) {
      ++known;
      if (r.failures.empty()) std::cout << "known failure now passes: " << c.op << " " << c.name << "\n";
      continue;
    }
    for (const auto& f : r.failures) ADD_FAILURE() << c.op << " [" << c.primitive << "] " << c.name << ": " << f;
  }
  std::cout << coverage_table(cases, results) << cases.size() << " cases, " << known << " known failures\n";
}

TEST(OpHarness, EveryPrimitiveAndEnumOpHasACase) {
  register_all();
  std::set<std::string> covered;
  for (const auto& c : registry()) covered.insert(c.primitive);
  for (const auto& p : required_primitives()) {
    EXPECT_TRUE(covered.count(p)) << "no harness case exercises " << p << " (register one in tests/harness/)";
  }
}

// Every op declared in include/kiln/ops.h and random.h has a case (read
// from the headers, so a new op without a case fails here).
TEST(OpHarness, EveryPublicOpHasACase) {
  register_all();
  std::set<std::string> ops;
  for (const auto& c : registry()) ops.insert(c.op);
  // Not ops on arrays: weak scalars of the C++ operators, and key creation.
  const std::set<std::string> exempt = {"scalar_like", "as_weak_scalar", "check_scalar_fits", "random::key", "random::seed"};
  const std::regex decl(R"(^(?:array|std::vector<array>|void) (\w+)\()");
  for (const auto& [file, prefix] : {std::pair<std::string, std::string>{"ops.h", ""}, {"random.h", "random::"},
                                     {"linalg.h", "linalg::"}, {"einsum.h", ""}, {"fft.h", "fft::"}}) {
    std::ifstream in(std::string(KILN_SOURCE_DIR) + "/include/kiln/" + file);
    ASSERT_TRUE(in) << file;
    std::string line;
    int found = 0;
    while (std::getline(in, line)) {
      std::smatch m;
      if (!std::regex_search(line, m, decl)) continue;
      ++found;
      const std::string name = prefix + m[1].str();
      if (exempt.count(name)) continue;
      EXPECT_TRUE(ops.count(name)) << name << " (" << file << ") has no harness case (register one in tests/harness/)";
    }
    EXPECT_GT(found, file == "einsum.h" ? 0 : 5) << "no declarations read from " << file;
  }
}

TEST(OpHarness, CasesHaveUniqueNames) {
  register_all();
  std::set<std::string> names;
  for (const auto& c : registry()) {
    EXPECT_TRUE(names.insert(c.op + "|" + c.primitive + "|" + c.name).second) << "duplicate case " << c.op << " " << c.name;
  }
}

// The runner catches a wrong rule: sin with a vjp, a jvp and a batched rule
// each off by a little (through custom_function).
TEST(OpHarness, CatchesWrongRules) {
  auto wrong = custom_function(
      [](const Arrays& x) { return Arrays{sin(x[0])}; },
      [](const Arrays& x, const Arrays& cot, const Arrays&) { return Arrays{cot[0] * cos(x[0]) * 1.001}; },
      [](const Arrays& x, const Arrays& tan, const std::vector<int>&) { return Arrays{tan[0] * cos(x[0]) * 1.001}; },
      [](const Arrays& x, const std::vector<int>& axes) {
        return std::pair<Arrays, std::vector<int>>{{sin(x[0]) * 1.001}, {axes[0]}};
      });
  Case c{.op = "sin", .primitive = "Unary:sin", .name = "wrong rules", .fn = wrong, .inputs = {in({3, 4})},
         .dtypes = {float32}, .diff = {0}};
  Result r = run_case(c, RunOptions{});
  EXPECT_EQ(r.cpu, Outcome::kPass);
  EXPECT_EQ(r.vjp, Outcome::kFail);
  EXPECT_EQ(r.jvp, Outcome::kFail);
  EXPECT_EQ(r.vmap, Outcome::kFail);
  // grad2 differentiates the (wrong) first derivative consistently: a wrong
  // first rule is the vjp check's to catch.
}

// Finite differences see stop_gradient as the identity; its rule is zero.
TEST(OpHarness, StopGradientHasAZeroDerivative) {
  array x = test::random_array({3, 5}, float64);
  auto f = [](const array& v) { return sum(stop_gradient(v) * v); };
  EXPECT_TRUE(test::all_close(grad(f)(x), test::to_double(x), 1e-15));
  auto [out, tan] = jvp([](const array& v) { return stop_gradient(v); }, x, ones_like(x));
  EXPECT_TRUE(test::all_close(tan, std::vector<double>(15, 0.0), 0.0));
}

}  // namespace
}  // namespace kiln::harness
