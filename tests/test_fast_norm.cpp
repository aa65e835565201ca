// fast::rms_norm, fast::layer_norm and fast::rope: the fused kernels against
// a float64 loop and against their own fallback, on every float dtype, odd
// widths, every input layout, broadcast weights, rope's offsets, custom
// frequencies and both layouts; the fused backward of rope; the errors.
#include <cmath>
#include <memory>
#include <vector>

#include "backend/cpu/copy.h"
#include "backend/cpu/cpu_features.h"
#include "core/primitives_fast_norm.h"
#include "kiln/fast.h"
#include "test_layouts.h"
#include "test_util.h"

namespace kiln::test {
namespace {

constexpr Dtype kFloatTypes[] = {float32, float16, bfloat16, float64};
constexpr double kEps = static_cast<double>(1e-5f);  // the ops take eps as a float

// The fallback graph of a fast op's node, on the node's own inputs (call it
// before evaluating the node: evaluation detaches it from its primitive).
array fallback_of(const array& y) {
  auto p = std::dynamic_pointer_cast<FastPrimitive>(y.primitive());
  EXPECT_TRUE(p) << "not a fast node: " << y.primitive()->name();
  return p->fallback()(y.inputs())[0];
}

std::vector<double> rms_ref(const std::vector<double>& x, const std::vector<double>* w, int64_t d, double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / d; ++r) {
    double ss = 0;
    for (int64_t k = 0; k < d; ++k) ss += x[r * d + k] * x[r * d + k];
    const double inv = 1.0 / std::sqrt(ss / d + eps);
    for (int64_t k = 0; k < d; ++k) y[r * d + k] = x[r * d + k] * inv * (w ? (*w)[k] : 1.0);
  }
  return y;
}

std::vector<double> layer_ref(const std::vector<double>& x, const std::vector<double>* w,
                              const std::vector<double>* b, int64_t d, double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / d; ++r) {
    double m = 0, v = 0;
    for (int64_t k = 0; k < d; ++k) m += x[r * d + k];
    m /= d;
    for (int64_t k = 0; k < d; ++k) v += (x[r * d + k] - m) * (x[r * d + k] - m);
    const double inv = 1.0 / std::sqrt(v / d + eps);
    for (int64_t k = 0; k < d; ++k) {
      y[r * d + k] = (x[r * d + k] - m) * inv * (w ? (*w)[k] : 1.0) + (b ? (*b)[k] : 0.0);
    }
  }
  return y;
}

// Tolerance of a normalized output (values of order 1; the 16-bit types
// round the normalized value and the weighted one).
double norm_tol(Dtype t) { return t == float64 ? 1e-12 : t == float32 ? 2e-5 : 3 * tolerance(t); }

TEST(FastNorm, RmsNormMatchesReferenceAndFallback) {
  for (Dtype t : kFloatTypes) {
    for (int d : {1, 7, 64, 513, 4097}) {
      for (Layout layout : kLayouts) {
        for (bool with_weight : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(t)) + " d " + std::to_string(d) + " " + layout_name(layout) +
                       (with_weight ? " weight" : ""));
          array x = make_input({3, d}, layout, [&](const Shape& s) { return random_array(s, t); });
          array w = random_array({d}, t, 0.5, 1.5);
          array y = fast::rms_norm(x, with_weight ? std::optional<array>(w) : std::nullopt, 1e-5f);
          // The node's fallback, taken before evaluation detaches the node.
          std::optional<array> fb;
          if (t != float64) {
            EXPECT_STREQ(y.primitive()->name(), "RMSNorm");
            fb = fallback_of(y);
          }
          std::vector<double> wv = to_double(w);
          auto want = rms_ref(to_double(x), with_weight ? &wv : nullptr, d, kEps);
          const double tol = norm_tol(t);
          EXPECT_TRUE(all_close(y, want, tol, tol));
          EXPECT_EQ(y.dtype(), t);
          if (fb) EXPECT_TRUE(all_close(y, to_double(*fb), tol, tol));
        }
      }
    }
  }
}

TEST(FastNorm, LayerNormMatchesReferenceAndFallback) {
  for (Dtype t : kFloatTypes) {
    for (int d : {1, 7, 64, 513, 4097}) {
      for (Layout layout : kLayouts) {
        for (int affine = 0; affine < 4; ++affine) {
          const bool with_w = affine & 1, with_b = affine & 2;
          SCOPED_TRACE(std::string(dtype_name(t)) + " d " + std::to_string(d) + " " + layout_name(layout) +
                       " affine " + std::to_string(affine));
          array x = make_input({3, d}, layout, [&](const Shape& s) { return random_array(s, t); });
          array w = random_array({d}, t, 0.5, 1.5), b = random_array({d}, t);
          array y = fast::layer_norm(x, with_w ? std::optional<array>(w) : std::nullopt,
                                     with_b ? std::optional<array>(b) : std::nullopt, 1e-5f);
          std::optional<array> fb;
          if (t != float64) {
            EXPECT_STREQ(y.primitive()->name(), "LayerNorm");
            fb = fallback_of(y);
          }
          std::vector<double> wv = to_double(w), bv = to_double(b);
          auto want = layer_ref(to_double(x), with_w ? &wv : nullptr, with_b ? &bv : nullptr, d, kEps);
          // A width-1 row is all mean: 0 * rsqrt(eps), exactly.
          const double tol = norm_tol(t) * 2;
          EXPECT_TRUE(all_close(y, want, tol, tol));
          if (fb) EXPECT_TRUE(all_close(y, to_double(*fb), tol, tol));
        }
      }
    }
  }
}

// Rows whose mean is far from zero: a variance from plain sums of x and
// x^2 would cancel to noise in float32.
// The written-out AVX-512 kernels (with and without AVX512-BF16) agree bit
// for bit, with odd widths (vector tails), weights, biases and a denormal
// input; the portable loops are left to the compiler (GCC contracts
// multiplies into adds there depending on the build: v * w + b becomes a
// fused multiply-add, while the AVX-512 kernel rounds the product first, as
// the fallback's separate ops do), so they are within an ulp of them.
TEST(FastNorm, EveryKernelLevelGivesTheSameBits) {
  for (Dtype t : {float32, bfloat16, float16}) {
    for (int d : {7, 37, 4099}) {
      array x = astype(random_array({9, d}), t);
      if (t == bfloat16) x = where(arange(d) == array(3), array(1e-39f, t), x);  // a denormal bf16 value
      array w = astype(random_array({d}), t), b = astype(random_array({d}), t);
      std::vector<std::vector<double>> first;
      for (auto level : {cpu::CpuTarget::scalar, cpu::CpuTarget::avx2, cpu::CpuTarget::avx512,
                         cpu::CpuTarget::avx512_bf16}) {
        cpu::set_cpu_target_override(level);
        std::vector<array> ys = {fast::rms_norm(x, w, 1e-5f), fast::rms_norm(x, std::nullopt, 1e-5f),
                                 fast::layer_norm(x, w, b, 1e-5f), fast::layer_norm(x, std::nullopt, std::nullopt, 1e-5f)};
        std::vector<std::vector<double>> vals;
        for (auto& y : ys) vals.push_back(to_double(y));
        cpu::clear_cpu_target_override();
        if (first.empty()) {
          first = vals;
          continue;
        }
        const bool portable_first = level == cpu::CpuTarget::avx512;  // first is the portable loop's
        for (size_t k = 0; k < vals.size(); ++k) {
          const double ulp = t == float32 ? 1.2e-7 : t == bfloat16 ? 7.9e-3 : 9.8e-4;
          const double tol = portable_first ? 2 * ulp : 0.0;
          for (size_t i = 0; i < vals[k].size(); ++i)
            ASSERT_LE(std::fabs(vals[k][i] - first[k][i]), tol * (4.0 + std::fabs(first[k][i])))
                << dtype_name(t) << " d " << d << " output " << k << " element " << i << " level "
                << cpu::cpu_target_name(level);
        }
        if (portable_first) first = vals;  // the AVX-512 levels agree bit for bit
      }
    }
  }
}

// float32 and bfloat16 outputs larger than the last-level cache are written
// with streaming stores (fast_norm.cpp, forced here through the threshold;
// bfloat16 two vectors to a line through vcvtne2ps2bf16 where the CPU has
// it): the same bits as normal stores; 4099 columns leave rows that start
// off the 64-byte alignment the streamed stores need, and a tail per row.
// Weights of 1e-39 put denormal outputs in some lines (the instruction reads
// denormals as zero; such lines take the integer rounding).
TEST(FastNorm, StreamedOutputsGiveTheSameBits) {
  const int rows = 37;
  for (Dtype t : {float32, bfloat16}) {
    for (int d : {4099, 4096}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " d " + std::to_string(d));
      array x = random_array({rows, d}, t);
      std::vector<float> wv(static_cast<size_t>(d), 0.75f);
      for (int k = 5; k < d; k += 97) wv[static_cast<size_t>(k)] = 1e-39f;
      array w(wv, {d}, t);
      array b = random_array({d}, t);
      std::vector<std::vector<double>> got[2];
      for (int streamed = 0; streamed < 2; ++streamed) {
        cpu::set_streaming_threshold(streamed ? 0 : SIZE_MAX);
        for (const array& y : {fast::rms_norm(x, w, 1e-5f), fast::layer_norm(x, w, b, 1e-5f),
                               fast::rms_norm(x, std::nullopt, 1e-5f)})
          got[streamed].push_back(to_double(y));
      }
      cpu::set_streaming_threshold(SIZE_MAX);
      for (size_t k = 0; k < got[0].size(); ++k) EXPECT_EQ(got[0][k], got[1][k]) << "output " << k;
      // The denormal outputs are there to be checked.
      int denormal = 0;
      for (double v : got[1][0]) denormal += v != 0 && std::fabs(v) < 1.1754943508222875e-38;
      EXPECT_GT(denormal, rows);
    }
  }
}

// add_rms_norm: {x + r, rms_norm(x + r)} in one node where x, r and the
// weight share a float dtype and shape; the same bits as the two ops.
TEST(FastNorm, AddRmsNormIsTheAddThenTheNorm) {
  for (Dtype t : kFloatTypes) {
    for (int d : {1, 7, 64, 513, 4097}) {
      for (Layout layout : kLayouts) {
        for (bool with_weight : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(t)) + " d " + std::to_string(d) + " " + layout_name(layout) +
                       (with_weight ? " weight" : ""));
          array x = make_input({3, d}, layout, [&](const Shape& s) { return random_array(s, t); });
          array r = random_array({3, d}, t);
          std::optional<array> w;
          if (with_weight) w = random_array({d}, t, 0.5, 1.5);
          auto [h, y] = fast::add_rms_norm(x, r, w, 1e-5f);
          if (t != float64) EXPECT_STREQ(y.primitive()->name(), "AddRMSNorm");
          array h2 = add(x, r);
          array y2 = fast::rms_norm(h2, w, 1e-5f);
          EXPECT_TRUE(all_close(h, to_double(h2), 0, 0));
          EXPECT_TRUE(all_close(y, to_double(y2), 0, 0));
          EXPECT_EQ(h.dtype(), t);
          EXPECT_EQ(y.dtype(), t);
        }
      }
    }
  }
  // A broadcast residual and mixed dtypes take the two ops.
  array x = random_array({4, 9}, bfloat16), r = random_array({9}, float32), w = random_array({9}, bfloat16);
  auto [h, y] = fast::add_rms_norm(x, r, w, 1e-5f);
  EXPECT_EQ(h.dtype(), float32);
  EXPECT_EQ(y.dtype(), float32);
  EXPECT_TRUE(all_close(h, to_double(add(x, r)), 0, 0));
  EXPECT_TRUE(all_close(y, to_double(fast::rms_norm(add(x, r), w, 1e-5f)), 0, 0));
}

TEST(FastNorm, AddRmsNormBackwardMatchesFloat64) {
  array x = random_array({3, 19}), r = random_array({3, 19}), w = random_array({19}, float32, 0.5, 1.5);
  array u = random_array({3, 19}), v = random_array({3, 19});
  auto f = [](const std::vector<array>& in) {
    auto [h, y] = fast::add_rms_norm(in[0], in[1], in[2], 1e-5f);
    return std::vector<array>{h, y};
  };
  auto [o32, g32] = vjp(f, {x, r, w}, {u, v});
  auto [o64, g64] = vjp(f, {astype(x, float64), astype(r, float64), astype(w, float64)},
                        {astype(u, float64), astype(v, float64)});
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(all_close(g32[i], to_double(g64[i]), 1e-4, 1e-4)) << "input " << i;
  // vmap over a leading axis: a loop of the unbatched op.
  array xb = random_array({2, 3, 5}), rb = random_array({2, 3, 5}), wb = random_array({5});
  auto outs = vmap(f, {0, 0, -1})({xb, rb, wb});
  for (int b = 0; b < 2; ++b) {
    auto [h, y] = fast::add_rms_norm(take(xb, array(b), 0), take(rb, array(b), 0), wb, 1e-5f);
    EXPECT_TRUE(all_close(take(outs[0], array(b), 0), to_double(h), 0, 0));
    EXPECT_TRUE(all_close(take(outs[1], array(b), 0), to_double(y), 1e-6, 1e-6));
  }
}

TEST(FastNorm, LayerNormLargeMean) {
  array x = add(random_array({4, 1000}, float32), array(3000.0f));
  array y = fast::layer_norm(x, std::nullopt, std::nullopt, 1e-5f);
  EXPECT_TRUE(all_close(y, layer_ref(to_double(x), nullptr, nullptr, 1000, 1e-5), 2e-3, 2e-3));
}

// Weights given as broadcast (stride 0) and strided views, and of another
// dtype than x (the output takes the promoted type).
TEST(FastNorm, BroadcastStridedAndPromotedWeights) {
  const int d = 37;
  array x = random_array({5, d}, bfloat16);
  array wb = broadcast_to(array({1.25f}), {d});
  array ws = slice(random_array({2 * d}, float32, 0.5, 1.5), {0}, {2 * d}, {2});
  for (const array& w : {wb, ws}) {
    array y = fast::rms_norm(x, w, 1e-6f);
    EXPECT_EQ(y.dtype(), float32);
    std::vector<double> wv = to_double(w);
    EXPECT_TRUE(all_close(y, rms_ref(to_double(x), &wv, d, 1e-6), 2e-5, 2e-5));
    array z = fast::layer_norm(x, w, w, 1e-6f);
    EXPECT_TRUE(all_close(z, layer_ref(to_double(x), &wv, &wv, d, 1e-6), 4e-5, 4e-5));
  }
}

struct RopeSpec {
  int dims;
  bool traditional;
  float scale;
  std::vector<int> offsets;  // one: the int overload; several: per batch
  bool custom_freqs;
};

std::vector<double> rope_ref(const array& x, const RopeSpec& sp, float base, const std::vector<double>& freqs) {
  const Shape& sh = x.shape();
  const int64_t d = sh.back(), t_len = sh[sh.size() - 2];
  std::vector<double> v = to_double(x), out = v;
  const int64_t rows = static_cast<int64_t>(v.size()) / d, per_batch = rows / sh[0];
  const int half = sp.dims / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = r / per_batch;
    const double pos = (sp.offsets.size() > 1 ? sp.offsets[b] : sp.offsets[0]) + r % t_len;
    for (int i = 0; i < half; ++i) {
      const double inv = sp.custom_freqs ? 1.0 / freqs[i] : std::pow(static_cast<double>(base), -2.0 * i / sp.dims);
      const double th = pos * sp.scale * inv;
      const int64_t i1 = sp.traditional ? 2 * i : i, i2 = sp.traditional ? i1 + 1 : i1 + half;
      const double x1 = v[r * d + i1], x2 = v[r * d + i2];
      out[r * d + i1] = x1 * std::cos(th) - x2 * std::sin(th);
      out[r * d + i2] = x1 * std::sin(th) + x2 * std::cos(th);
    }
  }
  return out;
}

array run_rope(const array& x, const RopeSpec& sp, float base, const array& freqs) {
  std::optional<float> b = sp.custom_freqs ? std::nullopt : std::optional<float>(base);
  std::optional<array> f = sp.custom_freqs ? std::optional<array>(freqs) : std::nullopt;
  if (sp.offsets.size() == 1) return fast::rope(x, sp.dims, sp.traditional, b, sp.scale, sp.offsets[0], f);
  return fast::rope(x, sp.dims, sp.traditional, b, sp.scale, array(sp.offsets, {static_cast<int>(sp.offsets.size())}),
                    f);
}

TEST(FastRope, MatchesReferenceAndFallback) {
  const float base = 10000.0f;
  const std::vector<RopeSpec> specs = {
      {8, false, 1.0f, {0}, false},      {8, true, 1.0f, {5}, false},      {6, false, 0.5f, {3}, false},
      {6, true, 2.0f, {1}, true},        {8, false, 1.0f, {7, 100}, false}, {4, true, 1.0f, {2, 0}, true},
      {8, true, 1.0f, {4000}, false},
  };
  for (Dtype t : kFloatTypes) {
    for (const auto& sp : specs) {
      for (Layout layout : kLayouts) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " dims " + std::to_string(sp.dims) +
                     (sp.traditional ? " traditional" : " split") + " offset " + std::to_string(sp.offsets[0]) +
                     (sp.custom_freqs ? " freqs" : "") + " " + layout_name(layout));
        array x = make_input({2, 3, 5, 9 - (sp.dims % 4 == 0 ? 1 : 0)}, layout,
                             [&](const Shape& s) { return random_array(s, t); });
        array freqs = random_array({sp.dims / 2}, float32, 1.0, 50.0);
        array y = run_rope(x, sp, base, freqs);
        std::optional<array> fb;
        if (t != float64) {
          EXPECT_STREQ(y.primitive()->name(), "RoPE");
          fb = fallback_of(y);
        }
        // Angles up to 4000 rad: float32 angles carry ~4000 * 2^-24 error.
        const double atol = (t == float32 ? 2e-5 : tolerance(t)) + (sp.offsets[0] >= 1000 ? 2e-3 : 0.0);
        EXPECT_TRUE(all_close(y, rope_ref(x, sp, base, to_double(freqs)), tolerance(t), atol));
        if (fb) EXPECT_TRUE(all_close(y, to_double(*fb), 2 * tolerance(t), 2 * atol));
      }
    }
  }
}

// Offsets and frequencies given as strided views.
// float32 rows written through streaming stores (large outputs) give the
// same bits as plain stores: partial rotation, both layouts.
TEST(FastRope, StreamedOutputsGiveTheSameBits) {
  array x = random_array({2, 3, 37, 72}, float32);
  for (bool traditional : {false, true}) {
    SCOPED_TRACE(traditional ? "traditional" : "half-split");
    std::vector<double> got[2];
    for (int streamed = 0; streamed < 2; ++streamed) {
      cpu::set_streaming_threshold(streamed ? 0 : SIZE_MAX);
      got[streamed] = to_double(fast::rope(x, 64, traditional, 10000.0f, 0.5f, 3));
    }
    cpu::set_streaming_threshold(SIZE_MAX);
    EXPECT_EQ(got[0], got[1]);
  }
}

// Every CPU kernel level (the portable rotation, the AVX-512 table rows)
// gives the same bits: rows over the shared table (several heads, many
// positions), partial rotation, half widths that are not a multiple of 16,
// denormal bf16 inputs, streamed and plain stores, both layouts.
TEST(FastRope, EveryKernelLevelGivesTheSameBits) {
  for (Dtype t : {float32, bfloat16, float16}) {
    for (auto [d, dims] : {std::pair{128, 128}, {72, 40}, {36, 36}, {10, 6}}) {
      array x = astype(random_array({2, 3, 37, d}), t);
      if (t == bfloat16) x = where(arange(d) == array(3), array(1e-39f, t), x);
      for (bool traditional : {false, true}) {
        for (int streamed = 0; streamed < 2; ++streamed) {
          SCOPED_TRACE(std::string(dtype_name(t)) + " d " + std::to_string(d) + " dims " + std::to_string(dims) +
                       (traditional ? " traditional" : " half-split") + (streamed ? " streamed" : ""));
          cpu::set_streaming_threshold(streamed ? 0 : SIZE_MAX);
          std::vector<double> first;
          for (auto level :
               {cpu::CpuTarget::scalar, cpu::CpuTarget::avx2, cpu::CpuTarget::avx512, cpu::CpuTarget::avx512_bf16}) {
            if (level > cpu::cpu_target()) continue;
            cpu::set_cpu_target_override(level);
            std::vector<double> got = to_double(fast::rope(x, dims, traditional, 10000.0f, 0.5f, 11));
            cpu::clear_cpu_target_override();
            if (first.empty()) {
              first = got;
              continue;
            }
            size_t i = 0;
            while (i < got.size() && (got[i] == first[i] || (std::isnan(got[i]) && std::isnan(first[i])))) ++i;
            EXPECT_EQ(i, got.size()) << "level " << static_cast<int>(level) << ": element " << i << " differs";
          }
        }
      }
    }
  }
  cpu::set_streaming_threshold(SIZE_MAX);
}

TEST(FastRope, StridedOffsetsAndFreqs) {
  array x = random_array({3, 2, 4, 8}, float32);
  array off = slice(array({4, -1, 9, -1, 30, -1}, {6}), {0}, {6}, {2});
  array freqs = slice(random_array({8}, float32, 1.0, 20.0), {0}, {8}, {2});
  array y = fast::rope(x, 8, true, std::nullopt, 1.0f, off, freqs);
  RopeSpec sp{8, true, 1.0f, {4, 9, 30}, true};
  EXPECT_TRUE(all_close(y, rope_ref(x, sp, 0.0f, to_double(freqs)), 2e-5, 2e-5));
}

// 3-d and 5-d inputs: the middle axes are heads, the second-to-last the positions.
TEST(FastRope, RanksThreeAndFive) {
  for (const Shape& sh : {Shape{2, 6, 8}, Shape{2, 2, 3, 4, 8}}) {
    array x = random_array(sh, float32);
    RopeSpec sp{8, false, 1.0f, {3}, false};
    array y = run_rope(x, sp, 500.0f, array({1.0f}));
    EXPECT_TRUE(all_close(y, rope_ref(x, sp, 500.0f, {}), 2e-5, 2e-5));
  }
}

// The fused backward (the inverse rotation) against the vjp of the
// float64 op (its fallback), and the gradient of custom frequencies.
TEST(FastRope, BackwardMatchesFloat64) {
  for (bool traditional : {false, true}) {
    array x = random_array({2, 2, 4, 8}, float32);
    array u = random_array({2, 2, 4, 8}, float32);
    array freqs = random_array({3}, float32, 1.0, 5.0);
    auto f = [&](const std::vector<array>& in) {
      return std::vector<array>{fast::rope(in[0], 6, traditional, std::nullopt, 1.0f, array({2, 9}, {2}), in[1])};
    };
    auto [y32, g32] = vjp(f, {x, freqs}, {u});
    auto [y64, g64] = vjp(f, {astype(x, float64), astype(freqs, float64)}, {astype(u, float64)});
    EXPECT_TRUE(all_close(g32[0], to_double(g64[0]), 1e-4, 1e-5));
    EXPECT_TRUE(all_close(g32[1], to_double(g64[1]), 1e-3, 1e-4));
  }
}

TEST(FastNorm, NormBackwardMatchesFloat64) {
  array x = random_array({3, 19}, float32), w = random_array({19}, float32, 0.5, 1.5), b = random_array({19});
  array u = random_array({3, 19}, float32);
  auto f = [](const std::vector<array>& in) {
    return std::vector<array>{add(fast::rms_norm(in[0], in[1], 1e-5f), fast::layer_norm(in[0], in[1], in[2], 1e-5f))};
  };
  auto [y32, g32] = vjp(f, {x, w, b}, {u});
  auto [y64, g64] = vjp(f, {astype(x, float64), astype(w, float64), astype(b, float64)}, {astype(u, float64)});
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(all_close(g32[i], to_double(g64[i]), 1e-4, 1e-4)) << "input " << i;
}

TEST(FastNorm, Errors) {
  array x = random_array({2, 4});
  EXPECT_TRUE(throws_error([&] { fast::rms_norm(array(1.0f), std::nullopt, 1e-5f); }, {"[rms_norm]", "1 dimension"}));
  EXPECT_TRUE(throws_error([&] { fast::rms_norm(x, random_array({3}), 1e-5f); }, {"[rms_norm]", "weight", "(3)"}));
  EXPECT_TRUE(throws_error([&] { fast::rms_norm(astype(x, int32), std::nullopt, 1e-5f); }, {"[rms_norm]", "int32"}));
  EXPECT_TRUE(throws_error([&] { fast::layer_norm(x, std::nullopt, random_array({2, 4}), 1e-5f); },
                           {"[layer_norm]", "bias", "(2,4)"}));
  EXPECT_TRUE(throws_error([&] { fast::add_rms_norm(x, random_array({3, 2, 4}), std::nullopt, 1e-5f); },
                           {"[add_rms_norm]", "residual", "(3,2,4)"}));
  EXPECT_TRUE(throws_error([&] { fast::add_rms_norm(x, random_array({3}), std::nullopt, 1e-5f); },
                           {"[add_rms_norm]", "(2,4)", "(3)"}));
  EXPECT_TRUE(throws_error([&] { fast::add_rms_norm(x, x, random_array({3}), 1e-5f); }, {"[add_rms_norm]", "weight"}));
  EXPECT_TRUE(throws_error([&] { fast::add_rms_norm(astype(x, int32), astype(x, int32), std::nullopt, 1e-5f); },
                           {"[add_rms_norm]", "int32"}));
  array x3 = random_array({1, 2, 8});
  EXPECT_TRUE(throws_error([&] { fast::rope(x, 4, false, 1e4f, 1.0f, 0); }, {"[rope]", "3 dimensions", "(2,4)"}));
  EXPECT_TRUE(throws_error([&] { fast::rope(x3, 5, false, 1e4f, 1.0f, 0); }, {"[rope]", "even"}));
  EXPECT_TRUE(throws_error([&] { fast::rope(x3, 10, false, 1e4f, 1.0f, 0); }, {"[rope]", "dims"}));
  EXPECT_TRUE(throws_error([&] { fast::rope(x3, 8, false, std::nullopt, 1.0f, 0); }, {"[rope]", "base or freqs"}));
  EXPECT_TRUE(
      throws_error([&] { fast::rope(x3, 8, false, 1e4f, 1.0f, 0, random_array({4})); }, {"[rope]", "not both"}));
  EXPECT_TRUE(throws_error([&] { fast::rope(x3, 8, false, std::nullopt, 1.0f, 0, random_array({3})); },
                           {"[rope]", "freqs", "(3)"}));
  EXPECT_TRUE(throws_error([&] { fast::rope(x3, 8, false, 1e4f, 1.0f, array({1, 2, 3}, {3})); },
                           {"[rope]", "offset", "(3)"}));
  EXPECT_TRUE(throws_error([&] { fast::rope(x3, 8, false, 1e4f, 1.0f, array(1.5f)); }, {"[rope]", "integer"}));
}

// MLX's precise flag is accepted; Kiln's softmax is always precise.
TEST(FastNorm, SoftmaxPreciseOverloads) {
  array x = random_array({3, 7}, bfloat16);
  EXPECT_TRUE(all_close(softmax(x, -1, true), to_double(softmax(x, -1)), 0, 0));
  EXPECT_TRUE(all_close(softmax(x, std::vector<int>{0, 1}, true), to_double(softmax(x, std::vector<int>{0, 1})), 0, 0));
  EXPECT_TRUE(all_close(softmax(x, true), to_double(softmax(x)), 0, 0));
}

}  // namespace
}  // namespace kiln::test
