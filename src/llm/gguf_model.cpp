// Models from GGUF files (llama.cpp's key and tensor names): the config
// from {arch}.* metadata, the tensors renamed to Hugging Face names and
// used in place over the file's mapping (block formats as they are).
//
// llama.cpp's converter permutes the Q and K rows of "llama" files so that
// rotary pairs are adjacent (2i, 2i+1); such files run rope in its
// traditional layout instead of being permuted back (which quantized rows
// would not allow). Qwen files keep Hugging Face's layout (pairs i, i + d/2).
#include <cmath>

#include "kiln/gguf.h"
#include "kiln/llm.h"
#include "kiln/ops.h"

namespace kiln::llm {
namespace {

int meta_int(const gguf::File& f, const std::string& key) {
  const gguf::Value* v = f.find(key);
  if (!v) throw Error("[llm::Model::load] " + f.path() + " lacks the metadata key " + key);
  return static_cast<int>(v->to_int());
}

std::optional<double> meta_number(const gguf::File& f, const std::string& key) {
  const gguf::Value* v = f.find(key);
  return v ? std::optional<double>(v->to_double()) : std::nullopt;
}

// GGUF tensor name -> Hugging Face name ("" when the runtime does not use it).
std::string hf_name(const std::string& name) {
  static const std::vector<std::pair<std::string, std::string>> global = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"},
      {"rope_freqs.weight", "rope_freqs"},
  };
  static const std::vector<std::pair<std::string, std::string>> per_layer = {
      {"attn_norm", "input_layernorm"},  {"ffn_norm", "post_attention_layernorm"},
      {"attn_q", "self_attn.q_proj"},    {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"},    {"attn_output", "self_attn.o_proj"},
      {"attn_q_norm", "self_attn.q_norm"}, {"attn_k_norm", "self_attn.k_norm"},
      {"ffn_gate", "mlp.gate_proj"},     {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"},
  };
  for (const auto& [g, h] : global) {
    if (name == g) return h;
  }
  if (name.rfind("blk.", 0) != 0) return "";
  const size_t dot = name.find('.', 4), last = name.rfind('.');
  if (dot == std::string::npos || last <= dot) return "";
  const std::string layer = name.substr(4, dot - 4), part = name.substr(dot + 1, last - dot - 1);
  const std::string suffix = name.substr(last);  // ".weight" | ".bias"
  for (const auto& [g, h] : per_layer) {
    if (part == g) return "model.layers." + layer + "." + h + suffix;
  }
  return "";
}

}  // namespace

ModelConfig config_from_gguf(const gguf::File& f) {
  const std::string arch = f.get<std::string>("general.architecture");
  if (arch != "llama" && arch != "qwen2" && arch != "qwen3") {
    throw Error("[llm::Model::load] " + f.path() + ": unsupported architecture \"" + arch +
                "\" (supported: llama, qwen2, qwen3)");
  }
  const std::string p = arch + ".";
  ModelConfig c;
  c.architecture = arch;
  c.num_layers = meta_int(f, p + "block_count");
  c.hidden_size = meta_int(f, p + "embedding_length");
  c.intermediate_size = meta_int(f, p + "feed_forward_length");
  c.num_heads = meta_int(f, p + "attention.head_count");
  c.num_kv_heads = f.find(p + "attention.head_count_kv") ? meta_int(f, p + "attention.head_count_kv") : c.num_heads;
  if (f.find(p + "attention.key_length")) c.head_dim = meta_int(f, p + "attention.key_length");
  c.rms_norm_eps = static_cast<float>(meta_number(f, p + "attention.layer_norm_rms_epsilon").value_or(1e-5));
  c.rope_theta = static_cast<float>(meta_number(f, p + "rope.freq_base").value_or(10000.0));
  if (f.find(p + "context_length")) c.max_position_embeddings = meta_int(f, p + "context_length");
  if (f.find(p + "attention.sliding_window")) c.sliding_window = meta_int(f, p + "attention.sliding_window");
  if (const gguf::Value* t = f.find(p + "rope.scaling.type"); t && t->get<std::string>() == "linear") {
    c.rope_scaling.type = "linear";
    c.rope_scaling.factor = static_cast<float>(meta_number(f, p + "rope.scaling.factor").value_or(1.0));
  }
  c.rope_traditional = arch == "llama";
  c.attention_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.qk_norm = arch == "qwen3";
  c.tie_word_embeddings = f.find_tensor("output.weight") == nullptr;
  const gguf::TensorInfo* embd = f.find_tensor("token_embd.weight");
  if (!embd) throw Error("[llm::Model::load] " + f.path() + " has no token_embd.weight");
  c.vocab_size = embd->shape[0];
  if (c.num_heads <= 0 || c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0) {
    throw Error("[llm::Model::load] " + f.path() + ": head_count " + std::to_string(c.num_heads) +
                " must be a positive multiple of head_count_kv " + std::to_string(c.num_kv_heads));
  }
  return c;
}

TokenizerSpec tokenizer_spec_from_gguf(const gguf::File& f) {
  const std::string k = "tokenizer.ggml.";
  if (!f.find(k + "tokens")) throw Error("[llm::tokenizer_spec_from_gguf] " + f.path() + " has no tokenizer.ggml.tokens");
  TokenizerSpec s;
  auto str = [&](const std::string& key, std::string& out) {
    if (const gguf::Value* v = f.find(key)) out = v->get<std::string>();
  };
  auto id = [&](const std::string& key, int32_t& out) {
    if (const gguf::Value* v = f.find(key)) out = static_cast<int32_t>(v->to_int());
  };
  auto flag = [&](const std::string& key, std::optional<bool>& out) {
    if (const gguf::Value* v = f.find(key)) out = v->get<bool>();
  };
  str(k + "model", s.model);
  str(k + "pre", s.pre);
  s.tokens = f.get<std::vector<std::string>>(k + "tokens");
  if (const gguf::Value* v = f.find(k + "scores")) s.scores = v->get<std::vector<float>>();
  if (const gguf::Value* v = f.find(k + "token_type")) s.token_type = v->get<std::vector<int32_t>>();
  if (const gguf::Value* v = f.find(k + "merges")) s.merges = v->get<std::vector<std::string>>();
  id(k + "bos_token_id", s.bos_id);
  id(k + "eos_token_id", s.eos_id);
  id(k + "eot_token_id", s.eot_id);
  id(k + "unknown_token_id", s.unk_id);
  id(k + "padding_token_id", s.pad_id);
  flag(k + "add_bos_token", s.add_bos);
  flag(k + "add_eos_token", s.add_eos);
  flag(k + "add_space_prefix", s.add_space_prefix);
  str("tokenizer.chat_template", s.chat_template);
  return s;
}

Checkpoint read_gguf_checkpoint(const gguf::File& f) {
  Checkpoint cp;
  cp.config = config_from_gguf(f);
  const ModelConfig& c = cp.config;
  TensorMap& tensors = cp.tensors;
  BlockModes& modes = cp.block_modes;
  for (const gguf::TensorInfo& info : f.tensors()) {
    const std::string name = hf_name(info.name);
    if (name.empty()) continue;
    array a = f.tensor(info);
    if (auto mode = gguf::block_mode(info.type)) modes.emplace(name, *mode);
    if (name == "rope_freqs") {
      // llama.cpp stores Llama 3's scaling as a factor per pair that divides
      // the angle: the period base^(2i/d) times the factor.
      const int half = static_cast<int>(a.size());
      const array exponent = astype(arange(0, half, 1), float32) * array(2.0f / (2 * half));
      a = power(array(c.rope_theta), exponent) * astype(a, float32);
    }
    tensors.insert_or_assign(name, a);
  }
  return cp;
}

}  // namespace kiln::llm
