// fast::scaled_dot_product_attention: argument checks, the plain-op
// fallback that defines the op, and the primitive's transformation rules
// (all through the fallback: attention's backward is a few matmuls whose
// score matrix the fallback materializes anyway).
#include <cfloat>
#include <cmath>
#include <sstream>

#include "core/ops_util.h"
#include "core/primitives_attention.h"
#include "core/transform_util.h"
#include "kiln/fast.h"
#include "kiln/ops.h"
#include "kiln/transforms.h"

namespace kiln {

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// The lowest finite value of a floating dtype: what a false in a bool mask
// turns a score into (MLX's finfo(dtype).min), so that a fully masked row
// is a uniform average instead of NaN.
double lowest_finite(Dtype t) {
  switch (t) {
    case float16: return -65504.0;
    case bfloat16: return -3.3895313892515355e38;
    case float32: return -static_cast<double>(FLT_MAX);
    default: return -DBL_MAX;
  }
}

}  // namespace

namespace fast::detail {

std::vector<array> sdpa_fallback(const std::vector<array>& inputs, float scale, bool causal, bool has_mask,
                                 bool has_sinks, Stream s) {
  const array& q_in = inputs[0];
  array k = inputs[1];
  array v = inputs[2];
  const int n_q_heads = q_in.shape(1), n_kv_heads = k.shape(1);
  const int n_repeats = n_q_heads / n_kv_heads;
  // Scaling q (not the scores) rounds in q's dtype as MLX's fallback does.
  array q = multiply(array(scale, q_in.dtype()), q_in, s);
  // Grouped heads become a broadcast axis of K and V: [B, Hkv, rep, L, D]
  // against [B, Hkv, 1, L, D], never a repeated copy.
  if (n_repeats > 1) {
    q = unflatten(q, 1, {n_kv_heads, n_repeats}, s);
    k = expand_dims(k, 2, s);
    v = expand_dims(v, 2, s);
  }
  array scores = matmul(q, swapaxes(k, -1, -2, s), s);
  if (has_mask || causal) {
    array mask = has_mask ? inputs[3] : array(0.0f);
    if (causal) {
      const int lq = q.shape(-2), lk = k.shape(-2);
      const int offset = lk - lq;  // queries are the last lq positions
      array q_idx = expand_dims(arange(offset, lq + offset, s), 1, s);
      array k_idx = expand_dims(arange(0, lk, s), 0, s);
      mask = greater_equal(q_idx, k_idx, s);
    } else if (n_repeats > 1) {
      mask = unflatten(mask, 1, {n_kv_heads, n_repeats}, s);
    }
    if (mask.dtype() == bool_) {
      scores = where(mask, scores, array(lowest_finite(scores.dtype()), scores.dtype()), s);
    } else {
      scores = add(scores, mask, s);
    }
  }
  if (has_sinks) {
    array sinks = expand_dims(inputs.back(), {0, 2, 3}, s);  // [1, Hq, 1, 1]
    if (n_repeats > 1) sinks = unflatten(sinks, 1, {n_kv_heads, n_repeats}, s);
    Shape col = scores.shape();
    col.back() = 1;
    scores = concatenate({broadcast_to(sinks, col, s), scores}, -1, s);
  }
  // Kiln's softmax accumulates 16-bit inputs in float32 (MLX's precise).
  scores = softmax(scores, -1, s);
  if (has_sinks) {
    Shape start(scores.ndim(), 0);
    start.back() = 1;
    scores = slice(scores, start, scores.shape(), s);
  }
  array out = matmul(scores, v, s);
  if (n_repeats > 1) out = flatten(out, 1, 2, s);
  return {out};
}

}  // namespace fast::detail

namespace fast {

array scaled_dot_product_attention(const array& queries, const array& keys, const array& values, const float scale,
                                   const std::string& mask_mode, std::optional<array> mask_arr,
                                   const std::optional<array>& sinks, bool force_fused, StreamOrDevice s) {
  std::vector<const array*> all = {&queries, &keys, &values};
  if (mask_arr) all.push_back(&*mask_arr);
  if (sinks) all.push_back(&*sinks);
  auto bad = [&](const std::string& msg) {
    std::vector<array> ins;
    for (const array* a : all) ins.push_back(*a);
    fail(kOp, msg, ins);
  };
  for (const array* t : {&queries, &keys, &values}) {
    if (t->ndim() != 4) bad("queries, keys and values must have rank 4 [batch, heads, length, head_dim]");
  }
  if (mask_mode != "" && mask_mode != "causal" && mask_mode != "array") {
    bad("invalid mask_mode '" + mask_mode + "': use \"\", \"causal\" or \"array\"");
  }
  const bool causal = mask_mode == "causal";
  if (causal && mask_arr) bad("mask_mode \"causal\" takes no mask array");
  if (mask_mode == "array" && !mask_arr) bad("mask_mode \"array\" needs a mask array");
  const int batch = queries.shape(0), n_q_heads = queries.shape(1), lq = queries.shape(2), d = queries.shape(3);
  const int n_kv_heads = keys.shape(1), lk = keys.shape(2);
  if (keys.shape(0) != batch || values.shape(0) != batch) bad("queries, keys and values must have the same batch size");
  if (keys.shape(3) != d) bad("queries and keys must have the same head dimension");
  if (values.shape(1) != n_kv_heads) bad("keys and values must have the same number of heads");
  if (values.shape(2) != lk) bad("keys and values must have the same length");
  if (n_kv_heads == 0 || n_q_heads % n_kv_heads != 0) {
    bad("the number of query heads (" + std::to_string(n_q_heads) + ") must be a multiple of the number of key/value heads (" +
        std::to_string(n_kv_heads) + ")");
  }
  const Dtype out_type = promote_types(promote_types(queries.dtype(), keys.dtype()), values.dtype());
  if (!is_floating_point(out_type)) bad(std::string("needs floating inputs, they promote to ") + dtype_name(out_type));
  Stream st = to_stream(s);

  std::vector<array> inputs = {astype(queries, out_type, st), astype(keys, out_type, st), astype(values, out_type, st)};
  const Shape scores_shape = {batch, n_q_heads, lq, lk};
  if (mask_arr) {
    const array& m = *mask_arr;
    if (m.ndim() > 4) bad("the mask must have rank at most 4, got " + format_shape(m.shape()));
    for (int i = 0; i < m.ndim(); ++i) {
      int dim = m.shape(i), want = scores_shape[4 - m.ndim() + i];
      if (dim != want && dim != 1) {
        bad("the mask " + format_shape(m.shape()) + " does not broadcast to the scores " + format_shape(scores_shape));
      }
    }
    if (m.dtype() != bool_ && promote_types(m.dtype(), out_type) != out_type) {
      bad(std::string("the mask must be bool or promote to the output type ") + dtype_name(out_type));
    }
    array mm = m.dtype() == bool_ ? m : astype(m, out_type, st);
    inputs.push_back(broadcast_to(mm, scores_shape, st));
  }
  if (sinks) {
    if (sinks->ndim() != 1 || sinks->shape(0) != n_q_heads) {
      bad("sinks must have shape (" + std::to_string(n_q_heads) + ") (one per query head), got " +
          format_shape(sinks->shape()));
    }
    if (promote_types(sinks->dtype(), out_type) != out_type) {
      bad(std::string("sinks must promote to the output type ") + dtype_name(out_type));
    }
    inputs.push_back(astype(*sinks, out_type, st));
  }
  const bool has_mask = mask_arr.has_value(), has_sinks = sinks.has_value();
  auto fallback = [scale, causal, has_mask, has_sinks, st](const std::vector<array>& in) {
    return detail::sdpa_fallback(in, scale, causal, has_mask, has_sinks, st);
  };
  if (!force_fused && !detail::sdpa_fused_supported(inputs[0], inputs[1], inputs[2], st)) {
    return fallback(inputs)[0];
  }
  Shape out_shape = {batch, n_q_heads, lq, values.shape(3)};
  return make_node<ScaledDotProductAttention>(std::move(out_shape), out_type, std::move(inputs), st, fallback, scale,
                                              causal, has_mask, has_sinks);
}

}  // namespace fast

bool fast::detail::sdpa_fused_supported(const array& q, const array& k, const array& v, Stream s) {
  const Dtype t = q.dtype();
  if (t != float32 && t != float16 && t != bfloat16) return false;
  if (q.size() == 0 || k.shape(2) == 0) return false;
  const int d = q.shape(3), dv = v.shape(3);
  if (s.device == Device::cpu) return d <= 256 && dv <= 256;
  // The CUDA kernels are compiled for these head dims (equal for K and V);
  // decode (up to 16 rows per KV head) takes every float type, the tensor
  // core prefill 16-bit ones.
  if (d != dv || (d != 64 && d != 80 && d != 96 && d != 128 && d != 256)) return false;
  const bool decode = q.shape(2) * (q.shape(1) / k.shape(1)) <= 16;
  return decode || t != float32;
}

// ---- transformation rules: through the fallback ----

namespace {

// The fallback as a function of the inputs in argnums only (the others are
// held at their primal values): what vjp and jvp differentiate.
std::function<std::vector<array>(const std::vector<array>&)> fallback_of(
    const ScaledDotProductAttention::Fallback& fallback, const std::vector<array>& primals,
    const std::vector<int>& argnums) {
  return [fallback, primals, argnums](const std::vector<array>& args) {
    std::vector<array> in = primals;
    for (size_t i = 0; i < argnums.size(); ++i) in[argnums[i]] = args[i];
    return fallback(in);
  };
}

}  // namespace

std::vector<array> ScaledDotProductAttention::vjp(const std::vector<array>& primals,
                                                  const std::vector<array>& cotangents,
                                                  const std::vector<int>& argnums, const std::vector<array>&) {
  detail::RuleStreamScope scope(stream());
  std::vector<array> args;
  for (int a : argnums) args.push_back(primals[a]);
  return kiln::vjp(fallback_of(fallback_, primals, argnums), args, cotangents).second;
}

std::vector<array> ScaledDotProductAttention::jvp(const std::vector<array>& primals,
                                                  const std::vector<array>& tangents,
                                                  const std::vector<int>& argnums) {
  detail::RuleStreamScope scope(stream());
  std::vector<array> args;
  for (int a : argnums) args.push_back(primals[a]);
  return kiln::jvp(fallback_of(fallback_, primals, argnums), args, tangents).second;
}

std::pair<std::vector<array>, std::vector<int>> ScaledDotProductAttention::vmap(const std::vector<array>& inputs,
                                                                                const std::vector<int>& axes) {
  detail::RuleStreamScope scope(stream());
  std::vector<array> out = kiln::vmap(fallback_, axes, {0})(inputs);
  return {out, {0}};
}

std::vector<Shape> ScaledDotProductAttention::output_shapes(const std::vector<array>& inputs) {
  return {{inputs[0].shape(0), inputs[0].shape(1), inputs[0].shape(2), inputs[2].shape(3)}};
}

bool ScaledDotProductAttention::is_equivalent(const Primitive& other) const {
  const auto* o = dynamic_cast<const ScaledDotProductAttention*>(&other);
  return o && o->scale_ == scale_ && o->causal_ == causal_ && o->has_mask_ == has_mask_ && o->has_sinks_ == has_sinks_;
}

std::string ScaledDotProductAttention::describe() const {
  std::ostringstream os;
  os << name() << "(scale=" << scale_ << (causal_ ? ", causal" : "") << (has_mask_ ? ", mask" : "")
     << (has_sinks_ ? ", sinks" : "") << ")";
  return os.str();
}

}  // namespace kiln
