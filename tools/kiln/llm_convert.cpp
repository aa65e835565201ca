// `kiln convert` (llm_cli.h): a Hugging Face directory to GGUF, quantizing
// the matrices on the way (llama.cpp's metadata and tensor names, Q/K rows
// of "llama" permuted as its converter does), or a GGUF file to a Hugging
// Face directory in a float type (block formats dequantized, Q/K rows put
// back). The tokenizer is not converted.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/gguf.h"
#include "kiln/io.h"
#include "kiln/kiln.h"
#include "kiln/llm.h"
#include "llm_cli.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;
using llm::Checkpoint;
using llm::ModelConfig;

const std::vector<std::pair<std::string, std::string>>& layer_names() {
  static const std::vector<std::pair<std::string, std::string>> names = {
      {"input_layernorm", "attn_norm"},  {"post_attention_layernorm", "ffn_norm"},
      {"self_attn.q_proj", "attn_q"},    {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},    {"self_attn.o_proj", "attn_output"},
      {"self_attn.q_norm", "attn_q_norm"}, {"self_attn.k_norm", "attn_k_norm"},
      {"mlp.gate_proj", "ffn_gate"},     {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"},
  };
  return names;
}

std::string gguf_name(const std::string& hf) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  const std::string prefix = "model.layers.";
  if (hf.rfind(prefix, 0) != 0) throw Error("kiln convert: no GGUF name for the tensor " + hf);
  const size_t dot = hf.find('.', prefix.size()), last = hf.rfind('.');
  const std::string layer = hf.substr(prefix.size(), dot - prefix.size()), part = hf.substr(dot + 1, last - dot - 1);
  for (const auto& [h, g] : layer_names()) {
    if (part == h) return "blk." + layer + "." + g + hf.substr(last);
  }
  throw Error("kiln convert: no GGUF name for the tensor " + hf);
}

// llama.cpp's Q/K row order for "llama": each head's two halves interleaved
// so that rotary pairs are adjacent; inverse undoes it.
array permute_rows(const array& w, int heads, bool inverse) {
  const int rows = w.shape(0), half = rows / heads / 2;
  const Shape split = inverse ? Shape{heads, half, 2, w.shape(1)} : Shape{heads, 2, half, w.shape(1)};
  return reshape(swapaxes(reshape(w, split), 1, 2), w.shape());
}

bool is_qk(const std::string& hf) {
  return hf.find("self_attn.q_proj.weight") != std::string::npos ||
         hf.find("self_attn.k_proj.weight") != std::string::npos;
}

int qk_heads(const ModelConfig& c, const std::string& hf) {
  return hf.find("q_proj") != std::string::npos ? c.num_heads : c.num_kv_heads;
}

// A float32 matrix of a checkpoint's tensor (dequantized when quantized).
array as_float(const Checkpoint& cp, const std::string& name, const array& a) {
  if (auto it = cp.block_modes.find(name); it != cp.block_modes.end()) {
    return dequantize(a, array({}), std::nullopt, std::nullopt, std::nullopt, it->second, std::nullopt, float32);
  }
  const std::string stem = name.substr(0, name.rfind('.'));
  if (auto s = cp.tensors.find(stem + ".scales"); s != cp.tensors.end() && name.ends_with(".weight")) {
    auto b = cp.tensors.find(stem + ".biases");
    return astype(dequantize(a, s->second, b == cp.tensors.end() ? std::nullopt : std::optional<array>(b->second),
                             cp.group_size, cp.bits),
                  float32);
  }
  return astype(a, float32);
}

Dtype float_type(const std::string& type) {
  if (type == "f32") return float32;
  if (type == "f16") return float16;
  if (type == "bf16") return bfloat16;
  throw Error("kiln convert: --type " + type + " is not a float type (f32, f16, bf16) for a Hugging Face output");
}

int to_gguf(const Checkpoint& cp, const std::string& out, const std::string& type) {
  const ModelConfig& c = cp.config;
  const std::string a = c.architecture;
  const int hd = c.resolved_head_dim();
  gguf::Writer w;
  w.add("general.architecture", a);
  w.add("general.name", fs::path(out).stem().string());
  w.add(a + ".block_count", uint32_t(c.num_layers));
  w.add(a + ".context_length", uint32_t(c.max_position_embeddings));
  w.add(a + ".embedding_length", uint32_t(c.hidden_size));
  w.add(a + ".feed_forward_length", uint32_t(c.intermediate_size));
  w.add(a + ".attention.head_count", uint32_t(c.num_heads));
  w.add(a + ".attention.head_count_kv", uint32_t(c.num_kv_heads));
  w.add(a + ".attention.key_length", uint32_t(hd));
  w.add(a + ".attention.value_length", uint32_t(hd));
  w.add(a + ".rope.dimension_count", uint32_t(hd));
  w.add(a + ".rope.freq_base", c.rope_theta);
  w.add(a + ".attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  if (c.sliding_window > 0) w.add(a + ".attention.sliding_window", uint32_t(c.sliding_window));
  if (c.rope_scaling.type == "linear") {
    w.add(a + ".rope.scaling.type", "linear");
    w.add(a + ".rope.scaling.factor", c.rope_scaling.factor);
  }
  if (auto periods = llm::rope_periods(c)) {
    // llama.cpp's rope_freqs: the factor each period was multiplied by.
    array exponent = astype(arange(0, hd / 2, 1), float32) * array(2.0f / hd);
    w.add_tensor("rope_freqs.weight", *periods / power(array(c.rope_theta), exponent));
  }
  std::vector<std::string> names;
  for (const auto& [name, t] : cp.tensors) {
    if (!name.ends_with(".scales") && !name.ends_with(".biases")) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  int fallback = 0;
  for (const std::string& name : names) {
    array t = as_float(cp, name, cp.tensors.at(name));
    if (a == "llama" && is_qk(name)) t = permute_rows(t, qk_heads(c, name), false);
    const std::string g = gguf_name(name);
    if (t.ndim() != 2 || type == "f32") {
      w.add_tensor(g, t);
    } else if (type == "f16" || type == "bf16") {
      w.add_tensor(g, astype(t, float_type(type)));
    } else {
      const int block = type.ends_with("_k") ? 256 : 32;
      if (t.shape(1) % block != 0) {
        // Rows that do not fill whole blocks stay f16 (as llama.cpp falls back).
        w.add_tensor(g, astype(t, float16));
        ++fallback;
      } else {
        w.add_tensor(g, quantize(t, std::nullopt, std::nullopt, type)[0], type);
      }
    }
  }
  w.write(out);
  std::printf("wrote %s (%s, %zu tensors%s)\n", out.c_str(), type.c_str(), names.size(),
              fallback ? (", " + std::to_string(fallback) + " kept f16: rows not a multiple of the block").c_str() : "");
  return 0;
}

int to_hf(const Checkpoint& cp, const std::string& out, const std::string& type) {
  const ModelConfig& c = cp.config;
  const Dtype dtype = float_type(type);
  std::unordered_map<std::string, array> tensors;
  for (const auto& [name, t] : cp.tensors) {
    if (name == "rope_freqs") continue;  // the config's rope_scaling says it
    array f = as_float(cp, name, t);
    if (c.rope_traditional && is_qk(name)) f = permute_rows(f, qk_heads(c, name), true);
    tensors.emplace(name, astype(f, dtype));
  }
  fs::create_directories(out);
  nlohmann::json j = {{"model_type", c.architecture},
                      {"architectures", {c.architecture == "llama" ? "LlamaForCausalLM"
                                         : c.architecture == "qwen2" ? "Qwen2ForCausalLM"
                                                                     : "Qwen3ForCausalLM"}},
                      {"vocab_size", c.vocab_size},
                      {"hidden_size", c.hidden_size},
                      {"intermediate_size", c.intermediate_size},
                      {"num_hidden_layers", c.num_layers},
                      {"num_attention_heads", c.num_heads},
                      {"num_key_value_heads", c.num_kv_heads},
                      {"head_dim", c.resolved_head_dim()},
                      {"rms_norm_eps", c.rms_norm_eps},
                      {"rope_theta", c.rope_theta},
                      {"max_position_embeddings", c.max_position_embeddings},
                      {"tie_word_embeddings", !cp.tensors.count("lm_head.weight")},
                      {"torch_dtype", type == "f32" ? "float32" : type == "f16" ? "float16" : "bfloat16"}};
  if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
  if (c.rope_scaling.type == "linear") j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", c.rope_scaling.factor}};
  if (cp.tensors.count("rope_freqs")) {
    std::fprintf(stderr, "kiln convert: note: the file's rope_freqs (Llama 3 scaling) are not written to config.json\n");
  }
  std::ofstream(fs::path(out) / "config.json") << j.dump(2) << "\n";
  save_safetensors((fs::path(out) / "model.safetensors").string(), tensors);
  std::printf("wrote %s (config.json, model.safetensors: %zu tensors, %s)\n", out.c_str(), tensors.size(), type.c_str());
  return 0;
}

}  // namespace

int run_convert(const ConvertOptions& opt) {
  const bool from_gguf = fs::path(opt.input).extension() == ".gguf";
  const bool to_gguf_file = fs::path(opt.output).extension() == ".gguf";
  if (from_gguf == to_gguf_file) {
    throw Error("kiln convert: one side must be a .gguf file and the other a Hugging Face directory (got " +
                opt.input + " -> " + opt.output + ")");
  }
  if (from_gguf) return to_hf(llm::read_gguf_checkpoint(gguf::File(opt.input)), opt.output, opt.type);
  return to_gguf(llm::read_hf_checkpoint(opt.input), opt.output, opt.type);
}

int write_gguf_checkpoint(const Checkpoint& cp, const std::string& out, const std::string& type) {
  return to_gguf(cp, out, type);
}

}  // namespace kiln::cli
