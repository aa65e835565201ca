#pragma once
// kiln::nn: neural-network modules with parameter trees, after MLX's Python
// mlx.nn (MLX has no C++ nn), translated to C++:
//
//   auto model = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::UnaryModule>>{
//       std::make_shared<nn::Linear>(2, 32), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(32, 1)});
//   auto loss_and_grad = nn::value_and_grad(*model, [&](const std::vector<array>& in) {
//     return nn::losses::mse_loss((*model)(in[0]), in[1], "mean");
//   });
//   auto [loss, grads] = loss_and_grad({x, y});   // grads["layers.0.weight"], ...
//
// A module's parameters are array members it registers by name; its child
// modules are shared_ptr members registered the same way. The tree is seen
// flat: parameters() maps "layers.0.weight" -> array, the names MLX's
// tree_flatten gives. Modules are neither copied nor moved (the registry
// points at their members): hold them by shared_ptr.
//
// Differences from MLX, on purpose:
// - the parameter tree is a flat std::map (key order), not nested dicts;
// - a module called with one array derives from UnaryModule (Sequential's
//   layers must), activations are modules (ReLU, GELU, SiLU) or the plain
//   ops kiln::relu, kiln::gelu, kiln::silu;
// - value_and_grad puts the model's own parameters back after the call
//   (MLX leaves the traced ones in the model).
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kiln/array.h"
#include "kiln/ops.h"

namespace kiln::nn {

// Flat parameter tree: "layers.0.weight" -> array.
using Params = std::map<std::string, array>;

class Module {
 public:
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;

  // Every parameter of this module and its descendants, by dotted name.
  Params parameters() const;
  // parameters() less the frozen ones: what value_and_grad differentiates.
  Params trainable_parameters() const;
  // Replaces parameters by name. strict: every name must be a parameter of
  // the model (a kiln::Error lists those that are not).
  Module& update(const Params& params, bool strict = true);
  // Maps every parameter through fn (MLX apply), e.g. a dtype cast.
  Module& apply(const std::function<array(const array&)>& fn);
  // Casts the floating-point parameters to dtype.
  Module& set_dtype(Dtype dtype);

  // Frozen parameters are left out of trainable_parameters(). keys: local
  // parameter names ("bias"); empty: all. recurse: also every descendant.
  // strict: a key that names no parameter of this module is an error.
  Module& freeze(bool recurse = true, const std::vector<std::string>& keys = {}, bool strict = false);
  Module& unfreeze(bool recurse = true, const std::vector<std::string>& keys = {}, bool strict = false);

  // Training mode (Dropout is active only while training); recursive.
  Module& train(bool mode = true);
  Module& eval() { return train(false); }
  bool training() const { return training_; }

  // This module ("") and every descendant, depth first, by dotted name.
  std::vector<std::pair<std::string, Module*>> named_modules();
  // Direct children by local name.
  std::vector<std::pair<std::string, Module*>> children() const;
  // Descendants without children (and this module if it has none).
  std::vector<std::pair<std::string, Module*>> leaf_modules();
  void apply_to_modules(const std::function<void(const std::string&, Module&)>& fn);

  // Writes parameters() to a .safetensors file.
  void save_weights(const std::string& path) const;
  // Loads parameters from a .safetensors file or a Params map. strict:
  // the names and shapes must be exactly the model's.
  Module& load_weights(const std::string& path, bool strict = true);
  Module& load_weights(const Params& weights, bool strict = true);

 protected:
  // Registers a parameter member: the module keeps reading it, update()
  // writes it. Names are local ("weight"), unique, without dots.
  void register_parameter(const std::string& name, array* slot);
  // Registers a child module member; reassigning the member later swaps
  // the child. Names are local ("query_proj"; "layers.0" for lists).
  template <typename M>
  void register_module(const std::string& name, std::shared_ptr<M>* slot) {
    add_child(name, [slot]() -> Module* { return slot->get(); });
  }

 private:
  void add_child(const std::string& name, std::function<Module*()> get);
  void check_new_name(const std::string& name) const;
  void collect(const std::string& prefix, Params& out, bool trainable_only) const;
  array* find_parameter(const std::string& dotted);
  Module& set_frozen(bool frozen, bool recurse, const std::vector<std::string>& keys, bool strict);

  std::vector<std::pair<std::string, array*>> params_;
  std::vector<std::pair<std::string, std::function<Module*()>>> children_;
  std::set<std::string> frozen_;
  bool training_ = true;
};

// A module called with one array; the layers of a Sequential.
class UnaryModule : public Module {
 public:
  virtual array operator()(const array& x) = 0;
};

// y = x W^T + b with W: [output_dims, input_dims], initialized (with b)
// uniformly in [-1/sqrt(input_dims), 1/sqrt(input_dims)].
class Linear : public UnaryModule {
 public:
  Linear(int input_dims, int output_dims, bool bias = true);
  array operator()(const array& x) override;
  array weight;
  std::optional<array> bias;
};

// Rows of weight [num_embeddings, dims] (normal, std 1/sqrt(dims)) picked by
// integer indices.
class Embedding : public UnaryModule {
 public:
  Embedding(int num_embeddings, int dims);
  array operator()(const array& x) override;
  // x @ weight^T: the embedding used as the output layer (tied weights).
  array as_linear(const array& x) const;
  array weight;
};

// x / sqrt(mean(x^2) + eps) * weight over the last axis.
class RMSNorm : public UnaryModule {
 public:
  explicit RMSNorm(int dims, float eps = 1e-5f);
  array operator()(const array& x) override;
  array weight;
  float eps;
};

// (x - mean) / sqrt(var + eps) * weight + bias over the last axis; no
// weight or bias when affine is false, no bias when bias is false.
class LayerNorm : public UnaryModule {
 public:
  explicit LayerNorm(int dims, float eps = 1e-5f, bool affine = true, bool bias = true);
  array operator()(const array& x) override;
  std::optional<array> weight;
  std::optional<array> bias;
  float eps;

 private:
  int dims_;
};

// While training, zeroes each element with probability p and scales the
// others by 1/(1-p); the identity in eval mode. p in [0, 1).
class Dropout : public UnaryModule {
 public:
  explicit Dropout(float p = 0.5f);
  array operator()(const array& x) override;
  float p;
};

class ReLU : public UnaryModule {
 public:
  array operator()(const array& x) override { return relu(x); }
};
// approx, as MLX's nn.GELU: "none" (exact, erf), "precise" or "tanh" (tanh
// approximation), "fast" (x * sigmoid(1.702 x)).
class GELU : public UnaryModule {
 public:
  explicit GELU(const std::string& approx = "none");
  array operator()(const array& x) override;
  std::string approx;
};
class SiLU : public UnaryModule {
 public:
  array operator()(const array& x) override { return silu(x); }
};

// Calls its layers in order; parameters are named "layers.<i>.<name>".
class Sequential : public UnaryModule {
 public:
  explicit Sequential(std::vector<std::shared_ptr<UnaryModule>> layers);
  array operator()(const array& x) override;
  std::vector<std::shared_ptr<UnaryModule>> layers;
};

// Multi-head attention with query/key/value/output projections, scores
// scaled by 1/sqrt(head_dims). mask broadcasts against the scores
// [B, heads, L, S]: a bool mask keeps the true entries (the others get
// -inf), any other dtype is added to the scores.
class MultiHeadAttention : public Module {
 public:
  // Optional sizes default as in MLX: query/key input dims to dims, value
  // input dims to key input dims, value dims and value output dims to dims.
  MultiHeadAttention(int dims, int num_heads, std::optional<int> query_input_dims = std::nullopt,
                     std::optional<int> key_input_dims = std::nullopt,
                     std::optional<int> value_input_dims = std::nullopt, std::optional<int> value_dims = std::nullopt,
                     std::optional<int> value_output_dims = std::nullopt, bool bias = false);
  array operator()(const array& queries, const array& keys, const array& values,
                   const std::optional<array>& mask = std::nullopt);
  // [n, n] additive mask: 0 on and below the diagonal, the lowest finite
  // value of dtype above it (a position attends to itself and the past).
  static array create_additive_causal_mask(int n, Dtype dtype = float32);

  int num_heads;
  std::shared_ptr<Linear> query_proj, key_proj, value_proj, out_proj;
};

// MLX's TransformerEncoderLayer: attention and an MLP (linear1, activation,
// dropout, linear2), each in a residual branch; pre-norm (ln1/ln2 applied
// to the branch input) when norm_first, else post-norm. mlp_dims defaults
// to 4 * dims; activation to relu.
class TransformerEncoderLayer : public UnaryModule {
 public:
  TransformerEncoderLayer(int dims, int num_heads, std::optional<int> mlp_dims = std::nullopt, float dropout = 0.0f,
                          std::function<array(const array&)> activation = nullptr, bool norm_first = true);
  array operator()(const array& x) override { return (*this)(x, std::nullopt); }
  array operator()(const array& x, const std::optional<array>& mask);

  std::shared_ptr<MultiHeadAttention> attention;
  std::shared_ptr<LayerNorm> ln1, ln2;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout1, dropout2;
  std::function<array(const array&)> activation;
  bool norm_first;
};
// The pre-norm transformer block of the issue is this layer with norm_first.
using TransformerBlock = TransformerEncoderLayer;

// MLX's nn.value_and_grad: a function of fn's inputs that returns fn's
// outputs and the gradient of the first (a scalar) with respect to the
// model's trainable parameters, named as in trainable_parameters(). fn
// reads the model (it captures it); during the call the model holds the
// traced parameters, afterwards its own again.
std::function<std::pair<std::vector<array>, Params>(const std::vector<array>&)> value_and_grad(
    Module& model, std::function<std::vector<array>(const std::vector<array>&)> fn);
std::function<std::pair<array, Params>(const std::vector<array>&)> value_and_grad(
    Module& model, std::function<array(const std::vector<array>&)> fn);

namespace losses {

// Every loss takes MLX's reduction: "none", "mean" or "sum".

// Cross entropy of logits against integer class targets (logits' shape
// without axis) or probabilities (logits' shape), optionally weighted
// (weights: the loss's shape) and label-smoothed (in [0, 1)).
array cross_entropy(const array& logits, const array& targets, const std::optional<array>& weights = std::nullopt,
                    int axis = -1, float label_smoothing = 0.0f, const std::string& reduction = "none");
// Binary cross entropy of logits (with_logits) or probabilities.
array binary_cross_entropy(const array& inputs, const array& targets,
                           const std::optional<array>& weights = std::nullopt, bool with_logits = true,
                           const std::string& reduction = "mean");
// -inputs[targets] along axis (inputs are log-probabilities).
array nll_loss(const array& inputs, const array& targets, int axis = -1, const std::string& reduction = "none");
array mse_loss(const array& predictions, const array& targets, const std::string& reduction = "mean");
array l1_loss(const array& predictions, const array& targets, const std::string& reduction = "mean");

}  // namespace losses

}  // namespace kiln::nn
