// D5 attention on the CPU (fast::scaled_dot_product_attention, bf16, head
// dim 128): prefill, causal and full, and decode with 32 query heads over 8
// KV heads (kv 4096 and 32768), whose floor is the K/V bytes read once.
// Prefill sizes are smaller than the GPU's h32 s4096 (minutes on a few
// cores). The peer is Kiln's own plain-op fallback (matmul, softmax, matmul
// with the full score matrix): what the fused kernel saves. MLX's CPU SDPA
// on the same shapes: kiln bench --mlx. D5 decoder_layer (one decode
// step through a whole layer) is built here for both backends; its peer on
// the CPU is the same step not compiled.
#include <cmath>
#include <memory>

#include "bench.h"
#include "core/primitives.h"
#include "kiln/compile.h"
#include "kiln/llm.h"

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

llm::ModelConfig decoder_layer_config(bool quick) {
  llm::ModelConfig c;
  c.vocab_size = 256;
  c.hidden_size = quick ? 1024 : 4096;
  c.intermediate_size = quick ? 2816 : 14336;
  c.num_layers = 1;
  c.num_heads = quick ? 8 : 32;
  c.num_kv_heads = quick ? 2 : 8;
  c.head_dim = 128;
  c.rope_theta = 500000.0f;
  c.max_position_embeddings = 1 << 20;
  return c;
}

}  // namespace

std::vector<int64_t> decoder_layer_shape(int kv, bool quick) {
  const llm::ModelConfig c = decoder_layer_config(quick);
  return {c.hidden_size, c.intermediate_size, c.num_heads, c.num_kv_heads, kv};
}

void decoder_layer_cost(int kv, bool quick, double& bytes, double& flops) {
  const llm::ModelConfig c = decoder_layer_config(quick);
  const double h = c.hidden_size, hd = c.resolved_head_dim(), q = c.num_heads * hd, kvw = c.num_kv_heads * hd;
  // q, k, v, o; gate, up, down; embedding and logits; three norms.
  const double params = h * (q + 2 * kvw) + q * h + 3 * h * c.intermediate_size + 2.0 * c.vocab_size * h + 3 * h;
  const double kv_bytes = 2.0 * 2.0 * kvw * kv;
  bytes = 2.0 * params + kv_bytes;
  flops = 2.0 * params + 4.0 * c.num_heads * hd * kv;
}

DecoderLayerCase make_decoder_layer(int kv, bool quick) {
  const llm::ModelConfig c = decoder_layer_config(quick);
  auto model = std::make_shared<llm::Model>(llm::Model::random(c, 5, bfloat16));
  DecoderLayerCase d;
  d.model = model;
  d.eager_step = [m = model.get()](const std::vector<array>& in) { return m->decode_step(in); };
  d.step = compile(d.eager_step);
  const int hd = c.resolved_head_dim();
  d.inputs = {array({7}, {1, 1}, int32), array({kv - 1}, {1}, int32),
              random_input({1, c.num_kv_heads, kv, hd}, bfloat16, 71, -1, 1),
              random_input({1, c.num_kv_heads, kv, hd}, bfloat16, 72, -1, 1)};
  return d;
}

void add_decoder_layer_drills(std::vector<DrillSpec>& out, bool quick) {
  for (int kv : {quick ? 512 : 4096}) {
    double bytes = 0, flops = 0;
    decoder_layer_cost(kv, quick, bytes, flops);
    out.push_back({"D5", "decoder_layer", bfloat16, decoder_layer_shape(kv, quick), bytes, flops, [=] {
      auto d = std::make_shared<DecoderLayerCase>(make_decoder_layer(kv, quick));
      auto st = std::make_shared<DrillState>();
      st->inputs = d->inputs;
      DrillCase c = kiln_case(st, [d](const std::vector<array>& in) { return d->step(in)[0]; });
      auto peer_out = std::make_shared<std::optional<array>>();
      c.peer_name = "kiln_uncompiled";
      c.run_peer = [d, st, peer_out] {
        peer_out->reset();
        array y = d->eager_step(st->inputs)[0];
        eval(y);
        *peer_out = y;
      };
      c.tolerance = kTolerance;
      c.peer_difference = [st, peer_out] {
        array diff = max(abs(*st->out - **peer_out));
        array ref = max(abs(**peer_out));
        return static_cast<double>(diff.item<float>()) / std::max(1e-30, static_cast<double>(ref.item<float>()));
      };
      return c;
    }});
  }
}

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
  add_decoder_layer_drills(out, quick);
}

}  // namespace kiln::bench
