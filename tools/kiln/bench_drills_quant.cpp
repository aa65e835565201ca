// D4 quantized products on the CPU: qmv_affine4 / qmv_affine8 (decode, one
// row of x against 4-bit / 8-bit affine weights in the [N, K] layout of a
// linear layer, bound by reading the packed bytes) and qmm_affine4 (prefill,
// M = 512, compute bound). bytes = packed weights + scales + biases, the
// bytes that must stream per token. The in-process peer is Kiln's own
// dequantize-then-matmul (what the fused kernels replace); MLX's CPU
// quantized_matmul is timed beside each row with --mlx (bench/peers/mlx_peers.py).
// qmv_mxfp4 / qmv_mxfp8: the same decode product in MLX's microscaling
// modes (group 32, one e8m0 byte per group, no biases).
#include <memory>

#include "bench.h"

namespace kiln::bench {
namespace {

constexpr int kGroup = 64;

void add_quantized(std::vector<DrillSpec>& out, const std::string& name, int bits, int64_t m, int64_t k, int64_t n) {
  const double weight_bytes = static_cast<double>(n) * k * bits / 8 + 2.0 * 2 * n * (k / kGroup);  // bf16 scales, biases
  const double flops = 2.0 * m * k * n;
  out.push_back({"D4", name, bfloat16, {m, k, n}, weight_bytes, flops, [=] {
    auto st = std::make_shared<DrillState>();
    array w = random_input({static_cast<int>(n), static_cast<int>(k)}, bfloat16, 31, -0.05f, 0.05f);
    auto q = quantize(w, kGroup, bits);
    eval(q);
    array x = random_input({static_cast<int>(m), static_cast<int>(k)}, bfloat16, 32, -1, 1);
    st->inputs = {x, q[0], q[1], q[2]};
    st->out_elements = m * n;
    DrillCase c = kiln_case(st, [bits](const std::vector<array>& in) {
      return quantized_matmul(in[0], in[1], in[2], in[3], true, kGroup, bits);
    });
    st->ref = make_float_buffer(m * n);
    c.peer_name = "kiln_dequantize_matmul";
    c.run_peer = [st, bits] {
      const auto& in = st->inputs;
      array y = astype(matmul(in[0], transpose(dequantize(in[1], in[2], in[3], kGroup, bits))), float32);
      y.eval();
      std::copy(y.data<float>(), y.data<float>() + y.size(), st->ref.get());
    };
    compare_with_float_reference(c, st, 2e-2);
    return c;
  }});
}

// A microscaling mode ("mxfp4", "mxfp8"): bytes = packed codes + scale bytes.
void add_microscaled(std::vector<DrillSpec>& out, const std::string& name, const std::string& mode, int bits,
                     int64_t m, int64_t k, int64_t n) {
  const double weight_bytes = static_cast<double>(n) * k * bits / 8 + static_cast<double>(n) * (k / 32);
  const double flops = 2.0 * m * k * n;
  out.push_back({"D4", name, bfloat16, {m, k, n}, weight_bytes, flops, [=] {
    auto st = std::make_shared<DrillState>();
    array w = random_input({static_cast<int>(n), static_cast<int>(k)}, bfloat16, 33, -0.05f, 0.05f);
    auto q = quantize(w, std::nullopt, std::nullopt, mode);
    eval(q);
    array x = random_input({static_cast<int>(m), static_cast<int>(k)}, bfloat16, 34, -1, 1);
    st->inputs = {x, q[0], q[1]};
    st->out_elements = m * n;
    DrillCase c = kiln_case(st, [mode](const std::vector<array>& in) {
      return quantized_matmul(in[0], in[1], in[2], std::nullopt, true, std::nullopt, std::nullopt, mode);
    });
    st->ref = make_float_buffer(m * n);
    c.peer_name = "kiln_dequantize_matmul";
    c.run_peer = [st, mode] {
      const auto& in = st->inputs;
      array d = dequantize(in[1], in[2], std::nullopt, std::nullopt, std::nullopt, mode);
      array y = astype(matmul(in[0], transpose(d)), float32);
      y.eval();
      std::copy(y.data<float>(), y.data<float>() + y.size(), st->ref.get());
    };
    compare_with_float_reference(c, st, 2e-2);
    return c;
  }});
}

}  // namespace

void add_quant_drills(std::vector<DrillSpec>& out, bool quick) {
  const int64_t k = quick ? 1024 : 4096, n = quick ? 2048 : 14336;
  add_quantized(out, "qmv_affine4", 4, 1, k, n);
  add_quantized(out, "qmv_affine8", 8, 1, k, n);
  add_quantized(out, "qmm_affine4", 4, quick ? 64 : 512, k, n);
  add_microscaled(out, "qmv_mxfp4", "mxfp4", 4, 1, k, n);
  add_microscaled(out, "qmv_mxfp8", "mxfp8", 8, 1, k, n);
}

}  // namespace kiln::bench
