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
// rotating window unless asked); Mistral's sliding window is a band mask
// over the whole cache (mlx-lm ignores it); the decode step is one compiled
// graph; sampling runs on the host for anything but greedy decoding.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
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
  // Mistral's sliding window: the token at position p attends to positions
  // p - sliding_window + 1 ... p (sliding_window keys, itself included);
  // 0: every earlier position.
  int sliding_window = 0;

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
  // Model::fuse_projections: q, k, v stacked into one matrix and gate, up
  // into another (q, k, v, gate, up then hold no weights).
  std::optional<Linear> qkv, gate_up;
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
  // norms 1): the default model of `kiln generate`, and for tests. A block
  // format as `mode` ("q8_0", "q4_0", "q4_k", ...) stores every matrix
  // (embedding and lm_head included) quantized to it, each quantized as
  // soon as it is drawn (what `kiln bench llm -m random:...` times).
  static Model random(const ModelConfig& config, uint64_t seed = 0, Dtype dtype = float32,
                      const std::string& mode = "none");

  // tokens [B, T] (integer) -> logits [B, T, vocab] (float32), appending T
  // positions to each layer's cache (caches.size() == num_layers);
  // last_only: the logits of the last position alone, [B, 1, vocab].
  array forward(const array& tokens, std::vector<nn::KVCache>& caches, bool last_only = false) const;
  std::vector<nn::KVCache> make_caches() const;
  // One decode step as a pure function of arrays, the function Decoder
  // compiles. in = {tokens [B, 1] integer, position [1] int32, then each
  // layer's key and value buffers [B, kv_heads, capacity, head_dim]} with
  // position < capacity; out = {logits [B, 1, vocab] float32, then the
  // buffers with this token's keys and values written at `position`
  // (slice_update at an array offset: in place once the input buffers have
  // no other owner)}. Buffer slots past `position` are masked out, so the
  // graph's shapes do not change from token to token.
  std::vector<array> decode_step(const std::vector<array>& in) const;

  const ModelConfig& config() const { return config_; }
  // Bytes of every weight (about what one decode step reads).
  size_t weight_bytes() const;
  // Whether the layers' matrices are quantized (MLX affine or GGUF blocks).
  bool quantized() const;
  // The activations' dtype (residual stream, norm outputs, queries, the KV
  // cache) of a quantized model: by default float32 for GGUF block weights
  // (as llama.cpp's CPU path) and the scales' dtype for MLX affine weights.
  // bfloat16 or float16 halve the KV cache and run the GPU's tensor-core
  // QMV and attention kernels (`kiln generate` / `kiln bench llm` choose
  // bfloat16 on the GPU unless --dtype says otherwise; llama.cpp's CUDA
  // path rounds activations to 8 bits for its quantized products). Norm
  // weights and biases are converted once here. A float-weight model
  // computes in its weights' dtype: asking it for another throws.
  void set_activation_dtype(Dtype dtype);
  std::optional<Dtype> activation_dtype() const { return act_dtype_; }
  // Stacks each layer's q, k, v matrices into one and gate, up into
  // another (same format and dtype; biases and scales stacked alike), so a
  // decode step runs 2 matrix-vector products where it ran 5, each over
  // more rows (`kiln generate` / `kiln bench llm` do it on the GPU). The
  // stacked matrices are new arrays evaluated on the default device: on
  // the CPU this copies a mapped file's weights into memory, so the CPU
  // path leaves them apart. Layers whose matrices differ in format keep
  // them apart. Logits are unchanged up to the products' summation order.
  void fuse_projections();

 private:
  ModelConfig config_;
  array embed_ = array(0.0f);  // [vocab, hidden] float; or a quantized matrix (embed_q_)
  std::optional<Linear> embed_q_;
  array final_norm_ = array(0.0f);
  Linear lm_head_;
  std::vector<Layer> layers_;
  std::optional<array> rope_freqs_;
  std::optional<Dtype> act_dtype_;  // set_activation_dtype; nullopt: as loaded

  array embed(const array& tokens) const;
  // The residual stream between layers is h + delta (delta: the last MLP's
  // output, not added yet), so that each add runs in one kernel with the
  // norm after it (fast::add_rms_norm). Returns {h + delta, rms_norm of it}.
  std::pair<array, array> pre_norm(const array& h, const std::optional<array>& delta, const array& weight) const;
  // {h + delta, lin(rms_norm of it)}; with the lab switch KILN_FUSED_NORM=1,
  // for one token on block-quantized weights, the norm runs inside the
  // product (fast::add_rms_norm_quantized_matmul; off by default: slower).
  std::pair<array, array> norm_product(const array& h, const std::optional<array>& delta, const array& weight,
                                       const Linear& lin) const;
  // A layer's queries, keys and values [B, heads, T, head_dim] from the
  // residual stream h + delta (h becomes the sum), normed, q/k normed
  // (Qwen 3) and rotated at positions offset, offset + 1, ...
  std::tuple<array, array, array> project_qkv(const Layer& l, array& h, const std::optional<array>& delta,
                                              const array& offset) const;
  // {h + o_proj(attention [B, H, T, head_dim]), the MLP's output of it}.
  std::pair<array, array> finish_layer(const Layer& l, const array& h, const array& attention) const;
  array logits(const array& h, const std::optional<array>& delta) const;
};

// The per-token decode loop's state after the prefill: the KV caches and
// the step that appends one token to them. Compiled (the default), the step
// is Model::decode_step traced once by kiln::compile per buffer capacity:
// the position is an array carried from step to step (never a constant of
// the graph) and the key/value buffers are state passed in and returned,
// written in place, so every step replays the same graph (on the GPU, the
// same cached CUDA graph). The buffers grow by `step` tokens when full (one
// copy and one new trace per growth). Not compiled, each step is
// Model::forward over the nn::KVCache list, rebuilt op by op.
class Decoder {
 public:
  // caches: those the prompt was prefilled into (all the same offset > 0).
  Decoder(const Model& model, std::vector<nn::KVCache> caches, bool compiled = true, int step = 256);
  // Appends token ([B, 1] int32, may be lazy: the previous step's argmax)
  // and returns the next position's logits [B, 1, vocab] float32 and their
  // argmax [B, 1] int32, both lazy.
  std::pair<array, array> step(const array& token);
  int offset() const { return offset_; }
  int capacity() const;
  // How many times the step function was traced (compiled), or run (not compiled).
  int traces() const { return *traces_; }
  // The key and value buffers of each layer (compiled; for inspection).
  const std::vector<array>& buffers() const { return buffers_; }

 private:
  void grow();

  const Model* model_;
  bool compiled_;
  int step_;
  int offset_ = 0;
  std::vector<nn::KVCache> caches_;  // not compiled
  std::function<std::vector<array>(const std::vector<array>&)> fn_;
  std::optional<array> position_;    // [1] int32, the next token's position
  std::vector<array> buffers_;       // k0, v0, k1, v1, ...
  static constexpr int kSlots = 3;
  std::vector<array> slots_;         // token [B, 1], position [1]: kSlots of each, used in turn
  std::shared_ptr<int> traces_ = std::make_shared<int>(0);
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
  // The decode step as one compiled graph (Decoder); false: op by op
  // (`kiln generate --no-compile`).
  bool compile = true;
};

struct GenerateStats {
  int prompt_tokens = 0;
  double prompt_seconds = 0;
  int decode_tokens = 0;  // generated tokens after the first
  double decode_seconds = 0;
  // Of decode_seconds: the host building the steps' graphs (Decoder::step),
  // handing them to the device (eval / async_eval), and waiting for tokens.
  double decode_build_seconds = 0, decode_eval_seconds = 0, decode_wait_seconds = 0;
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
