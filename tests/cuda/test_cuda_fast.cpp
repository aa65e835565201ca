// The fast ops' GPU kernels (CTest label `cuda`): rms_norm, layer_norm and
// rope on Device::gpu against the CPU's fused kernels and against the GPU's
// own fallback graph, over the paths of src/backend/cuda/fast_norm.cu (a
// warp per row, a block per row with the row in registers, the re-reading
// loop for very wide rows, unaligned rows) and rope.cu (both layouts,
// int and per-batch offsets, custom frequencies, partial dims, and the
// 128-bit kernel of dims == D).
#include <gtest/gtest.h>

#include <memory>

#include "core/array_desc.h"
#include "core/primitives_fast_norm.h"
#include "kiln/kiln.h"
#include "kiln/kv_cache.h"
#include "test_layouts.h"
#include "test_util.h"

namespace kiln::test {
namespace {

class CudaFast : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!is_available(Device::gpu)) GTEST_SKIP() << "no GPU available for the cuda suite";
  }
};

array fallback_of(const array& y) {
  auto p = std::dynamic_pointer_cast<FastPrimitive>(y.primitive());
  EXPECT_TRUE(p);
  return p->fallback()(y.inputs())[0];
}

double tol_of(Dtype t) { return t == float32 ? 2e-5 : 3 * tolerance(t); }

TEST_F(CudaFast, NormsMatchCpuAndFallback) {
  // 7: unaligned (scalar loads); 96, 1024: a warp per row; 4096: a block
  // per row in registers; 40000: the re-reading loop.
  for (Dtype t : {float32, float16, bfloat16}) {
    for (int d : {1, 7, 96, 1024, 4096, 40000}) {
      for (Layout layout : {Layout::kContiguous, Layout::kTransposed}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " d " + std::to_string(d) + " " + layout_name(layout));
        array x = make_input({5, d}, layout, [&](const Shape& s) { return random_array(s, t); });
        array w = random_array({d}, t, 0.5, 1.5), b = random_array({d}, t);
        x.eval();
        const double tol = tol_of(t);
        for (int variant = 0; variant < 3; ++variant) {
          auto run = [&](Device dev) {
            if (variant == 0) return fast::rms_norm(x, w, 1e-5f, dev);
            if (variant == 1) return fast::rms_norm(x, std::nullopt, 1e-5f, dev);
            return fast::layer_norm(x, w, b, 1e-5f, dev);
          };
          array g = run(Device::gpu);
          array fb = fallback_of(g);  // before evaluation detaches g
          array c = run(Device::cpu);
          EXPECT_TRUE(all_close(g, to_double(c), tol, tol)) << "variant " << variant;
          EXPECT_TRUE(all_close(g, to_double(fb), 2 * tol, 2 * tol)) << "variant " << variant;
        }
      }
    }
  }
}

// add_rms_norm's fused kernel: h = x + r to the bit of the CPU's, the norm
// within the norms' tolerance, over the same kernel paths; in place where
// x and r are temporaries.
TEST_F(CudaFast, AddRmsNormMatchesCpu) {
  for (Dtype t : {float32, float16, bfloat16}) {
    for (int d : {1, 7, 96, 1024, 4096, 40000}) {
      for (Layout layout : {Layout::kContiguous, Layout::kTransposed}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " d " + std::to_string(d) + " " + layout_name(layout));
        array x = make_input({5, d}, layout, [&](const Shape& s) { return random_array(s, t); });
        array r = random_array({5, d}, t), w = random_array({d}, t, 0.5, 1.5);
        x.eval();
        r.eval();
        const double tol = tol_of(t);
        for (bool with_weight : {true, false}) {
          std::optional<array> ww;
          if (with_weight) ww = w;
          auto [hg, yg] = fast::add_rms_norm(x, r, ww, 1e-5f, Device::gpu);
          EXPECT_STREQ(yg.primitive()->name(), "AddRMSNorm");
          auto [hc, yc] = fast::add_rms_norm(x, r, ww, 1e-5f, Device::cpu);
          EXPECT_TRUE(all_close(hg, to_double(hc), 0, 0));
          EXPECT_TRUE(all_close(yg, to_double(yc), tol, tol));
        }
        // Inputs that are temporaries: h and y take their buffers.
        auto [hg, yg] = fast::add_rms_norm(x * array(1.0f, t), r * array(1.0f, t), w, 1e-5f, Device::gpu);
        auto [hc, yc] = fast::add_rms_norm(x, r, w, 1e-5f, Device::cpu);
        EXPECT_TRUE(all_close(hg, to_double(hc), 0, 0));
        EXPECT_TRUE(all_close(yg, to_double(yc), tol, tol));
      }
    }
  }
}

TEST_F(CudaFast, RopeMatchesCpuAndFallback) {
  struct Spec {
    int dims;
    bool traditional;
    bool per_batch;
    bool freqs;
  };
  for (Dtype t : {float32, float16, bfloat16}) {
    for (Spec sp : {Spec{8, false, false, false}, Spec{8, true, false, false}, Spec{6, false, true, false},
                    Spec{6, true, true, true}, Spec{128, false, false, false},
                    Spec{64, true, true, true}, Spec{64, false, true, true}}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " dims " + std::to_string(sp.dims) + (sp.traditional ? " trad" : ""));
      const int d = sp.dims >= 64 ? sp.dims : 9;  // dims == D: the 128-bit kernel
      // Heads in chunks of 4 with a partial last one (3, 9, 6 rows per position).
      for (const Shape& xs : {Shape{2, 3, 17, d}, Shape{2, 9, 5, d}, Shape{2, 2, 3, 7, d}}) {
        array x = random_array(xs, t);
        array off = sp.per_batch ? array({5, 300}, {2}) : array(7);
        std::optional<array> freqs;
        if (sp.freqs) freqs = random_array({sp.dims / 2}, float32, 1.0, 40.0);
        std::optional<float> base = sp.freqs ? std::nullopt : std::optional<float>(10000.0f);
        array g = fast::rope(x, sp.dims, sp.traditional, base, 1.0f, off, freqs, Device::gpu);
        array fb = fallback_of(g);  // before evaluation detaches g
        array c = fast::rope(x, sp.dims, sp.traditional, base, 1.0f, off, freqs, Device::cpu);
        const double tol = tol_of(t), atol = tol + 1e-4;  // float angles up to ~300 rad
        EXPECT_TRUE(all_close(g, to_double(c), tol, atol));
        EXPECT_TRUE(all_close(g, to_double(fb), 2 * tol, 2 * atol));
        // The fused backward is the inverse rotation.
        array back = vjp([&](const array& a) { return fast::rope(a, sp.dims, sp.traditional, base, 1.0f, off, freqs,
                                                                 Device::gpu); },
                         x, g).second;
        EXPECT_TRUE(all_close(back, to_double(x), 4 * tol, 4 * atol));
      }
    }
  }
}

// The KV cache on the GPU: the device buffer is updated in place (the same
// Buffer object after every step) and holds every token appended.
TEST_F(CudaFast, KVCacheAppendsInPlace) {
  StreamContext on_gpu(Device::gpu);
  nn::KVCache cache;
  std::vector<std::vector<double>> ks;
  const Buffer* first = nullptr;
  for (int step = 0; step < 100; ++step) {
    array k = random_array({1, 2, 1, 16}, bfloat16), v = random_array({1, 2, 1, 16}, bfloat16);
    ks.push_back(to_double(k));
    {
      auto [keys, values] = cache.update_and_fetch(k, v);
      eval(keys, values);
    }
    const Buffer* b = cache.key_buffer()->desc()->buffer.get();
    if (step == 0) first = b;
    EXPECT_EQ(b, first) << "the key buffer moved at step " << step;
  }
  std::vector<double> want;
  for (int h = 0; h < 2; ++h) {
    for (const auto& k : ks) want.insert(want.end(), k.begin() + h * 16, k.begin() + (h + 1) * 16);
  }
  EXPECT_TRUE(all_close(cache.keys_and_values().first, want, 0, 0));
}

}  // namespace
}  // namespace kiln::test
