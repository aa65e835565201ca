// SGD, Adam and AdamW (MLX's update rules) and the Optimizer bookkeeping:
// hyperparameters evaluated from their schedules at each step, one set of
// slots (momenta) per parameter, a flat state for evaluation and saving.
#include "kiln/optimizers.h"

namespace kiln::optimizers {

array ScheduleOrValue::at(const array& step) const {
  if (!schedule_) return array(static_cast<float>(value_));
  return astype(schedule_(step), float32);
}

Optimizer::Optimizer(ScheduleOrValue learning_rate) : step_(array(0, int32)) {
  add_hyperparameter("learning_rate", std::move(learning_rate));
}

void Optimizer::add_hyperparameter(const std::string& name, ScheduleOrValue value) {
  array initial = value.at(step_);
  if (initial.ndim() != 0) {
    throw Error("[Optimizer] the schedule of " + name + " must return a scalar, got " + std::to_string(initial.ndim()) +
                " dimensions");
  }
  hyper_.push_back({name, std::move(value), initial});
}

const array& Optimizer::hyperparameter(const std::string& name) const {
  for (auto& h : hyper_) {
    if (h.name == name) return h.value;
  }
  throw Error("[Optimizer] no hyperparameter named " + name);
}

void Optimizer::set_learning_rate(float learning_rate) {
  for (auto& h : hyper_) {
    if (h.name == "learning_rate") {
      h.rule = ScheduleOrValue(learning_rate);
      h.value = array(learning_rate);
    }
  }
}

nn::Params Optimizer::state() const {
  nn::Params out;
  out.insert_or_assign("step", step_);
  for (auto& h : hyper_) out.insert_or_assign(h.name, h.value);
  for (auto& [param, slots] : slots_) {
    for (auto& [slot, value] : slots) out.insert_or_assign(param + "." + slot, value);
  }
  return out;
}

void Optimizer::set_state(const nn::Params& state) {
  auto step = state.find("step");
  if (step == state.end() || step->second.ndim() != 0) throw Error("[Optimizer::set_state] no scalar \"step\"");
  std::map<std::string, nn::Params> slots;
  for (auto& [key, value] : state) {
    if (key == "step") continue;
    bool is_hyper = false;
    for (auto& h : hyper_) is_hyper = is_hyper || h.name == key;
    if (is_hyper) continue;
    // Slot names have no dots: the last dot splits "<parameter>.<slot>".
    auto dot = key.rfind('.');
    if (dot == std::string::npos) throw Error("[Optimizer::set_state] unknown state entry " + key);
    slots[key.substr(0, dot)].insert_or_assign(key.substr(dot + 1), value);
  }
  step_ = astype(step->second, int32);
  for (auto& h : hyper_) {
    auto it = state.find(h.name);
    h.value = it != state.end() ? it->second : h.rule.at(step_);
  }
  slots_ = std::move(slots);
}

nn::Params Optimizer::apply_gradients(const nn::Params& gradients, const nn::Params& parameters) {
  for (auto& [name, g] : gradients) {
    auto p = parameters.find(name);
    if (p == parameters.end()) throw Error("[Optimizer::apply_gradients] no parameter named " + name);
    if (p->second.shape() != g.shape()) {
      throw Error("[Optimizer::apply_gradients] the gradient of " + name + " does not have the parameter's shape");
    }
  }
  // As MLX: scheduled values are taken at the current step, then the step
  // advances, so the first update uses schedule(0) and sees step 1.
  for (auto& h : hyper_) {
    if (h.rule.is_schedule()) h.value = h.rule.at(step_);
  }
  step_ = step_ + 1;
  nn::Params updated;
  for (auto& [name, g] : gradients) {
    auto [it, fresh] = slots_.try_emplace(name);
    if (fresh) init_single(g, it->second);
    updated.insert_or_assign(name, apply_single(g, parameters.at(name), it->second));
  }
  return updated;
}

void Optimizer::update(nn::Module& model, const nn::Params& gradients) {
  model.update(apply_gradients(gradients, model.parameters()));
}

SGD::SGD(ScheduleOrValue learning_rate, float momentum, float weight_decay, float dampening, bool nesterov)
    : Optimizer(std::move(learning_rate)),
      momentum_(momentum),
      weight_decay_(weight_decay),
      dampening_(dampening),
      nesterov_(nesterov) {
  if (nesterov && (momentum <= 0.0f || dampening != 0.0f)) {
    throw Error("[SGD] Nesterov momentum requires a momentum and zero dampening");
  }
}

void SGD::init_single(const array& parameter, nn::Params& slots) { slots.insert_or_assign("v", zeros_like(parameter)); }

array SGD::apply_single(const array& gradient, const array& parameter, nn::Params& slots) {
  array g = weight_decay_ != 0.0f ? gradient + weight_decay_ * parameter : gradient;
  array lr = astype(learning_rate(), gradient.dtype());
  if (momentum_ <= 0.0f) return parameter - lr * g;
  array v = momentum_ * slots.at("v") + (dampening_ > 0.0f ? (1.0f - dampening_) * g : g);
  slots.insert_or_assign("v", v);
  return parameter - lr * (nesterov_ ? g + momentum_ * v : v);
}

Adam::Adam(ScheduleOrValue learning_rate, std::vector<float> betas, float eps, bool bias_correction)
    : Optimizer(std::move(learning_rate)), eps_(eps), bias_correction_(bias_correction) {
  if (betas.size() != 2) throw Error("[Adam] betas must hold two values, got " + std::to_string(betas.size()));
  beta1_ = betas[0];
  beta2_ = betas[1];
}

void Adam::init_single(const array& parameter, nn::Params& slots) {
  slots.insert_or_assign("m", zeros_like(parameter));
  slots.insert_or_assign("v", zeros_like(parameter));
}

array Adam::apply_single(const array& gradient, const array& parameter, nn::Params& slots) {
  const Dtype dt = gradient.dtype();
  array lr = astype(learning_rate(), dt);
  array m = beta1_ * slots.at("m") + (1.0f - beta1_) * gradient;
  array v = beta2_ * slots.at("v") + (1.0f - beta2_) * square(gradient);
  slots.insert_or_assign("m", m);
  slots.insert_or_assign("v", v);
  if (!bias_correction_) return parameter - lr * m / (sqrt(v) + eps_);
  array t = astype(step(), dt);
  array c1 = lr / (1.0f - power(array(beta1_, dt), t));
  array c2 = rsqrt(1.0f - power(array(beta2_, dt), t));
  return parameter - c1 * m / (sqrt(v) * c2 + eps_);
}

AdamW::AdamW(ScheduleOrValue learning_rate, std::vector<float> betas, float eps, float weight_decay,
             bool bias_correction)
    : Adam(std::move(learning_rate), std::move(betas), eps, bias_correction), weight_decay_(weight_decay) {}

array AdamW::apply_single(const array& gradient, const array& parameter, nn::Params& slots) {
  array lr = astype(learning_rate(), gradient.dtype());
  return Adam::apply_single(gradient, parameter * (1.0f - lr * weight_decay_), slots);
}

}  // namespace kiln::optimizers
