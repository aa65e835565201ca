// kiln::compile: compiled results equal the uncompiled function's (bit for
// bit: the fused kernels share the op definitions and round intermediates
// to their dtype), traces are cached per input signature, CSE and fusion
// happen, and disable_compile turns it all off.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/compiled.h"
#include "core/primitive.h"
#include "core/primitives.h"
#include "kiln/compile.h"
#include "kiln/fast.h"
#include "test_util.h"

namespace kiln::test {
namespace {

// Runs fn compiled and uncompiled on the same inputs and checks every output.
void expect_same(const ArrayFn& fn, const std::vector<array>& inputs, double rtol = 0.0) {
  ArrayFn c = compile(fn);
  std::vector<array> got = c(inputs);
  std::vector<array> want = fn(inputs);
  ASSERT_EQ(got.size(), want.size());
  eval(got);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].shape(), want[i].shape()) << "output " << i;
    EXPECT_EQ(got[i].dtype(), want[i].dtype()) << "output " << i;
    EXPECT_TRUE(all_close(got[i], to_double(want[i]), rtol)) << "output " << i;
  }
}

// Counts nodes of a lazy graph whose primitive has the given name.
int count_nodes(const std::vector<array>& outs, const std::string& name) {
  std::vector<array> stack(outs.begin(), outs.end());
  std::vector<uintptr_t> seen;
  int n = 0;
  while (!stack.empty()) {
    array a = stack.back();
    stack.pop_back();
    if (std::find(seen.begin(), seen.end(), a.id()) != seen.end()) continue;
    seen.push_back(a.id());
    if (a.has_primitive() && name == a.primitive()->name()) ++n;
    for (const auto& in : a.inputs()) stack.push_back(in);
  }
  return n;
}

std::vector<array> add_gelu(const std::vector<array>& in) { return {gelu_approx(in[0] + in[1])}; }

TEST(Compile, FusesAddGeluFloat32AndBfloat16) {
  for (Dtype t : {float32, bfloat16}) {
    // Sizes that are not a multiple of the tile, and one over several tiles.
    for (int n : {1, 7, 2048, 5000, 70001}) {
      std::vector<array> in = {random_array({n}, t), random_array({n}, t)};
      expect_same(add_gelu, in);
      std::vector<array> out = compile(add_gelu)(in);
      EXPECT_EQ(count_nodes(out, "Compiled"), 1);
      EXPECT_EQ(count_nodes(out, "Binary"), 0);
      EXPECT_EQ(count_nodes(out, "Unary"), 0);
    }
  }
}

TEST(Compile, ManyOpsAndDtypes) {
  auto fn = [](const std::vector<array>& in) -> std::vector<array> {
    const array& x = in[0];
    const array& y = in[1];
    array a = exp(x * 0.5f) - tanh(y) + sigmoid(x - y);
    array b = where(x > y, a, silu(y)) / (abs(x) + 1.0f);
    array c = maximum(b, -x) + minimum(square(y), 3.0f) + relu(x) * sign(y);
    return {c * gelu(x) + erf(y) + log1p(abs(x)) + sqrt(abs(y)) + floor(x) + round(y)};
  };
  for (Dtype t : {float32, bfloat16, float16, float64}) {
    expect_same(fn, {random_array({33, 65}, t), random_array({33, 65}, t)});
  }
}

TEST(Compile, Broadcasting) {
  auto fn = [](const std::vector<array>& in) -> std::vector<array> {
    return {tanh(in[0] * in[1] + in[2]) - in[1]};
  };
  // [4,1,5] * [3,1] + [5] -> [4,3,5]; a scalar input; a 0-d input.
  expect_same(fn, {random_array({4, 1, 5}), random_array({3, 1}), random_array({5})});
  expect_same(fn, {random_array({1}), random_array({6, 7}), random_array({})});
  expect_same(fn, {random_array({}), random_array({}), random_array({})});
  std::vector<array> out = compile(fn)({random_array({64, 1}), random_array({1, 300}), random_array({300})});
  EXPECT_EQ(count_nodes(out, "Compiled"), 1);
  EXPECT_EQ(count_nodes(out, "Broadcast"), 0);  // folded into the fused reads
  expect_same(fn, {random_array({64, 1}), random_array({1, 300}), random_array({300})});
}

TEST(Compile, MixedDtypePromotions) {
  auto fn = [](const std::vector<array>& in) -> std::vector<array> {
    array s = in[0] + in[1];          // float32 + bfloat16 -> float32
    array t = in[2] * in[2] + in[3];  // int32 arithmetic, + uint8 -> int32
    array u = exp(in[1]) * in[1];     // bfloat16 chain
    return {s * t - astype(u, float32), u + in[1], astype(t % 7, int8), (t > 3) && (s < 0.5f),
            astype(in[0], int32) + t};
  };
  std::vector<array> in = {random_array({17, 40}, float32), random_array({40}, bfloat16),
                           random_array({17, 40}, int32, -50, 50), random_array({17, 1}, uint8, 1, 9)};
  expect_same(fn, in);
}

TEST(Compile, NonContiguousInputs) {
  auto fn = [](const std::vector<array>& in) -> std::vector<array> {
    return {gelu_approx(in[0] + in[1]) * in[2] - exp(in[1])};
  };
  array base = random_array({48, 40});
  array t = transpose(base);                                            // [40, 48]
  array s = slice(random_array({90, 100}), {3, 2}, {83, 98}, {2, 2});  // [40, 48]
  array f = flip(random_array({40, 48}), {0, 1});
  expect_same(fn, {t, s, f});
  expect_same(fn, {t, random_array({40, 48}), random_array({48})});
  // bf16 through the gathering path.
  array tb = transpose(random_array({48, 40}, bfloat16));
  expect_same(fn, {tb, flip(random_array({40, 48}, bfloat16), {1}), random_array({40, 1}, bfloat16)});
}

TEST(Compile, RetracesOnNewShapesAndHitsCache) {
  int calls = 0;
  ArrayFn c = compile([&calls](const std::vector<array>& in) -> std::vector<array> {
    ++calls;
    return {sigmoid(in[0]) * in[1] + 2.0f};
  });
  int64_t before = detail::compile_trace_count();
  for (int rep = 0; rep < 3; ++rep) {
    array a = random_array({5, 6}), b = random_array({5, 6});
    std::vector<array> got = c({a, b});
    EXPECT_TRUE(all_close(got[0], to_double(sigmoid(a) * b + 2.0f), 0.0));
  }
  EXPECT_EQ(detail::compile_trace_count() - before, 1);
  EXPECT_EQ(calls, 1);
  array a = random_array({9}), b = random_array({9});
  EXPECT_TRUE(all_close(c({a, b})[0], to_double(sigmoid(a) * b + 2.0f), 0.0));
  EXPECT_EQ(detail::compile_trace_count() - before, 2);  // new shape
  array ab = random_array({9}, bfloat16);
  EXPECT_TRUE(all_close(c({ab, b})[0], to_double(sigmoid(ab) * b + 2.0f), 0.0));
  EXPECT_EQ(detail::compile_trace_count() - before, 3);  // new dtype
  c({random_array({5, 6}), random_array({5, 6})});
  c({random_array({9}), random_array({9})});
  EXPECT_EQ(detail::compile_trace_count() - before, 3);
  EXPECT_EQ(calls, 3);
}

TEST(Compile, CommonSubexpressionsAndNoOps) {
  auto fn = [](const std::vector<array>& in) -> std::vector<array> {
    array p = in[0] * in[1];
    array q = in[0] * in[1];  // duplicate of p
    array r = exp(p) + exp(q);  // exp(p) and exp(q) merge once p == q
    array s = copy(reshape(astype(r, float32), r.shape()));  // no-ops
    return {s, exp(in[0] * in[1])};
  };
  std::vector<array> in = {random_array({8, 8}), random_array({8, 8})};
  expect_same(fn, in);
  compile(fn)(in);  // cache hit: no new stats
  ArrayFn c = compile(fn);
  std::vector<array> out = c(in);
  auto st = detail::last_compile_stats();
  // Traced: 3 multiply, 3 exp, add, copy (astype and reshape to the same
  // dtype and shape make no node; copy does, and simplification drops it).
  EXPECT_EQ(st.traced_nodes, 8);
  EXPECT_EQ(st.simplified_nodes, 3);  // multiply, exp, add
  // exp(multiply) is an output and feeds the add, so it is a fused node of
  // its own that the add reads: one Compiled (multiply+exp) and the add.
  EXPECT_EQ(st.fused_regions, 1);
  EXPECT_EQ(count_nodes(out, "Compiled"), 1);
  EXPECT_EQ(count_nodes(out, "Binary"), 1);
  EXPECT_EQ(count_nodes(out, "Unary"), 0);
  EXPECT_EQ(out[0].inputs()[0].id(), out[1].id());  // the add reads output 1
}

TEST(Compile, ReductionAndMatmulEndRegions) {
  auto fn = [](const std::vector<array>& in) -> std::vector<array> {
    array h = gelu_approx(in[0] * 1.5f + in[1]);  // fused
    array m = matmul(h, in[2]);                    // ends the region
    array s = sum(exp(m - 1.0f) * 0.25f, 1, true); // fused, then a reduction
    return {tanh(m / s) + 1.0f, s};                // fused (broadcast of s folded)
  };
  std::vector<array> in = {random_array({16, 24}), random_array({24}), random_array({24, 12})};
  expect_same(fn, in);
  std::vector<array> out = compile(fn)(in);
  EXPECT_EQ(count_nodes(out, "Compiled"), 3);
  EXPECT_EQ(count_nodes(out, "Matmul"), 1);
  EXPECT_EQ(count_nodes(out, "Reduce"), 1);
}

TEST(Compile, ConstantsInsideFn) {
  array captured = random_array({6});
  auto fn = [captured](const std::vector<array>& in) -> std::vector<array> {
    array k = full({4, 6}, 0.75f);
    array r = arange(0.0, 6.0, 1.0);
    return {in[0] * k + captured - r * 2.0f + array(3, int32)};
  };
  std::vector<array> in = {random_array({4, 6})};
  expect_same(fn, in);
  ArrayFn c = compile(fn);
  for (int rep = 0; rep < 2; ++rep) {
    array x = random_array({4, 6});
    EXPECT_TRUE(all_close(c({x})[0], to_double(fn({x})[0]), 0.0));
  }
  // A function that returns an input and a constant.
  auto ident = [](const std::vector<array>& in) -> std::vector<array> { return {in[0], array(2.5f), in[0] + 0.0f}; };
  expect_same(ident, in);
}

TEST(Compile, MultipleOutputsSharingIntermediates) {
  auto fn = [](const std::vector<array>& in) -> std::vector<array> {
    array a = in[0] + in[1];
    array b = exp(a);
    return {b * 2.0f, a, tanh(b) - a, astype(b, bfloat16)};
  };
  expect_same(fn, {random_array({10, 300}), random_array({300})});
}

// Multi-output primitives (quantize's three arrays, add_rms_norm's two) are
// one node each in the replay, with every output, used or not, and CSE keeps
// the outputs of one node apart.
TEST(Compile, MultiOutputPrimitives) {
  auto quant = [](const std::vector<array>& in) -> std::vector<array> {
    auto q = quantize(in[0] * 2.0f, 64, 4);
    return {q[0], q[1] + 1.0f, dequantize(q[0], q[1], q[2], 64, 4)};
  };
  expect_same(quant, {random_array({8, 128})});
  auto only_scales = [](const std::vector<array>& in) -> std::vector<array> { return {quantize(in[0], 64, 8)[1]}; };
  expect_same(only_scales, {random_array({4, 64})});
  auto norm = [](const std::vector<array>& in) -> std::vector<array> {
    auto [h, y] = fast::add_rms_norm(in[0], in[1], in[2], 1e-5f);
    auto [h2, y2] = fast::add_rms_norm(h, y, in[2], 1e-5f);
    return {y2, h2 * 2.0f, y};
  };
  expect_same(norm, {random_array({3, 40}), random_array({3, 40}), random_array({40})});
  auto norm_y = [](const std::vector<array>& in) -> std::vector<array> {
    return {fast::add_rms_norm(in[0], in[1], std::nullopt, 1e-5f).second};
  };
  expect_same(norm_y, {random_array({2, 16}, bfloat16), random_array({2, 16}, bfloat16)});
}

TEST(Compile, Donation) {
  // Intermediates nobody else holds may lend their buffer to the fused node.
  ArrayFn c = compile([](const std::vector<array>& in) -> std::vector<array> {
    return {tanh(exp(in[0] * 0.5f) + 1.0f)};
  });
  array x = random_array({3000});
  std::vector<double> want = to_double(tanh(exp(x * 0.5f) + 1.0f));
  EXPECT_TRUE(all_close(c({copy(x) * 1.0f})[0], want, 0.0));
}

TEST(Compile, DisableCompile) {
  int calls = 0;
  ArrayFn c = compile([&calls](const std::vector<array>& in) -> std::vector<array> {
    ++calls;
    return {exp(in[0]) + 1.0f};
  });
  disable_compile();
  array x = random_array({20});
  std::vector<array> out = c({x});
  c({x});
  enable_compile();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(count_nodes(out, "Compiled"), 0);
  EXPECT_TRUE(all_close(out[0], to_double(exp(x) + 1.0f), 0.0));
  std::vector<array> out2 = c({x});
  EXPECT_EQ(count_nodes(out2, "Compiled"), 1);
  EXPECT_TRUE(all_close(out2[0], to_double(exp(x) + 1.0f), 0.0));
}

// MLX's CompileMode: no_fuse simplifies only, no_simplify fuses only,
// disabled runs the function; each mode has its own trace; the results
// are the same in every mode.
TEST(Compile, CompileModes) {
  int calls = 0;
  ArrayFn c = compile([&calls](const std::vector<array>& in) -> std::vector<array> {
    ++calls;
    // Two identical subexpressions: simplification makes them one node.
    return {exp(in[0]) * 2.0f + exp(in[0]) * 2.0f};
  });
  array x = random_array({33});
  const std::vector<double> want = to_double(exp(x) * 2.0f + exp(x) * 2.0f);
  auto check = [&](CompileMode m, int fused, int exps, int new_calls) {
    set_compile_mode(m);
    const int before = calls;
    std::vector<array> out = c({x});
    EXPECT_EQ(calls - before, new_calls) << static_cast<int>(m);
    EXPECT_EQ(count_nodes(out, "Compiled"), fused) << static_cast<int>(m);
    if (exps >= 0) EXPECT_EQ(count_nodes(out, "Unary"), exps) << static_cast<int>(m);
    EXPECT_TRUE(all_close(out[0], want, 0.0)) << static_cast<int>(m);
  };
  check(CompileMode::no_fuse, 0, 1, 1);      // one exp after CSE, nothing fused
  check(CompileMode::no_simplify, 1, 0, 1);  // fused, traced again for this mode
  check(CompileMode::disabled, 0, 2, 1);     // the plain function
  check(CompileMode::enabled, 1, 0, 1);
  check(CompileMode::enabled, 1, 0, 0);      // cached
  check(CompileMode::no_fuse, 0, 1, 0);      // cached too
  enable_compile();
}

// shapeless is accepted (MLX's signature); Kiln traces per shape, so a
// function of its input's shape is right for every shape.
TEST(Compile, ShapelessAcceptedAndRightForEveryShape) {
  ArrayFn c = compile(
      [](const std::vector<array>& in) -> std::vector<array> {
        return {reshape(in[0], {in[0].shape(0) * in[0].shape(1)}) + 1.0f};
      },
      /*shapeless=*/true);
  for (Shape s : {Shape{2, 3}, Shape{4, 5}}) {
    array x = random_array(s);
    std::vector<array> out = c({x});
    EXPECT_EQ(out[0].shape(), Shape({s[0] * s[1]}));
    EXPECT_TRUE(all_close(out[0], to_double(reshape(x, {s[0] * s[1]}) + 1.0f), 0.0));
  }
}

// Fusion of GPU nodes, checked on any machine: the graph is built from
// primitives on a GPU stream and never evaluated. A GPU region takes at
// most 256 ops and 32 inputs; nodes of another stream stay out.
TEST(Compile, GpuRegionsAreBounded) {
  const Stream gpu{0, Device::gpu};
  auto bin = [gpu](BinaryOp op, const array& x, const array& y) {
    return array(x.shape(), x.dtype(), std::make_shared<Binary>(gpu, op), {x, y});
  };
  auto chain = [&](const std::vector<array>& in) -> std::vector<array> {
    array x = in[0];
    for (int i = 0; i < 1000; ++i) {
      x = i % 2 ? bin(BinaryOp::add, x, in[1]) : array(x.shape(), x.dtype(), std::make_shared<Unary>(gpu, UnaryOp::tanh), {x});
    }
    return {x};
  };
  std::vector<array> in = {random_array({8}), random_array({8})};
  std::vector<array> out = compile(chain)(in);
  EXPECT_EQ(count_nodes(out, "Compiled"), 4);  // 256 + 256 + 256 + 232 ops
  EXPECT_EQ(count_nodes(out, "Unary") + count_nodes(out, "Binary"), 0);
  EXPECT_EQ(out[0].primitive()->stream(), gpu);

  // A scalar's broadcast shared by every region (CSE made it one node): each
  // region reads the scalar itself, and no broadcast node is left.
  auto scaled = [&](const std::vector<array>& in) -> std::vector<array> {
    array x = in[0];
    for (int i = 0; i < 600; ++i) {
      array half = array(x.shape(), x.dtype(), std::make_shared<Broadcast>(gpu, x.shape()), {array(0.5f)});
      x = i % 2 ? bin(BinaryOp::multiply, x, half) : bin(BinaryOp::add, x, in[1]);
    }
    return {x};
  };
  std::vector<array> s = compile(scaled)(in);
  EXPECT_EQ(count_nodes(s, "Compiled"), 3);  // 256 + 256 + 88 ops
  EXPECT_EQ(count_nodes(s, "Broadcast"), 0);
  bool reads_scalar = false;
  for (const auto& a : s[0].inputs()) reads_scalar = reads_scalar || a.ndim() == 0;
  EXPECT_TRUE(reads_scalar);

  // 40 distinct inputs summed: a region of at most 32 inputs, then the rest.
  auto wide = [&](const std::vector<array>& in) -> std::vector<array> {
    array acc = in[0];
    for (size_t i = 1; i < in.size(); ++i) acc = bin(BinaryOp::add, acc, in[i]);
    return {acc};
  };
  std::vector<array> many;
  for (int i = 0; i < 40; ++i) many.push_back(random_array({8}));
  std::vector<array> w = compile(wide)(many);
  EXPECT_EQ(count_nodes(w, "Compiled"), 2);
  EXPECT_EQ(w[0].inputs().size(), 32u);

  // A node on another GPU stream ends the region.
  const Stream other{1, Device::gpu};
  auto two = [&](const std::vector<array>& in) -> std::vector<array> {
    array a = bin(BinaryOp::multiply, in[0], in[1]);
    array b = array(a.shape(), a.dtype(), std::make_shared<Binary>(other, BinaryOp::add), {a, in[1]});
    return {bin(BinaryOp::subtract, bin(BinaryOp::multiply, b, in[0]), in[1])};
  };
  std::vector<array> t = compile(two)(in);
  EXPECT_EQ(count_nodes(t, "Compiled"), 1);
  EXPECT_EQ(count_nodes(t, "Binary"), 2);
}

// GPU regions are fused by default; KILN_GPU_FUSION=0 leaves them unfused
// (compile.cpp).
TEST(Compile, GpuFusionCanBeSwitchedOff) {
  const char* saved = std::getenv("KILN_GPU_FUSION");
  const std::string restore = saved ? saved : "";
  setenv("KILN_GPU_FUSION", "0", 1);
  const Stream gpu{0, Device::gpu};
  auto chain = [gpu](const std::vector<array>& in) -> std::vector<array> {
    array x = array(in[0].shape(), in[0].dtype(), std::make_shared<Unary>(gpu, UnaryOp::tanh), {in[0]});
    return {array(x.shape(), x.dtype(), std::make_shared<Binary>(gpu, BinaryOp::add), {x, in[0]})};
  };
  std::vector<array> out = compile(chain)({random_array({8})});
  EXPECT_EQ(count_nodes(out, "Compiled"), 0);
  EXPECT_EQ(count_nodes(out, "Binary"), 1);
  unsetenv("KILN_GPU_FUSION");
  std::vector<array> fused = compile(chain)({random_array({8})});
  EXPECT_EQ(count_nodes(fused, "Compiled"), 1);
  if (saved) setenv("KILN_GPU_FUSION", restore.c_str(), 1);
}

TEST(Compile, EvaluatingInsideFnFailsClearly) {
  ArrayFn c = compile([](const std::vector<array>& in) -> std::vector<array> {
    return {in[0] * in[0].item<float>()};
  });
  EXPECT_TRUE(throws_error([&] { c({random_array({1})}); }, {"compile"}));
}

}  // namespace
}  // namespace kiln::test
