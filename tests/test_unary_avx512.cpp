// The AVX-512 exp / sigmoid / silu / gelu_approx / tanh kernels (unary_avx512.cpp)
// give the scalar definitions' bits (the ones compile's generated kernels
// and strided layouts use): every bfloat16 input, and float32 inputs drawn
// over all bit patterns plus values where the functions bend, on both the
// AVX512-BF16 conversion and the integer one.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/op_functors.h"
#include "backend/cpu/simd_math.h"
#include "backend/cpu/unary_avx512.h"
#include "backend/cpu/vec_math_avx512.h"

namespace kiln {
namespace {

const UnaryOp kOps[] = {UnaryOp::exp, UnaryOp::sigmoid, UnaryOp::silu, UnaryOp::gelu_approx, UnaryOp::tanh};

float scalar(UnaryOp op, float x) {
  float y = 0;
  cpu::with_unary_op<float>(op, [&](auto f) { y = f(x); });
  return y;
}

bool avx512() { return cpu::cpu_target() >= cpu::CpuTarget::avx512; }

TEST(UnaryAvx512, EveryBfloat16InputMatchesTheScalarPath) {
  if (!avx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  // 65536 + 7 elements: a partial last vector and more than one block.
  std::vector<uint16_t> in(65536 + 7);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint16_t>(i * 40503u);
  for (UnaryOp op : kOps) {
    std::vector<uint16_t> want(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      want[i] = cpu::simd::float_to_bf16(scalar(op, cpu::simd::bf16_to_float(in[i])));
    }
    for (bool native : {false, true}) {
      if (native && cpu::cpu_target() < cpu::CpuTarget::avx512_bf16) continue;
      std::vector<uint16_t> got(in.size(), 0xdead);
      ASSERT_TRUE(cpu::unary_avx512(op, bfloat16, in.data(), got.data(), static_cast<int64_t>(in.size()), native));
      int bad = 0;
      for (size_t i = 0; i < in.size() && bad < 5; ++i) {
        if (got[i] != want[i]) {
          ++bad;
          ADD_FAILURE() << unary_op_name(op) << (native ? " (vcvtneps2bf16)" : " (integer rounding)") << " of bf16 0x"
                        << std::hex << in[i] << ": 0x" << got[i] << ", scalar 0x" << want[i];
        }
      }
    }
  }
}

TEST(UnaryAvx512, Float32MatchesTheScalarPath) {
  if (!avx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::mt19937 rng(7);
  const int64_t n = (1 << 22) + 13;
  std::vector<float> in(n);
  std::uniform_real_distribution<float> near(-12.0f, 12.0f);
  const float specials[] = {0.0f, -0.0f, 1e-45f, -1e-45f, 1e-38f, -1e-38f, 88.72f, 89.0f, -87.0f, -103.9f, -104.0f,
                            -150.0f, 1e30f, -1e30f, INFINITY, -INFINITY, NAN, -NAN};
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits = rng();
    if (i % 3 == 0) {
      in[i] = near(rng);
    } else if (i % 97 == 0) {
      in[i] = specials[(i / 97) % (sizeof(specials) / sizeof(float))];
    } else {
      std::memcpy(&in[i], &bits, 4);  // every exponent, NaN payloads, subnormals
    }
  }
  for (UnaryOp op : kOps) {
    std::vector<float> got(n);
    ASSERT_TRUE(cpu::unary_avx512(op, float32, in.data(), got.data(), n, false));
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 5; ++i) {
      const float want = scalar(op, in[i]);
      if (std::memcmp(&got[i], &want, 4) != 0) {
        ++bad;
        ADD_FAILURE() << unary_op_name(op) << " of " << in[i] << " (0x" << std::hex << std::bit_cast<uint32_t>(in[i])
                      << "): " << got[i] << " (0x" << std::bit_cast<uint32_t>(got[i]) << "), scalar " << want << " (0x"
                      << std::bit_cast<uint32_t>(want) << ")";
      }
    }
  }
}

// Float32 inputs for the 16-lane tests: every bit pattern class, values
// where the functions bend, and plain ones.
std::vector<float> mixed_inputs(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> near(-12.0f, 12.0f);
  const float specials[] = {0.0f,    -0.0f,   1e-45f,  -1e-45f, 1e-38f,      -1e-38f,     88.72f,
                            89.0f,   -87.0f,  -104.0f, -150.0f, 0.0004f,     -0.00039f,   9.0109138f,
                            -9.011f, 7.9053f, 1e30f,   -1e30f,  INFINITY,    -INFINITY,   NAN,
                            -NAN,    1.0f,    -1.0f,   2.0f,    1.00390625f, 1.01171875f, -3.0f};
  std::vector<float> in(n);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits = rng();
    if (i % 3 == 0)
      in[i] = near(rng);
    else if (i % 5 == 1)
      in[i] = specials[rng() % (sizeof(specials) / sizeof(float))];
    else
      std::memcpy(&in[i], &bits, 4);
  }
  return in;
}

::testing::AssertionResult same_bits(const std::vector<float>& got, const std::vector<float>& want,
                                     const std::string& what) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], 4) != 0) {
      char buf[64];
      std::snprintf(buf, sizeof buf, ": 0x%08x, scalar 0x%08x", std::bit_cast<uint32_t>(got[i]),
                    std::bit_cast<uint32_t>(want[i]));
      return ::testing::AssertionFailure() << what << " at " << i << buf;
    }
  }
  return ::testing::AssertionSuccess();
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq")
// f over 16 lanes of each input array, stored (lanes past n masked off).
template <typename F>
std::vector<float> lanes16(int64_t n, F f) {
  std::vector<float> out(n);
  for (int64_t i = 0; i < n; i += 16) _mm512_mask_storeu_ps(out.data() + i, cpu::vec::lanes(n - i), f(i));
  return out;
}

// Each 16-lane op (vec_math_avx512.inc) against its op_math.inc definition,
// and the bfloat16 rounding against kernel_math.inc's, bit for bit.
void check_vec_math() {
  const int64_t n = (1 << 18) + 5;
  const std::vector<float> x = mixed_inputs(n, 11), y = mixed_inputs(n, 12);
  auto at = [](const std::vector<float>& v, int64_t i) {
    return _mm512_maskz_loadu_ps(cpu::vec::lanes(static_cast<int64_t>(v.size()) - i), v.data() + i);
  };
  const std::pair<UnaryOp, __m512 (*)(__m512)> unary[] = {
      {UnaryOp::abs, cpu::vec::abs},       {UnaryOp::negative, cpu::vec::negative},
      {UnaryOp::square, cpu::vec::square}, {UnaryOp::sqrt, cpu::vec::sqrt},
      {UnaryOp::rsqrt, cpu::vec::rsqrt},   {UnaryOp::relu, cpu::vec::relu},
      {UnaryOp::exp, cpu::vec::exp},       {UnaryOp::sigmoid, cpu::vec::sigmoid},
      {UnaryOp::silu, cpu::vec::silu},     {UnaryOp::gelu_approx, cpu::vec::gelu_approx},
      {UnaryOp::tanh, cpu::vec::tanh}};
  for (auto [op, f] : unary) {
    std::vector<float> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = scalar(op, x[i]);
    EXPECT_TRUE(same_bits(lanes16(n, [&](int64_t i) { return f(at(x, i)); }), want, unary_op_name(op)));
  }
  const std::pair<BinaryOp, __m512 (*)(__m512, __m512)> binary[] = {
      {BinaryOp::add, cpu::vec::add},           {BinaryOp::subtract, cpu::vec::subtract},
      {BinaryOp::multiply, cpu::vec::multiply}, {BinaryOp::divide, cpu::vec::divide},
      {BinaryOp::maximum, cpu::vec::maximum},   {BinaryOp::minimum, cpu::vec::minimum}};
  for (auto [op, f] : binary) {
    std::vector<float> want(n);
    for (int64_t i = 0; i < n; ++i) {
      cpu::with_binary_op<float>(
          op, [&](auto g) { want[i] = g(x[i], y[i]); }, [](auto) {});
    }
    std::vector<float> got = lanes16(n, [&](int64_t i) { return f(at(x, i), at(y, i)); });
    // Two NaN operands: x86 returns the first source's NaN, and compilers
    // swap the operands of + and *, so which payload comes back is not
    // defined in scalar code either; a NaN it must be.
    for (int64_t i = 0; i < n; ++i) {
      if (std::isnan(x[i]) && std::isnan(y[i]) && std::isnan(got[i])) got[i] = want[i];
    }
    EXPECT_TRUE(same_bits(got, want, binary_op_name(op)));
  }
  std::vector<float> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = cpu::simd::round_bf16(x[i]);
  EXPECT_TRUE(same_bits(lanes16(n, [&](int64_t i) { return cpu::vec::round_bf16(at(x, i)); }), want, "round_bf16"));
  for (int64_t i = 0; i < n; ++i) want[i] = cpu::simd::bf16_to_float(cpu::simd::float_to_bf16(x[i]));
  auto stored = lanes16(n, [&](int64_t i) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(cpu::vec::to_bf16(at(x, i))), 16));
  });
  EXPECT_TRUE(same_bits(stored, want, "to_bf16"));
}
#pragma GCC pop_options

TEST(VecMathAvx512, EveryOpMatchesItsScalarDefinition) {
  if (!avx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  check_vec_math();
}

TEST(UnaryAvx512, OtherOpsAndDtypesAreLeftToTheCaller) {
  if (!avx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  float x = 1.0f, y = 0.0f;
  EXPECT_FALSE(cpu::unary_avx512(UnaryOp::erf, float32, &x, &y, 1, false));
  EXPECT_FALSE(cpu::unary_avx512(UnaryOp::exp, float16, &x, &y, 1, false));
  EXPECT_EQ(y, 0.0f);
}

}  // namespace
}  // namespace kiln
