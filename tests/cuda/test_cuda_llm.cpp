// The LLM runtime on the GPU (CTest label `cuda`): a random Llama / Qwen 3
// in float32, bfloat16 and with Q8_0 / Q4_0 block weights gives the CPU's
// logits (within the type's rounding) and, at float32, the CPU's greedy ids
// through the pipelined decode loop; the compiled decode step (llm::Decoder)
// gives the op-by-op step's ids and logits on the GPU.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/llm.h"
#include "quant_blocks_ref.h"

namespace kiln::test {
namespace {

using llm::Model;

llm::ModelConfig tiny(const std::string& arch) {
  llm::ModelConfig c;
  c.architecture = arch;
  c.vocab_size = 160;
  c.hidden_size = 128;
  c.intermediate_size = 256;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.qk_norm = arch == "qwen3";
  c.head_dim = arch == "qwen3" ? 64 : 0;
  return c;
}

const std::vector<int32_t> kPrompt = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26, 43};

std::vector<int32_t> greedy(const Model& m, Device d, int n) {
  llm::GenerateOptions opt;
  opt.max_tokens = n;
  opt.stream = d;
  std::vector<int32_t> out;
  llm::generate(m, kPrompt, opt, [&](int32_t id) {
    out.push_back(id);
    return true;
  });
  return out;
}

array last_logits(const Model& m, Device d) {
  StreamContext ctx(d);
  auto caches = m.make_caches();
  array l = m.forward(array(kPrompt, {1, static_cast<int>(kPrompt.size())}), caches, true);
  eval(l);
  return l;
}

// The same random weights with every matrix in a block format.
Model blocks_of(const llm::ModelConfig& c, const std::string& mode) {
  llm::TensorMap t;
  llm::BlockModes modes;
  int n = 0;
  auto add = [&](const std::string& name, Shape s, bool matrix) {
    array w = matrix ? random::normal(s, float32, 0.0f, 0.1f, random::key(++n)) : ones(s);
    if (matrix) {
      w = quantize(w, std::nullopt, std::nullopt, mode)[0];
      modes.emplace(name, mode);
    }
    t.emplace(name, w);
  };
  const int D = c.hidden_size, F = c.intermediate_size, hd = c.resolved_head_dim();
  add("model.embed_tokens.weight", {c.vocab_size, D}, true);
  add("model.norm.weight", {D}, false);
  add("lm_head.weight", {c.vocab_size, D}, true);
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {D}, false);
    add(p + "post_attention_layernorm.weight", {D}, false);
    add(p + "self_attn.q_proj.weight", {c.num_heads * hd, D}, true);
    add(p + "self_attn.k_proj.weight", {c.num_kv_heads * hd, D}, true);
    add(p + "self_attn.v_proj.weight", {c.num_kv_heads * hd, D}, true);
    add(p + "self_attn.o_proj.weight", {D, c.num_heads * hd}, true);
    add(p + "mlp.gate_proj.weight", {F, D}, true);
    add(p + "mlp.up_proj.weight", {F, D}, true);
    add(p + "mlp.down_proj.weight", {D, F}, true);
    if (c.qk_norm) {
      add(p + "self_attn.q_norm.weight", {hd}, false);
      add(p + "self_attn.k_norm.weight", {hd}, false);
    }
  }
  return Model::from_tensors(c, t, std::nullopt, std::nullopt, modes);
}

float max_abs_diff(const array& a, const array& b) { return max(abs(a - b)).item<float>(); }

struct Steps {
  std::vector<int32_t> ids;
  std::vector<array> logits;
  int traces = 0;
};

// n greedy steps through an llm::Decoder on device d after prefilling kPrompt.
Steps decode_steps(const Model& m, Device d, bool compiled, int n) {
  StreamContext ctx(d);
  auto caches = m.make_caches();
  array token = astype(argmax(m.forward(array(kPrompt, {1, static_cast<int>(kPrompt.size())}), caches, true), -1), int32);
  llm::Decoder dec(m, std::move(caches), compiled);
  Steps s;
  for (int i = 0; i < n; ++i) {
    auto [logits, next] = dec.step(token);
    eval({logits, next});
    s.logits.push_back(logits);
    s.ids.push_back(next.item<int32_t>());
    token = next;
  }
  s.traces = dec.traces();
  return s;
}

}  // namespace

TEST(CudaLlm, GreedyIdsAndLogitsMatchTheCpu) {
  if (!is_available(Device::gpu)) GTEST_SKIP() << "no GPU available for the cuda suite";
  for (const char* arch : {"llama", "qwen3"}) {
    Model m = Model::random(tiny(arch), 21);
    EXPECT_LT(max_abs_diff(last_logits(m, Device::gpu), last_logits(m, Device::cpu)), 1e-3f) << arch;
    EXPECT_EQ(greedy(m, Device::gpu, 24), greedy(m, Device::cpu, 24)) << arch;
  }
}

TEST(CudaLlm, HalfAndBlockWeightsMatchTheCpu) {
  if (!is_available(Device::gpu)) GTEST_SKIP() << "no GPU available for the cuda suite";
  CpuBlockXExact exact_x;  // the GPU multiplies x as it is; so does the CPU here
  Model bf16 = Model::random(tiny("llama"), 4, bfloat16);
  EXPECT_LT(max_abs_diff(last_logits(bf16, Device::gpu), last_logits(bf16, Device::cpu)), 5e-2f);
  for (const char* mode : {"q8_0", "q4_0"}) {
    Model q = blocks_of(tiny("llama"), mode);
    EXPECT_LT(max_abs_diff(last_logits(q, Device::gpu), last_logits(q, Device::cpu)), 2e-3f) << mode;
    const auto ids = greedy(q, Device::gpu, 8);
    EXPECT_EQ(ids.size(), 8u) << mode;
    // bfloat16 activations (the runtime's choice on the GPU): the GPU's
    // tensor-core QMV and attention against the CPU in the same dtype.
    Model h = blocks_of(tiny("llama"), mode);
    h.set_activation_dtype(bfloat16);
    const array hc = last_logits(h, Device::cpu);
    const float hs = max(abs(hc)).item<float>();
    EXPECT_GT(hs, 0.0f);
    EXPECT_LT(max_abs_diff(last_logits(h, Device::gpu), hc), 0.02f * hs) << mode << " bf16, logits up to " << hs;
    EXPECT_EQ(greedy(h, Device::gpu, 8).size(), 8u) << mode << " bf16";
  }
}

TEST(CudaLlm, CompiledDecodeMatchesOpByOpOnTheGpu) {
  if (!is_available(Device::gpu)) GTEST_SKIP() << "no GPU available for the cuda suite";
  CpuBlockXExact exact_x;  // the GPU multiplies x as it is; so does the CPU here
  llm::ModelConfig mistral = tiny("llama");
  mistral.sliding_window = 5;
  std::vector<std::pair<std::string, Model>> models;
  models.emplace_back("llama", Model::random(tiny("llama"), 31));
  models.emplace_back("qwen3", Model::random(tiny("qwen3"), 32));
  models.emplace_back("mistral (window 5)", Model::random(mistral, 33));
  models.emplace_back("llama q8_0", blocks_of(tiny("llama"), "q8_0"));
  for (const auto& [name, m] : models) {
    const Steps op_by_op = decode_steps(m, Device::gpu, false, 40), compiled = decode_steps(m, Device::gpu, true, 40);
    EXPECT_EQ(compiled.ids, op_by_op.ids) << name;
    EXPECT_EQ(compiled.traces, 1) << name;
    for (size_t i = 0; i < compiled.logits.size(); ++i) {
      EXPECT_LT(max_abs_diff(compiled.logits[i], op_by_op.logits[i]), 1e-4f) << name << " step " << i;
    }
    EXPECT_EQ(compiled.ids, decode_steps(m, Device::cpu, true, 40).ids) << name << ": GPU vs CPU";
  }
  // Stacked projections and bfloat16 activations over Q4_0 (the runtime's GPU
  // choices): the tensor-core
  // QMV and decode attention (skipping the buffer past the position) against
  // the op-by-op step over exactly the cached keys, within bf16 rounding,
  // over the steps both fed the same tokens (a near-tie of a random model
  // may pick another id under another rounding).
  Model h = blocks_of(tiny("llama"), "q4_0");
  {
    StreamContext gpu(Device::gpu);
    h.fuse_projections();  // the runtime's GPU set-up
  }
  h.set_activation_dtype(bfloat16);
  const Steps op_by_op = decode_steps(h, Device::gpu, false, 40), compiled = decode_steps(h, Device::gpu, true, 40);
  EXPECT_EQ(compiled.traces, 1);
  float worst = 0.0f, scale = 0.0f;
  size_t same = 0;
  for (size_t i = 0; i < compiled.logits.size(); ++i) {
    worst = std::max(worst, max_abs_diff(compiled.logits[i], op_by_op.logits[i]));
    scale = std::max(scale, max(abs(op_by_op.logits[i])).item<float>());
    ++same;
    if (compiled.ids[i] != op_by_op.ids[i]) break;
  }
  EXPECT_GE(same, 8u);
  EXPECT_GT(scale, 0.0f);
  EXPECT_LT(worst, 0.05f * scale);
}

}  // namespace kiln::test
