// export_function / import_function: graphs of several primitive families
// written to a file, read back and run on new inputs against the original
// function; captured constants, keyword arguments, metadata, shapeless
// imports and the errors.
#include <cstdio>
#include <fstream>

#include "test_util.h"

namespace kiln {
namespace {

using test::throws_error;

std::string temp_file(const std::string& name) { return ::testing::TempDir() + "kiln_export_" + name + ".kfn"; }

void expect_same(const std::vector<array>& got, const std::vector<array>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].shape(), want[i].shape());
    EXPECT_EQ(got[i].dtype(), want[i].dtype());
    auto g = test::to_double(got[i]), w = test::to_double(want[i]);
    ASSERT_EQ(g.size(), w.size());
    for (size_t k = 0; k < g.size(); ++k) EXPECT_NEAR(g[k], w[k], 1e-5 * (1 + std::abs(w[k]))) << "output " << i;
  }
}

TEST(Export, RoundTripOnNewInputs) {
  array weight = test::random_array({6, 4});  // captured: exported as a constant
  auto fun = [weight](const Args& x) {
    array h = softmax(matmul(x[0], weight), -1);
    array g = gather(h, {x[1]}, {0}, {1, 4});
    array s = scatter_add(zeros({5, 4}), x[1], g, 0);
    array d = slice(transpose(h), array({1}), {1}, {4, 2});
    std::vector<array> parts = split(sum(s, 1), 5);
    return std::vector<array>{s, max(h, 0), argsort(h, 1), d, cumsum(parts[2], 0), view(h, int32),
                              as_strided(h, {2, 2}, {1, 4}, 1)};
  };
  Args example = {test::random_array({5, 6}), array({0, 4, -1}, {3})};
  std::string file = temp_file("round_trip");
  export_function(file, fun, example, false, "demo");
  ImportedFunction f = import_function(file);
  EXPECT_EQ(f.metadata(), "demo");
  Args fresh = {test::random_array({5, 6}), array({2, 2, 1}, {3})};
  expect_same(f(fresh), fun(fresh));
  expect_same(f({fresh[0], fresh[1]}), fun(fresh));
  std::remove(file.c_str());
}

TEST(Export, QuantizedAndNormalizedGraphs) {
  array w = test::random_array({8, 64});
  std::vector<array> q = quantize(w, 32, 4);
  auto fun = [q](const Args& x) {
    array y = quantized_matmul(fast::rms_norm(x[0], x[1], 1e-5f), q[0], q[1], q[2], true, 32, 4);
    std::vector<array> qq = quantize(x[0], 32, 8);
    auto [h, n] = fast::add_rms_norm(x[0], x[0] * 0.5f, x[1], 1e-5f);
    return std::vector<array>{y, dequantize(qq[0], qq[1], qq[2], 32, 8), h, n};
  };
  std::string file = temp_file("quant");
  export_function(file, fun, {test::random_array({3, 64}), test::random_array({64})});
  ImportedFunction f = import_function(file);
  Args fresh = {test::random_array({3, 64}), test::random_array({64})};
  expect_same(f(fresh), fun(fresh));
  std::remove(file.c_str());
}

TEST(Export, KeywordArgumentsAndShapeless) {
  auto fun = [](const Args& a, const Kwargs& kw) {
    return std::vector<array>{sum(multiply(a[0], kw.at("scale")), -1, true), exp(kw.at("bias"))};
  };
  std::string file = temp_file("kwargs");
  export_function(file, fun, {test::random_array({2, 3})},
                  {{"scale", test::random_array({2, 3})}, {"bias", test::random_array({3})}}, true);
  ImportedFunction f = import_function(file);
  Kwargs kw = {{"scale", test::random_array({4, 5})}, {"bias", test::random_array({7})}};
  Args a = {test::random_array({4, 5})};
  expect_same(f(a, kw), fun(a, kw));  // shapeless: new shapes
  EXPECT_TRUE(throws_error([&] { f(a); }, {"[import_function]", "keywords [bias, scale]"}));
  std::remove(file.c_str());
}

TEST(Export, Errors) {
  std::string file = temp_file("errors");
  auto fixed_fun = [](const Args& x) { return std::vector<array>{slice(x[0], {0}, {2})}; };
  export_function(file, fixed_fun, {test::random_array({4})}, true);
  ImportedFunction f = import_function(file);
  EXPECT_TRUE(throws_error([&] { f({zeros({4}, int32)}); }, {"[import_function]", "int32"}));
  EXPECT_TRUE(throws_error([&] { f({zeros({6})}); }, {"[import_function]", "Slice"}));
  EXPECT_EQ(f({zeros({4})})[0].shape(), (Shape{2}));
  export_function(file, fixed_fun, {test::random_array({4})});
  EXPECT_TRUE(throws_error([&] { import_function(file)({zeros({6})}); }, {"[import_function]", "(4)"}));
  auto rope_fun = [](const Args& x) { return std::vector<array>{fast::rope(x[0], 4, false, 10000.f, 1.f, 0)}; };
  EXPECT_TRUE(throws_error([&] { export_function(file, rope_fun, {test::random_array({1, 1, 2, 4})}); },
                           {"[export_function]", "RoPE"}));
  {
    std::ofstream os(file, std::ios::binary);
    os << "not a function";
  }
  EXPECT_TRUE(throws_error([&] { import_function(file); }, {"[import_function]", "not a function"}));
  EXPECT_TRUE(throws_error([&] { import_function(file + ".missing"); }, {"[import_function]", "cannot open"}));
  std::remove(file.c_str());
}

}  // namespace
}  // namespace kiln
