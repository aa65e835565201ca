// compile's two CPU backends: the blocked interpreter and generated C++
// (compiled_codegen.cpp). Both must give the uncompiled function's bits;
// generated kernels are cached on disk and reused, built once when two
// threads ask together, and a broken compiler falls back to the
// interpreter. Kernels go to a temporary cache directory, never the
// source tree or the user's cache.
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include "backend/cpu/compiled_codegen.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/simd_math.h"
#include "core/compiled.h"
#include "kiln/compile.h"
#include "test_util.h"

namespace kiln::test {
namespace {

// Set before any test runs (every test in this binary that compiles uses it).
const std::string kCacheDir = [] {
  char tmpl[] = "/tmp/kiln-codegen-test-XXXXXX";
  const char* d = ::mkdtemp(tmpl);
  std::string dir = d ? d : "/tmp/kiln-codegen-test";
  ::setenv("KILN_CACHE_DIR", dir.c_str(), 1);
  return dir;
}();

struct CacheDirCleanup {
  ~CacheDirCleanup() {
    std::error_code ec;
    std::filesystem::remove_all(kCacheDir, ec);
  }
} cleanup;

// Forces a backend for the scope.
struct UseBackend {
  explicit UseBackend(detail::CompileBackend b) { detail::set_compile_backend(b); }
  ~UseBackend() { detail::clear_compile_backend(); }
};

void expect_same(const ArrayFn& fn, const std::vector<array>& inputs) {
  std::vector<array> got = compile(fn)(inputs);
  std::vector<array> want = fn(inputs);
  ASSERT_EQ(got.size(), want.size());
  eval(got);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].dtype(), want[i].dtype()) << "output " << i;
    EXPECT_EQ(got[i].shape(), want[i].shape()) << "output " << i;
    EXPECT_TRUE(all_close(got[i], to_double(want[i]), 0.0)) << "output " << i;
  }
}

std::vector<array> add_gelu(const std::vector<array>& in) { return {gelu_approx(in[0] + in[1])}; }

class CompileBackends : public ::testing::TestWithParam<detail::CompileBackend> {
 protected:
  UseBackend use_{GetParam()};
};

TEST_P(CompileBackends, AddGeluMatchesUnfused) {
  for (Dtype t : {float32, bfloat16, float16}) {
    for (int n : {1, 15, 16, 17, 2048, 70001}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " n=" + std::to_string(n));
      expect_same(add_gelu, {random_array({n}, t), random_array({n}, t)});
    }
  }
}

TEST_P(CompileBackends, ManyOpsAndDtypes) {
  auto fn = [](const std::vector<array>& in) -> std::vector<array> {
    const array& x = in[0];
    const array& y = in[1];
    array a = exp(x * 0.5f) - tanh(y) + sigmoid(x - y) + silu(y);
    array b = where(x > y, a, silu(y)) / (abs(x) + 1.0f);
    array c = maximum(b, -x) + minimum(square(y), 3.0f) + relu(x) * sign(y);
    return {c * gelu(x) + erf(y) + log1p(abs(x)) + sqrt(abs(y)) + floor(x) + round(y) + gelu_approx(y)};
  };
  for (Dtype t : {float32, bfloat16, float16, float64}) {
    SCOPED_TRACE(dtype_name(t));
    expect_same(fn, {random_array({33, 65}, t), random_array({33, 65}, t)});
  }
}

TEST_P(CompileBackends, Broadcasting) {
  auto fn = [](const std::vector<array>& in) -> std::vector<array> {
    return {gelu_approx(in[0] * in[1] + in[2]) - in[1]};
  };
  // Row, column, scalar and 0-d operands; one split of [4,3,5] per case.
  expect_same(fn, {random_array({4, 3, 5}), random_array({3, 5}), random_array({5})});
  expect_same(fn, {random_array({64, 300}), random_array({64, 1}), random_array({1, 300})});
  expect_same(fn, {random_array({1}), random_array({6, 7}), random_array({})});
  expect_same(fn, {random_array({4, 1, 5}), random_array({3, 1}), random_array({5})});  // needs the interpreter
  expect_same(fn, {random_array({}), random_array({}), random_array({})});
  expect_same(fn, {random_array({7, 9}, bfloat16), random_array({7, 1}, bfloat16), random_array({9}, bfloat16)});
}

TEST_P(CompileBackends, MixedDtypesAndIntegers) {
  auto fn = [](const std::vector<array>& in) -> std::vector<array> {
    array s = in[0] + in[1];          // float32 + bfloat16 -> float32
    array t = in[2] * in[2] + in[3];  // int32 arithmetic, + uint8 -> int32
    array u = exp(in[1]) * in[1];     // bfloat16 chain
    array h = astype(in[4], float32) * s + astype(in[1], float16);  // float16 in the mix
    return {s * t - astype(u, float32), u + in[1], astype(t % 7, int8), (t > 3) && (s < 0.5f),
            astype(in[0] * 100.0f, int32) + t, maximum(-t, power(t, in[5])), h};
  };
  std::vector<array> in = {random_array({17, 40}, float32), random_array({40}, bfloat16),
                           random_array({17, 40}, int32, -50, 50), random_array({17, 1}, uint8, 1, 9),
                           random_array({17, 40}, float16), random_array({17, 40}, int32, 0, 4)};
  expect_same(fn, in);
}

TEST_P(CompileBackends, NonContiguousInputsAndNewShapes) {
  auto fn = [](const std::vector<array>& in) -> std::vector<array> {
    return {gelu_approx(in[0] + in[1]) * in[2] - exp(in[1])};
  };
  array t = transpose(random_array({48, 40}));  // gathered by the interpreter
  expect_same(fn, {t, random_array({40, 48}), random_array({48})});
  ArrayFn c = compile(fn);
  for (Shape s : {Shape{5}, Shape{3, 1000}, Shape{2, 3, 4}, Shape{100000}}) {
    std::vector<array> in = {random_array(s), random_array(s), random_array(s)};
    array got = c(in)[0];
    EXPECT_TRUE(all_close(got, to_double(fn(in)[0]), 0.0));
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, CompileBackends,
                         ::testing::Values(detail::CompileBackend::interp, detail::CompileBackend::codegen),
                         [](const auto& info) {
                           return info.param == detail::CompileBackend::interp ? "interp" : "codegen";
                         });

// ---- the code generator itself ----

TEST(CompileCodegen, BuildsAddGeluAndReusesTheDiskCache) {
  UseBackend use(detail::CompileBackend::codegen);
  // A structure no other test compiles.
  auto fn = [](const std::vector<array>& in) -> std::vector<array> { return {tanh(in[0] - in[1]) * in[0]}; };
  std::vector<array> in = {random_array({1000}), random_array({1000})};
  auto before = detail::codegen_counters();
  expect_same(fn, in);
  auto built = detail::codegen_counters();
  EXPECT_EQ(built.compiler_runs, before.compiler_runs + 1);
  EXPECT_EQ(built.failures, before.failures);

  // Same structure, new compile: the in-memory cache answers.
  expect_same(fn, in);
  EXPECT_EQ(detail::codegen_counters().compiler_runs, built.compiler_runs);

  // Without the in-memory cache the .so comes from disk, no compiler run.
  detail::clear_codegen_memory_cache();
  expect_same(fn, in);
  auto reloaded = detail::codegen_counters();
  EXPECT_EQ(reloaded.compiler_runs, built.compiler_runs);
  EXPECT_EQ(reloaded.disk_loads, built.disk_loads + 1);
  bool found = false;
  for (const auto& e : std::filesystem::directory_iterator(kCacheDir)) {
    found = found || e.path().extension() == ".so";
  }
  EXPECT_TRUE(found);
}

TEST(CompileCodegen, ConcurrentFirstCallsBuildOnce) {
  UseBackend use(detail::CompileBackend::codegen);
  auto fn = [](const std::vector<array>& in) -> std::vector<array> { return {sigmoid(in[0] * in[1]) - in[1]}; };
  auto before = detail::codegen_counters();
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  std::vector<std::vector<array>> ins;
  for (int t = 0; t < 2; ++t) ins.push_back({random_array({5000}), random_array({5000})});
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      const std::vector<array>& in = ins[t];
      array got = compile(fn)(in)[0];
      if (all_close(got, to_double(fn(in)[0]), 0.0)) ++ok;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 2);
  EXPECT_EQ(detail::codegen_counters().compiler_runs, before.compiler_runs + 1);
}

TEST(CompileCodegen, BrokenCompilerFallsBackToTheInterpreter) {
  UseBackend use(detail::CompileBackend::codegen);
  ::setenv("KILN_CXX", "/bin/false", 1);
  auto fn = [](const std::vector<array>& in) -> std::vector<array> { return {silu(in[0] + in[1]) * in[1]}; };
  auto before = detail::codegen_counters();
  expect_same(fn, {random_array({3000}), random_array({3000})});
  expect_same(fn, {random_array({3000}, bfloat16), random_array({3000}, bfloat16)});
  ::setenv("KILN_CXX", "/nonexistent/kiln-no-such-compiler", 1);
  expect_same(fn, {random_array({300}, float16), random_array({300}, float16)});
  ::unsetenv("KILN_CXX");
  EXPECT_GE(detail::codegen_counters().failures, before.failures + 3);
}

TEST(CompileCodegen, UnsupportedOpsHaveNoSource) {
  // erfinv is not generated (its library form leaves multiply-adds for the
  // compiler to contract); every other op is a call of its op_math.inc
  // definition, double gelu_approx included (written with explicit fmas).
  auto fn = [](const std::vector<array>& in) -> std::vector<array> { return {erfinv(in[0] * in[1])}; };
  std::vector<array> out = compile(fn)({random_array({10}, float64), random_array({10}, float64)});
  auto* c = dynamic_cast<const Compiled*>(out[0].primitive().get());
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(cpu::codegen::kernel_source(*c, "cc"), "");
  auto gelu_fn = [](const std::vector<array>& in) -> std::vector<array> { return {gelu_approx(in[0] + in[1])}; };
  for (Dtype t : {float32, float64}) {
    std::vector<array> g = compile(gelu_fn)({random_array({10}, t), random_array({10}, t)});
    auto* cg = dynamic_cast<const Compiled*>(g[0].primitive().get());
    ASSERT_NE(cg, nullptr);
    // float32 on AVX-512 runs the 16-lane form (vec_math_avx512.inc).
    const bool lanes = t == float32 && cpu::cpu_target() >= cpu::CpuTarget::avx512;
    EXPECT_NE(cpu::codegen::kernel_source(*cg, "cc").find(lanes ? "kv::gelu_approx(" : "ko::gelu_approx_op::apply"),
              std::string::npos);
  }
  expect_same(gelu_fn, {random_array({3001}, float64), random_array({3001}, float64)});
}

// ---- the 16-lane loop (float32 / bfloat16 on AVX-512) ----

// n floats: plain values, NaNs, infinities, signed zeros, subnormals and the
// points where exp, tanh and the bf16 rounding bend.
std::vector<float> special_floats(int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-6.0f, 6.0f);
  const float specials[] = {0.0f,     -0.0f,     1e-45f, -3e-39f, 1e-38f,  89.5f, -104.5f, -1e30f,      1e30f,
                            INFINITY, -INFINITY, NAN,    -NAN,    0.0003f, 9.02f, -7.95f,  1.00390625f, 3.3895314e38f};
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = i % 7 == 3 ? specials[g() % (sizeof(specials) / sizeof(float))] : u(g);
  return v;
}

// The outputs' bits against the uncompiled function's; two NaNs compare
// equal (x86 picks between two NaN operands' payloads by operand order,
// which compilers swap for + and *).
void expect_same_bits(const ArrayFn& fn, const std::vector<array>& inputs) {
  std::vector<array> got = compile(fn)(inputs);
  std::vector<array> want = fn(inputs);
  eval(got);
  eval(want);
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].dtype(), want[k].dtype());
    array g = astype(got[k], float32), w = astype(want[k], float32);  // exact for bf16
    const float* a = g.data<float>();
    const float* b = w.data<float>();
    int bad = 0;
    for (size_t i = 0; i < g.size() && bad < 5; ++i) {
      if (std::memcmp(&a[i], &b[i], 4) != 0 && !(std::isnan(a[i]) && std::isnan(b[i]))) {
        ++bad;
        ADD_FAILURE() << "output " << k << " element " << i << ": " << a[i] << " vs uncompiled " << b[i];
      }
    }
  }
}

TEST(CompileCodegen, SixteenLaneLoopMatchesTheOpsBitForBit) {
  UseBackend use(detail::CompileBackend::codegen);
  auto fn = [](const std::vector<array>& in) -> std::vector<array> {
    const array &x = in[0], &y = in[1], &r = in[2], &k = in[3], &s = in[4];
    array a = gelu_approx(x + y) * r - tanh(x) / k;
    array b = maximum(sigmoid(x), minimum(y, s)) + silu(r) - exp(y * 0.25f);
    array c = rsqrt(abs(x)) + sqrt(square(y)) + relu(-x) - a * b;
    return {c + astype(astype(a, float32) * 2.0f, x.dtype())};
  };
  for (Dtype t : {float32, bfloat16}) {
    for (int64_t cols : {1, 15, 16, 17, 300, 4099}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " cols=" + std::to_string(cols));
      const int64_t rows = 5;
      auto make = [&](int64_t n, Shape shape, uint32_t seed) {
        return astype(array(special_floats(n, seed), shape), t);
      };
      std::vector<array> in = {make(rows * cols, {rows, cols}, 1), make(rows * cols, {rows, cols}, 2),
                               make(cols, {cols}, 3), make(rows, {rows, 1}, 4), make(1, {}, 5)};
      expect_same_bits(fn, in);
    }
  }
  // Comparisons, logical ops and where: bool values as lane masks, bool
  // inputs and outputs, casts between bool and the floats.
  auto masks = [](const std::vector<array>& in) -> std::vector<array> {
    const array &x = in[0], &y = in[1], &b = in[2], &s = in[3];
    array pos = x > 0.0f, small = abs(y) <= 1.0f;
    array leaky = where(pos, x, x * 0.01f);
    array picked = where(logical_and(pos, logical_not(b)), exp(y), where(logical_or(small, b), tanh(x), s));
    array as_float = astype(x != y, x.dtype()) + astype(x >= s, x.dtype()) - astype(x == y, x.dtype());
    return {leaky + picked * as_float + astype(astype(y, bool_), x.dtype()), (x < y) != b};
  };
  for (Dtype t : {float32, bfloat16}) {
    for (int64_t n : {1, 16, 33, 1000}) {
      SCOPED_TRACE(std::string("masks ") + dtype_name(t) + " n=" + std::to_string(n));
      std::vector<float> bits = special_floats(n, 9);
      std::vector<bool> flags(n);
      for (int64_t i = 0; i < n; ++i) flags[i] = bits[i] > 0.5f;
      std::vector<array> in = {astype(array(special_floats(n, 7), {static_cast<int>(n)}), t),
                               astype(array(special_floats(n, 8), {static_cast<int>(n)}), t),
                               array(flags, {static_cast<int>(n)}), astype(array(0.75f), t)};
      expect_same_bits(masks, in);
    }
  }
  {
    std::vector<array> g =
        compile(masks)({random_array({8}), random_array({8}), random_array({8}) > 0.0f, array(1.0f)});
    auto* c = dynamic_cast<const Compiled*>(g[1].primitive().get());
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(cpu::codegen::kernel_source(*c, "cccs").find("_mm512_cmp_ps_mask(") != std::string::npos,
              cpu::cpu_target() >= cpu::CpuTarget::avx512);
  }
  // The kernel runs 16 lanes where the CPU has AVX-512, its scalar loop below.
  std::vector<array> g = compile(add_gelu)({random_array({10}, bfloat16), random_array({10}, bfloat16)});
  auto* c = dynamic_cast<const Compiled*>(g[0].primitive().get());
  ASSERT_NE(c, nullptr);
  const bool lanes = cpu::cpu_target() >= cpu::CpuTarget::avx512;
  EXPECT_EQ(cpu::codegen::kernel_source(*c, "cc").find("kv::gelu_approx(") != std::string::npos, lanes);
}

// ---- the branch-free 16-bit conversions equal dtype.h's ----

TEST(KernelMath, SixteenBitConversionsAreBitExact) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float a = cpu::simd::f16_to_float(static_cast<uint16_t>(h));
    float b = float16_t::to_float(static_cast<uint16_t>(h));
    ASSERT_EQ(std::bit_cast<uint32_t>(a), std::bit_cast<uint32_t>(b)) << "half " << h;
    ASSERT_EQ(std::bit_cast<uint32_t>(cpu::simd::bf16_to_float(static_cast<uint16_t>(h))),
              std::bit_cast<uint32_t>(bfloat16_t::to_float(static_cast<uint16_t>(h))));
  }
  auto check = [](uint32_t x) {
    float f = std::bit_cast<float>(x);
    ASSERT_EQ(cpu::simd::float_to_bf16(f), bfloat16_t::from_float(f)) << std::hex << x;
    ASSERT_EQ(cpu::simd::float_to_f16(f), float16_t::from_float(f)) << std::hex << x;
    // round_bf16 (the fused kernels' intermediate rounding) is the same round trip.
    ASSERT_EQ(std::bit_cast<uint32_t>(cpu::simd::round_bf16(f)),
              std::bit_cast<uint32_t>(bfloat16_t::to_float(bfloat16_t::from_float(f))))
        << std::hex << x;
  };
  // A prime stride over all floats, plus every rounding neighbourhood of
  // the boundaries (ties, subnormal halves, overflow, inf, NaN payloads).
  for (uint64_t x = 0; x < (1ull << 32); x += 4099) check(static_cast<uint32_t>(x));
  for (uint32_t base : {0x00000000u, 0x33000000u, 0x38800000u, 0x387fe000u, 0x477fe000u, 0x477ff000u, 0x7f800000u,
                        0x7f800001u, 0x7fc00000u, 0x3f808000u, 0x3f818000u, 0x3f800fffu, 0x3f801000u}) {
    for (uint32_t d = 0; d < 64; ++d) {
      for (uint32_t sign : {0u, 0x80000000u}) {
        check((base + d) | sign);
        check((base - d) | sign);
      }
    }
  }
}

}  // namespace
}  // namespace kiln::test
