// fast::scaled_dot_product_attention: the fused CPU kernels and the plain-op
// fallback against a float64 reference (masks, GQA/MQA, sinks, odd lengths,
// strided inputs, every kernel level), the argument errors, and the
// transformations (through the fallback) against finite differences.
#include <cfloat>
#include <cmath>

#include "backend/cpu/cpu_features.h"
#include "core/primitives.h"
#include "test_util.h"

namespace kiln::test {
namespace {

enum class MaskKind { kNone, kCausal, kBool, kAdditive, kBoolBroadcast, kAdditiveBroadcast };

const char* mask_name(MaskKind m) {
  switch (m) {
    case MaskKind::kNone: return "none";
    case MaskKind::kCausal: return "causal";
    case MaskKind::kBool: return "bool";
    case MaskKind::kAdditive: return "additive";
    case MaskKind::kBoolBroadcast: return "bool-broadcast";
    case MaskKind::kAdditiveBroadcast: return "additive-broadcast";
  }
  return "?";
}

struct Config {
  int batch, n_q_heads, n_kv_heads, q_len, kv_len, head_dim, v_head_dim;
  Dtype dtype = float32;
  MaskKind mask = MaskKind::kNone;
  bool sinks = false;
  bool transposed = false;  // q, k, v as views of [B, L, H, D]
  std::string str() const {
    std::ostringstream os;
    os << "B" << batch << " Hq" << n_q_heads << " Hkv" << n_kv_heads << " Lq" << q_len << " Lk" << kv_len << " D"
       << head_dim << "/" << v_head_dim << " " << dtype_name(dtype) << " mask=" << mask_name(mask)
       << (sinks ? " sinks" : "") << (transposed ? " transposed" : "");
    return os.str();
  }
};

struct Inputs {
  array q, k, v;
  std::optional<array> mask;
  std::string mode;
  std::optional<array> sinks;
  float scale;
};

array make_qkv(int b, int h, int l, int d, Dtype t, bool transposed) {
  if (transposed) return swapaxes(random_array({b, l, h, d}, t, -1.0, 1.0), 1, 2);
  return random_array({b, h, l, d}, t, -1.0, 1.0);
}

Inputs make_inputs(const Config& c) {
  Inputs in{make_qkv(c.batch, c.n_q_heads, c.q_len, c.head_dim, c.dtype, c.transposed),
            make_qkv(c.batch, c.n_kv_heads, c.kv_len, c.head_dim, c.dtype, c.transposed),
            make_qkv(c.batch, c.n_kv_heads, c.kv_len, c.v_head_dim, c.dtype, c.transposed),
            std::nullopt,
            "",
            std::nullopt,
            static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)))};
  // Masks keep most entries so that rows are rarely fully masked (those
  // are tested on their own).
  switch (c.mask) {
    case MaskKind::kNone: break;
    case MaskKind::kCausal: in.mode = "causal"; break;
    case MaskKind::kBool: in.mask = random_array({c.batch, c.n_q_heads, c.q_len, c.kv_len}, float32, 0.0, 1.0) < array(0.8f); break;
    case MaskKind::kAdditive:
      in.mask = random_array({c.batch, c.n_q_heads, c.q_len, c.kv_len}, c.dtype, -3.0, 1.0);
      break;
    case MaskKind::kBoolBroadcast: in.mask = random_array({c.q_len, c.kv_len}, float32, 0.0, 1.0) < array(0.8f); break;
    case MaskKind::kAdditiveBroadcast: in.mask = random_array({c.n_q_heads, 1, c.kv_len}, c.dtype, -3.0, 1.0); break;
  }
  if (c.sinks) in.sinks = random_array({c.n_q_heads}, c.dtype, -1.0, 2.0);
  return in;
}

array run_fused(const Inputs& in, StreamOrDevice s = {}) {
  return fast::scaled_dot_product_attention(in.q, in.k, in.v, in.scale, in.mode, in.mask, in.sinks, false, s);
}

// MLX's definition in float64: a false in a bool mask makes the score the
// lowest finite value (a fully masked row averages V), sinks are an extra
// logit column without a value.
std::vector<double> reference(const Inputs& in) {
  const Shape qs = in.q.shape();
  const int B = qs[0], Hq = qs[1], Lq = qs[2], D = qs[3];
  const int Hkv = in.k.shape(1), Lk = in.k.shape(2), Dv = in.v.shape(3);
  const int rep = Hq / Hkv;
  std::vector<double> q = to_double(in.q), k = to_double(in.k), v = to_double(in.v);
  std::vector<double> mask, sinks;
  bool mask_bool = false;
  if (in.mask) {
    mask_bool = in.mask->dtype() == bool_;
    mask = to_double(broadcast_to(*in.mask, {B, Hq, Lq, Lk}));
  }
  if (in.sinks) sinks = to_double(*in.sinks);
  std::vector<double> out(static_cast<size_t>(B) * Hq * Lq * Dv);
  std::vector<double> s(Lk);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < Hq; ++h)
      for (int i = 0; i < Lq; ++i) {
        const int kh = h / rep;
        double mx = in.sinks ? sinks[h] : -INFINITY;
        for (int j = 0; j < Lk; ++j) {
          double acc = 0;
          for (int d = 0; d < D; ++d) {
            acc += q[((static_cast<size_t>(b) * Hq + h) * Lq + i) * D + d] *
                   k[((static_cast<size_t>(b) * Hkv + kh) * Lk + j) * D + d];
          }
          acc *= in.scale;
          const size_t mi = ((static_cast<size_t>(b) * Hq + h) * Lq + i) * Lk + j;
          if (in.mode == "causal" && j > i + Lk - Lq) acc = -1e300;
          if (in.mask) acc = mask_bool ? (mask[mi] != 0 ? acc : -1e300) : acc + mask[mi];
          s[j] = acc;
          mx = std::max(mx, acc);
        }
        double l = in.sinks ? std::exp(sinks[h] - mx) : 0.0;
        for (int j = 0; j < Lk; ++j) l += (s[j] = std::exp(s[j] - mx));
        for (int d = 0; d < Dv; ++d) {
          double acc = 0;
          for (int j = 0; j < Lk; ++j) acc += s[j] * v[((static_cast<size_t>(b) * Hkv + kh) * Lk + j) * Dv + d];
          out[((static_cast<size_t>(b) * Hq + h) * Lq + i) * Dv + d] = acc / l;
        }
      }
  return out;
}

// The fallback graph on the primitive's inputs (what vjp/jvp/vmap run);
// call before evaluating `fused` (evaluation detaches the node).
array run_fallback(const array& fused) {
  auto p = std::dynamic_pointer_cast<ScaledDotProductAttention>(fused.primitive());
  if (!p) {
    ADD_FAILURE() << "the op did not build the fused primitive";
    return fused;
  }
  return p->fallback()(fused.inputs())[0];
}

// Tolerances against float64: the fused kernels accumulate in float32; the
// fallback also rounds scores and probabilities to 16-bit types.
double atol_fused(Dtype t) { return t == float32 ? 2e-5 : t == float16 ? 2e-3 : 1e-2; }
double atol_fallback(Dtype t) { return t == float32 ? 2e-5 : t == float16 ? 5e-3 : 4e-2; }

void check(const Config& c) {
  SCOPED_TRACE(c.str());
  Inputs in = make_inputs(c);
  array fused = run_fused(in);
  ASSERT_TRUE(fused.has_primitive());
  ASSERT_STREQ(fused.primitive()->name(), "ScaledDotProductAttention");
  array fb = run_fallback(fused);
  EXPECT_EQ(fused.shape(), (Shape{c.batch, c.n_q_heads, c.q_len, c.v_head_dim}));
  EXPECT_EQ(fused.dtype(), c.dtype);
  std::vector<double> want = reference(in);
  EXPECT_TRUE(all_close(fused, want, 1e-2, atol_fused(c.dtype)));
  EXPECT_TRUE(all_close(fb, want, 2e-2, atol_fallback(c.dtype)));
}

TEST(Attention, MatchesReferenceAcrossDtypesAndMasks) {
  const MaskKind masks[] = {MaskKind::kNone,          MaskKind::kCausal,           MaskKind::kBool,
                            MaskKind::kAdditive,      MaskKind::kBoolBroadcast,    MaskKind::kAdditiveBroadcast};
  for (Dtype t : {float32, float16, bfloat16}) {
    for (MaskKind m : masks) {
      check({1, 4, 2, 1, 37, 64, 64, t, m});     // decode, GQA
      check({2, 4, 4, 19, 45, 64, 64, t, m});    // prefill, q shorter than k
      check({1, 2, 1, 70, 70, 32, 32, t, m});    // MQA, two row tiles
    }
  }
}

TEST(Attention, HeadDimsAndOddShapes) {
  for (int d : {64, 80, 96, 128, 256}) {
    check({1, 8, 2, 1, 17, d, d, bfloat16, MaskKind::kNone});
    check({1, 8, 2, 33, 33, d, d, float16, MaskKind::kCausal});
  }
  // Head dims that are not whole vectors (the blocked kernel), V's head
  // dim different from Q/K's.
  check({1, 3, 1, 1, 17, 5, 7, float32, MaskKind::kNone});
  check({1, 3, 3, 9, 17, 33, 12, float32, MaskKind::kCausal});
  check({2, 6, 3, 2, 1, 40, 24, bfloat16, MaskKind::kBool});
  // Decode tiles of 8, 7 and 3 rows (bf16 keys: 2, 2 and 5 keys per
  // 16-lane reduction, the last step of a block partly empty).
  check({1, 8, 1, 1, 300, 128, 128, bfloat16, MaskKind::kNone});
  check({1, 7, 1, 1, 77, 64, 64, bfloat16, MaskKind::kBool});
  check({1, 6, 2, 1, 45, 96, 96, bfloat16, MaskKind::kCausal});
  // KV lengths 1, 17, 1000 (split over threads and merged), long queries.
  for (int lk : {1, 17, 1000}) check({1, 32, 8, 1, lk, 128, 128, bfloat16, MaskKind::kNone});
  check({1, 4, 1, 200, 1000, 64, 64, float32, MaskKind::kCausal});
  check({1, 2, 2, 130, 129, 64, 64, bfloat16, MaskKind::kAdditive});
}

// bf16 prefill on AMX tiles where the CPU has them (blocked_amx; the
// vdpbf16ps tiles elsewhere): head dims that are multiples of 32, V's of
// 16, key blocks whose last 16- and 32-key groups are partly empty, row
// tiles that are not a multiple of 16, split keys with sinks.
TEST(Attention, Bf16PrefillTiles) {
  for (int d : {32, 96, 128, 256}) check({1, 4, 2, 21, 47, d, d, bfloat16, MaskKind::kCausal});
  check({1, 4, 1, 37, 81, 128, 64, bfloat16, MaskKind::kNone});
  check({1, 2, 2, 70, 70, 64, 144, bfloat16, MaskKind::kAdditiveBroadcast});
  for (int lk : {1, 15, 16, 17, 31, 33, 63, 64, 65}) check({1, 2, 1, 9, lk, 64, 64, bfloat16, MaskKind::kBool});
  check({1, 4, 2, 65, 700, 128, 128, bfloat16, MaskKind::kNone, true, true});
  check({1, 2, 2, 300, 300, 64, 64, bfloat16, MaskKind::kCausal});
}

TEST(Attention, SinksAndStridedInputs) {
  for (Dtype t : {float32, bfloat16}) {
    check({1, 4, 2, 1, 300, 64, 64, t, MaskKind::kNone, true});
    check({2, 4, 1, 20, 50, 64, 64, t, MaskKind::kCausal, true});
    check({1, 4, 2, 3, 50, 64, 64, t, MaskKind::kBool, true, true});
    check({2, 8, 2, 1, 777, 128, 128, t, MaskKind::kNone, false, true});
    check({1, 4, 4, 65, 65, 80, 80, t, MaskKind::kCausal, false, true});
  }
}

TEST(Attention, EveryKernelLevel) {
  for (auto level : {cpu::CpuTarget::scalar, cpu::CpuTarget::avx2, cpu::CpuTarget::avx512, cpu::CpuTarget::avx512_bf16,
                     cpu::CpuTarget::amx_bf16}) {
    cpu::set_cpu_target_override(level);
    check({1, 4, 2, 2, 100, 64, 64, bfloat16, MaskKind::kCausal, true});
    // bf16 prefill tiles (vdpbf16ps where the CPU has AVX512-BF16): an odd
    // block, two row tiles, GQA.
    check({1, 8, 2, 70, 101, 64, 64, bfloat16, MaskKind::kNone});
    check({1, 4, 2, 40, 100, 48, 40, float16, MaskKind::kAdditive});
    check({1, 2, 2, 1, 600, 16, 16, float32, MaskKind::kBool});
    cpu::clear_cpu_target_override();
  }
}

TEST(Attention, CausalAlignsToTheEnd) {
  // One query at the end of the sequence sees every key: causal = no mask.
  Inputs in = make_inputs({1, 4, 2, 1, 50, 64, 64, float32});
  array full = run_fused(in);
  in.mode = "causal";
  EXPECT_TRUE(all_close(run_fused(in), to_double(full), 1e-5, 1e-6));
  // Queries longer than keys: the first rows see no key and average V
  // (MLX's fallback: every score at the lowest value).
  Config c{1, 2, 2, 6, 4, 16, 16, float32, MaskKind::kCausal};
  SCOPED_TRACE(c.str());
  Inputs in2 = make_inputs(c);
  array got = run_fused(in2);
  std::vector<double> want = reference(in2);
  EXPECT_TRUE(all_close(got, want, 1e-4, 1e-5));
  std::vector<double> v = to_double(in2.v);
  for (int d = 0; d < 16; ++d) {  // row 0 of head 0: the mean of V's rows
    double mean = 0;
    for (int j = 0; j < 4; ++j) mean += v[j * 16 + d] / 4;
    EXPECT_NEAR(to_double(got)[d], mean, 1e-5);
  }
}

TEST(Attention, GroupedHeadsEqualRepeatedKV) {
  Inputs in = make_inputs({2, 8, 2, 5, 40, 64, 64, float32, MaskKind::kCausal});
  array grouped = run_fused(in);
  in.k = repeat(in.k, 4, 1);
  in.v = repeat(in.v, 4, 1);
  EXPECT_TRUE(all_close(run_fused(in), to_double(grouped), 1e-5, 1e-6));
}

TEST(Attention, FullyMaskedRowsAverageValues) {
  Inputs in = make_inputs({1, 2, 1, 3, 20, 32, 32, bfloat16});
  in.mask = zeros({3, 20}, bool_);
  array got = run_fused(in);
  array fb = run_fallback(got);
  EXPECT_TRUE(all_close(got, reference(in), 1e-2, 1e-2));
  EXPECT_TRUE(all_close(fb, reference(in), 1e-2, 2e-2));
}

TEST(Attention, Float64AndEmptyUseTheFallback) {
  Inputs in = make_inputs({1, 2, 1, 3, 20, 8, 8, float64, MaskKind::kCausal, true});
  array got = run_fused(in);
  EXPECT_STRNE(got.primitive()->name(), "ScaledDotProductAttention");
  EXPECT_TRUE(all_close(got, reference(in), 1e-12, 1e-12));
  array q = random_array({1, 2, 0, 8}), k = random_array({1, 2, 5, 8});
  EXPECT_EQ(fast::scaled_dot_product_attention(q, k, k, 1.0f).shape(), (Shape{1, 2, 0, 8}));
  // No keys: zeros, as the fallback's empty matmul, also when forced fused.
  array q2 = random_array({1, 2, 3, 8}), none = random_array({1, 2, 0, 8});
  array forced = fast::scaled_dot_product_attention(q2, none, none, 1.0f, "", {}, {}, true);
  EXPECT_STREQ(forced.primitive()->name(), "ScaledDotProductAttention");
  EXPECT_TRUE(all_close(forced, std::vector<double>(48, 0.0), 0, 0));
  EXPECT_TRUE(all_close(fast::scaled_dot_product_attention(q2, none, none, 1.0f), std::vector<double>(48, 0.0), 0, 0));
}

TEST(Attention, Errors) {
  const char* op = "[scaled_dot_product_attention]";
  array q = random_array({1, 4, 3, 8}), k = random_array({1, 2, 5, 8}), v = random_array({1, 2, 5, 8});
  auto sdpa = [](const array& a, const array& b, const array& c, const std::string& mode = "",
                 std::optional<array> m = {}, std::optional<array> s = {}) {
    return fast::scaled_dot_product_attention(a, b, c, 1.0f, mode, m, s);
  };
  EXPECT_TRUE(throws_error([&] { sdpa(reshape(q, {4, 3, 8}), k, v); }, {op, "rank 4", "(4,3,8) float32"}));
  EXPECT_TRUE(throws_error([&] { sdpa(random_array({1, 3, 3, 8}), k, v); }, {op, "multiple", "(1,3,3,8)"}));
  EXPECT_TRUE(throws_error([&] { sdpa(q, random_array({1, 2, 5, 6}), v); }, {op, "head dimension", "(1,2,5,6)"}));
  EXPECT_TRUE(throws_error([&] { sdpa(q, k, random_array({1, 1, 5, 8})); }, {op, "number of heads"}));
  EXPECT_TRUE(throws_error([&] { sdpa(q, k, random_array({1, 2, 4, 8})); }, {op, "same length"}));
  EXPECT_TRUE(throws_error([&] { sdpa(q, random_array({2, 2, 5, 8}), v); }, {op, "batch"}));
  EXPECT_TRUE(throws_error([&] { sdpa(astype(q, int32), astype(k, int32), astype(v, int32)); }, {op, "floating", "int32"}));
  EXPECT_TRUE(throws_error([&] { sdpa(q, k, v, "banded"); }, {op, "mask_mode", "banded"}));
  EXPECT_TRUE(throws_error([&] { sdpa(q, k, v, "causal", ones({3, 5}, bool_)); }, {op, "causal"}));
  EXPECT_TRUE(throws_error([&] { sdpa(q, k, v, "array"); }, {op, "needs a mask"}));
  EXPECT_TRUE(throws_error([&] { sdpa(q, k, v, "", ones({3, 4}, bool_)); }, {op, "(3,4)", "broadcast", "(1,4,3,5)"}));
  EXPECT_TRUE(throws_error([&] { sdpa(q, k, v, "", ones({1, 1, 1, 3, 5})); }, {op, "rank at most 4"}));
  EXPECT_TRUE(throws_error([&] { sdpa(astype(q, bfloat16), astype(k, bfloat16), astype(v, bfloat16), "", ones({3, 5})); },
                           {op, "promote", "bfloat16"}));
  EXPECT_TRUE(throws_error([&] { sdpa(q, k, v, "", ones({3, 5}, float64)); }, {op, "promote", "float32"}));
  EXPECT_TRUE(throws_error([&] { sdpa(q, k, v, "", {}, ones({2})); }, {op, "sinks", "(4)", "(2)"}));
}

// ---- transformations: through the fallback ----

// Central differences of sum(f(x) * w) along random directions.
void check_grad(const Config& c) {
  SCOPED_TRACE(c.str());
  Inputs in = make_inputs(c);
  array w = random_array({c.batch, c.n_q_heads, c.q_len, c.v_head_dim}, float32);
  auto loss = [&](const std::vector<array>& x) {
    return sum(fast::scaled_dot_product_attention(x[0], x[1], x[2], in.scale, in.mode, in.mask, in.sinks) * w);
  };
  std::vector<array> primals = {in.q, in.k, in.v};
  std::vector<array> g = grad(loss, {0, 1, 2})(primals);
  for (int i = 0; i < 3; ++i) {
    array dir = random_array(primals[i].shape(), float32);
    const float h = 1e-2f;
    std::vector<array> plus = primals, minus = primals;
    plus[i] = primals[i] + dir * array(h);
    minus[i] = primals[i] - dir * array(h);
    const double fd = (loss(plus).item<float>() - loss(minus).item<float>()) / (2.0 * h);
    const double an = sum(g[i] * dir).item<float>();
    EXPECT_NEAR(an, fd, 2e-3 * (1.0 + std::fabs(fd))) << "input " << i;
    // jvp along the same direction gives the same number.
    std::vector<array> tangents = {zeros_like(primals[0]), zeros_like(primals[1]), zeros_like(primals[2])};
    tangents[i] = dir;
    auto outs = jvp([&](const std::vector<array>& x) { return std::vector<array>{loss(x)}; }, primals, tangents);
    EXPECT_NEAR(outs.second[0].item<float>(), fd, 2e-3 * (1.0 + std::fabs(fd))) << "jvp, input " << i;
  }
}

TEST(Attention, GradientsMatchFiniteDifferences) {
  check_grad({1, 4, 2, 3, 7, 16, 16, float32, MaskKind::kNone});
  check_grad({1, 2, 1, 5, 5, 8, 12, float32, MaskKind::kCausal, true});
  check_grad({2, 2, 2, 4, 6, 8, 8, float32, MaskKind::kAdditiveBroadcast});
  check_grad({1, 2, 2, 1, 9, 16, 16, float32, MaskKind::kBool, false, true});
}

TEST(Attention, VmapMatchesALoop) {
  Config c{1, 4, 2, 3, 11, 16, 16, float32, MaskKind::kCausal};
  array qs = random_array({3, 1, 4, 3, 16}, float32, -1, 1);
  Inputs in = make_inputs(c);
  auto f = [&](const std::vector<array>& x) {
    return std::vector<array>{fast::scaled_dot_product_attention(x[0], x[1], x[2], 0.3f, "causal")};
  };
  array got = vmap(f, {0, -1, -1})({qs, in.k, in.v})[0];
  for (int i = 0; i < 3; ++i) {
    array qi = squeeze(slice(qs, {i, 0, 0, 0, 0}, {i + 1, 1, 4, 3, 16}), 0);
    array want = f({qi, in.k, in.v})[0];
    array gi = squeeze(slice(got, {i, 0, 0, 0, 0}, {i + 1, 1, 4, 3, 16}), 0);
    EXPECT_TRUE(all_close(gi, to_double(want), 1e-5, 1e-6));
  }
}

}  // namespace
}  // namespace kiln::test
