// llama.cpp block formats on the GPU (src/backend/cuda/quant_blocks.cu)
// against the CPU: decoding and the 32-weight formats' encoding bit for bit
// (both sides round every product and sum on their own), the K formats'
// encoding too (the .cu is compiled with --fmad=false, like the CPU file
// with -ffp-contract=off), and quantized_matmul for 1..8 rows (QMV) and more
// (dequantize + cuBLASLt), on rows whose bytes are and are not a multiple
// of 16 (the kernel's 16-byte staging and its byte-wise fallback).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/block_format.h"
#include "core/primitives.h"
#include "core/quantize_blocks.h"
#include "kiln/kiln.h"
#include "quant_blocks_ref.h"
#include "test_util.h"

#ifdef KILN_HAS_CUDA
namespace kiln::cuda {
void set_qmv_bulk_override(int on);  // quantized_qmv.cuh (a CUDA header)
}
#endif

namespace kiln::test {
namespace {

// Which one-row QMV kernel the GPU takes (1: the bulk-copy one, 0: the
// others, -1: as KILN_QMV_BULK says); nothing to choose in a build without
// the CUDA backend, where these tests skip.
void use_bulk_qmv(int on) {
#ifdef KILN_HAS_CUDA
  cuda::set_qmv_bulk_override(on);
#else
  (void)on;
#endif
}

const std::vector<std::string> kModes = {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0",
                                         "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"};

const BlockLayout& layout(const std::string& mode) {
  for (const auto& l : kBlockLayouts) {
    if (mode == l.name) return l;
  }
  throw std::runtime_error(mode);
}

class GpuBlocks : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!is_available(Device::gpu)) GTEST_SKIP() << "no GPU available for the cuda suite";
  }
  // The GPU multiplies x as it is: the CPU side too (its default 8-bit
  // rounding of x is checked against the GPU within its bound by the op
  // harness's gpu check).
  CpuBlockXExact exact_x_;
};

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST_F(GpuBlocks, DequantizeBitForBit) {
  for (const auto& mode : kModes) {
    SCOPED_TRACE(mode);
    const BlockLayout& l = layout(mode);
    // Random bytes: the fp16 scales include infinities, NaNs and subnormals.
    std::vector<uint8_t> bytes(5 * 9 * l.bytes);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng()());
    array w(bytes, {5, 9 * l.bytes}, uint8);
    array c = detail::block_dequantize(w, mode, float32, Device::cpu);
    array g = detail::block_dequantize(w, mode, float32, Device::gpu);
    eval(c, g);
    const float* pc = c.data<float>();
    const float* pg = g.data<float>();
    for (size_t i = 0; i < c.size(); ++i) {
      bool same = (std::isnan(pc[i]) && std::isnan(pg[i])) || bits_of(pc[i]) == bits_of(pg[i]);
      ASSERT_TRUE(same) << "element " << i << ": cpu " << pc[i] << ", gpu " << pg[i];
    }
    array gb = detail::block_dequantize(w, mode, bfloat16, Device::gpu);
    EXPECT_TRUE(all_close(gb, to_double(astype(c, bfloat16)), 0.0));
  }
}

TEST_F(GpuBlocks, QuantizeSameBytes) {
  for (const auto& mode : kModes) {
    SCOPED_TRACE(mode);
    array x = random_array({6, 512}, float32, -3, 3);
    array c = detail::block_quantize(x, mode, Device::cpu)[0];
    array g = detail::block_quantize(x, mode, Device::gpu)[0];
    eval(c, g);
    ASSERT_EQ(c.nbytes(), g.nbytes());
    EXPECT_EQ(std::memcmp(c.data<uint8_t>(), g.data<uint8_t>(), c.nbytes()), 0);
  }
}

// |gpu - cpu| <= tol * max |cpu| element by element: relative to the
// products' scale (sums of sqrt(K) |x| |w| terms cancel).
void expect_near_scaled(const array& gpu, const array& cpu, double tol) {
  std::vector<double> cd = to_double(cpu), gd = to_double(gpu);
  ASSERT_EQ(cd.size(), gd.size());
  double scale = 0;
  for (double v : cd) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < cd.size(); ++i) ASSERT_NEAR(gd[i], cd[i], tol * scale) << "element " << i;
}

TEST_F(GpuBlocks, MatmulAgainstCpu) {
  for (const auto& mode : kModes) {
    const BlockLayout& l = layout(mode);
    // 16-byte-multiple rows (staged with 16-byte loads) and odd ones.
    for (int blocks : {l.block == 32 ? 200 : 24, 3}) {
      int k = blocks * l.block;
      array w = detail::block_quantize(random_array({67, k}), mode, Device::cpu)[0];
      for (int m : {1, 2, 3, 5, 8, 11, 20}) {
        for (Dtype t : {float32, bfloat16}) {
          SCOPED_TRACE(mode + " K=" + std::to_string(k) + " M=" + std::to_string(m) + " " + dtype_name(t));
          array x = astype(random_array({m, k}), t);
          array c = detail::block_quantized_matmul(astype(x, float32), w, true, mode, Device::cpu);
          array g = detail::block_quantized_matmul(x, w, true, mode, Device::gpu);
          EXPECT_EQ(g.dtype(), t);
          expect_near_scaled(g, c, t == float32 ? 1e-5 : 1e-2);
        }
      }
    }
  }
}

// 1 to 8 rows of x in bf16 / fp16 take the tensor-core kernels of
// quant_blocks_qmv.cu for Q4_K, Q4_0 and Q8_0: 4 warps on K = 4096, 8 on
// K = 12288; 37 rows leave a partial 16-row tile. M = 8 runs as one launch
// (or as two passes of 4 where x does not fit in shared memory), 3 and 6
// leave unused columns of the mma, 2 is a pass of 2.
TEST_F(GpuBlocks, DecodeOnLongRows) {
  for (std::string mode : {"q4_k", "q4_0", "q8_0"}) {
    for (int k : {4096, 12288}) {
      array w = detail::block_quantize(random_array({37, k}), mode, Device::cpu)[0];
      for (auto [t, m] : {std::pair{bfloat16, 1}, {float16, 1}, {bfloat16, 2}, {bfloat16, 3}, {float16, 6},
                          {bfloat16, 8}}) {
        SCOPED_TRACE(mode + " K=" + std::to_string(k) + " M=" + std::to_string(m) + " " + dtype_name(t));
        array x = astype(random_array({m, k}), t);
        array c = detail::block_quantized_matmul(astype(x, float32), w, true, mode, Device::cpu);
        array g = detail::block_quantized_matmul(x, w, true, mode, Device::gpu);
        EXPECT_EQ(g.dtype(), t);
        expect_near_scaled(g, c, 1e-2);
      }
    }
  }
}

// One row of x rounded to 8 bits (the default: quant_blocks_qmv_i8.cu, the
// bulk-copy kernel, or with KILN_QMV_BULK=0 the register-pipelined one)
// against the CPU's rounding: the same codes and exact integer sums on both
// sides, so only the float32 order of the per-block terms differs. Shapes
// that take each lanes-per-row choice (K / 256 items per row: 1 with lanes
// idle, 8, 16, 56 with a partial second round), rows fewer than the SMs,
// CTAs whose rows take several chunks and more chunks than stages.
// x holds an all-zero block and, in one case, an infinity (its row is NaN).
TEST_F(GpuBlocks, DecodeWithXRoundedTo8Bits) {
  cpu::set_block_x_int8_override(1);
  struct Case {
    std::string mode;
    int n, k;
  };
  const std::vector<Case> cases = {{"q4_0", 37, 256},    {"q4_0", 37, 4096},  {"q4_0", 6001, 4096},
                                   {"q4_0", 20003, 2048}, {"q4_0", 129, 14336}, {"q8_0", 37, 8192},
                                   {"q8_0", 6001, 4096}, {"q8_0", 45, 14336}, {"q4_k", 37, 4096},
                                   {"q4_k", 6001, 4096}, {"q4_k", 45, 14336}, {"q4_k", 37, 768}};
  for (const Case& cs : cases) {
    array w = detail::block_quantize(random_array({cs.n, cs.k}), cs.mode, Device::cpu)[0];
    for (int bulk : {1, 0})
      for (Dtype t : {float32, bfloat16, float16}) {
        use_bulk_qmv(bulk);
        SCOPED_TRACE(cs.mode + " N=" + std::to_string(cs.n) + " K=" + std::to_string(cs.k) + " " + dtype_name(t) +
                     (bulk ? " bulk" : " registers"));
        const std::vector<double> xd = to_double(random_array({1, cs.k}));
        std::vector<float> xv(xd.begin(), xd.end());
        for (int i = 32; i < 64; ++i) xv[i] = 0.f;  // an all-zero block: d = 0
        array x = astype(array(xv, {1, cs.k}), t);
        array c = detail::block_quantized_matmul(astype(x, float32), w, true, cs.mode, Device::cpu);
        array g = detail::block_quantized_matmul(x, w, true, cs.mode, Device::gpu);
        EXPECT_EQ(g.dtype(), t);
        expect_near_scaled(g, c, t == float32 ? 1e-5 : 1e-2);
      }
  }
  use_bulk_qmv(-1);
  const std::vector<double> xd = to_double(random_array({1, 4096}));
  std::vector<float> xv(xd.begin(), xd.end());
  xv[100] = INFINITY;
  array w = detail::block_quantize(random_array({40, 4096}), "q4_k", Device::cpu)[0];
  array g = detail::block_quantized_matmul(astype(array(xv, {1, 4096}), bfloat16), w, true, "q4_k", Device::gpu);
  for (double v : to_double(g)) EXPECT_TRUE(std::isnan(v));
}

TEST_F(GpuBlocks, StridedBatchedX) {
  array w = detail::block_quantize(random_array({33, 512}), "q4_k", Device::cpu)[0];
  array x = transpose(random_array({512, 6}));
  array xb = random_array({2, 3, 512});
  for (const array& xi : {x, xb}) {
    array c = detail::block_quantized_matmul(xi, w, true, "q4_k", Device::cpu);
    array g = detail::block_quantized_matmul(xi, w, true, "q4_k", Device::gpu);
    EXPECT_TRUE(all_close(g, to_double(c), 1e-4, 1e-4));
  }
}

// fast::swiglu_quantized_matmul and fast::add_rms_norm_quantized_matmul
// build one FusedBlockQMV node on the GPU, whose kernel computes x as it
// rounds it: bit for bit the ops it stands for on the GPU (the same x, the
// same product), through the bulk kernel, the other kernels (x computed by
// one block first) and x kept in float. gate / up are halves of one row,
// as the decode step slices them; the norm's rows are 256 and 512 vectors.
TEST_F(GpuBlocks, FusedProloguesGiveTheOpsBitForBit) {
  auto same_bits = [](const array& a, const array& b) {
    eval(a, b);
    const array ab = astype(a, float32), bb = astype(b, float32);
    eval(ab, bb);
    ASSERT_EQ(ab.size(), bb.size());
    const float* pa = ab.data<float>();
    const float* pb = bb.data<float>();
    for (size_t i = 0; i < ab.size(); ++i) {
      ASSERT_TRUE(bits_of(pa[i]) == bits_of(pb[i]) || (std::isnan(pa[i]) && std::isnan(pb[i])))
          << "element " << i << ": " << pa[i] << " vs " << pb[i];
    }
  };
  auto fused = [](const array& y) {
    return y.has_primitive() && std::string(y.primitive()->name()) == "FusedBlockQMV";
  };
  const Device g = Device::gpu;
  detail::set_fused_qmv_override(1);  // whatever KILN_FUSED_QMV says
  for (std::string mode : {"q4_0", "q8_0", "q4_k"}) {
    for (auto [n, k] : {std::pair{37, 2048}, {6001, 4096}, {45, 14336}}) {
      array w = detail::block_quantize(random_array({n, k}), mode, Device::cpu)[0];
      array nw = random_array({k}, float32, 0.5, 1.5);
      for (int x8 : {1, 0})
        for (int bulk : {1, 0})
          for (Dtype t : {float32, bfloat16, float16}) {
            cpu::set_block_x_int8_override(x8);
            use_bulk_qmv(bulk);
            SCOPED_TRACE(mode + " N=" + std::to_string(n) + " K=" + std::to_string(k) + " " + dtype_name(t) +
                         (bulk ? " bulk" : " others") + (x8 ? " x8" : " xfloat"));
            array gu = astype(random_array({1, 1, 2 * k}, float32, -4, 4), t);
            array gate = slice(gu, {0, 0, 0}, {1, 1, k}), up = slice(gu, {0, 0, k}, {1, 1, 2 * k});
            array y = fast::swiglu_quantized_matmul(gate, up, w, array({}), std::nullopt, true, std::nullopt,
                                                    std::nullopt, mode, g);
            EXPECT_TRUE(fused(y));
            array ref = quantized_matmul(multiply(silu(gate, g), up, g), w, array({}), std::nullopt, true, std::nullopt,
                                         std::nullopt, mode, g);
            same_bits(y, ref);
            const int vec = k / (16 / static_cast<int>(size_of(t)));
            if (vec < 256 || vec > 2048) continue;  // the norm's sizes
            array x = astype(random_array({1, 1, k}), t), r = astype(random_array({1, 1, k}), t);
            array wt = astype(nw, t);
            auto [h, yn] = fast::add_rms_norm_quantized_matmul(x, r, wt, 1e-5f, w, array({}), std::nullopt, true,
                                                               std::nullopt, std::nullopt, mode, g);
            EXPECT_TRUE(fused(yn));
            auto [h_ref, x_ref] = fast::add_rms_norm(x, r, wt, 1e-5f, g);
            same_bits(h, h_ref);
            same_bits(yn,
                      quantized_matmul(x_ref, w, array({}), std::nullopt, true, std::nullopt, std::nullopt, mode, g));
          }
    }
  }
  use_bulk_qmv(-1);
  cpu::set_block_x_int8_override(-1);
  // Where it does not apply (two rows, q6_k, a norm row of 128 vectors) the ops build the plain graph.
  array w = detail::block_quantize(random_array({8, 1024}), "q6_k", Device::cpu)[0];
  array two = astype(random_array({2, 1024}), bfloat16);
  EXPECT_FALSE(fused(fast::swiglu_quantized_matmul(two, two, w, array({}), std::nullopt, true, std::nullopt,
                                                   std::nullopt, "q6_k", g)));
  array w4 = detail::block_quantize(random_array({8, 1024}), "q4_k", Device::cpu)[0];
  array one = astype(random_array({1, 1024}), bfloat16);
  EXPECT_FALSE(fused(fast::add_rms_norm_quantized_matmul(one, one, ones({1024}, bfloat16), 1e-5f, w4, array({}),
                                                         std::nullopt, true, std::nullopt, std::nullopt, "q4_k", g)
                         .second));
  detail::set_fused_qmv_override(-1);
}

}  // namespace
}  // namespace kiln::test
