// fast::scaled_dot_product_attention on the GPU (CTest label `cuda`): the
// decode (flash-decoding) and tensor-core prefill kernels against the CPU's
// fused kernel and a float64 evaluation of the plain-op fallback, across
// head dims, masks, GQA/MQA, sinks, odd lengths and strided inputs.
#include <gtest/gtest.h>

#if KILN_HAS_CUDA
#include "backend/cuda/cudnn_attention.h"
#endif
#include "core/primitives.h"
#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln::test {
namespace {

enum class Mask { kNone, kCausal, kBool, kAdditive };

struct Shape4 {
  int batch, hq, hkv, lq, lk, d;
};

class GpuAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!is_available(Device::gpu)) GTEST_SKIP() << "no GPU available for the cuda suite";
  }
};

// Runs the op on both devices with the same inputs; the GPU result must be
// the fused primitive and match the float64 fallback (and the CPU kernel).
// `given`: the boolean mask to use for Mask::kBool (else a random one).
void check(const Shape4& s, Dtype t, Mask mask, bool sinks = false, bool transposed = false,
           const std::optional<array>& given = std::nullopt) {
  std::ostringstream name;
  name << "B" << s.batch << " Hq" << s.hq << " Hkv" << s.hkv << " Lq" << s.lq << " Lk" << s.lk << " D" << s.d << " "
       << dtype_name(t) << " mask " << static_cast<int>(mask) << (sinks ? " sinks" : "") << (transposed ? " transposed" : "");
  SCOPED_TRACE(name.str());
  auto qkv = [&](int h, int l) {
    if (transposed) return swapaxes(random_array({s.batch, l, h, s.d}, t, -1, 1), 1, 2);
    return random_array({s.batch, h, l, s.d}, t, -1, 1);
  };
  array q = qkv(s.hq, s.lq), k = qkv(s.hkv, s.lk), v = qkv(s.hkv, s.lk);
  std::optional<array> m, sk;
  std::string mode;
  if (mask == Mask::kCausal) mode = "causal";
  if (mask == Mask::kBool) m = given ? *given : random_array({s.lq, s.lk}, float32, 0, 1) < array(0.8f);
  if (mask == Mask::kAdditive) m = random_array({s.batch, s.hq, s.lq, s.lk}, t, -3, 1);
  if (sinks) sk = random_array({s.hq}, t, -1, 2);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
  array gpu = fast::scaled_dot_product_attention(q, k, v, scale, mode, m, sk, false, Device::gpu);
  ASSERT_STREQ(gpu.primitive()->name(), "ScaledDotProductAttention");
  array cpu = fast::scaled_dot_product_attention(q, k, v, scale, mode, m, sk, false, Device::cpu);
  auto f64 = [](const std::optional<array>& a) -> std::optional<array> {
    if (!a) return a;
    return a->dtype() == bool_ ? *a : astype(*a, float64);
  };
  array ref = fast::scaled_dot_product_attention(astype(q, float64), astype(k, float64), astype(v, float64), scale, mode,
                                                 f64(m), f64(sk), false, Device::cpu);
  const double atol = t == float32 ? 1e-4 : t == float16 ? 3e-3 : 2e-2;
  std::vector<double> want = to_double(ref);
  EXPECT_TRUE(all_close(gpu, want, 1e-2, atol));
  EXPECT_TRUE(all_close(gpu, to_double(cpu), 1e-2, atol));
}

TEST_F(GpuAttention, DecodeAcrossHeadDimsDtypesAndMasks) {
  for (int d : {64, 80, 96, 128, 256}) {
    for (Dtype t : {float32, float16, bfloat16}) {
      check({1, 32, 8, 1, 1000, d}, t, Mask::kNone);
      check({2, 4, 4, 1, 17, d}, t, Mask::kCausal);
      check({1, 8, 1, 2, 333, d}, t, Mask::kBool);  // MQA, 16 rows
      check({1, 4, 2, 3, 129, d}, t, Mask::kAdditive, true);
    }
  }
  for (int lk : {1, 17, 2048, 2049, 4096, 32768}) check({1, 32, 8, 1, lk, 128}, bfloat16, Mask::kNone);
  check({2, 8, 2, 1, 555, 128}, bfloat16, Mask::kNone, true, true);  // strided q/k/v
}

// The compiled decode step's mask: slots up to a position visible, the rest
// of the buffer hidden, so the decode kernels skip the splits past it
// (split_hidden). Fully hidden rows average V; sinks; per-batch positions.
TEST_F(GpuAttention, DecodeSkipsSplitsAKeyMaskHides) {
  for (Dtype t : {float32, bfloat16, float16}) {
    for (int lk : {300, 4096}) {
      const array slots = arange(0, lk, 1);
      for (int pos : {0, 5, 130, lk / 2, lk - 1, -1}) {
        const array visible = less_equal(slots, array(pos, int32));  // pos -1: nothing visible
        check({1, 32, 8, 1, lk, 128}, t, Mask::kBool, false, false, visible);
        check({1, 4, 2, 1, lk, 64}, t, Mask::kBool, true, false, visible);
      }
      // Batch 2 with its own positions ([B, 1, 1, lk]).
      const array per_batch = reshape(less_equal(reshape(slots, {1, lk}), array({7, lk - 3}, {2, 1})), {2, 1, 1, lk});
      check({2, 32, 8, 1, lk, 128}, t, Mask::kBool, false, false, per_batch);
    }
  }
}

TEST_F(GpuAttention, PrefillAcrossHeadDimsAndMasks) {
  for (int d : {64, 80, 96, 128, 256}) {
    for (Dtype t : {float16, bfloat16}) {
      check({1, 4, 4, 64, 64, d}, t, Mask::kNone);
      check({1, 4, 2, 100, 100, d}, t, Mask::kCausal);  // odd length, GQA
      check({2, 2, 1, 37, 200, d}, t, Mask::kCausal);   // q shorter than k
      check({1, 2, 2, 70, 45, d}, t, Mask::kBool, true);
      check({1, 2, 2, 65, 130, d}, t, Mask::kAdditive);
    }
  }
  check({1, 8, 2, 300, 300, 128}, bfloat16, Mask::kCausal, false, true);  // strided
  check({1, 2, 2, 80, 50, 64}, float16, Mask::kCausal);                   // rows that see no key
  check({1, 32, 8, 1024, 1024, 128}, bfloat16, Mask::kCausal);
}

// cuDNN's fused attention (cudnn_attention.cpp) takes a 16-bit prefill shape
// from its second request on: each shape runs twice, with new data, both
// results checked. Where libcudnn.so.9 is present the second runs must
// have gone through it.
TEST_F(GpuAttention, RepeatedPrefillShapesThroughCudnn) {
#if KILN_HAS_CUDA
  const uint64_t before = cuda::cudnn_sdpa_runs();
#endif
  int shapes = 0;
  auto twice = [&](const Shape4& s, Dtype t, Mask mask, bool transposed = false) {
    check(s, t, mask, false, transposed);
    check(s, t, mask, false, transposed);
    ++shapes;
  };
  for (int d : {64, 80, 96, 128, 256}) {
    for (Dtype t : {float16, bfloat16}) {
      twice({1, 4, 4, 64, 64, d}, t, Mask::kNone);
      twice({1, 4, 2, 100, 100, d}, t, Mask::kCausal);  // odd length, GQA, top-left = bottom-right
      twice({2, 2, 1, 37, 200, d}, t, Mask::kCausal);   // q shorter than k: bottom-right, MQA
    }
  }
  twice({1, 8, 2, 300, 300, 128}, bfloat16, Mask::kCausal, true);  // strided (BSHD) q/k/v
  twice({1, 8, 2, 129, 333, 128}, float16, Mask::kNone, true);
  twice({1, 32, 8, 1024, 1024, 128}, bfloat16, Mask::kCausal);
#if KILN_HAS_CUDA
  if (cuda::cudnn_sdpa_loaded()) {
    // At least the second run of each (shapes an earlier test ran take
    // cuDNN on both).
    EXPECT_GE(cuda::cudnn_sdpa_runs() - before, static_cast<uint64_t>(shapes));
  } else {
    std::printf("libcudnn.so.9 not loaded: the prefill kernel ran every shape\n");
  }
#endif
}

// Inside CUDA graphs: the first capture runs Kiln's kernel, the second
// request throws under capture (the plan is built outside it, the batch
// runs eagerly), later captures replay cuDNN's kernel. Every step's result
// is checked.
TEST_F(GpuAttention, CudnnPrefillInsideCapturedBatches) {
  const Shape4 s{1, 8, 2, 192, 256, 64};
#if KILN_HAS_CUDA
  const uint64_t before = cuda::cudnn_sdpa_runs();
#endif
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    array q = random_array({s.batch, s.hq, s.lq, s.d}, bfloat16, -1, 1);
    array k = random_array({s.batch, s.hkv, s.lk, s.d}, bfloat16, -1, 1);
    array v = random_array({s.batch, s.hkv, s.lk, s.d}, bfloat16, -1, 1);
    // Several nodes, so that the batch is captured into a graph.
    auto run = [&](Device dev) {
      array qs = multiply(q, array(2.0f, bfloat16), dev);
      array o = fast::scaled_dot_product_attention(qs, k, v, 0.0625f, "causal", {}, {}, false, dev);
      return add(o, array(1.0f, bfloat16), dev);
    };
    array gpu = run(Device::gpu), cpu = run(Device::cpu);
    EXPECT_TRUE(all_close(gpu, to_double(cpu), 1e-2, 2e-2));
  }
#if KILN_HAS_CUDA
  if (cuda::cudnn_sdpa_loaded()) EXPECT_GE(cuda::cudnn_sdpa_runs() - before, 3u);
#endif
}

TEST_F(GpuAttention, Float32PrefillUsesTheFallback) {
  array q = random_array({1, 2, 40, 64}), k = random_array({1, 2, 40, 64});
  array out = fast::scaled_dot_product_attention(q, k, k, 0.125f, "causal", {}, {}, false, Device::gpu);
  EXPECT_STRNE(out.primitive()->name(), "ScaledDotProductAttention");
  array cpu = fast::scaled_dot_product_attention(q, k, k, 0.125f, "causal", {}, {}, false, Device::cpu);
  EXPECT_TRUE(all_close(out, to_double(cpu), 1e-3, 1e-4));
}

}  // namespace
}  // namespace kiln::test
