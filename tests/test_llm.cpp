// The LLM runtime on random-weight models (no files, no python): the
// forward pass against a plain-op reference, cached decoding against the
// full sequence, chunked prefill, greedy generation, quantized weights,
// config parsing and argument errors.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/fast.h"
#include "kiln/kiln.h"
#include "kiln/llm.h"
#include "quant_blocks_ref.h"

using namespace kiln;
using namespace kiln::llm;

namespace {

ModelConfig tiny(const std::string& arch) {
  ModelConfig c;
  c.architecture = arch;
  c.vocab_size = 97;
  c.hidden_size = 48;
  c.intermediate_size = 80;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = arch == "llama" ? 2 : 1;
  c.head_dim = arch == "qwen3" ? 16 : 0;
  c.attention_bias = arch == "qwen2";
  c.qk_norm = arch == "qwen3";
  c.tie_word_embeddings = arch == "qwen2";
  return c;
}

std::vector<float> to_vector(const array& a) {
  array f = astype(a, float32);
  eval(f);
  return std::vector<float>(f.data<float>(), f.data<float>() + f.size());
}

float max_abs_diff(const array& a, const array& b) {
  return max(abs(astype(a, float32) - astype(b, float32))).item<float>();
}

array tokens_of(const std::vector<int32_t>& ids) { return array(ids, {1, static_cast<int>(ids.size())}); }

const std::vector<int32_t> kPrompt = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46};

}  // namespace

TEST(LlmModel, CachedDecodeMatchesTheFullSequence) {
  for (const char* arch : {"llama", "qwen2", "qwen3"}) {
    Model m = Model::random(tiny(arch), 7);
    auto full_caches = m.make_caches();
    array full = m.forward(tokens_of(kPrompt), full_caches);  // [1, T, V]
    ASSERT_EQ(full.shape(), (Shape{1, static_cast<int>(kPrompt.size()), 97}));
    auto caches = m.make_caches();
    std::vector<int32_t> head(kPrompt.begin(), kPrompt.end() - 3);
    array part = m.forward(tokens_of(head), caches);
    EXPECT_LT(max_abs_diff(part, slice(full, {0, 0, 0}, {1, static_cast<int>(head.size()), 97})), 1e-5f) << arch;
    for (size_t t = head.size(); t < kPrompt.size(); ++t) {
      array step = m.forward(tokens_of({kPrompt[t]}), caches);
      const int i = static_cast<int>(t);
      EXPECT_LT(max_abs_diff(step, slice(full, {0, i, 0}, {1, i + 1, 97})), 1e-5f) << arch << " position " << t;
    }
    EXPECT_EQ(caches[0].offset(), static_cast<int>(kPrompt.size()));
  }
}

// Model::random with a block format: the same draws as the float model,
// every matrix stored quantized (fewer bytes), logits close to the float
// model's (`kiln bench llm -m random:SHAPE:TYPE` builds models this way).
TEST(LlmModel, RandomInABlockFormat) {
  ModelConfig c = tiny("llama");
  c.hidden_size = 64;
  c.intermediate_size = 96;  // K of every matrix a multiple of 32
  Model f = Model::random(c, 3);
  Model q = Model::random(c, 3, float32, "q8_0");
  EXPECT_LT(q.weight_bytes() * 3, f.weight_bytes());
  auto cf = f.make_caches(), cq = q.make_caches();
  array lf = f.forward(tokens_of(kPrompt), cf), lq = q.forward(tokens_of(kPrompt), cq);
  const float scale = max(abs(lf)).item<float>();
  EXPECT_GT(scale, 0.f);
  EXPECT_LT(max_abs_diff(lf, lq), 0.05f * scale);
}

// A quantized model's activations in bfloat16 / float16 (what `kiln
// generate` picks on the GPU): the residual stream, the KV cache and the
// norms run in that dtype, the logits stay float32 and close to the
// float32-activation model's; a float-weight model refuses.
TEST(LlmModel, QuantizedModelTakesAnActivationDtype) {
  ModelConfig c = tiny("qwen2");  // biases and a tied embedding
  c.hidden_size = 64;
  c.intermediate_size = 96;
  Model q = Model::random(c, 5, float32, "q8_0");
  EXPECT_TRUE(q.quantized());
  EXPECT_FALSE(q.activation_dtype().has_value());
  auto c32 = q.make_caches();
  array l32 = q.forward(tokens_of(kPrompt), c32);
  const float scale = max(abs(l32)).item<float>();
  for (Dtype t : {bfloat16, float16}) {
    Model h = Model::random(c, 5, float32, "q8_0");
    h.set_activation_dtype(t);
    EXPECT_EQ(h.activation_dtype(), t);
    auto ch = h.make_caches();
    array lh = h.forward(tokens_of(kPrompt), ch);
    EXPECT_EQ(lh.dtype(), float32);
    EXPECT_EQ(ch[0].key_buffer()->dtype(), t) << dtype_name(t);
    EXPECT_LT(max_abs_diff(lh, l32), 0.05f * scale) << dtype_name(t);
  }
  Model f = Model::random(c, 5);
  EXPECT_FALSE(f.quantized());
  EXPECT_THROW(f.set_activation_dtype(bfloat16), Error);
  EXPECT_THROW(q.set_activation_dtype(int32), Error);
}

// Stacked q/k/v and gate/up matrices (what the runtime does on the GPU):
// the same logits, float and block weights, biases (Qwen 2) and q/k norms
// (Qwen 3, rotated apart), cached decoding included; the same weight bytes.
TEST(LlmModel, FusedProjectionsGiveTheSameLogits) {
  for (const char* arch : {"llama", "qwen2", "qwen3"}) {
    for (const std::string mode : {"none", "q8_0"}) {
      ModelConfig c = tiny(arch);
      c.hidden_size = 64;
      c.intermediate_size = 96;
      Model a = Model::random(c, 9, float32, mode), b = Model::random(c, 9, float32, mode);
      b.fuse_projections();
      EXPECT_EQ(a.weight_bytes(), b.weight_bytes()) << arch << " " << mode;
      EXPECT_EQ(a.quantized(), b.quantized());
      auto ca = a.make_caches(), cb = b.make_caches();
      array la = a.forward(tokens_of(kPrompt), ca), lb = b.forward(tokens_of(kPrompt), cb);
      EXPECT_LT(max_abs_diff(la, lb), 1e-4f) << arch << " " << mode;
      array sa = a.forward(tokens_of({7}), ca), sb = b.forward(tokens_of({7}), cb);
      EXPECT_LT(max_abs_diff(sa, sb), 1e-4f) << arch << " " << mode << " decode";
    }
  }
}

TEST(LlmModel, ForwardMatchesAPlainOpReference) {
  // One llama layer written out with plain ops (attention by softmax, rope
  // by its fallback through a non-traditional rotation of halves).
  ModelConfig c = tiny("llama");
  c.num_layers = 1;
  c.rope_theta = 500.0f;
  TensorMap t;
  const int D = c.hidden_size, F = c.intermediate_size, H = c.num_heads, KV = c.num_kv_heads, hd = D / H, V = 97;
  int n = 0;
  auto w = [&](Shape s) { return random::normal(s, float32, 0.0f, 0.3f, random::key(++n)); };
  t.emplace("model.embed_tokens.weight", w({V, D}));
  t.emplace("model.norm.weight", 1.0f + w({D}));
  t.emplace("lm_head.weight", w({V, D}));
  const std::string p = "model.layers.0.";
  for (const char* name : {"input_layernorm", "post_attention_layernorm"}) t.emplace(p + name + ".weight", 1.0f + w({D}));
  t.emplace(p + "self_attn.q_proj.weight", w({H * hd, D}));
  t.emplace(p + "self_attn.k_proj.weight", w({KV * hd, D}));
  t.emplace(p + "self_attn.v_proj.weight", w({KV * hd, D}));
  t.emplace(p + "self_attn.o_proj.weight", w({D, H * hd}));
  t.emplace(p + "mlp.gate_proj.weight", w({F, D}));
  t.emplace(p + "mlp.up_proj.weight", w({F, D}));
  t.emplace(p + "mlp.down_proj.weight", w({D, F}));
  Model m = Model::from_tensors(c, t);
  auto caches = m.make_caches();
  array got = m.forward(tokens_of(kPrompt), caches);

  const int T = static_cast<int>(kPrompt.size());
  auto rms = [&](const array& x, const array& g) {
    return x * rsqrt(mean(x * x, -1, true) + array(c.rms_norm_eps)) * g;
  };
  auto lin = [&](const array& x, const std::string& name) { return matmul(x, transpose(t.at(name))); };
  auto rope_ref = [&](const array& x) {  // x [1, h, T, hd], pairs (i, i + hd/2)
    array pos = reshape(astype(arange(0, T, 1), float32), {T, 1});
    array inv = power(array(c.rope_theta), astype(arange(0, hd / 2, 1), float32) * array(-2.0f / hd));
    array ang = pos * reshape(inv, {1, hd / 2});
    array x1 = slice(x, {0, 0, 0, 0}, {1, x.shape(1), T, hd / 2}), x2 = slice(x, {0, 0, 0, hd / 2}, {1, x.shape(1), T, hd});
    return concatenate({x1 * cos(ang) - x2 * sin(ang), x1 * sin(ang) + x2 * cos(ang)}, -1);
  };
  auto heads = [&](const array& x, int h) { return transpose(reshape(x, {1, T, h, hd}), {0, 2, 1, 3}); };
  array h = take(t.at("model.embed_tokens.weight"), tokens_of(kPrompt), 0);
  array x = rms(h, t.at(p + "input_layernorm.weight"));
  array q = rope_ref(heads(lin(x, p + "self_attn.q_proj.weight"), H));
  array k = rope_ref(heads(lin(x, p + "self_attn.k_proj.weight"), KV));
  array v = heads(lin(x, p + "self_attn.v_proj.weight"), KV);
  k = repeat(k, H / KV, 1);
  v = repeat(v, H / KV, 1);
  array scores = matmul(q, swapaxes(k, -1, -2)) * array(1.0f / std::sqrt(static_cast<float>(hd)));
  array causal = less_equal(reshape(arange(0, T, 1), {1, T}), reshape(arange(0, T, 1), {T, 1}));
  scores = where(causal, scores, array(-1e30f));
  array o = matmul(softmax(scores, -1), v);
  h = h + lin(reshape(transpose(o, {0, 2, 1, 3}), {1, T, H * hd}), p + "self_attn.o_proj.weight");
  x = rms(h, t.at(p + "post_attention_layernorm.weight"));
  array g = lin(x, p + "mlp.gate_proj.weight");
  h = h + lin(g * sigmoid(g) * lin(x, p + "mlp.up_proj.weight"), p + "mlp.down_proj.weight");
  array want = lin(rms(h, t.at("model.norm.weight")), "lm_head.weight");
  EXPECT_LT(max_abs_diff(got, want), 1e-4f);
}

TEST(LlmModel, TraditionalRopeOfPermutedRowsMatchesHalfRotation) {
  // llama.cpp's converter reorders each head's Q/K rows so that halves
  // become adjacent pairs; with rope_traditional the logits are unchanged.
  ModelConfig c = tiny("llama");
  TensorMap t;
  int n = 0;
  auto w = [&](Shape s) { return random::normal(s, float32, 0.0f, 0.3f, random::key(100 + ++n)); };
  const int D = c.hidden_size, H = c.num_heads, KV = c.num_kv_heads, hd = D / H;
  auto permute = [&](const array& m, int heads) {
    return reshape(swapaxes(reshape(m, {heads, 2, hd / 2, D}), 1, 2), {heads * hd, D});
  };
  t.emplace("model.embed_tokens.weight", w({c.vocab_size, D}));
  t.emplace("model.norm.weight", ones({D}));
  t.emplace("lm_head.weight", w({c.vocab_size, D}));
  TensorMap permuted = t;
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (const char* name : {"input_layernorm", "post_attention_layernorm"}) {
      t.emplace(p + name + ".weight", ones({D}));
      permuted.emplace(p + name + ".weight", ones({D}));
    }
    array q = w({H * hd, D}), k = w({KV * hd, D});
    t.emplace(p + "self_attn.q_proj.weight", q);
    t.emplace(p + "self_attn.k_proj.weight", k);
    permuted.emplace(p + "self_attn.q_proj.weight", permute(q, H));
    permuted.emplace(p + "self_attn.k_proj.weight", permute(k, KV));
    for (auto [name, shape] : std::vector<std::pair<std::string, Shape>>{{"self_attn.v_proj", {KV * hd, D}},
                                                                          {"self_attn.o_proj", {D, H * hd}},
                                                                          {"mlp.gate_proj", {c.intermediate_size, D}},
                                                                          {"mlp.up_proj", {c.intermediate_size, D}},
                                                                          {"mlp.down_proj", {D, c.intermediate_size}}}) {
      array m = w(shape);
      t.emplace(p + name + ".weight", m);
      permuted.emplace(p + name + ".weight", m);
    }
  }
  ModelConfig traditional = c;
  traditional.rope_traditional = true;
  Model half_rotation = Model::from_tensors(c, t), adjacent_pairs = Model::from_tensors(traditional, permuted);
  auto c1 = half_rotation.make_caches(), c2 = adjacent_pairs.make_caches();
  array a = half_rotation.forward(tokens_of(kPrompt), c1);
  array b = adjacent_pairs.forward(tokens_of(kPrompt), c2);
  EXPECT_LT(max_abs_diff(a, b), 1e-4f);
}

TEST(LlmModel, QuantizedWeightsStayCloseToTheirDequantizedCopies) {
  // The block formats' products with x as it is: this compares weights; the
  // CPU's default 8-bit rounding of x (include/kiln/ops.h) has its own
  // bounds in test_quant_blocks_int8.cpp.
  test::CpuBlockXExact exact_x;
  ModelConfig c = tiny("llama");
  c.hidden_size = 64;
  c.intermediate_size = 128;
  // The same weights quantized (MLX affine 8-bit, two block formats) and
  // dequantized back to float32.
  TensorMap base;
  {
    int n = 0;
    auto w = [&](Shape s) { return random::normal(s, float32, 0.0f, 0.3f, random::key(500 + ++n)); };
    const int D = c.hidden_size, F = c.intermediate_size, H = c.num_heads, KV = c.num_kv_heads, hd = D / H;
    base.emplace("model.embed_tokens.weight", w({c.vocab_size, D}));
    base.emplace("model.norm.weight", ones({D}));
    base.emplace("lm_head.weight", w({c.vocab_size, D}));
    for (int i = 0; i < c.num_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      base.emplace(p + "input_layernorm.weight", ones({D}));
      base.emplace(p + "post_attention_layernorm.weight", ones({D}));
      base.emplace(p + "self_attn.q_proj.weight", w({H * hd, D}));
      base.emplace(p + "self_attn.k_proj.weight", w({KV * hd, D}));
      base.emplace(p + "self_attn.v_proj.weight", w({KV * hd, D}));
      base.emplace(p + "self_attn.o_proj.weight", w({D, H * hd}));
      base.emplace(p + "mlp.gate_proj.weight", w({F, D}));
      base.emplace(p + "mlp.up_proj.weight", w({F, D}));
      base.emplace(p + "mlp.down_proj.weight", w({D, F}));
    }
  }
  for (const std::string mode : {"affine", "q8_0", "q4_0"}) {
    TensorMap quant, dequant;
    BlockModes modes;
    for (const auto& [name, a] : base) {
      if (a.ndim() != 2) {
        quant.emplace(name, a);
        dequant.emplace(name, a);
        continue;
      }
      const std::string stem = name.substr(0, name.size() - std::string(".weight").size());
      if (mode == "affine") {
        auto q = quantize(a, 32, 8);
        quant.emplace(name, q[0]);
        quant.emplace(stem + ".scales", q[1]);
        quant.emplace(stem + ".biases", q[2]);
        dequant.emplace(name, dequantize(q[0], q[1], q[2], 32, 8));
      } else {
        array q = quantize(a, std::nullopt, std::nullopt, mode)[0];
        quant.emplace(name, q);
        modes.emplace(name, mode);
        dequant.emplace(name, dequantize(q, array({}), std::nullopt, std::nullopt, std::nullopt, mode));
      }
    }
    Model qm = mode == "affine" ? Model::from_tensors(c, quant, 32, 8) : Model::from_tensors(c, quant, {}, {}, modes);
    Model dm = Model::from_tensors(c, dequant);
    auto c1 = qm.make_caches(), c2 = dm.make_caches();
    array a = qm.forward(tokens_of(kPrompt), c1), b = dm.forward(tokens_of(kPrompt), c2);
    EXPECT_LT(max_abs_diff(a, b), 1e-3f) << mode;
    EXPECT_LT(qm.weight_bytes(), dm.weight_bytes()) << mode;
  }
}

TEST(LlmGenerate, GreedyIsTheArgmaxOfEachStepAndChunkingChangesNothing) {
  Model m = Model::random(tiny("qwen3"), 5);
  GenerateOptions opt;
  opt.max_tokens = 12;
  std::vector<int32_t> got;
  GenerateStats stats = generate(m, kPrompt, opt, [&](int32_t id) {
    got.push_back(id);
    return true;
  });
  ASSERT_EQ(got.size(), 12u);
  EXPECT_EQ(stats.prompt_tokens, static_cast<int>(kPrompt.size()));
  EXPECT_EQ(stats.decode_tokens, 11);

  // The same ids stepping by hand, token by token from the full context.
  std::vector<int32_t> ctx = kPrompt;
  for (int32_t id : got) {
    auto caches = m.make_caches();
    array logits = m.forward(tokens_of(ctx), caches, true);
    EXPECT_EQ(argmax(reshape(logits, {-1})).item<uint32_t>(), static_cast<uint32_t>(id));
    ctx.push_back(id);
  }

  opt.prefill_chunk = 4;
  std::vector<int32_t> chunked;
  generate(m, kPrompt, opt, [&](int32_t id) {
    chunked.push_back(id);
    return true;
  });
  EXPECT_EQ(chunked, got);
}

TEST(LlmGenerate, HostSamplerStopsAndCallbackCanEnd) {
  Model m = Model::random(tiny("llama"), 9);
  GenerateOptions opt;
  opt.max_tokens = 20;
  int calls = 0;
  opt.sampler = [&](const float* logits, int vocab) {
    ++calls;
    EXPECT_EQ(vocab, 97);
    EXPECT_TRUE(std::isfinite(logits[0]));
    return 42;
  };
  opt.is_stop = [](int32_t id) { return id == 42; };
  std::vector<int32_t> got;
  generate(m, kPrompt, opt, [&](int32_t id) {
    got.push_back(id);
    return true;
  });
  EXPECT_EQ(got, std::vector<int32_t>{42});
  EXPECT_EQ(calls, 1);

  opt.is_stop = nullptr;
  got.clear();
  generate(m, kPrompt, opt, [&](int32_t id) {
    got.push_back(id);
    return got.size() < 3;
  });
  EXPECT_EQ(got.size(), 3u);
}

TEST(LlmConfig, ParsesHuggingFaceConfigs) {
  ModelConfig c = config_from_hf_json(R"({"model_type": "llama", "vocab_size": 128256, "hidden_size": 2048,
    "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": true,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"}})");
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.resolved_head_dim(), 64);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  // Llama 3.2's periods: the fastest pairs unscaled, the slowest times 32.
  std::vector<float> p = to_vector(*rope_periods(c));
  ASSERT_EQ(p.size(), 32u);
  EXPECT_FLOAT_EQ(p[0], 1.0f);
  EXPECT_NEAR(p[31] / std::pow(500000.0f, 62.0f / 64), 32.0f, 1e-3f);

  ModelConfig q = config_from_hf_json(R"({"model_type": "qwen2", "vocab_size": 10, "hidden_size": 8,
    "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1})");
  EXPECT_TRUE(q.attention_bias);
  EXPECT_FALSE(rope_periods(q).has_value());
  ModelConfig q3 = config_from_hf_json(R"({"model_type": "qwen3", "vocab_size": 10, "hidden_size": 8,
    "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "head_dim": 16})");
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_EQ(q3.resolved_head_dim(), 16);
}

TEST(LlmErrors, BadConfigsTensorsAndArgumentsThrow) {
  EXPECT_THROW(config_from_hf_json("{not json"), Error);
  // Values of the wrong JSON type or out of range are Errors naming the key
  // (not nlohmann's exceptions, not undefined casts).
  const std::string base = R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
      "num_hidden_layers": 1, "num_attention_heads": 2, )";
  for (const char* extra : {R"("rope_theta": 1e300})", R"("rope_theta": "big"})", R"("head_dim": 1e40})",
                            R"("head_dim": 2.5})", R"("num_key_value_heads": 4294967298})",
                            R"("tie_word_embeddings": 1})", R"("rope_scaling": {"type": 3}})"}) {
    EXPECT_TRUE(test::throws_error([&] { config_from_hf_json(base + extra); }, {"config_from_hf_json", "is not"}))
        << extra;
  }
  EXPECT_THROW(config_from_hf_json(R"({"model_type": "gpt2", "vocab_size": 10})"), Error);
  EXPECT_THROW(config_from_hf_json(R"({"model_type": "llama", "vocab_size": 10})"), Error);
  EXPECT_THROW(config_from_hf_json(R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8,
    "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 3, "num_key_value_heads": 2})"),
               Error);
  ModelConfig c = tiny("llama");
  EXPECT_THROW(Model::from_tensors(c, {}), Error);
  Model m = Model::random(c, 1);
  auto caches = m.make_caches();
  EXPECT_THROW(m.forward(array({1.0f, 2.0f}), caches), Error);
  std::vector<nn::KVCache> wrong(1);
  EXPECT_THROW(m.forward(tokens_of({1, 2}), wrong), Error);
  auto ok = [](int32_t) { return true; };
  EXPECT_THROW(generate(m, {}, {}, ok), Error);
  EXPECT_THROW(generate(m, {1, 97}, {}, ok), Error);
  EXPECT_THROW(Model::load("/nonexistent/model/dir"), Error);
}
