// llama.cpp's block formats (core/quantize_blocks.h) on the CPU:
// - decoding is bit for bit gguf-py's numpy dequantizers (python3 writes
//   random blocks, edge cases included, and their decoded floats);
// - Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 encode to gguf-py's quantizers' bytes;
//   the K formats (no quantizer in gguf-py) are checked by their error;
// - quantized_matmul against a float64 product with the decoded weights (and
//   x rounded to 8 bits as the CPU rounds it: quant_blocks_ref.h), for the
//   fused QMV (<= 8 rows) and the tiled GEMM path, strided and batched x
//   (the 8-bit path's own cases: test_quant_blocks_int8.cpp);
// - transformations and argument errors.
// The gguf comparisons skip when python3, numpy or gguf is missing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "backend/cpu/quant_blocks_cpu.h"
#include "core/block_format.h"
#include "core/quantize_blocks.h"
#include "kiln/fast.h"
#include "kiln/ops.h"
#include "quant_blocks_ref.h"
#include "test_util.h"

namespace kiln {
namespace {

using test::rng;

const std::vector<std::string> kAllModes = {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0",
                                            "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"};

const BlockLayout& layout(const std::string& mode) {
  for (const auto& l : kBlockLayouts) {
    if (mode == l.name) return l;
  }
  throw std::runtime_error("no mode " + mode);
}

bool have_gguf() {
  static const bool ok = std::system("python3 -c 'import numpy, gguf' >/dev/null 2>&1") == 0;
  return ok;
}

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/kiln_qblocks_" + std::to_string(::getpid()) + "_" + name;
}

std::vector<char> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

bool run_python(const std::string& script) {
  std::string path = temp_path("script.py");
  std::ofstream(path) << script;
  bool ok = std::system(("python3 " + path).c_str()) == 0;
  std::remove(path.c_str());
  return ok;
}

array dequantize(const array& w, const std::string& mode, Dtype t = float32) {
  return detail::block_dequantize(w, mode, t, {});
}
array quantize(const array& w, const std::string& mode) { return detail::block_quantize(w, mode, {})[0]; }
array qmm(const array& x, const array& w, const std::string& mode) {
  return detail::block_quantized_matmul(x, w, true, mode, {});
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Random block bytes (fp16 scales included: some are inf / nan / subnormal)
// plus edge blocks: all zero bytes, all 0xff, and scales set to 0, +-inf,
// nan, the largest and the smallest fp16. Written by python, decoded by
// gguf-py; Kiln decodes the same bytes.
TEST(QuantBlocks, DequantizeMatchesGgufBitForBit) {
  if (!have_gguf()) GTEST_SKIP() << "python3 with numpy and gguf is not available";
  for (const auto& mode : kAllModes) {
    SCOPED_TRACE(mode);
    const BlockLayout& l = layout(mode);
    std::string in = temp_path("blocks.bin"), out = temp_path("floats.bin");
    const int rows = 6, per_row = 7;
    std::string qname = mode;
    for (auto& c : qname) c = static_cast<char>(std::toupper(c));
    std::string script = R"(
import numpy as np
np.seterr(all="ignore")
from gguf.quants import dequantize
from gguf.constants import GGMLQuantizationType as T
rng = np.random.default_rng(7)
qt = T.)" + qname + R"(
bs = )" + std::to_string(l.bytes) + R"(
n = )" + std::to_string(rows * per_row) + R"(
b = rng.integers(0, 256, size=(n, bs), dtype=np.uint8)
b[0] = 0
b[1] = 255
# fp16 fields of each format: offsets of d (and dmin / m)
fields = {"q4_0": [0], "q4_1": [0, 2], "q5_0": [0], "q5_1": [0, 2], "q8_0": [0],
          "q2_k": [80, 82], "q3_k": [108], "q4_k": [0, 2], "q5_k": [0, 2], "q6_k": [208]}[")" + mode + R"("]
specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, -65504.0, 6e-8, 1e-5, 1.0], dtype=np.float16)
for i, v in enumerate(specials):
    for off in fields:
        b[2 + i, off:off + 2] = np.frombuffer(v.tobytes(), dtype=np.uint8)
# normal-range scales for the rest but a few rows, so most values are finite
for r in range(2 + len(specials), n - 4):
    for off in fields:
        v = np.float16(rng.uniform(-2, 2) * 10.0 ** rng.integers(-4, 2))
        b[r, off:off + 2] = np.frombuffer(v.tobytes(), dtype=np.uint8)
b.tofile(")" + in + R"(")
dequantize(b.reshape(-1), qt).astype(np.float32).tofile(")" + out + R"(")
)";
    ASSERT_TRUE(run_python(script));
    std::vector<char> bytes = read_file(in), want = read_file(out);
    std::remove(in.c_str());
    std::remove(out.c_str());
    ASSERT_EQ(bytes.size(), size_t(rows * per_row * l.bytes));
    ASSERT_EQ(want.size(), size_t(rows * per_row * l.block * 4));
    std::vector<uint8_t> u(bytes.begin(), bytes.end());
    array w(std::vector<uint8_t>(u), {rows, per_row * l.bytes}, uint8);
    array got = dequantize(w, mode);
    got.eval();
    ASSERT_EQ(got.shape(), (Shape{rows, per_row * l.block}));
    const float* g = got.data<float>();
    const float* r = reinterpret_cast<const float*>(want.data());
    int bad = 0;
    for (size_t i = 0; i < got.size() && bad < 5; ++i) {
      bool same = (std::isnan(g[i]) && std::isnan(r[i])) || bits(g[i]) == bits(r[i]);
      if (!same) {
        ++bad;
        ADD_FAILURE() << "element " << i << " (block " << i / l.block << "): got " << g[i] << ", gguf " << r[i];
      }
    }
    // bfloat16 / float16 outputs are the float32 values rounded once.
    array h = dequantize(w, mode, bfloat16);
    EXPECT_TRUE(test::all_close(h, test::to_double(astype(astype(got, bfloat16), float32)), 0.0));
  }
}

// Float rows with edge cases (all equal, zeros, one spike, extremes, only
// negative values) plus random data at several scales.
const char* kQuantizeData = R"(
import numpy as np
np.seterr(all="ignore")
rng = np.random.default_rng(11)
rows = [np.zeros(256), np.full(256, 3.25), np.full(256, -0.5), np.linspace(-1, 1, 256),
        np.where(np.arange(256) == 17, 100.0, 0.01), np.full(256, 60000.0) * np.sign(rng.standard_normal(256)),
        -np.abs(rng.standard_normal(256)), np.abs(rng.standard_normal(256)) + 5]
for s in [1e-6, 1e-2, 1.0, 1e3]:
    rows += [rng.standard_normal(256) * s for _ in range(3)]
x = np.stack(rows).astype(np.float32)
)";

TEST(QuantBlocks, QuantizeMatchesGgufBytes) {
  if (!have_gguf()) GTEST_SKIP() << "python3 with numpy and gguf is not available";
  for (std::string mode : {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0"}) {
    SCOPED_TRACE(mode);
    std::string qname = mode;
    for (auto& c : qname) c = static_cast<char>(std::toupper(c));
    std::string xs = temp_path("x.bin"), qs = temp_path("q.bin");
    ASSERT_TRUE(run_python(std::string(kQuantizeData) + R"(
from gguf.quants import quantize
from gguf.constants import GGMLQuantizationType as T
x.tofile(")" + xs + R"(")
quantize(x, T.)" + qname + R"().tofile(")" + qs + R"(")
)"));
    std::vector<char> xb = read_file(xs), want = read_file(qs);
    std::remove(xs.c_str());
    std::remove(qs.c_str());
    int rows = static_cast<int>(xb.size() / (256 * 4));
    std::vector<float> xv(xb.size() / 4);
    std::memcpy(xv.data(), xb.data(), xb.size());
    array x(xv, {rows, 256}, float32);
    array q = quantize(x, mode);
    q.eval();
    ASSERT_EQ(q.nbytes(), want.size());
    const uint8_t* g = q.data<uint8_t>();
    const BlockLayout& l = layout(mode);
    int bad = 0;
    for (size_t i = 0; i < want.size() && bad < 5; ++i) {
      if (g[i] != static_cast<uint8_t>(want[i])) {
        ++bad;
        ADD_FAILURE() << "byte " << i << " (block " << i / l.bytes << ", offset " << i % l.bytes
                      << "): got " << int(g[i]) << ", gguf " << int(static_cast<uint8_t>(want[i]));
      }
    }
  }
}

// The K formats follow ggml's reference quantizers, which gguf-py does not
// have: their round trip must be as accurate as the format allows.
TEST(QuantBlocks, KQuantsRoundTripError) {
  std::normal_distribution<float> dist(0.f, 1.f);
  const int rows = 16, k = 1024;
  std::vector<float> v(rows * k);
  for (auto& e : v) e = dist(rng());
  array x(v, {rows, k}, float32);
  // rms error bounds for N(0, 1) data: ~10% above what these quantizers
  // give (q4_k 0.072, q6_k 0.018, q4_0 0.086, ...; ggml reports the same).
  const std::vector<std::pair<std::string, double>> bounds = {
      {"q2_k", 0.33}, {"q3_k", 0.17}, {"q4_k", 0.08}, {"q5_k", 0.04}, {"q6_k", 0.02},
      {"q4_0", 0.095}, {"q4_1", 0.087}, {"q5_0", 0.048}, {"q5_1", 0.042}, {"q8_0", 0.006}};
  for (const auto& [mode, bound] : bounds) {
    SCOPED_TRACE(mode);
    array d = dequantize(quantize(x, mode), mode);
    std::vector<double> got = test::to_double(d);
    double se = 0;
    for (size_t i = 0; i < v.size(); ++i) se += (got[i] - v[i]) * (got[i] - v[i]);
    double rms = std::sqrt(se / v.size());
    EXPECT_LT(rms, bound);
    EXPECT_GT(rms, bound / 2);  // not suspiciously exact either
  }
  // All-zero and constant rows decode exactly.
  for (const auto& mode : kAllModes) {
    SCOPED_TRACE(mode);
    array z = zeros({2, 256}, float32);
    EXPECT_TRUE(test::all_close(dequantize(quantize(z, mode), mode), std::vector<double>(512, 0.0), 0.0));
    array c = full({1, 256}, 0.5f);
    EXPECT_TRUE(test::all_close(dequantize(quantize(c, mode), mode), std::vector<double>(256, 0.5), 2e-3));
  }
}

// Weights of the formats from random floats.
array random_blocks(const std::string& mode, int n, int k) { return quantize(test::random_array({n, k}), mode); }

// y[r, j] = sum_k x[r, k] * w[j, k] in double; x rows flattened, rounded
// to 8 bits as the CPU rounds them where it does (quant_blocks_ref.h).
bool rounded(const array& x) { return test::rounds_x(x) && cpu::block_x_int8(); }
std::vector<double> reference(const array& x, const array& wq, const std::string& mode) {
  return test::block_product(test::to_double(x), x.shape(-1), wq, mode, rounded(x));
}

// |error| relative to sum |x| |w| (x as the kernels see it): float32
// accumulation of k terms.
::testing::AssertionResult close_product(const array& got, const array& x, const array& wq, const std::string& mode,
                                         double rtol) {
  std::vector<double> want = reference(x, wq, mode);
  std::vector<double> xa = test::to_double(x), wa = test::to_double(abs(dequantize(wq, mode)));
  if (rounded(x)) xa = test::round_x8(xa);
  std::vector<double> g = test::to_double(got);
  int64_t k = x.shape(-1), n = wq.shape(0);
  for (size_t i = 0; i < want.size(); ++i) {
    int64_t r = i / n, j = i % n;
    double mag = 0;
    for (int64_t t = 0; t < k; ++t) mag += std::fabs(xa[r * k + t]) * wa[j * k + t];
    if (!(std::fabs(g[i] - want[i]) <= rtol * mag + 1e-30)) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << g[i] << ", want " << want[i]
                                           << " (scale " << mag << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(QuantBlocks, MatmulMatchesFloat64) {
  for (const auto& mode : kAllModes) {
    const BlockLayout& l = layout(mode);
    // Odd block counts for the 32-formats; 9 blocks run the 4-block
    // unrolled loop of the M = 1 kernels twice and then its remainder.
    for (int k : l.block == 32 ? std::vector<int>{96, 288} : std::vector<int>{512, 768}) {
      array w = random_blocks(mode, 37, k);
      for (int m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 33}) {
        SCOPED_TRACE(mode + " K=" + std::to_string(k) + " M=" + std::to_string(m));
        array x = test::random_array({m, k});
        array y = qmm(x, w, mode);
        EXPECT_EQ(y.shape(), (Shape{m, 37}));
        EXPECT_TRUE(close_product(y, x, w, mode, 2e-6 * std::sqrt(double(k))));
      }
    }
  }
}

// Many rows of x: the packed 8-bit GEMM takes 512 rows per pass over the
// panels (quant_blocks_qmm_int8.cpp), so 600 rows run a second, partial
// pass with a remainder tile.
TEST(QuantBlocks, MatmulManyRowsMatchesFloat64) {
  for (const std::string mode : {"q4_0", "q4_k", "q6_k"}) {
    SCOPED_TRACE(mode);
    const int k = layout(mode).block == 32 ? 96 : 512;
    array w = random_blocks(mode, 37, k);
    array x = test::random_array({600, k});
    EXPECT_TRUE(close_product(qmm(x, w, mode), x, w, mode, 2e-6 * std::sqrt(double(k))));
  }
}

// bfloat16 x through the decode kernels (on AVX512-BF16 CPUs Q4_0, Q4_K and
// Q6_K take quant_blocks_qmv_bf16.cpp's vdpbf16ps kernel): every row count
// of the fused path, odd block counts, sums long enough to show a wrong
// offset or nibble order.
TEST(QuantBlocks, MatmulBf16xMatchesFloat64) {
  for (const auto& mode : kAllModes) {
    const BlockLayout& l = layout(mode);
    int k = l.block == 32 ? 800 : 1280;
    array w = random_blocks(mode, 29, k);
    for (int m : {1, 2, 3, 4, 5, 6, 7, 8, 11}) {
      SCOPED_TRACE(mode + " M=" + std::to_string(m));
      array x = astype(test::random_array({m, k}), bfloat16);
      array y = qmm(x, w, mode);
      EXPECT_EQ(y.dtype(), bfloat16);
      EXPECT_TRUE(close_product(y, x, w, mode, 2.5e-3));  // half a bf16 ulp of the output, and a little
    }
  }
}

TEST(QuantBlocks, MatmulLayoutsAndDtypes) {
  for (const std::string mode : {"q4_0", "q8_0", "q4_k", "q6_k", "q5_1", "q3_k"}) {
    SCOPED_TRACE(mode);
    int k = layout(mode).block == 32 ? 64 : 256;
    array w = random_blocks(mode, 19, k);
    // Transposed x (column stride != 1) and batched x [2, 3, K].
    array xt = transpose(test::random_array({k, 4}));
    EXPECT_TRUE(close_product(qmm(xt, w, mode), xt, w, mode, 1e-5));
    array xb = test::random_array({2, 3, k});
    array yb = qmm(xb, w, mode);
    EXPECT_EQ(yb.shape(), (Shape{2, 3, 19}));
    EXPECT_TRUE(close_product(yb, xb, w, mode, 1e-5));
    array xb2 = test::random_array({4, 5, k});  // 20 rows: the GEMM path
    EXPECT_TRUE(close_product(qmm(xb2, w, mode), xb2, w, mode, 1e-5));
    // A broadcast x (stride 0 rows) and a 1-d x.
    array xbc = broadcast_to(test::random_array({1, k}), {3, k});
    EXPECT_TRUE(close_product(qmm(xbc, w, mode), xbc, w, mode, 1e-5));
    array x1 = test::random_array({k});
    array y1 = qmm(x1, w, mode);
    EXPECT_EQ(y1.shape(), (Shape{19}));
    EXPECT_TRUE(close_product(y1, x1, w, mode, 1e-5));
    // A strided w (every other row).
    array w2 = slice(random_blocks(mode, 38, k), {0, 0}, {38, static_cast<int>(w.shape(1))}, {2, 1});
    EXPECT_TRUE(close_product(qmm(xb, w2, mode), xb, w2, mode, 1e-5));
    // Half-precision x: the output is x's dtype.
    for (Dtype t : {bfloat16, float16, float64}) {
      array xh = astype(test::random_array({3, k}), t);
      array yh = qmm(xh, w, mode);
      EXPECT_EQ(yh.dtype(), t);
      EXPECT_TRUE(close_product(yh, xh, w, mode, t == float64 ? 1e-5 : test::tolerance(t)));
    }
  }
}

TEST(QuantBlocks, Transformations) {
  const std::string mode = "q4_k";
  array w = random_blocks(mode, 11, 256);
  array wd = dequantize(w, mode);
  array x = test::random_array({3, 256});
  array c = test::random_array({3, 11});
  // vjp with respect to x: c @ decoded w.
  auto [outs, grads] = vjp([&](const std::vector<array>& in) { return std::vector<array>{qmm(in[0], w, mode)}; },
                           {x}, {c});
  EXPECT_TRUE(test::all_close(grads[0], test::to_double(matmul(c, wd)), 1e-5, 1e-5));
  // jvp: the product with the tangent.
  array t = test::random_array({3, 256});
  auto [jo, jt] = jvp([&](const std::vector<array>& in) { return std::vector<array>{qmm(in[0], w, mode)}; }, {x}, {t});
  EXPECT_TRUE(close_product(jt[0], t, w, mode, 1e-5));
  // vmap over x's middle axis and over a batch of weights.
  array xb = test::random_array({3, 4, 256});
  array yv = vmap([&](const array& a) { return qmm(a, w, mode); }, 1)(xb);
  EXPECT_TRUE(close_product(reshape(yv, {12, 11}), reshape(moveaxis(xb, 1, 0), {12, 256}), w, mode, 1e-5));
  array ws = stack({w, random_blocks(mode, 11, 256)});
  array yw = vmap([&](const array& a, const array& b) { return qmm(a, b, mode); }, -1, 0)(x, ws);
  // (Mapped weights are decoded and go through matmul: x is not rounded.)
  for (int i = 0; i < 2; ++i) {
    array wi = take(ws, array(i), 0);
    EXPECT_TRUE(test::all_close(take(yw, array(i), 0), test::block_product(test::to_double(x), 256, wi, mode, false),
                                1e-5, 1e-5));
  }
  array yd = vmap([&](const array& a) { return dequantize(a, mode); }, 0)(ws);
  EXPECT_TRUE(test::all_close(take(yd, array(1), 0), test::to_double(dequantize(take(ws, array(1), 0), mode)), 0.0));
  array xq = test::random_array({2, 3, 256});
  array yq = vmap([&](const array& a) { return quantize(a, mode); }, 1)(xq);
  EXPECT_TRUE(test::all_close(take(yq, array(0), 0), test::to_double(quantize(take(xq, array(0), 1), mode)), 0.0));
  // No derivative with respect to the blocks.
  EXPECT_TRUE(test::throws_error(
      [&] {
        vjp([&](const std::vector<array>& in) { return std::vector<array>{qmm(x, in[0], mode)}; }, {w},
            {zeros({3, 11})});
      },
      {"quantized_matmul", "quantized weights"}));
}

TEST(QuantBlocks, Errors) {
  array w = random_blocks("q4_0", 4, 64);
  array x = test::random_array({2, 64});
  EXPECT_TRUE(test::throws_error([&] { quantize(test::random_array({2, 48}), "q4_0"); },
                                 {"[quantize]", "q4_0", "multiple of the block size 32", "(2,48)"}));
  EXPECT_TRUE(test::throws_error([&] { quantize(test::random_array({2, 256}, int32), "q4_k"); },
                                 {"[quantize]", "floating-point", "int32"}));
  EXPECT_TRUE(test::throws_error([&] { dequantize(slice(w, {0, 0}, {4, 35}), "q4_0"); },
                                 {"[dequantize]", "18-byte block", "(4,35)"}));
  EXPECT_TRUE(test::throws_error([&] { dequantize(astype(w, int32), "q4_0"); }, {"[dequantize]", "uint8", "int32"}));
  EXPECT_TRUE(test::throws_error([&] { dequantize(w, "q4_0", int32); }, {"[dequantize]", "floating-point", "int32"}));
  EXPECT_TRUE(test::throws_error([&] { detail::block_quantized_matmul(x, w, false, "q4_0", {}); },
                                 {"[quantized_matmul]", "transpose"}));
  EXPECT_TRUE(test::throws_error([&] { qmm(test::random_array({2, 32}), w, "q4_0"); },
                                 {"[quantized_matmul]", "64", "(2,32) float32", "(4,36) uint8"}));
  EXPECT_TRUE(test::throws_error([&] { qmm(astype(x, int32), w, "q4_0"); }, {"[quantized_matmul]", "floating-point"}));
  EXPECT_TRUE(test::throws_error([&] { qmm(x, reshape(w, {2, 2, 36}), "q4_0"); }, {"[quantized_matmul]", "2-d"}));
  EXPECT_TRUE(test::throws_error([&] { qmm(x, w, "q7_0"); }, {"[quantized_matmul]", "unknown mode 'q7_0'"}));
  EXPECT_FALSE(detail::is_block_format("affine"));
  EXPECT_TRUE(detail::is_block_format("q6_k"));
}

// fast::swiglu_quantized_matmul / add_rms_norm_quantized_matmul on the CPU
// are the ops they stand for (the fused node is built for GPU streams only:
// tests/cuda/test_cuda_quant_blocks.cpp), for block and affine weights, and
// bad arguments are a kiln::Error naming the op.
TEST(QuantBlocks, FusedProductsAreTheirOpsOnTheCpu) {
  using test::random_array;
  array wb = detail::block_quantize(random_array({9, 512}), "q4_k", Device::cpu)[0];
  auto qa = quantize(random_array({9, 512}), 64, 4);
  for (Dtype t : {float32, bfloat16}) {
    array gate = astype(random_array({2, 512}), t), up = astype(random_array({2, 512}), t);
    array y =
        fast::swiglu_quantized_matmul(gate, up, wb, array({}), std::nullopt, true, std::nullopt, std::nullopt, "q4_k");
    array ref = quantized_matmul(multiply(silu(gate), up), wb, array({}), std::nullopt, true, std::nullopt,
                                 std::nullopt, "q4_k");
    EXPECT_TRUE(test::all_close(y, test::to_double(ref), 0, 0)) << dtype_name(t);
    array ya = fast::swiglu_quantized_matmul(gate, up, qa[0], qa[1], qa[2], true, 64, 4, "affine");
    EXPECT_TRUE(test::all_close(
        ya, test::to_double(quantized_matmul(multiply(silu(gate), up), qa[0], qa[1], qa[2], true, 64, 4, "affine")), 0,
        0));
    array nw = astype(random_array({512}, float32, 0.5, 1.5), t);
    auto [h, yn] = fast::add_rms_norm_quantized_matmul(gate, up, nw, 1e-5f, wb, array({}), std::nullopt, true,
                                                       std::nullopt, std::nullopt, "q4_k");
    auto [h_ref, x_ref] = fast::add_rms_norm(gate, up, nw, 1e-5f);
    EXPECT_TRUE(test::all_close(h, test::to_double(h_ref), 0, 0));
    EXPECT_TRUE(test::all_close(
        yn,
        test::to_double(quantized_matmul(x_ref, wb, array({}), std::nullopt, true, std::nullopt, std::nullopt, "q4_k")),
        0, 0));
  }
  array x = random_array({1, 512}), bad = random_array({1, 256});
  auto throws_naming = [](const char* op, auto&& f) {
    try {
      f();
      ADD_FAILURE() << op << " did not throw";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(op), std::string::npos) << e.what();
    }
  };
  throws_naming("swiglu_quantized_matmul", [&] {
    fast::swiglu_quantized_matmul(bad, bad, wb, array({}), std::nullopt, true, std::nullopt, std::nullopt, "q4_k");
  });
  throws_naming("swiglu_quantized_matmul", [&] {
    fast::swiglu_quantized_matmul(x, bad, wb, array({}), std::nullopt, true, std::nullopt, std::nullopt, "q4_k");
  });
  throws_naming("add_rms_norm_quantized_matmul", [&] {
    fast::add_rms_norm_quantized_matmul(x, x, random_array({7}), 1e-5f, wb, array({}), std::nullopt, true, std::nullopt,
                                        std::nullopt, "q4_k");
  });
}

}  // namespace
}  // namespace kiln
