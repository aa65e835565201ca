// Model configuration from a Hugging Face config.json, and the rotary
// periods of Llama 3's frequency scaling (mlx-lm's Llama3RoPE).
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/llm.h"

namespace kiln::llm {
namespace {

using nlohmann::json;

// j[key] as T, or fallback when it is missing or null. A value of another
// JSON type, or a number out of T's range, is an Error naming the key
// (nlohmann's own conversions would throw its type_error, or cast 1e40 to
// int / 1e300 to float with undefined behaviour).
template <typename T>
T get_or(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  auto bad = [&](const char* what) {
    return Error(std::string("[llm::config_from_hf_json] \"") + key + "\" is not " + what + ": " +
                 it->dump().substr(0, 100));
  };
  if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) throw bad("a string");
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) throw bad("true or false");
  } else if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer() || it->get<int64_t>() < std::numeric_limits<T>::min() ||
        it->get<int64_t>() > std::numeric_limits<T>::max()) {
      throw bad("an integer in range");
    }
  } else {
    static_assert(std::is_floating_point_v<T>);
    if (!it->is_number() || !(std::fabs(it->get<double>()) <= std::numeric_limits<T>::max())) {
      throw bad("a finite number in range");
    }
    return static_cast<T>(it->get<double>());
  }
  return it->get<T>();
}

int require_int(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) {
    throw Error(std::string("[llm::config_from_hf_json] config.json lacks the integer \"") + key + "\"");
  }
  return it->get<int>();
}

}  // namespace

ModelConfig config_from_hf_json(const std::string& json_text) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    throw Error(std::string("[llm::config_from_hf_json] config.json is not JSON: ") + e.what());
  }
  ModelConfig c;
  const std::string type = get_or<std::string>(j, "model_type", "llama");
  if (type == "llama" || type == "mistral") {
    c.architecture = "llama";
  } else if (type == "qwen2" || type == "qwen3") {
    c.architecture = type;
  } else {
    throw Error("[llm::config_from_hf_json] unsupported model_type \"" + type +
                "\" (supported: llama, mistral, qwen2, qwen3)");
  }
  c.vocab_size = require_int(j, "vocab_size");
  c.hidden_size = require_int(j, "hidden_size");
  c.intermediate_size = require_int(j, "intermediate_size");
  c.num_layers = require_int(j, "num_hidden_layers");
  c.num_heads = require_int(j, "num_attention_heads");
  c.num_kv_heads = get_or<int>(j, "num_key_value_heads", c.num_heads);
  c.head_dim = get_or<int>(j, "head_dim", 0);
  c.rms_norm_eps = get_or<float>(j, "rms_norm_eps", 1e-5f);
  c.rope_theta = get_or<float>(j, "rope_theta", 10000.0f);
  c.max_position_embeddings = get_or<int>(j, "max_position_embeddings", 4096);
  c.tie_word_embeddings = get_or<bool>(j, "tie_word_embeddings", false);
  c.attention_bias = type == "qwen2" || get_or<bool>(j, "attention_bias", false);
  c.qk_norm = type == "qwen3";
  // Mistral's window; Qwen configs carry one with "use_sliding_window": false.
  if (get_or<bool>(j, "use_sliding_window", true)) c.sliding_window = get_or<int>(j, "sliding_window", 0);
  if (auto it = j.find("rope_scaling"); it != j.end() && it->is_object()) {
    const std::string kind = get_or<std::string>(*it, "rope_type", get_or<std::string>(*it, "type", "default"));
    if (kind == "llama3" || kind == "linear") {
      c.rope_scaling.type = kind;
      c.rope_scaling.factor = get_or<float>(*it, "factor", 1.0f);
      c.rope_scaling.low_freq_factor = get_or<float>(*it, "low_freq_factor", 1.0f);
      c.rope_scaling.high_freq_factor = get_or<float>(*it, "high_freq_factor", 4.0f);
      c.rope_scaling.original_max_position_embeddings =
          get_or<int>(*it, "original_max_position_embeddings", 8192);
    } else if (kind != "default") {
      throw Error("[llm::config_from_hf_json] unsupported rope_scaling type \"" + kind +
                  "\" (supported: default, linear, llama3)");
    }
  }
  if (c.num_heads <= 0 || c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0) {
    throw Error("[llm::config_from_hf_json] num_attention_heads " + std::to_string(c.num_heads) +
                " must be a positive multiple of num_key_value_heads " + std::to_string(c.num_kv_heads));
  }
  return c;
}

std::optional<array> rope_periods(const ModelConfig& c) {
  if (c.rope_scaling.type != "llama3") return std::nullopt;
  const int dims = c.resolved_head_dim();
  const RopeScaling& s = c.rope_scaling;
  const float old_len = static_cast<float>(s.original_max_position_embeddings);
  const float low_wavelen = old_len / s.low_freq_factor, high_wavelen = old_len / s.high_freq_factor;
  std::vector<float> periods(dims / 2);
  for (int i = 0; i < dims / 2; ++i) {
    float p = std::pow(c.rope_theta, 2.0f * i / dims);
    const float wavelen = 2.0f * static_cast<float>(M_PI) * p;
    if (wavelen > low_wavelen) {
      p *= s.factor;
    } else if (wavelen > high_wavelen && wavelen < low_wavelen) {
      // Between the two wavelengths the period blends smoothly from scaled to unscaled.
      const float smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      p = p / ((1.0f - smooth) / s.factor + smooth);
    }
    periods[i] = p;
  }
  return array(periods, {dims / 2});
}

}  // namespace kiln::llm
