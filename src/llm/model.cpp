// The decoder of include/kiln/llm.h: weights by Hugging Face name, the
// forward pass of Llama / Qwen 2 / Qwen 3 (mlx-lm's llama.py, qwen2.py,
// qwen3.py), random models and the Hugging Face directory loader.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "kiln/compile.h"
#include "kiln/fast.h"
#include "kiln/gguf.h"
#include "kiln/io.h"
#include "kiln/llm.h"
#include "kiln/ops.h"
#include "kiln/random.h"

namespace kiln::llm {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error("[llm::Model::load] cannot read " + p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const array& need(const TensorMap& t, const std::string& name) {
  auto it = t.find(name);
  if (it == t.end()) throw Error("[llm::Model] the weights lack the tensor \"" + name + "\"");
  return it->second;
}

std::optional<array> maybe(const TensorMap& t, const std::string& name) {
  auto it = t.find(name);
  return it == t.end() ? std::nullopt : std::optional<array>(it->second);
}

// A projection named `prefix` ("model.layers.0.mlp.up_proj"): prefix.weight
// (+ .scales/.biases when MLX-quantized, + .bias when present). A
// uint8 weight with a mode in `block_modes` is a GGUF block matrix.
Linear make_linear(const TensorMap& t, const std::string& prefix, std::optional<int> group_size,
                   std::optional<int> bits, const BlockModes& block_modes) {
  Linear l;
  l.weight = need(t, prefix + ".weight");
  l.bias = maybe(t, prefix + ".bias");
  if (auto scales = maybe(t, prefix + ".scales")) {
    l.mode = "affine";
    l.scales = scales;
    l.biases = maybe(t, prefix + ".biases");
    l.bits = bits.value_or(4);
    l.group_size = group_size.value_or(64);
  } else if (auto it = block_modes.find(prefix + ".weight"); it != block_modes.end()) {
    l.mode = it->second;
  } else if (!is_floating_point(l.weight.dtype())) {
    throw Error("[llm::Model] " + prefix + ".weight has dtype " + dtype_name(l.weight.dtype()) +
                " but no scales and no block format");
  }
  return l;
}

// The band of Mistral's sliding window for T queries at positions
// offset.. over the offset + T cached keys: query i sees keys j with
// i - window < j <= i. nullopt where no query reaches past the window (the
// plain causal mask is then the same).
std::optional<array> window_mask(int offset, int T, int window) {
  if (window <= 0 || offset + T <= window) return std::nullopt;
  array q = reshape(arange(offset, offset + T, 1), {T, 1});
  array k = reshape(arange(0, offset + T, 1), {1, offset + T});
  return logical_and(less_equal(k, q), greater(k, q - array(window, int32)));
}

// silu(gate) * up fused into one elementwise kernel.
const ArrayFn& swiglu() {
  static const ArrayFn fn = compile([](const std::vector<array>& in) { return std::vector<array>{silu(in[0]) * in[1]}; });
  return fn;
}

}  // namespace

array Linear::operator()(const array& x) const {
  array y = x;
  if (mode == "none") {
    // In the weight's type: promoting the weight instead would convert the
    // whole matrix every step (f16 GGUF matrices with f32 norms).
    y = matmul(x.dtype() == weight.dtype() ? x : astype(x, weight.dtype()), transpose(weight));
  } else if (mode == "affine") {
    y = quantized_matmul(x, weight, *scales, biases, true, group_size, bits, "affine");
  } else {
    y = quantized_matmul(x, weight, array({}), std::nullopt, true, std::nullopt, std::nullopt, mode);
  }
  return bias ? y + astype(*bias, y.dtype()) : y;
}

Model Model::from_tensors(const ModelConfig& config, const TensorMap& t, std::optional<int> group_size,
                          std::optional<int> bits, const BlockModes& block_modes) {
  if (config.num_layers <= 0 || config.hidden_size <= 0 || config.vocab_size <= 0 || config.num_heads <= 0 ||
      config.num_kv_heads <= 0 || config.num_heads % config.num_kv_heads != 0) {
    throw Error("[llm::Model] invalid config: layers " + std::to_string(config.num_layers) + ", hidden " +
                std::to_string(config.hidden_size) + ", vocab " + std::to_string(config.vocab_size) + ", heads " +
                std::to_string(config.num_heads) + "/" + std::to_string(config.num_kv_heads));
  }
  Model m;
  m.config_ = config;
  Linear embed = make_linear(t, "model.embed_tokens", group_size, bits, block_modes);
  if (embed.mode == "none") {
    m.embed_ = embed.weight;
  } else {
    m.embed_q_ = embed;
  }
  m.final_norm_ = need(t, "model.norm.weight");
  m.lm_head_ = t.count("lm_head.weight") ? make_linear(t, "lm_head", group_size, bits, block_modes) : embed;
  for (int i = 0; i < config.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    Layer l;
    l.attn_norm = need(t, p + "input_layernorm.weight");
    l.mlp_norm = need(t, p + "post_attention_layernorm.weight");
    l.q_norm = maybe(t, p + "self_attn.q_norm.weight");
    l.k_norm = maybe(t, p + "self_attn.k_norm.weight");
    auto lin = [&](const std::string& name) { return make_linear(t, p + name, group_size, bits, block_modes); };
    l.q = lin("self_attn.q_proj");
    l.k = lin("self_attn.k_proj");
    l.v = lin("self_attn.v_proj");
    l.o = lin("self_attn.o_proj");
    l.gate = lin("mlp.gate_proj");
    l.up = lin("mlp.up_proj");
    l.down = lin("mlp.down_proj");
    if (config.qk_norm && (!l.q_norm || !l.k_norm)) {
      throw Error("[llm::Model] " + config.architecture + " needs " + p + "self_attn.q_norm/k_norm weights");
    }
    m.layers_.push_back(std::move(l));
  }
  m.rope_freqs_ = rope_periods(config);
  if (auto periods = maybe(t, "rope_freqs")) m.rope_freqs_ = periods;
  return m;
}

Model Model::random(const ModelConfig& c, uint64_t seed, Dtype dtype, const std::string& mode) {
  TensorMap t;
  BlockModes modes;
  uint64_t n = 0;
  auto normal = [&](Shape shape) {  // one key per tensor
    return random::normal(shape, dtype, 0.0f, 0.02f, random::key(seed * 1000003 + ++n));
  };
  // A matrix: drawn, and quantized at once when a block format is asked for
  // (an 8B-shaped model's float32 weights would not fit a small machine).
  auto matrix = [&](const std::string& name, Shape shape) {
    array m = normal(shape);
    if (mode != "none") {
      m = quantize(astype(m, float32), std::nullopt, std::nullopt, mode)[0];
      modes.emplace(name, mode);
      eval(m);
    }
    t.emplace(name, m);
  };
  const int hd = c.resolved_head_dim(), D = c.hidden_size, F = c.intermediate_size;
  matrix("model.embed_tokens.weight", {c.vocab_size, D});
  t.emplace("model.norm.weight", ones({D}, dtype));
  if (!c.tie_word_embeddings) matrix("lm_head.weight", {c.vocab_size, D});
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    t.emplace(p + "input_layernorm.weight", ones({D}, dtype));
    t.emplace(p + "post_attention_layernorm.weight", ones({D}, dtype));
    matrix(p + "self_attn.q_proj.weight", {c.num_heads * hd, D});
    matrix(p + "self_attn.k_proj.weight", {c.num_kv_heads * hd, D});
    matrix(p + "self_attn.v_proj.weight", {c.num_kv_heads * hd, D});
    matrix(p + "self_attn.o_proj.weight", {D, c.num_heads * hd});
    matrix(p + "mlp.gate_proj.weight", {F, D});
    matrix(p + "mlp.up_proj.weight", {F, D});
    matrix(p + "mlp.down_proj.weight", {D, F});
    if (c.attention_bias) {
      t.emplace(p + "self_attn.q_proj.bias", normal({c.num_heads * hd}));
      t.emplace(p + "self_attn.k_proj.bias", normal({c.num_kv_heads * hd}));
      t.emplace(p + "self_attn.v_proj.bias", normal({c.num_kv_heads * hd}));
    }
    if (c.qk_norm) {
      t.emplace(p + "self_attn.q_norm.weight", ones({hd}, dtype));
      t.emplace(p + "self_attn.k_norm.weight", ones({hd}, dtype));
    }
  }
  std::vector<array> all;
  for (auto& [name, a] : t) all.push_back(a);
  eval(all);
  return from_tensors(c, t, std::nullopt, std::nullopt, modes);
}

Checkpoint read_hf_checkpoint(const std::string& path) {
  const fs::path dir(path);
  if (!fs::is_directory(dir)) {
    throw Error("[llm::read_hf_checkpoint] " + path + " is not a directory with config.json and safetensors");
  }
  const std::string config_text = read_text(dir / "config.json");
  Checkpoint c;
  c.config = config_from_hf_json(config_text);
  const auto j = nlohmann::json::parse(config_text);
  if (auto q = j.find("quantization"); q != j.end() && q->is_object()) {
    c.group_size = q->value("group_size", 64);
    c.bits = q->value("bits", 4);
  }
  std::set<std::string> files;
  if (fs::exists(dir / "model.safetensors.index.json")) {
    const auto index = nlohmann::json::parse(read_text(dir / "model.safetensors.index.json"));
    for (const auto& [name, file] : index.at("weight_map").items()) files.insert(file.get<std::string>());
  } else {
    files.insert("model.safetensors");
  }
  for (const auto& f : files) {
    for (auto& [name, a] : load_safetensors((dir / f).string()).first) c.tensors.insert_or_assign(name, a);
  }
  return c;
}

Model Model::from_checkpoint(const Checkpoint& c) {
  return from_tensors(c.config, c.tensors, c.group_size, c.bits, c.block_modes);
}

Model Model::load(const std::string& path) {
  if (fs::path(path).extension() == ".gguf") return from_gguf(gguf::File(path));
  return from_checkpoint(read_hf_checkpoint(path));
}

std::vector<nn::KVCache> Model::make_caches() const { return std::vector<nn::KVCache>(layers_.size()); }

namespace {

// A layer's matrices: the stacked ones where fuse_projections made them,
// else q, k, v and gate, up apart (L: Layer or const Layer).
template <typename L>
auto linears(L& l) {
  using P = decltype(&l.o);
  std::vector<P> out;
  if (l.qkv) out.push_back(&*l.qkv);
  else out.insert(out.end(), {&l.q, &l.k, &l.v});
  if (l.gate_up) out.push_back(&*l.gate_up);
  else out.insert(out.end(), {&l.gate, &l.up});
  out.insert(out.end(), {&l.o, &l.down});
  return out;
}

}  // namespace

size_t Model::weight_bytes() const {
  size_t total = 0;
  auto add = [&](const Linear& l) {
    total += l.weight.nbytes() + (l.scales ? l.scales->nbytes() : 0) + (l.biases ? l.biases->nbytes() : 0);
  };
  for (const Layer& l : layers_) {
    for (const Linear* p : linears(l)) add(*p);
  }
  add(lm_head_);
  return total;
}

bool Model::quantized() const {
  if (layers_.empty()) return false;
  const Layer& l = layers_[0];
  return (l.qkv ? l.qkv->mode : l.q.mode) != "none";
}

void Model::set_activation_dtype(Dtype dtype) {
  if (!is_floating_point(dtype) || dtype == float64) {
    throw Error(std::string("[llm::Model::set_activation_dtype] needs float32, bfloat16 or float16, got ") +
                dtype_name(dtype));
  }
  if (!quantized()) {
    throw Error(std::string("[llm::Model::set_activation_dtype] a float-weight model computes in its weights' dtype (") +
                dtype_name(embed_.dtype()) + "); only quantized models take another activation dtype");
  }
  act_dtype_ = dtype;
  std::vector<array> all;
  auto cast = [&](array& a) { all.push_back(a = astype(a, dtype)); };
  auto cast_opt = [&](std::optional<array>& a) {
    if (a) cast(*a);
  };
  cast(final_norm_);
  cast_opt(lm_head_.bias);
  for (Layer& l : layers_) {
    cast(l.attn_norm), cast(l.mlp_norm), cast_opt(l.q_norm), cast_opt(l.k_norm);
    for (Linear* p : linears(l)) cast_opt(p->bias);
  }
  eval(all);  // converted once, not in every step's graph
}

namespace {

// One Linear of `parts` stacked along the output rows, or nullopt where
// their formats, dtypes or bias presence differ.
std::optional<Linear> stack(const std::vector<const Linear*>& parts) {
  const Linear& a = *parts[0];
  for (const Linear* p : parts) {
    if (p->mode != a.mode || p->bits != a.bits || p->group_size != a.group_size ||
        p->weight.dtype() != a.weight.dtype() || p->weight.ndim() != 2 || p->weight.shape(1) != a.weight.shape(1) ||
        p->scales.has_value() != a.scales.has_value() || p->biases.has_value() != a.biases.has_value() ||
        p->bias.has_value() != a.bias.has_value()) {
      return std::nullopt;
    }
  }
  auto cat = [&](auto get) {
    std::vector<array> v;
    for (const Linear* p : parts) v.push_back(get(*p));
    return concatenate(v, 0);
  };
  Linear s = a;
  s.weight = cat([](const Linear& p) { return p.weight; });
  if (a.scales) s.scales = cat([](const Linear& p) { return *p.scales; });
  if (a.biases) s.biases = cat([](const Linear& p) { return *p.biases; });
  if (a.bias) s.bias = cat([](const Linear& p) { return *p.bias; });
  return s;
}

}  // namespace

void Model::fuse_projections() {
  for (Layer& l : layers_) {
    if (!l.qkv) {
      if (auto s = stack({&l.q, &l.k, &l.v})) {
        l.qkv = std::move(s);
        l.q = l.k = l.v = Linear{};
      }
    }
    if (!l.gate_up) {
      if (auto s = stack({&l.gate, &l.up})) {
        l.gate_up = std::move(s);
        l.gate = l.up = Linear{};
      }
    }
    std::vector<array> made;
    for (const std::optional<Linear>* f : {&l.qkv, &l.gate_up}) {
      if (!*f) continue;
      made.push_back((*f)->weight);
      for (const auto* o : {&(*f)->scales, &(*f)->biases, &(*f)->bias}) {
        if (*o) made.push_back(**o);
      }
    }
    eval(made);  // layer by layer: the parts are released as we go
  }
}

array Model::embed(const array& tokens) const {
  if (!embed_q_) return act_dtype_ ? astype(take(embed_, tokens, 0), *act_dtype_) : take(embed_, tokens, 0);
  const Linear& e = *embed_q_;
  if (e.mode == "affine") {
    return dequantize(take(e.weight, tokens, 0), take(*e.scales, tokens, 0),
                      e.biases ? std::optional<array>(take(*e.biases, tokens, 0)) : std::nullopt, e.group_size, e.bits,
                      "affine", std::nullopt, act_dtype_);
  }
  return dequantize(take(e.weight, tokens, 0), array({}), std::nullopt, std::nullopt, std::nullopt, e.mode, std::nullopt,
                    act_dtype_.value_or(float32));
}

std::pair<array, array> Model::pre_norm(const array& h, const std::optional<array>& delta, const array& weight) const {
  if (!delta) return {h, fast::rms_norm(h, weight, config_.rms_norm_eps)};
  return fast::add_rms_norm(h, *delta, weight, config_.rms_norm_eps);
}

namespace {

// KILN_FUSED_NORM=1 (a lab switch): one token on GGUF blocks has the
// residual add and the norm computed by the product's kernel
// (fast::add_rms_norm_quantized_matmul). Off: with it the 8B Q4_K decode
// ran 5% slower on an H100 (docs/performance.md, session 33): every CTA of the product waits
// for its own norm after its weights arrive, where the separate norm
// kernel ran while the product's CTAs were already fetching them.
bool fuses_norm(const array& h, const std::optional<array>& delta, const Linear& lin) {
  static const bool on = [] {
    const char* e = std::getenv("KILN_FUSED_NORM");
    return e && std::string(e) == "1";
  }();
  return on && delta && h.ndim() == 3 && h.shape(0) * h.shape(1) == 1 && lin.mode != "none" && lin.mode != "affine" &&
         !lin.bias;
}

}  // namespace

std::pair<array, array> Model::norm_product(const array& h, const std::optional<array>& delta, const array& weight,
                                            const Linear& lin) const {
  if (!fuses_norm(h, delta, lin)) {
    auto [sum, x] = pre_norm(h, delta, weight);
    return {sum, lin(x)};
  }
  return fast::add_rms_norm_quantized_matmul(h, *delta, weight, config_.rms_norm_eps, lin.weight, array({}),
                                             std::nullopt, true, std::nullopt, std::nullopt, lin.mode);
}

std::tuple<array, array, array> Model::project_qkv(const Layer& l, array& h, const std::optional<array>& delta,
                                                   const array& offset) const {
  const ModelConfig& c = config_;
  const int B = h.shape(0), T = h.shape(1), hd = c.resolved_head_dim();
  const float rope_scale = c.rope_scaling.type == "linear" ? 1.0f / c.rope_scaling.factor : 1.0f;
  const std::optional<float> base = rope_freqs_ ? std::nullopt : std::optional<float>(c.rope_theta);
  auto heads = [&](const array& x, int n) { return transpose(reshape(x, {B, T, n, hd}), {0, 2, 1, 3}); };
  auto rope = [&](const array& x) {
    return fast::rope(x, hd, c.rope_traditional, base, rope_scale, offset, rope_freqs_);
  };
  const int nq = c.num_heads * hd, nk = c.num_kv_heads * hd;
  if (l.qkv && !l.q_norm) {
    // Stacked: the query and key heads are rotated in one pass, then split.
    array y = h;
    std::tie(h, y) = norm_product(h, delta, l.attn_norm, *l.qkv);
    const array qk = rope(heads(slice(y, {0, 0, 0}, {B, T, nq + nk}), c.num_heads + c.num_kv_heads));
    const array v = heads(slice(y, {0, 0, nq + nk}, {B, T, nq + 2 * nk}), c.num_kv_heads);
    return {slice(qk, {0, 0, 0, 0}, {B, c.num_heads, T, hd}),
            slice(qk, {0, c.num_heads, 0, 0}, {B, c.num_heads + c.num_kv_heads, T, hd}), v};
  }
  array x = h;
  std::tie(h, x) = pre_norm(h, delta, l.attn_norm);
  const std::optional<array> y = l.qkv ? std::optional<array>((*l.qkv)(x)) : std::nullopt;
  array q = heads(y ? slice(*y, {0, 0, 0}, {B, T, nq}) : l.q(x), c.num_heads);
  array k = heads(y ? slice(*y, {0, 0, nq}, {B, T, nq + nk}) : l.k(x), c.num_kv_heads);
  array v = heads(y ? slice(*y, {0, 0, nq + nk}, {B, T, nq + 2 * nk}) : l.v(x), c.num_kv_heads);
  if (l.q_norm) q = fast::rms_norm(q, *l.q_norm, c.rms_norm_eps);
  if (l.k_norm) k = fast::rms_norm(k, *l.k_norm, c.rms_norm_eps);
  return {rope(q), rope(k), v};
}

std::pair<array, array> Model::finish_layer(const Layer& l, const array& h, const array& attention) const {
  const int B = h.shape(0), T = h.shape(1), n = attention.shape(1) * attention.shape(3);
  const array o = l.o(reshape(transpose(attention, {0, 2, 1, 3}), {B, T, n}));
  // KILN_FUSED_SWIGLU=1 (a lab switch): one token on GGUF blocks has SwiGLU
  // computed by the down product's kernel. Off: every CTA of that product
  // evaluates all of silu's K exponentials and divisions (see
  // docs/performance.md, session 33), where the separate kernel shares them.
  static const bool fused_swiglu = [] {
    const char* e = std::getenv("KILN_FUSED_SWIGLU");
    return e && std::string(e) == "1";
  }();
  auto down = [&](const array& gate, const array& up) {
    if (fused_swiglu && B * T == 1 && l.down.mode != "none" && l.down.mode != "affine" && !l.down.bias) {
      return fast::swiglu_quantized_matmul(gate, up, l.down.weight, array({}), std::nullopt, true, std::nullopt,
                                           std::nullopt, l.down.mode);
    }
    return l.down(swiglu()({gate, up})[0]);
  };
  if (l.gate_up) {
    auto [out, y] = norm_product(h, o, l.mlp_norm, *l.gate_up);
    const int F = y.shape(2) / 2;
    return {out, down(slice(y, {0, 0, 0}, {B, T, F}), slice(y, {0, 0, F}, {B, T, 2 * F}))};
  }
  auto [out, x] = pre_norm(h, o, l.mlp_norm);
  return {out, down(l.gate(x), l.up(x))};
}

array Model::logits(const array& h, const std::optional<array>& delta) const {
  return astype(norm_product(h, delta, final_norm_, lm_head_).second, float32);
}

array Model::forward(const array& tokens, std::vector<nn::KVCache>& caches, bool last_only) const {
  const ModelConfig& c = config_;
  if (tokens.ndim() != 2 || !is_integral(tokens.dtype())) {
    throw Error("[llm::Model::forward] tokens must be [batch, length] integers, got " +
                std::to_string(tokens.ndim()) + "-d " + dtype_name(tokens.dtype()));
  }
  if (caches.size() != layers_.size()) {
    throw Error("[llm::Model::forward] " + std::to_string(caches.size()) + " caches for " +
                std::to_string(layers_.size()) + " layers");
  }
  const int B = tokens.shape(0), T = tokens.shape(1);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.resolved_head_dim()));
  array h = embed(tokens);
  std::optional<array> delta;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const int offset = caches[i].offset();
    auto [q, k, v] = project_qkv(layers_[i], h, delta, array(offset, int32));
    auto [keys, values] = caches[i].update_and_fetch(k, v);
    const std::optional<array> band = window_mask(offset, T, c.sliding_window);
    array o = band ? fast::scaled_dot_product_attention(q, keys, values, scale, "array", band)
                   : fast::scaled_dot_product_attention(q, keys, values, scale, T > 1 ? "causal" : "");
    std::tie(h, delta) = finish_layer(layers_[i], h, o);
  }
  if (last_only && T > 1) {
    h = slice(h, {0, T - 1, 0}, {B, T, h.shape(2)});
    if (delta) delta = slice(*delta, {0, T - 1, 0}, {B, T, delta->shape(2)});
  }
  return logits(h, delta);
}

std::vector<array> Model::decode_step(const std::vector<array>& in) const {
  const ModelConfig& c = config_;
  const size_t L = layers_.size();
  if (in.size() != 2 + 2 * L || in[0].ndim() != 2 || in[0].shape(1) != 1 || in[1].ndim() != 1 ||
      in[1].size() != 1) {
    throw Error("[llm::Model::decode_step] needs {tokens [B, 1], position [1], then a key and a value buffer per "
                "layer} (" + std::to_string(2 + 2 * L) + " arrays), got " + std::to_string(in.size()));
  }
  const array& position = in[1];
  const int capacity = in[2].shape(2);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.resolved_head_dim()));
  // Slot j of the buffers holds position j: those after `position` are not written yet.
  const array slots = arange(0, capacity, 1);
  array visible = less_equal(slots, position);
  if (c.sliding_window > 0) visible = logical_and(visible, greater(slots, position - array(c.sliding_window, int32)));
  std::vector<array> out = {array(0.0f)};
  array h = embed(in[0]);
  std::optional<array> delta;
  for (size_t i = 0; i < L; ++i) {
    auto [q, k, v] = project_qkv(layers_[i], h, delta, position);
    array keys = slice_update(in[2 + 2 * i], k, position, {2});
    array values = slice_update(in[3 + 2 * i], v, position, {2});
    const array o = fast::scaled_dot_product_attention(q, keys, values, scale, "array", visible);
    std::tie(h, delta) = finish_layer(layers_[i], h, o);
    out.push_back(keys);
    out.push_back(values);
  }
  out[0] = logits(h, delta);
  return out;
}

}  // namespace kiln::llm
