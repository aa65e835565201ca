// D4 quantized matvec on llama.cpp's block formats: y[1, N] = x[1, K] w^T
// with w [N, K] in Q4_0, Q8_0, Q4_K or Q6_K blocks, read once (bytes = the
// blocks plus x and y), for float32 and bfloat16 x. On the CPU both take the
// 8-bit-x kernels (quant_blocks_qmv_int8.cpp); with KILN_BLOCK_X=float the
// float ones (bfloat16 x: vdpbf16ps on AVX512-BF16 CPUs). The peer is OpenBLAS's sgemv on the same weights
// decoded to float32 (prepared outside the timing): it checks Kiln's
// numbers, and its time is what the unquantized weights cost.
// qmm_*: prefill, M = 512 rows of float32 x against 4096 x 4096 blocks
// (compute bound: the packed 8-bit GEMM of quant_blocks_qmm_int8.cpp on
// AVX-512 VNNI CPUs); the peer is OpenBLAS's sgemm on the decoded weights.
#include <cblas.h>

#include <cstring>
#include <random>

#include "backend/cpu/quant_blocks_cpu.h"
#include "bench.h"
#include "core/block_format.h"
#include "core/quantize_blocks.h"

namespace kiln::bench {
namespace {

// The fp16 fields (d, and dmin / m) of each format's block.
std::vector<int> scale_offsets(const std::string& mode) {
  if (mode == "q4_0" || mode == "q5_0" || mode == "q8_0") return {0};
  if (mode == "q4_1" || mode == "q5_1" || mode == "q4_k" || mode == "q5_k") return {0, 2};
  if (mode == "q2_k") return {80, 82};
  if (mode == "q3_k") return {108};
  return {208};  // q6_k
}

const BlockLayout& layout_of(const std::string& mode) {
  for (const auto& l : kBlockLayouts) {
    if (mode == l.name) return l;
  }
  throw Error("[bench] unknown block format " + mode);
}

}  // namespace

array random_block_weights(const std::string& mode, int64_t n, int64_t k, uint64_t seed) {
  const BlockLayout& l = layout_of(mode);
  const int64_t blocks = n * (k / l.block);
  std::vector<uint8_t> bytes(blocks * l.bytes);
  std::mt19937_64 gen(seed);
  for (auto& b : bytes) b = static_cast<uint8_t>(gen());
  // Small finite scales keep the products O(1).
  std::uniform_real_distribution<float> scale(1e-3f, 1e-2f);
  for (int64_t b = 0; b < blocks; ++b) {
    for (int off : scale_offsets(mode)) {
      uint16_t h = float16_t(scale(gen)).bits;
      std::memcpy(&bytes[b * l.bytes + off], &h, 2);
    }
  }
  array w(bytes, {static_cast<int>(n), static_cast<int>(k / l.block * l.bytes)}, uint8);
  w.eval();
  return w;
}

void add_quant_block_drills(std::vector<DrillSpec>& out, bool quick) {
  const int64_t k = quick ? 1024 : 4096, n = quick ? 2048 : 14336;
  for (Dtype xt : {float32, bfloat16})
  for (const char* mode : {"q4_0", "q8_0", "q4_k", "q6_k"}) {
    const BlockLayout& l = layout_of(mode);
    const double bytes = static_cast<double>(n) * (k / l.block) * l.bytes + size_of(xt) * (k + n);
    out.push_back({"D4", std::string("qmv_") + mode, xt, {k, n}, bytes, 2.0 * k * n, [=] {
      auto st = std::make_shared<DrillState>();
      array x = random_input({1, static_cast<int>(k)}, xt, 41, -1, 1);
      // The peer multiplies the same values in float32.
      array xf = astype(x, float32);
      xf.eval();
      st->inputs = {x, random_block_weights(mode, n, k, 42)};
      array wd = detail::block_dequantize(st->inputs[1], mode, float32, {});
      wd.eval();
      st->inputs.push_back(wd);
      st->inputs.push_back(xf);
      st->out_elements = n;
      DrillCase c = kiln_case(st, [mode](const std::vector<array>& in) {
        return detail::block_quantized_matmul(in[0], in[1], true, mode, {});
      });
      st->ref = make_float_buffer(n);
      c.peer_name = "openblas_sgemv_decoded";
      c.run_peer = [st, k, n] {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, st->inputs[2].data<float>(), k,
                    st->inputs[3].data<float>(), 1, 0.0f, st->ref.get(), 1);
      };
      // bf16 x gives a bf16 y: its rounding (half an ulp, 2^-9) on top. On
      // the CPU x is rounded to 8 bits (include/kiln/ops.h): each x moves by
      // up to 1/254 of its block's max |x|, errors of that order relative
      // to y (measured ~4e-3 of max |y| with these uniform x).
      const bool x8 = cpu::block_x_int8();
      compare_with_float_reference(c, st, xt == float32 && !x8 ? 1e-4 : 1e-2);
      return c;
    }});
  }
  const int64_t m = quick ? 64 : 512, kq = quick ? 1024 : 4096, nq = quick ? 1024 : 4096;
  for (const char* mode : {"q4_0", "q8_0", "q4_k"}) {
    const BlockLayout& l = layout_of(mode);
    const double bytes = static_cast<double>(nq) * (kq / l.block) * l.bytes + 4.0 * (m * kq + m * nq);
    out.push_back({"D4", std::string("qmm_") + mode, float32, {m, kq, nq}, bytes, 2.0 * m * kq * nq, [=] {
      auto st = std::make_shared<DrillState>();
      st->inputs = {random_input({static_cast<int>(m), static_cast<int>(kq)}, float32, 43, -1, 1),
                    random_block_weights(mode, nq, kq, 44)};
      array wd = detail::block_dequantize(st->inputs[1], mode, float32, {});
      wd.eval();
      st->inputs.push_back(wd);
      st->out_elements = m * nq;
      DrillCase c = kiln_case(st, [mode](const std::vector<array>& in) {
        return detail::block_quantized_matmul(in[0], in[1], true, mode, {});
      });
      st->ref = make_float_buffer(m * nq);
      c.peer_name = "openblas_sgemm_decoded";
      c.run_peer = [st, m, kq, nq] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, nq, kq, 1.0f, st->inputs[0].data<float>(), kq,
                    st->inputs[2].data<float>(), kq, 0.0f, st->ref.get(), nq);
      };
      compare_with_float_reference(c, st, cpu::block_x_int8() ? 1e-2 : 1e-4);
      return c;
    }});
    out.back().int8_products = cpu::block_x_int8();
  }
}

}  // namespace kiln::bench
