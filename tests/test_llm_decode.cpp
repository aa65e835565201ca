// The decode step as one compiled graph (llm::Decoder) against the op-by-op
// path on random-weight models of every architecture, and Mistral's
// sliding window against plain full attention with an explicit band mask.
#include <gtest/gtest.h>

#include <cmath>

#include "core/compiled.h"
#include "kiln/kiln.h"
#include "kiln/llm.h"

using namespace kiln;
using namespace kiln::llm;

namespace {

// "mistral": a Llama with a sliding window of 4 (shorter than the prompt).
ModelConfig tiny(const std::string& arch) {
  ModelConfig c;
  c.architecture = arch == "mistral" ? "llama" : arch;
  c.vocab_size = 97;
  c.hidden_size = 48;
  c.intermediate_size = 80;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = arch == "qwen2" || arch == "qwen3" ? 1 : 2;
  c.head_dim = arch == "qwen3" ? 16 : 0;
  c.attention_bias = arch == "qwen2";
  c.qk_norm = arch == "qwen3";
  c.tie_word_embeddings = arch == "qwen2";
  c.sliding_window = arch == "mistral" ? 4 : 0;
  return c;
}

const char* const kArchs[] = {"llama", "qwen2", "qwen3", "mistral"};

array tokens_of(const std::vector<int32_t>& ids) { return array(ids, {1, static_cast<int>(ids.size())}); }

float max_abs_diff(const array& a, const array& b) {
  return max(abs(astype(a, float32) - astype(b, float32))).item<float>();
}

const std::vector<int32_t> kPrompt = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46};

struct Steps {
  std::vector<int32_t> ids;
  std::vector<array> logits;  // [1, 1, vocab] per step
  int traces = 0;
};

// Prefills the prompt into caches of `cache_step` tokens, then n greedy
// steps through a Decoder.
Steps decode(const Model& m, int n, bool compiled, int cache_step = 256) {
  std::vector<nn::KVCache> caches(m.config().num_layers, nn::KVCache(cache_step));
  array token = astype(argmax(m.forward(tokens_of(kPrompt), caches, true), -1), int32);
  Decoder d(m, std::move(caches), compiled, cache_step);
  Steps r;
  for (int i = 0; i < n; ++i) {
    auto [logits, next] = d.step(token);
    eval({logits, next});
    r.logits.push_back(logits);
    r.ids.push_back(next.item<int32_t>());
    token = next;
  }
  EXPECT_EQ(d.offset(), static_cast<int>(kPrompt.size()) + n);
  r.traces = d.traces();
  return r;
}

void expect_same(const Steps& a, const Steps& b, const std::string& what) {
  EXPECT_EQ(a.ids, b.ids) << what;
  ASSERT_EQ(a.logits.size(), b.logits.size());
  for (size_t i = 0; i < a.logits.size(); ++i) {
    EXPECT_LT(max_abs_diff(a.logits[i], b.logits[i]), 1e-5f) << what << " step " << i;
  }
}

}  // namespace

TEST(LlmDecoder, CompiledStepGivesTheOpByOpIdsAndLogits) {
  for (const char* arch : kArchs) {
    Model m = Model::random(tiny(arch), 11);
    Steps op_by_op = decode(m, 12, false), compiled = decode(m, 12, true);
    expect_same(compiled, op_by_op, arch);
    EXPECT_EQ(op_by_op.traces, 12) << arch;  // the uncompiled step runs its function every time
    EXPECT_EQ(compiled.traces, 1) << arch;
  }
}

TEST(LlmDecoder, FiftyStepsTraceOnceAndWriteTheCacheInPlace) {
  Model m = Model::random(tiny("qwen3"), 3);
  auto caches = m.make_caches();
  array token = astype(argmax(m.forward(tokens_of(kPrompt), caches, true), -1), int32);
  Decoder d(m, std::move(caches));
  const void* keys = nullptr;
  int64_t traces_after_first = 0;
  for (int i = 0; i < 50; ++i) {
    auto [logits, next] = d.step(token);
    eval({logits, next});
    token = next;
    const void* now = d.buffers()[0].data<float>();
    if (i == 0) {
      keys = now;
      traces_after_first = detail::compile_trace_count();
    }
    EXPECT_EQ(now, keys) << "step " << i << " copied the key buffer";
  }
  EXPECT_EQ(d.traces(), 1);
  EXPECT_EQ(detail::compile_trace_count(), traces_after_first);  // nothing nested retraced either
  EXPECT_EQ(d.capacity(), 256);
}

TEST(LlmDecoder, GrowingTheBuffersRetracesOncePerCapacity) {
  // Caches of 8 tokens: the 11-token prompt fills 16 slots; 14 steps grow to 24 then 32.
  for (const char* arch : {"llama", "mistral"}) {
    Model m = Model::random(tiny(arch), 5);
    Steps op_by_op = decode(m, 14, false, 8), compiled = decode(m, 14, true, 8);
    expect_same(compiled, op_by_op, arch);
    EXPECT_EQ(compiled.traces, 3) << arch;
  }
}

TEST(LlmDecoder, GenerateGivesTheSameIdsCompiledOrNot) {
  for (const char* arch : kArchs) {
    Model m = Model::random(tiny(arch), 9);
    std::vector<int32_t> ids[2];
    for (int compiled = 0; compiled < 2; ++compiled) {
      GenerateOptions opt;
      opt.max_tokens = 16;
      opt.compile = compiled == 1;
      generate(m, kPrompt, opt, [&](int32_t id) {
        ids[compiled].push_back(id);
        return true;
      });
    }
    EXPECT_EQ(ids[1], ids[0]) << arch;
    EXPECT_EQ(ids[1].size(), 16u);
  }
}

TEST(LlmDecoder, BlockQuantizedWeightsDecodeTheSameCompiledOrNot) {
  ModelConfig c = tiny("llama");
  c.hidden_size = 64;
  c.intermediate_size = 128;
  TensorMap t;
  BlockModes modes;
  int n = 0;
  auto add = [&](const std::string& name, Shape s) {
    array w = random::normal(s, float32, 0.0f, 0.1f, random::key(++n));
    if (s.size() == 2) {
      w = quantize(w, std::nullopt, std::nullopt, "q8_0")[0];
      modes.emplace(name, "q8_0");
    } else {
      w = 1.0f + w;
    }
    t.emplace(name, w);
  };
  const int D = c.hidden_size, F = c.intermediate_size, hd = D / c.num_heads;
  add("model.embed_tokens.weight", {c.vocab_size, D});
  add("model.norm.weight", {D});
  add("lm_head.weight", {c.vocab_size, D});
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {D});
    add(p + "post_attention_layernorm.weight", {D});
    add(p + "self_attn.q_proj.weight", {c.num_heads * hd, D});
    add(p + "self_attn.k_proj.weight", {c.num_kv_heads * hd, D});
    add(p + "self_attn.v_proj.weight", {c.num_kv_heads * hd, D});
    add(p + "self_attn.o_proj.weight", {D, c.num_heads * hd});
    add(p + "mlp.gate_proj.weight", {F, D});
    add(p + "mlp.up_proj.weight", {F, D});
    add(p + "mlp.down_proj.weight", {D, F});
  }
  Model m = Model::from_tensors(c, t, std::nullopt, std::nullopt, modes);
  expect_same(decode(m, 10, true), decode(m, 10, false), "q8_0");
}

// ---- sliding window ----

namespace {

// The logits of every position of `ids` by plain ops: attention as softmax
// over all positions with an explicit band mask (query i sees keys j with
// i - window < j <= i; window 0: causal), GQA by repeating K/V, rope by
// rotating halves (Hugging Face layout).
array reference_logits(const ModelConfig& c, const TensorMap& t, const std::vector<int32_t>& ids, int window) {
  const int T = static_cast<int>(ids.size()), H = c.num_heads, KV = c.num_kv_heads, hd = c.resolved_head_dim();
  auto rms = [&](const array& x, const array& g) {
    return x * rsqrt(mean(x * x, -1, true) + array(c.rms_norm_eps)) * g;
  };
  auto lin = [&](const array& x, const std::string& name) { return matmul(x, transpose(t.at(name))); };
  auto rope_ref = [&](const array& x) {
    array pos = reshape(astype(arange(0, T, 1), float32), {T, 1});
    array inv = power(array(c.rope_theta), astype(arange(0, hd / 2, 1), float32) * array(-2.0f / hd));
    array ang = pos * reshape(inv, {1, hd / 2});
    array x1 = slice(x, {0, 0, 0, 0}, {1, x.shape(1), T, hd / 2}), x2 = slice(x, {0, 0, 0, hd / 2}, {1, x.shape(1), T, hd});
    return concatenate({x1 * cos(ang) - x2 * sin(ang), x1 * sin(ang) + x2 * cos(ang)}, -1);
  };
  auto heads = [&](const array& x, int n) { return transpose(reshape(x, {1, T, n, hd}), {0, 2, 1, 3}); };
  array qi = reshape(arange(0, T, 1), {T, 1}), kj = reshape(arange(0, T, 1), {1, T});
  array band = less_equal(kj, qi);
  if (window > 0) band = logical_and(band, greater(kj, qi - array(window)));
  array h = take(t.at("model.embed_tokens.weight"), tokens_of(ids), 0);
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    array x = rms(h, t.at(p + "input_layernorm.weight"));
    array q = rope_ref(heads(lin(x, p + "self_attn.q_proj.weight"), H));
    array k = repeat(rope_ref(heads(lin(x, p + "self_attn.k_proj.weight"), KV)), H / KV, 1);
    array v = repeat(heads(lin(x, p + "self_attn.v_proj.weight"), KV), H / KV, 1);
    array scores = matmul(q, swapaxes(k, -1, -2)) * array(1.0f / std::sqrt(static_cast<float>(hd)));
    array o = matmul(softmax(where(band, scores, array(-1e30f)), -1), v);
    h = h + lin(reshape(transpose(o, {0, 2, 1, 3}), {1, T, H * hd}), p + "self_attn.o_proj.weight");
    x = rms(h, t.at(p + "post_attention_layernorm.weight"));
    array g = lin(x, p + "mlp.gate_proj.weight");
    h = h + lin(g * sigmoid(g) * lin(x, p + "mlp.up_proj.weight"), p + "mlp.down_proj.weight");
  }
  return lin(rms(h, t.at("model.norm.weight")), "lm_head.weight");
}

TensorMap random_llama(const ModelConfig& c) {
  TensorMap t;
  const int D = c.hidden_size, F = c.intermediate_size, hd = c.resolved_head_dim();
  int n = 0;
  auto w = [&](Shape s) { return random::normal(s, float32, 0.0f, 0.3f, random::key(100 + ++n)); };
  t.emplace("model.embed_tokens.weight", w({c.vocab_size, D}));
  t.emplace("model.norm.weight", 1.0f + w({D}));
  t.emplace("lm_head.weight", w({c.vocab_size, D}));
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (const char* name : {"input_layernorm", "post_attention_layernorm"}) {
      t.emplace(p + name + ".weight", 1.0f + w({D}));
    }
    t.emplace(p + "self_attn.q_proj.weight", w({c.num_heads * hd, D}));
    t.emplace(p + "self_attn.k_proj.weight", w({c.num_kv_heads * hd, D}));
    t.emplace(p + "self_attn.v_proj.weight", w({c.num_kv_heads * hd, D}));
    t.emplace(p + "self_attn.o_proj.weight", w({D, c.num_heads * hd}));
    t.emplace(p + "mlp.gate_proj.weight", w({F, D}));
    t.emplace(p + "mlp.up_proj.weight", w({F, D}));
    t.emplace(p + "mlp.down_proj.weight", w({D, F}));
  }
  return t;
}

array position(const array& logits, int i) { return slice(logits, {0, i, 0}, {1, i + 1, logits.shape(2)}); }

}  // namespace

TEST(LlmSlidingWindow, MatchesFullAttentionWithABandMask) {
  ModelConfig c = tiny("mistral");
  c.rope_theta = 500.0f;
  const TensorMap t = random_llama(c);
  Model m = Model::from_tensors(c, t);
  const int T = static_cast<int>(kPrompt.size());
  const array want = reference_logits(c, t, kPrompt, c.sliding_window);
  // The window matters here: without it the last positions differ.
  EXPECT_GT(max_abs_diff(position(want, T - 1), position(reference_logits(c, t, kPrompt, 0), T - 1)), 1e-2f);

  auto all = m.make_caches();
  EXPECT_LT(max_abs_diff(m.forward(tokens_of(kPrompt), all), want), 1e-4f) << "one prefill";

  // A prefill of 3 tokens (inside the window), then a chunk of 4 and steps
  // of one token, op by op and through the compiled Decoder.
  for (bool compiled : {false, true}) {
    auto caches = m.make_caches();
    m.forward(tokens_of(std::vector<int32_t>(kPrompt.begin(), kPrompt.begin() + 3)), caches);
    array chunk = m.forward(tokens_of(std::vector<int32_t>(kPrompt.begin() + 3, kPrompt.begin() + 7)), caches);
    for (int i = 0; i < 4; ++i) {
      EXPECT_LT(max_abs_diff(position(chunk, i), position(want, 3 + i)), 1e-4f) << "chunk position " << 3 + i;
    }
    Decoder d(m, std::move(caches), compiled);
    for (int i = 7; i < T; ++i) {
      array logits = d.step(tokens_of({kPrompt[i]})).first;
      EXPECT_LT(max_abs_diff(logits, position(want, i)), 1e-4f) << (compiled ? "compiled" : "op by op") << " step " << i;
    }
  }
}

TEST(LlmSlidingWindow, ComesFromHuggingFaceConfigs) {
  const std::string base = R"("vocab_size": 10, "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
    "num_attention_heads": 2, "num_key_value_heads": 1)";
  EXPECT_EQ(config_from_hf_json(R"({"model_type": "mistral", "sliding_window": 4096, )" + base + "}").sliding_window,
            4096);
  EXPECT_EQ(config_from_hf_json(R"({"model_type": "mistral", "sliding_window": null, )" + base + "}").sliding_window, 0);
  // Qwen 2 configs name a window they do not use.
  EXPECT_EQ(config_from_hf_json(R"({"model_type": "qwen2", "sliding_window": 32768, "use_sliding_window": false, )" +
                                base + "}")
                .sliding_window,
            0);
}
