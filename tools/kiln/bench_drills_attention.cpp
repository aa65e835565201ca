// D5 attention on the CPU (fast::scaled_dot_product_attention, bf16, head
// dim 128): prefill, causal and full, and decode with 32 query heads over 8
// KV heads (kv 4096 and 32768), whose floor is the K/V bytes read once.
// Prefill sizes are smaller than the GPU's h32 s4096 (minutes on a few
// cores). The peer is Kiln's own plain-op fallback (matmul, softmax, matmul
// with the full score matrix): what the fused kernel saves. MLX's CPU SDPA
// on the same shapes: bench/peers/mlx_sdpa.py.
#include <cmath>

#include "bench.h"
#include "core/primitives.h"

namespace kiln::bench {

namespace {

constexpr double kTolerance = 3e-2;  // bf16 outputs; the fallback also rounds scores and probabilities

void add_sdpa(std::vector<DrillSpec>& out, const std::string& name, std::vector<int64_t> shape, int heads, int kv_heads,
              int q_len, int kv_len, bool causal, double bytes, double flops) {
  const int d = 128;
  out.push_back({"D5", name, bfloat16, std::move(shape), bytes, flops, [=] {
    auto st = std::make_shared<DrillState>();
    st->inputs = {random_input({1, heads, q_len, d}, bfloat16, 31, -1, 1),
                  random_input({1, kv_heads, kv_len, d}, bfloat16, 32, -1, 1),
                  random_input({1, kv_heads, kv_len, d}, bfloat16, 33, -1, 1)};
    st->out_elements = static_cast<size_t>(heads) * q_len * d;
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    const std::string mode = causal ? "causal" : "";
    DrillCase c = kiln_case(st, [=](const std::vector<array>& in) {
      return fast::scaled_dot_product_attention(in[0], in[1], in[2], scale, mode);
    });
    auto peer_out = std::make_shared<std::optional<array>>();
    c.peer_name = "kiln_fallback";
    c.run_peer = [=] {
      peer_out->reset();
      array y = fast::detail::sdpa_fallback(st->inputs, scale, causal, false, false, default_stream(Device::cpu))[0];
      eval(y);
      *peer_out = y;
    };
    c.tolerance = kTolerance;
    c.peer_difference = [=] {
      array diff = max(abs(astype(*st->out, float32) - astype(**peer_out, float32)));
      array ref = max(abs(astype(**peer_out, float32)));
      return static_cast<double>(diff.item<float>()) / std::max(1e-30, static_cast<double>(ref.item<float>()));
    };
    return c;
  }});
}

}  // namespace

void add_attention_drills(std::vector<DrillSpec>& out, bool quick) {
  const int seq = quick ? 256 : 1024, heads = quick ? 2 : 8, d = 128;
  for (bool causal : {true, false}) {
    const double flops = 4.0 * heads * seq * static_cast<double>(seq) * d * (causal ? 0.5 : 1.0);
    add_sdpa(out, causal ? "sdpa_prefill_causal" : "sdpa_prefill", {1, heads, seq, d}, heads, heads, seq, seq, causal,
             4.0 * 2.0 * heads * seq * d, flops);
  }
  for (int kv : quick ? std::vector<int>{512, 2048} : std::vector<int>{4096, 32768}) {
    add_sdpa(out, "sdpa_decode_gqa", {32, 8, kv, d}, 32, 8, 1, kv, false, 2.0 * (2.0 * 8 * kv * d + 2.0 * 32 * d),
             4.0 * 32 * kv * d);
  }
}

}  // namespace kiln::bench
