// The AVX-512 exp / sigmoid / silu / gelu_approx kernels (unary_avx512.cpp)
// give the scalar definitions' bits (the ones compile's generated kernels
// and strided layouts use): every bfloat16 input, and float32 inputs drawn
// over all bit patterns plus values where the functions bend, on both the
// AVX512-BF16 conversion and the integer one.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/op_functors.h"
#include "backend/cpu/simd_math.h"
#include "backend/cpu/unary_avx512.h"

namespace kiln {
namespace {

const UnaryOp kOps[] = {UnaryOp::exp, UnaryOp::sigmoid, UnaryOp::silu, UnaryOp::gelu_approx};

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
      float want = scalar(op, in[i]);
      if (std::memcmp(&got[i], &want, 4) != 0) {
        ++bad;
        ADD_FAILURE() << unary_op_name(op) << " of " << in[i] << " (0x" << std::hex << std::bit_cast<uint32_t>(in[i])
                      << "): " << got[i] << " (0x" << std::bit_cast<uint32_t>(got[i]) << "), scalar " << want << " (0x"
                      << std::bit_cast<uint32_t>(want) << ")";
      }
    }
  }
}

TEST(UnaryAvx512, OtherOpsAndDtypesAreLeftToTheCaller) {
  if (!avx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  float x = 1.0f, y = 0.0f;
  EXPECT_FALSE(cpu::unary_avx512(UnaryOp::tanh, float32, &x, &y, 1, false));
  EXPECT_FALSE(cpu::unary_avx512(UnaryOp::exp, float16, &x, &y, 1, false));
  EXPECT_EQ(y, 0.0f);
}

}  // namespace
}  // namespace kiln
