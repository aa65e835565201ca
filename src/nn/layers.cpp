// The modules of kiln::nn, written with plain ops so that every transform
// and every backend applies to them. Initializations follow MLX's.
#include <cmath>
#include <limits>

#include "core/ops_util.h"
#include "kiln/fast.h"
#include "kiln/nn.h"
#include "kiln/random.h"

namespace kiln::nn {
namespace {

void check_positive(const char* op, const char* what, int n) {
  if (n <= 0) throw Error(std::string("[") + op + "] " + what + " must be positive, got " + std::to_string(n));
}

// The last axis of x must have `dims` entries.
void check_last_dim(const char* op, const array& x, int dims) {
  if (x.ndim() == 0 || x.shape(-1) != dims) {
    fail(op, "expected a last axis of size " + std::to_string(dims), {&x});
  }
}

double lowest_finite(Dtype dtype) {
  switch (dtype) {
    case float16: return -65504.0;
    case bfloat16: return -3.3895313892515355e38;
    case float32: return std::numeric_limits<float>::lowest();
    case float64: return std::numeric_limits<double>::lowest();
    default:
      throw Error(std::string("[MultiHeadAttention::create_additive_causal_mask] dtype must be floating point, got ") +
                  dtype_name(dtype));
  }
}

}  // namespace

Linear::Linear(int input_dims, int output_dims, bool has_bias)
    : weight([&] {
        check_positive("Linear", "input_dims", input_dims);
        check_positive("Linear", "output_dims", output_dims);
        float scale = 1.0f / std::sqrt(static_cast<float>(input_dims));
        return random::uniform(array(-scale), array(scale), {output_dims, input_dims});
      }()) {
  register_parameter("weight", &weight);
  if (has_bias) {
    float scale = 1.0f / std::sqrt(static_cast<float>(input_dims));
    bias = random::uniform(array(-scale), array(scale), {output_dims});
    register_parameter("bias", &*bias);
  }
}

array Linear::operator()(const array& x) {
  check_last_dim("Linear", x, weight.shape(1));
  array y = matmul(x, transpose(weight));
  return bias ? y + *bias : y;
}

Embedding::Embedding(int num_embeddings, int dims)
    : weight([&] {
        check_positive("Embedding", "num_embeddings", num_embeddings);
        check_positive("Embedding", "dims", dims);
        return random::normal({num_embeddings, dims}, float32, 0.0f, 1.0f / std::sqrt(static_cast<float>(dims)));
      }()) {
  register_parameter("weight", &weight);
}

array Embedding::operator()(const array& x) {
  if (!is_integral(x.dtype()) || x.dtype() == bool_) fail("Embedding", "indices must be integers", {&x});
  return take(weight, x, 0);
}

array Embedding::as_linear(const array& x) const {
  check_last_dim("Embedding::as_linear", x, weight.shape(1));
  return matmul(x, transpose(weight));
}

RMSNorm::RMSNorm(int dims, float eps_) : weight((check_positive("RMSNorm", "dims", dims), ones({dims}))), eps(eps_) {
  register_parameter("weight", &weight);
}

array RMSNorm::operator()(const array& x) {
  check_last_dim("RMSNorm", x, weight.shape(0));
  return fast::rms_norm(x, weight, eps);  // as MLX's nn.RMSNorm
}

LayerNorm::LayerNorm(int dims, float eps_, bool affine, bool has_bias) : eps(eps_) {
  check_positive("LayerNorm", "dims", dims);
  if (affine) {
    weight = ones({dims});
    register_parameter("weight", &*weight);
    if (has_bias) {
      bias = zeros({dims});
      register_parameter("bias", &*bias);
    }
  }
  dims_ = dims;
}

array LayerNorm::operator()(const array& x) {
  check_last_dim("LayerNorm", x, dims_);
  return fast::layer_norm(x, weight, bias, eps);  // as MLX's nn.LayerNorm
}

Dropout::Dropout(float p_) : p(p_) {
  if (!(p >= 0.0f && p < 1.0f)) throw Error("[Dropout] the probability " + std::to_string(p) + " is not in [0, 1)");
}

array Dropout::operator()(const array& x) {
  if (p == 0.0f || !training()) return x;
  const float keep = 1.0f - p;
  array mask = random::bernoulli(array(keep), x.shape());
  return where(mask, x * (1.0f / keep), zeros_like(x));
}

GELU::GELU(const std::string& approx_) : approx(approx_) {
  if (approx != "none" && approx != "precise" && approx != "tanh" && approx != "fast") {
    throw Error("[GELU] approx must be none, precise, tanh or fast; got " + approx);
  }
}

array GELU::operator()(const array& x) {
  if (approx == "none") return gelu(x);
  if (approx == "fast") return x * sigmoid(1.702f * x);
  return gelu_approx(x);
}

Sequential::Sequential(std::vector<std::shared_ptr<UnaryModule>> layers_) : layers(std::move(layers_)) {
  for (size_t i = 0; i < layers.size(); ++i) {
    if (!layers[i]) throw Error("[Sequential] layer " + std::to_string(i) + " is null");
    register_module("layers." + std::to_string(i), &layers[i]);
  }
}

array Sequential::operator()(const array& x) {
  array y = x;
  for (auto& layer : layers) y = (*layer)(y);
  return y;
}

MultiHeadAttention::MultiHeadAttention(int dims, int num_heads_, std::optional<int> query_input_dims,
                                       std::optional<int> key_input_dims, std::optional<int> value_input_dims,
                                       std::optional<int> value_dims, std::optional<int> value_output_dims, bool bias)
    : num_heads(num_heads_) {
  check_positive("MultiHeadAttention", "num_heads", num_heads);
  check_positive("MultiHeadAttention", "dims", dims);
  if (dims % num_heads != 0) {
    throw Error("[MultiHeadAttention] dims " + std::to_string(dims) + " must be divisible by num_heads " +
                std::to_string(num_heads));
  }
  int kin = key_input_dims.value_or(dims);
  int vdims = value_dims.value_or(dims);
  if (vdims % num_heads != 0) {
    throw Error("[MultiHeadAttention] value_dims " + std::to_string(vdims) + " must be divisible by num_heads " +
                std::to_string(num_heads));
  }
  query_proj = std::make_shared<Linear>(query_input_dims.value_or(dims), dims, bias);
  key_proj = std::make_shared<Linear>(kin, dims, bias);
  value_proj = std::make_shared<Linear>(value_input_dims.value_or(kin), vdims, bias);
  out_proj = std::make_shared<Linear>(vdims, value_output_dims.value_or(dims), bias);
  register_module("query_proj", &query_proj);
  register_module("key_proj", &key_proj);
  register_module("value_proj", &value_proj);
  register_module("out_proj", &out_proj);
}

array MultiHeadAttention::operator()(const array& queries, const array& keys, const array& values,
                                     const std::optional<array>& mask) {
  if (queries.ndim() != 3 || keys.ndim() != 3 || values.ndim() != 3 || keys.shape(0) != queries.shape(0) ||
      values.shape(0) != queries.shape(0) || keys.shape(1) != values.shape(1)) {
    fail("MultiHeadAttention", "expected queries [B, L, Dq], keys [B, S, Dk] and values [B, S, Dv]",
         {&queries, &keys, &values});
  }
  const int B = queries.shape(0), L = queries.shape(1), S = keys.shape(1);
  // [B, T, D] -> [B, heads, T, D / heads]
  auto heads = [&](const array& x, int T) { return transpose(reshape(x, {B, T, num_heads, -1}), {0, 2, 1, 3}); };
  array q = heads((*query_proj)(queries), L);
  array k = heads((*key_proj)(keys), S);
  array v = heads((*value_proj)(values), S);
  const float scale = 1.0f / std::sqrt(static_cast<float>(q.shape(-1)));
  array scores = matmul(q * scale, swapaxes(k, -1, -2));
  if (mask) {
    const array& m = *mask;
    try {
      broadcast_shapes(m.shape(), scores.shape(), "MultiHeadAttention", {&m, &scores});
    } catch (const Error&) {
      fail("MultiHeadAttention", "the mask does not broadcast to the scores [B, heads, L, S]", {&m, &scores});
    }
    if (m.dtype() == bool_) {
      scores = where(m, scores, array(-std::numeric_limits<float>::infinity(), scores.dtype()));
    } else {
      scores = scores + astype(m, scores.dtype());
    }
  }
  array out = matmul(softmax(scores, -1), v);  // [B, heads, L, Dv / heads]
  return (*out_proj)(reshape(transpose(out, {0, 2, 1, 3}), {B, L, -1}));
}

array MultiHeadAttention::create_additive_causal_mask(int n, Dtype dtype) {
  if (n < 0) throw Error("[MultiHeadAttention::create_additive_causal_mask] n must be >= 0, got " + std::to_string(n));
  const double lowest = lowest_finite(dtype);
  array idx = arange(n);
  array future = less(expand_dims(idx, 1), expand_dims(idx, 0));
  return where(future, array(lowest, dtype), array(0.0, dtype));
}

TransformerEncoderLayer::TransformerEncoderLayer(int dims, int num_heads, std::optional<int> mlp_dims, float dropout,
                                                 std::function<array(const array&)> activation_, bool norm_first_)
    : activation(activation_ ? std::move(activation_) : [](const array& x) { return relu(x); }),
      norm_first(norm_first_) {
  const int hidden = mlp_dims.value_or(4 * dims);
  attention = std::make_shared<MultiHeadAttention>(dims, num_heads);
  ln1 = std::make_shared<LayerNorm>(dims);
  ln2 = std::make_shared<LayerNorm>(dims);
  linear1 = std::make_shared<Linear>(dims, hidden);
  linear2 = std::make_shared<Linear>(hidden, dims);
  dropout1 = std::make_shared<Dropout>(dropout);
  dropout2 = std::make_shared<Dropout>(dropout);
  register_module("attention", &attention);
  register_module("ln1", &ln1);
  register_module("ln2", &ln2);
  register_module("linear1", &linear1);
  register_module("linear2", &linear2);
  register_module("dropout1", &dropout1);
  register_module("dropout2", &dropout2);
}

array TransformerEncoderLayer::operator()(const array& x, const std::optional<array>& mask) {
  auto mlp = [&](const array& y) { return (*linear2)((*dropout2)(activation((*linear1)(y)))); };
  if (norm_first) {
    array y = (*ln1)(x);
    array h = x + (*dropout1)((*attention)(y, y, y, mask));
    return h + mlp((*ln2)(h));
  }
  array h = (*ln1)(x + (*dropout1)((*attention)(x, x, x, mask)));
  return (*ln2)(h + mlp(h));
}

}  // namespace kiln::nn
