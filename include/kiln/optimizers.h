#pragma once
// kiln::optimizers, after MLX's mlx.optimizers (Python; MLX has no C++
// optimizers): SGD, Adam, AdamW and learning-rate schedules. The update
// math is ordinary ops, so it runs on the default stream like any other op
// and stays lazy until evaluated:
//
//   optimizers::AdamW opt(optimizers::cosine_decay(1e-3f, 1000));
//   auto [loss, grads] = loss_and_grad({x, y});
//   opt.update(*model, grads);
//   eval(model->parameters(), opt.state(), loss);   // or kiln::eval of the lists
//
// Differences from MLX, on purpose: the step counter is int32 (Kiln has no
// uint64); the state is a flat map ("step", "learning_rate",
// "<parameter>.<slot>", e.g. "layers.0.weight.m"), ready for
// save_safetensors.
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/array.h"
#include "kiln/nn.h"

namespace kiln::optimizers {

// A schedule maps the step (an int32 scalar array, 0 at the first update)
// to a value (a float32 scalar array).
using Schedule = std::function<array(const array& step)>;

// A hyperparameter given as a constant or a schedule.
class ScheduleOrValue {
 public:
  ScheduleOrValue(double value) : value_(value) {}  // NOLINT(implicit)
  template <typename F, typename = std::enable_if_t<std::is_invocable_r_v<array, F, const array&>>>
  ScheduleOrValue(F schedule) : schedule_(std::move(schedule)) {}  // NOLINT(implicit)
  // The value at step.
  array at(const array& step) const;
  bool is_schedule() const { return static_cast<bool>(schedule_); }

 private:
  double value_ = 0.0;
  Schedule schedule_;
};

class Optimizer {
 public:
  explicit Optimizer(ScheduleOrValue learning_rate);
  virtual ~Optimizer() = default;

  // model.update(apply_gradients(gradients, model.parameters())).
  void update(nn::Module& model, const nn::Params& gradients);
  // The updated parameters named in gradients (every name must be in
  // parameters); the step advances by one per call.
  nn::Params apply_gradients(const nn::Params& gradients, const nn::Params& parameters);

  // Updates done so far (int32 scalar), and the learning rate of the next.
  array step() const { return step_; }
  array learning_rate() const { return hyperparameter("learning_rate"); }
  // Replaces the learning rate (and any schedule of it) by a constant.
  void set_learning_rate(float learning_rate);
  // Everything the optimizer carries between updates; evaluate it with the
  // parameters. set_state restores a saved one.
  nn::Params state() const;
  void set_state(const nn::Params& state);

 protected:
  // Creates the slots of one parameter (e.g. "m" -> zeros) in `slots`.
  virtual void init_single(const array& parameter, nn::Params& slots) = 0;
  // The new value of one parameter; reads and writes its slots.
  virtual array apply_single(const array& gradient, const array& parameter, nn::Params& slots) = 0;
  // Registers a hyperparameter held in the state (and scheduled each step).
  void add_hyperparameter(const std::string& name, ScheduleOrValue value);
  const array& hyperparameter(const std::string& name) const;

 private:
  struct Hyperparameter {
    std::string name;
    ScheduleOrValue rule;
    array value;
  };
  array step_;
  std::vector<Hyperparameter> hyper_;
  std::map<std::string, nn::Params> slots_;  // parameter name -> its slots
};

// Stochastic gradient descent with optional momentum, dampening, Nesterov
// momentum and (L2) weight decay, as MLX's SGD.
class SGD : public Optimizer {
 public:
  explicit SGD(ScheduleOrValue learning_rate, float momentum = 0.0f, float weight_decay = 0.0f,
               float dampening = 0.0f, bool nesterov = false);

 protected:
  void init_single(const array& parameter, nn::Params& slots) override;
  array apply_single(const array& gradient, const array& parameter, nn::Params& slots) override;

 private:
  float momentum_, weight_decay_, dampening_;
  bool nesterov_;
};

// Adam: m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
// p -= lr m / (sqrt(v) + eps), with MLX's optional bias correction
// (off by default, as in MLX).
class Adam : public Optimizer {
 public:
  explicit Adam(ScheduleOrValue learning_rate, std::vector<float> betas = {0.9f, 0.999f}, float eps = 1e-8f,
                bool bias_correction = false);

 protected:
  void init_single(const array& parameter, nn::Params& slots) override;
  array apply_single(const array& gradient, const array& parameter, nn::Params& slots) override;

 private:
  float beta1_, beta2_, eps_;
  bool bias_correction_;
};

// Adam with decoupled weight decay: p <- p (1 - lr wd) before the Adam step.
class AdamW : public Adam {
 public:
  explicit AdamW(ScheduleOrValue learning_rate, std::vector<float> betas = {0.9f, 0.999f}, float eps = 1e-8f,
                 float weight_decay = 0.01f, bool bias_correction = false);

 protected:
  array apply_single(const array& gradient, const array& parameter, nn::Params& slots) override;

 private:
  float weight_decay_;
};

// Schedules (MLX's mlx.optimizers schedulers); also reachable as
// optimizers::schedulers::name.
inline namespace schedulers {

// init * decay_rate^step
Schedule exponential_decay(float init, float decay_rate);
// init * decay_rate^(step / step_size), integer division
Schedule step_decay(float init, float decay_rate, int step_size);
// From init to end along half a cosine over decay_steps, then end.
Schedule cosine_decay(float init, int decay_steps, float end = 0.0f);
// From init to end linearly over steps, then end.
Schedule linear_schedule(float init, float end, int steps);
// schedules[0] until boundaries[0], then schedules[1] from step 0 again,
// ...; needs one boundary fewer than schedules.
Schedule join_schedules(std::vector<Schedule> schedules, std::vector<int> boundaries);

}  // namespace schedulers

}  // namespace kiln::optimizers
