#pragma once
// The LLM runtime: decoder-only transformers of the Llama family (Llama 2,
// 3, 3.1/3.2, Mistral, SmolLM), Qwen 2/2.5 (q/k/v biases) and Qwen 3 (q/k
// RMS norms), with grouped-query attention and tied embeddings; greedy or
// sampled generation with a KV cache.
//
// The math follows mlx-lm's models/llama.py, qwen2.py and qwen3.py: x + attn(
// rms_norm(x)), then x + mlp(rms_norm(x)) with mlp = down(silu(gate) * up),
// rotary embeddings through fast::rope (Llama 3's "llama3" scaling as the
// freqs array, "linear" scaling as rope's scale), attention through
// fast::scaled_dot_product_attention over an nn::KVCache per layer.
//
// Weights keep the type they were stored with: float32/float16/bfloat16
// matrices go through matmul, MLX affine-quantized ones (weight, scales,
// biases) and GGUF block formats through quantized_matmul; nothing is
// requantized.
//
// Differences from mlx-lm: the KV cache always grows by whole steps (no
// rotating window unless asked); sampling runs on the host for anything but
// greedy decoding.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/array.h"
#include "kiln/kv_cache.h"
#include "kiln/tokenizer.h"

namespace kiln::gguf {
class File;
}

namespace kiln::llm {

struct RopeScaling {
  std::string type = "none";  // "none" | "linear" | "llama3"
  float factor = 1.0f;
  float low_freq_factor = 1.0f;   // llama3
  float high_freq_factor = 4.0f;  // llama3
  int original_max_position_embeddings = 8192;  // llama3
};

struct ModelConfig {
  std::string architecture = "llama";  // "llama" | "qwen2" | "qwen3" (Mistral and SmolLM are "llama")
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // 0: hidden_size / num_heads
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  // Feature pairs (2i, 2i+1) rotate together: the layout of llama.cpp's
  // Llama GGUF files, whose Q/K rows were permuted for it. Hugging Face
  // files pair (i, i + head_dim / 2).
  bool rope_traditional = false;
  RopeScaling rope_scaling;
  int max_position_embeddings = 4096;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v biases (Qwen 2)
  bool qk_norm = false;         // RMS norm of each head's q and k (Qwen 3)

  int resolved_head_dim() const { return head_dim > 0 ? head_dim : hidden_size / num_heads; }
};

// Parses a Hugging Face config.json text (LlamaForCausalLM, MistralForCausalLM,
// Qwen2ForCausalLM, Qwen3ForCausalLM, ...). Throws kiln::Error naming what
// is missing or unsupported.
ModelConfig config_from_hf_json(const std::string& json_text);
// The config of a GGUF file from llama.cpp's metadata names
// ({arch}.block_count, {arch}.attention.head_count_kv, ...; arch "llama",
// "qwen2" or "qwen3").
ModelConfig config_from_gguf(const gguf::File& file);
// The tokenizer.ggml.* metadata of a GGUF file (kiln/tokenizer.h builds
// the Tokenizer from it).
TokenizerSpec tokenizer_spec_from_gguf(const gguf::File& file);
// The rope_theta-based periods of each rotated pair (fast::rope's freqs),
// with Llama 3's scaling applied; nullopt when plain base^(2i/d) applies.
std::optional<array> rope_periods(const ModelConfig& config);

// One projection: y = x @ W^T (+ bias). W is [out, in] in a float type, or
// quantized: MLX affine (weight uint32 + scales + biases, `bits`,
// `group_size`) or a GGUF block format (`mode` "q8_0", "q4_0", "q4_k", ...:
// uint8 blocks, no scales).
struct Linear {
  array weight = array(0.0f);
  std::optional<array> scales, biases;  // affine quantization
  std::optional<array> bias;            // additive bias ([out])
  std::string mode = "none";            // "none" | "affine" | a block format
  int bits = 0, group_size = 0;
  array operator()(const array& x) const;
};

struct Layer {
  array attn_norm = array(0.0f), mlp_norm = array(0.0f);
  std::optional<array> q_norm, k_norm;  // Qwen 3
  Linear q, k, v, o, gate, up, down;
};

// A model's tensors by Hugging Face name ("model.layers.0.self_attn.q_proj.weight",
// ...). An optional "rope_freqs" ([head_dim / 2]) gives rope's periods.
using TensorMap = std::unordered_map<std::string, array>;
// Tensor name -> GGUF block format ("q4_0", ...) of the uint8 matrices that are blocks.
using BlockModes = std::unordered_map<std::string, std::string>;

// A model file's contents by Hugging Face name: what Model is built from
// and what `kiln convert` rewrites.
struct Checkpoint {
  ModelConfig config;
  TensorMap tensors;
  std::optional<int> group_size, bits;  // MLX affine quantization
  BlockModes block_modes;               // GGUF block matrices
};
// A Hugging Face directory: config.json and model.safetensors or a sharded
// model.safetensors.index.json (MLX affine-quantized files too:
// weight/scales/biases and the config's "quantization").
Checkpoint read_hf_checkpoint(const std::string& dir);
// A GGUF file with llama.cpp's tensor names (token_embd, blk.N.attn_q,
// ...) renamed; the arrays stay in the file's mapping (block formats as
// they are) and keep it alive after the File is gone. Q/K rows stay in the
// file's order (config.rope_traditional says which).
Checkpoint read_gguf_checkpoint(const gguf::File& file);

class Model {
 public:
  // A .gguf file or a Hugging Face directory (the readers above).
  static Model load(const std::string& path);
  static Model from_checkpoint(const Checkpoint& c);
  static Model from_gguf(const gguf::File& file) { return from_checkpoint(read_gguf_checkpoint(file)); }
  // Builds a model from tensors named as in Hugging Face files; group_size
  // and bits are those of MLX-quantized (weight, scales, biases) matrices.
  static Model from_tensors(const ModelConfig& config, const TensorMap& tensors,
                            std::optional<int> group_size = std::nullopt, std::optional<int> bits = std::nullopt,
                            const BlockModes& block_modes = {});
  // A model of the given shape with random normal weights (std 0.02,
  // norms 1): the default model of `kiln generate`, and for tests.
  static Model random(const ModelConfig& config, uint64_t seed = 0, Dtype dtype = float32);

  // tokens [B, T] (integer) -> logits [B, T, vocab] (float32), appending T
  // positions to each layer's cache (caches.size() == num_layers);
  // last_only: the logits of the last position alone, [B, 1, vocab].
  array forward(const array& tokens, std::vector<nn::KVCache>& caches, bool last_only = false) const;
  std::vector<nn::KVCache> make_caches() const;

  const ModelConfig& config() const { return config_; }
  // Bytes of every weight (about what one decode step reads).
  size_t weight_bytes() const;

 private:
  ModelConfig config_;
  array embed_ = array(0.0f);  // [vocab, hidden] float; or a quantized matrix (embed_q_)
  std::optional<Linear> embed_q_;
  array final_norm_ = array(0.0f);
  Linear lm_head_;
  std::vector<Layer> layers_;
  std::optional<array> rope_freqs_;

  array embed(const array& tokens) const;
};

// Picks the next token from the logits of the last position ([vocab],
// float32, evaluated). Used for everything but greedy decoding.
using HostSampler = std::function<int32_t(const float* logits, int vocab)>;

struct GenerateOptions {
  int max_tokens = 128;
  int prefill_chunk = 512;
  // Empty: greedy (argmax on the device, pipelined: token t+1's step is
  // queued before token t is read back).
  HostSampler sampler;
  // Stop when this returns true for a generated token (end of generation).
  std::function<bool(int32_t)> is_stop;
  StreamOrDevice stream;
};

struct GenerateStats {
  int prompt_tokens = 0;
  double prompt_seconds = 0;
  int decode_tokens = 0;  // generated tokens after the first
  double decode_seconds = 0;
  double prompt_tps() const { return prompt_seconds > 0 ? prompt_tokens / prompt_seconds : 0; }
  double decode_tps() const { return decode_seconds > 0 ? decode_tokens / decode_seconds : 0; }
};

// Runs the prompt (in chunks of prefill_chunk tokens) then generates up to
// max_tokens tokens, calling on_token with each as soon as it is known
// (returning false stops). The first generated token comes from the
// prefill and is counted in prompt time, as llama.cpp does.
GenerateStats generate(const Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                       const std::function<bool(int32_t)>& on_token);

}  // namespace kiln::llm
