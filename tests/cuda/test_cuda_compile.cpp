// compile on the GPU (CTest label `cuda`): fused elementwise regions run as
// one NVRTC-built kernel (backend/cuda/compiled.cpp) and give the unfused
// GPU kernels' bits for every op on every dtype, casts, broadcast,
// transposed, sliced and misaligned inputs, odd sizes; a 1000-op chain
// becomes a few kernels; kernels are built once and reused (memory and
// disk caches); an NVRTC failure is a kiln::Error. Skips without a GPU.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>

#include "compile_ops.h"
#include "core/compiled.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln::test {
namespace {

class CudaCompile : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!is_available(Device::gpu)) GTEST_SKIP() << "no GPU available for the cuda suite";
    unsetenv("KILN_GPU_FUSION");  // fused by default
    previous_ = default_device();
    set_default_device(Device::gpu);
  }
  void TearDown() override {
    if (is_available(Device::gpu)) set_default_device(previous_);
  }
  Device previous_ = Device::cpu;
};

// The bytes of a (row-major after eval: fresh outputs are).
std::vector<unsigned char> bytes(const array& a) {
  a.eval();
  EXPECT_TRUE(a.is_row_contiguous());
  const void* p = nullptr;
  switch (a.dtype()) {
    case bool_: p = a.data<bool>(); break;
    case uint8: p = a.data<uint8_t>(); break;
    case uint16: p = a.data<uint16_t>(); break;
    case uint32: p = a.data<uint32_t>(); break;
    case uint64: p = a.data<uint64_t>(); break;
    case int8: p = a.data<int8_t>(); break;
    case int16: p = a.data<int16_t>(); break;
    case int32: p = a.data<int32_t>(); break;
    case int64: p = a.data<int64_t>(); break;
    case float16: p = a.data<float16_t>(); break;
    case bfloat16: p = a.data<bfloat16_t>(); break;
    case float32: p = a.data<float>(); break;
    case float64: p = a.data<double>(); break;
  }
  const auto* b = static_cast<const unsigned char*>(p);
  return std::vector<unsigned char>(b, b + a.nbytes());
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

// fn compiled and uncompiled on the GPU: same shapes, dtypes and bytes; the
// compiled graph holds at least `min_fused` fused nodes. Returns whether
// the bytes matched.
bool expect_bits(const ArrayFn& fn, const std::vector<array>& inputs, const std::string& what, int min_fused = 1) {
  std::vector<array> got = compile(fn)(inputs);
  EXPECT_GE(count_nodes(got, "Compiled"), min_fused) << what;
  std::vector<array> want = fn(inputs);
  EXPECT_EQ(got.size(), want.size()) << what;
  if (got.size() != want.size()) return false;
  eval(got);
  eval(want);
  bool same = true;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].shape(), want[i].shape()) << what;
    EXPECT_EQ(got[i].dtype(), want[i].dtype()) << what;
    if (got[i].shape() != want[i].shape() || got[i].dtype() != want[i].dtype()) return false;
    std::vector<unsigned char> g = bytes(got[i]), w = bytes(want[i]);
    if (g == w) continue;
    same = false;
    size_t bad = 0;
    const size_t item = got[i].itemsize();
    while (std::memcmp(&g[bad * item], &w[bad * item], item) == 0) ++bad;
    std::vector<double> gd = to_double(got[i]), wd = to_double(want[i]), xd = to_double(inputs[0]);
    ADD_FAILURE() << what << ": output " << i << " differs first at element " << bad << ": fused " << gd[bad]
                  << ", unfused " << wd[bad] << " (input 0 there: " << (bad < xd.size() ? xd[bad] : 0.0) << ")";
  }
  return same;
}

Stream gpu_stream() { return default_stream(Device::gpu); }

// Nodes built from the primitives themselves (no dtype promotion: each op
// runs on the dtype it is given); operands broadcast as the op layer does.
array un(UnaryOp op, const array& x) { return array(x.shape(), x.dtype(), std::make_shared<Unary>(gpu_stream(), op), {x}); }
array bin(BinaryOp op, const array& x, const array& y) {
  const Shape& shape = x.size() >= y.size() ? x.shape() : y.shape();
  array a = x.shape() == shape ? x : broadcast_to(x, shape);
  array b = y.shape() == shape ? y : broadcast_to(y, shape);
  return array(shape, is_comparison(op) ? bool_ : x.dtype(), std::make_shared<Binary>(gpu_stream(), op), {a, b});
}
array sel(const array& c, const array& x, const array& y) {
  return array(x.shape(), x.dtype(), std::make_shared<Select>(gpu_stream()), {c, x, y});
}

// Inputs that suit a dtype: floats over [-3, 3] (NaNs from log and sqrt of
// negatives included), integers over a small range (shifts, divisions by
// zero), unsigned and bool non-negative.
array input_for(Dtype t, const Shape& shape) {
  if (t == bool_) return random_array(shape, t);
  if (is_integral(t) && !is_signed(t)) return random_array(shape, t, 0, 9);
  if (is_integral(t)) return random_array(shape, t, -9, 9);
  return random_array(shape, t, -3, 3);
}

// One region per dtype holding every op defined on it: the sum over the
// ops of op(arg) * y, so each op sits between a multiply and an add (FMA
// contraction across op boundaries would show) and is rounded to the dtype
// as the unfused kernels round it. Float ops whose domain is narrow get
// arguments inside it. On a mismatch each op is checked alone, to name it.
ArrayFn unary_sum(Dtype t, std::vector<UnaryOp> ops) {
  return [t, ops](const std::vector<array>& in) -> std::vector<array> {
    const array& x = in[0];
    const array& y = in[1];
    array xy = bin(BinaryOp::multiply, x, y);
    array unit = bin(BinaryOp::add, bin(BinaryOp::multiply, un(UnaryOp::abs, x), array(0.3f, t)), array(0.05f, t));
    array above_one = bin(BinaryOp::add, un(UnaryOp::abs, x), array(1.0f, t));
    std::optional<array> acc;
    for (UnaryOp op : ops) {
      array arg = xy;
      if (is_floating_point(t)) {
        switch (op) {
          case UnaryOp::log: case UnaryOp::log1p: case UnaryOp::log2: case UnaryOp::log10: case UnaryOp::sqrt:
          case UnaryOp::rsqrt: case UnaryOp::arcsin: case UnaryOp::arccos: case UnaryOp::arctanh:
          case UnaryOp::erfinv: arg = unit; break;
          case UnaryOp::arccosh: arg = above_one; break;
          default: break;
        }
      }
      array term = bin(BinaryOp::multiply, un(op, arg), y);
      acc = acc ? bin(BinaryOp::add, *acc, term) : term;
    }
    return {*acc};
  };
}

TEST_F(CudaCompile, EveryUnaryOpOnEveryDtype) {
  for (Dtype t : all_dtypes()) {
    std::vector<array> in = {input_for(t, {37, 29}), input_for(t, {37, 29})};
    if (expect_bits(unary_sum(t, unary_ops_on(t)), in, std::string("unary ops on ") + dtype_name(t))) continue;
    // Which ops differ (each alone).
    for (UnaryOp op : unary_ops_on(t)) {
      expect_bits(unary_sum(t, {op}), in, std::string("alone: ") + unary_op_name(op) + " " + dtype_name(t));
    }
  }
}

// The same with every binary op (comparisons select between the inputs).
ArrayFn binary_sum(Dtype t, std::vector<BinaryOp> ops) {
  return [t, ops](const std::vector<array>& in) -> std::vector<array> {
    const array& x = in[0];
    const array& y = in[1];
    std::optional<array> acc;
    for (BinaryOp op : ops) {
      // Signed integer powers stay unfused (negative exponents are errors).
      if (op == BinaryOp::power && is_integral(t) && is_signed(t)) continue;
      array a = x;
      if (op == BinaryOp::power && is_floating_point(t)) a = bin(BinaryOp::add, un(UnaryOp::abs, x), array(0.5f, t));
      array r = bin(op, a, y);
      array term = is_comparison(op) ? sel(r, x, y) : r;
      term = bin(BinaryOp::multiply, term, y);
      acc = acc ? bin(BinaryOp::add, *acc, term) : term;
    }
    return {*acc};
  };
}

TEST_F(CudaCompile, EveryBinaryOpOnEveryDtype) {
  for (Dtype t : all_dtypes()) {
    std::vector<array> in = {input_for(t, {1003}), input_for(t, {1003})};
    if (expect_bits(binary_sum(t, binary_ops_on(t)), in, std::string("binary ops on ") + dtype_name(t))) continue;
    for (BinaryOp op : binary_ops_on(t)) {
      if (op == BinaryOp::power && is_integral(t) && is_signed(t)) continue;
      expect_bits(binary_sum(t, {op}), in, std::string("alone: ") + binary_op_name(op) + " " + dtype_name(t));
    }
  }
}

// Per source dtype, one region casting to every dtype and back to float32.
TEST_F(CudaCompile, EveryCast) {
  for (Dtype from : all_dtypes()) {
    auto casts = [](std::vector<Dtype> targets) {
      return [targets](const std::vector<array>& in) -> std::vector<array> {
        array n = un(UnaryOp::negative, in[0]);
        std::optional<array> acc;
        for (Dtype to : targets) {
          array term = astype(un(UnaryOp::abs, astype(n, to)), float32);
          acc = acc ? bin(BinaryOp::add, *acc, term) : term;
        }
        return {*acc};
      };
    };
    std::vector<Dtype> targets;
    for (Dtype to : all_dtypes()) {
      if (to != from) targets.push_back(to);
    }
    // Wide values: saturating and rounding conversions (integers wrap at
    // the ends of their range: -(-32768) is -32768 in int16).
    array x = from == bool_ ? random_array({513}, from) : random_array({513}, from, -70000, 70000);
    if (expect_bits(casts(targets), {x}, std::string("casts from ") + dtype_name(from))) continue;
    for (Dtype to : targets) {  // which casts differ (each alone)
      expect_bits(casts({to}), {x}, std::string("alone: ") + dtype_name(from) + " -> " + dtype_name(to));
    }
  }
}

TEST_F(CudaCompile, BroadcastTransposedAndSlicedInputs) {
  auto fn = [](const std::vector<array>& in) -> std::vector<array> {
    return {gelu(in[0] * in[1] + 1.5f) - tanh(in[1]) * in[0]};
  };
  for (Dtype t : {float32, float16, bfloat16}) {
    const int rows = 37, cols = 130;
    std::vector<std::pair<std::string, array>> xs = {
        {"contiguous", random_array({rows, cols}, t)},
        {"transposed", transpose(random_array({cols, rows}, t))},
        {"sliced", slice(random_array({rows * 2, cols + 3}, t), {0, 1}, {rows * 2, cols + 1}, {2, 1})},
        {"flipped", flip(random_array({rows, cols}, t), {0, 1})},
        {"misaligned", slice(random_array({rows * cols + 1}, t), {1}, {rows * cols + 1}, {1})}};
    std::vector<std::pair<std::string, array>> ys = {{"row", random_array({cols}, t)},
                                                     {"column", random_array({rows, 1}, t)},
                                                     {"scalar", array(0.75f, t)},
                                                     {"full", random_array({rows, cols}, t)}};
    for (auto& [xn, x] : xs) {
      array xv = xn == "misaligned" ? reshape(x, {rows, cols}) : x;
      for (auto& [yn, y] : ys) expect_bits(fn, {xv, y}, std::string(dtype_name(t)) + " " + xn + " x " + yn);
    }
  }
  // Three dims, broadcast in the middle, a transposed operand.
  array a = random_array({6, 1, 40}), b = transpose(random_array({40, 5, 6}), {2, 1, 0});
  expect_bits(fn, {a, b}, "3-d");
}

TEST_F(CudaCompile, OddSizesAndOutputDtypes) {
  for (int n : {1, 7, 1000003}) {
    for (Dtype t : {float32, bfloat16, float16, int32, uint8}) {
      auto fn = [](const std::vector<array>& in) -> std::vector<array> {
        array s = in[0] + in[1];
        return {where(s > in[1], s * in[0], in[1] - s), astype(maximum(s, in[0]), bool_)};
      };
      expect_bits(fn, {input_for(t, {n}), input_for(t, {n})}, std::string(dtype_name(t)) + " n=" + std::to_string(n));
    }
    auto gelu_fn = [](const std::vector<array>& in) -> std::vector<array> { return {gelu_approx(in[0] + in[1])}; };
    for (Dtype t : {float32, bfloat16})
      expect_bits(gelu_fn, {random_array({n}, t), random_array({n}, t)}, "add_gelu n=" + std::to_string(n));
  }
}

TEST_F(CudaCompile, ThousandOpChainIsAFewKernels) {
  auto fn = [](const std::vector<array>& in) -> std::vector<array> {
    array x = in[0];
    for (int i = 0; i < 1000; ++i) {
      switch (i % 4) {
        case 0: x = x * 0.999f; break;
        case 1: x = x + in[1]; break;
        case 2: x = tanh(x); break;
        default: x = x - 0.25f; break;
      }
    }
    return {x};
  };
  std::vector<array> in = {random_array({4097}), random_array({4097})};
  expect_bits(fn, in, "chain", 1);
  std::vector<array> out = compile(fn)(in);
  const int kernels = count_nodes(out, "Compiled");
  EXPECT_GE(kernels, 1);
  EXPECT_LE(kernels, 8);
  EXPECT_EQ(count_nodes(out, "Unary") + count_nodes(out, "Binary"), 0);
}

TEST_F(CudaCompile, KernelsAreBuiltOnceAndCachedOnDisk) {
  char tmpl[] = "/tmp/kiln-cuda-compile-test-XXXXXX";
  const char* dir = ::mkdtemp(tmpl);
  ASSERT_NE(dir, nullptr);
  const char* old = std::getenv("KILN_CACHE_DIR");
  const std::string saved = old ? old : "";
  ::setenv("KILN_CACHE_DIR", dir, 1);
  // A structure no other test builds (a fresh constant in the source
  // would not do: constants are parameters), on a fresh cache directory.
  auto fn = [](const std::vector<array>& in) -> std::vector<array> {
    return {arctan2(sinh(in[0]) * in[1], cosh(in[1]) + 3.0f) - erf(in[0])};
  };
  ArrayFn c = compile(fn);
  const auto before = detail::gpu_jit_counters();
  for (int rep = 0; rep < 4; ++rep) eval(c({random_array({300, 7}), random_array({300, 7})}));
  auto after = detail::gpu_jit_counters();
  EXPECT_EQ(after.nvrtc_builds - before.nvrtc_builds, 1);
  EXPECT_EQ(after.disk_loads - before.disk_loads, 0);
  // A new compile of the same function (a new trace, new nodes) finds the
  // kernel in the service's memory cache.
  eval(compile(fn)({random_array({300, 7}), random_array({300, 7})}));
  EXPECT_EQ(detail::gpu_jit_counters().nvrtc_builds, after.nvrtc_builds);
  int cubins = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    cubins += e.path().extension() == ".cubin" && e.path().filename().string().rfind("kiln-cuda-", 0) == 0;
  }
  EXPECT_EQ(cubins, 1);
  if (old) {
    ::setenv("KILN_CACHE_DIR", saved.c_str(), 1);
  } else {
    ::unsetenv("KILN_CACHE_DIR");
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST_F(CudaCompile, NvrtcFailureIsAKilnError) {
  // NVRTC without the CUDA headers cannot build the kernel.
  const char* old = std::getenv("KILN_CUDA_INCLUDE_DIR");
  const std::string saved = old ? old : "";
  ::setenv("KILN_CUDA_INCLUDE_DIR", "/nonexistent/kiln-cuda-include", 1);
  auto fn = [](const std::vector<array>& in) -> std::vector<array> { return {exp(in[0]) * in[0] + 1.0f}; };
  std::vector<array> out = compile(fn)({random_array({64})});
  EXPECT_TRUE(throws_error([&] { eval(out); }, {"compile", "kiln_fused", "NVRTC"}));
  if (old) {
    ::setenv("KILN_CUDA_INCLUDE_DIR", saved.c_str(), 1);
  } else {
    ::unsetenv("KILN_CUDA_INCLUDE_DIR");
  }
  // The device is fine afterwards.
  expect_bits(fn, {random_array({64})}, "after the failure");
}

TEST_F(CudaCompile, RepeatedCallsReplayCorrectly) {
  // Same shapes every call: the stream's cached CUDA graph replays the
  // fused kernel with fresh inputs and fresh host scalars.
  auto fn = [](const std::vector<array>& in) -> std::vector<array> { return {silu(in[0] * in[2] + in[1])}; };
  ArrayFn c = compile(fn);
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<array> in = {random_array({2, 513}, bfloat16), random_array({513}, bfloat16),
                             array(static_cast<float>(rep) - 2.0f, bfloat16)};
    std::vector<array> got = c(in), want = fn(in);
    EXPECT_EQ(bytes(got[0]), bytes(want[0])) << "call " << rep;
  }
}

TEST_F(CudaCompile, CpuStreamsStillFuseOnTheCpu) {
  auto fn = [](const std::vector<array>& in) -> std::vector<array> {
    return {gelu_approx(add(in[0], in[1], Device::cpu), Device::cpu)};
  };
  std::vector<array> in = {random_array({100}), random_array({100})};
  std::vector<array> got = compile(fn)(in);
  EXPECT_EQ(count_nodes(got, "Compiled"), 1);
  EXPECT_EQ(got[0].primitive()->stream().device.type, Device::cpu);
  EXPECT_EQ(bytes(got[0]), bytes(fn(in)[0]));
}

}  // namespace
}  // namespace kiln::test
