// kiln::nn::losses, composed from plain ops (MLX's mlx.nn.losses).
#include "core/ops_util.h"
#include "kiln/nn.h"

namespace kiln::nn::losses {
namespace {

array reduce(const array& loss, const std::string& reduction, const char* op) {
  if (reduction == "none") return loss;
  if (reduction == "mean") return mean(loss);
  if (reduction == "sum") return sum(loss);
  throw Error(std::string("[") + op + "] invalid reduction " + reduction + "; must be none, mean or sum");
}

void check_same_shape(const char* op, const array& a, const array& b) {
  if (a.shape() != b.shape()) fail(op, "predictions and targets must have the same shape", {&a, &b});
}

void apply_weights(const char* op, array& loss, const std::optional<array>& weights) {
  if (!weights) return;
  if (weights->shape() != loss.shape()) {
    fail(op, "weights must have the shape of the loss " + format_shape(loss.shape()), {&*weights});
  }
  loss = loss * *weights;
}

// Class indices are integers with logits' rank minus one.
void check_class_targets(const char* op, const array& logits, const array& targets, int axis) {
  Shape want = logits.shape();
  want.erase(want.begin() + axis);
  if (!is_integral(targets.dtype()) || targets.dtype() == bool_ || targets.shape() != want) {
    fail(op, "targets must be integer class indices of shape " + format_shape(want), {&logits, &targets});
  }
}

}  // namespace

array cross_entropy(const array& logits, const array& targets, const std::optional<array>& weights, int axis,
                    float label_smoothing, const std::string& reduction) {
  const char* op = "cross_entropy";
  if (!(label_smoothing >= 0.0f && label_smoothing < 1.0f)) {
    throw Error("[cross_entropy] label_smoothing must be in [0, 1), got " + std::to_string(label_smoothing));
  }
  if (!is_floating_point(logits.dtype())) fail(op, "logits must be floating point", {&logits, &targets});
  axis = normalize_axis(axis, logits.ndim(), op, logits);
  array score = [&] {
    if (targets.ndim() == logits.ndim()) {  // probabilities
      check_same_shape(op, logits, targets);
      return sum(logits * targets, axis);
    }
    check_class_targets(op, logits, targets, axis);
    return squeeze(take_along_axis(logits, expand_dims(targets, axis), axis), axis);
  }();
  array loss = logsumexp(logits, axis);
  if (label_smoothing > 0.0f) {
    loss = loss - (1.0f - label_smoothing) * score - label_smoothing * mean(logits, axis);
  } else {
    loss = loss - score;
  }
  apply_weights(op, loss, weights);
  return reduce(loss, reduction, op);
}

array binary_cross_entropy(const array& inputs, const array& targets, const std::optional<array>& weights,
                           bool with_logits, const std::string& reduction) {
  const char* op = "binary_cross_entropy";
  check_same_shape(op, inputs, targets);
  array loss = [&] {
    if (with_logits) {
      // log(1 + e^x) - x t, with log(1 + e^x) = max(x, 0) + log1p(e^-|x|)
      // so that large |x| neither overflows nor loses the tail.
      return maximum(inputs, zeros_like(inputs)) + log1p(exp(-abs(inputs))) - inputs * targets;
    }
    // Clamped logs (MLX: at -100) keep 0 and 1 finite.
    array floor_ = array(-100.0f, inputs.dtype());
    array log_p = maximum(log(inputs), floor_), log_q = maximum(log1p(-inputs), floor_);
    return -(targets * log_p + (1.0f - targets) * log_q);
  }();
  apply_weights(op, loss, weights);
  return reduce(loss, reduction, op);
}

array nll_loss(const array& inputs, const array& targets, int axis, const std::string& reduction) {
  const char* op = "nll_loss";
  axis = normalize_axis(axis, inputs.ndim(), op, inputs);
  check_class_targets(op, inputs, targets, axis);
  array loss = -squeeze(take_along_axis(inputs, expand_dims(targets, axis), axis), axis);
  return reduce(loss, reduction, op);
}

array mse_loss(const array& predictions, const array& targets, const std::string& reduction) {
  check_same_shape("mse_loss", predictions, targets);
  return reduce(square(predictions - targets), reduction, "mse_loss");
}

array l1_loss(const array& predictions, const array& targets, const std::string& reduction) {
  check_same_shape("l1_loss", predictions, targets);
  return reduce(abs(predictions - targets), reduction, "l1_loss");
}

}  // namespace kiln::nn::losses
