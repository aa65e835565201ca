// Learning-rate schedules (MLX's mlx.optimizers.schedulers), as functions
// of the step array so that a compiled training step can carry them.
#include <cmath>

#include "kiln/optimizers.h"

namespace kiln::optimizers::schedulers {

Schedule exponential_decay(float init, float decay_rate) {
  return [init, decay_rate](const array& step) {
    return init * power(array(decay_rate), astype(step, float32));
  };
}

Schedule step_decay(float init, float decay_rate, int step_size) {
  if (step_size < 1) throw Error("[step_decay] step_size must be positive, got " + std::to_string(step_size));
  return [init, decay_rate, step_size](const array& step) {
    array periods = floor(astype(step, float32) / static_cast<float>(step_size));
    return init * power(array(decay_rate), periods);
  };
}

Schedule cosine_decay(float init, int decay_steps, float end) {
  if (decay_steps < 1) throw Error("[cosine_decay] decay_steps must be positive, got " + std::to_string(decay_steps));
  return [init, decay_steps, end](const array& step) {
    array s = minimum(astype(step, float32), array(static_cast<float>(decay_steps)));
    array decay = 0.5f * (1.0f + cos(static_cast<float>(M_PI / decay_steps) * s));
    return end + decay * (init - end);
  };
}

Schedule linear_schedule(float init, float end, int steps) {
  if (steps < 1) throw Error("[linear_schedule] steps must be positive, got " + std::to_string(steps));
  return [init, end, steps](const array& step) {
    array s = minimum(astype(step, float32), array(static_cast<float>(steps)));
    return s * ((end - init) / static_cast<float>(steps)) + init;
  };
}

Schedule join_schedules(std::vector<Schedule> schedules, std::vector<int> boundaries) {
  if (schedules.empty()) throw Error("[join_schedules] needs at least one schedule");
  if (schedules.size() != boundaries.size() + 1) {
    throw Error("[join_schedules] got " + std::to_string(boundaries.size()) + " boundaries for " +
                std::to_string(schedules.size()) + " schedules; expected " + std::to_string(schedules.size() - 1));
  }
  for (auto& s : schedules) {
    if (!s) throw Error("[join_schedules] a schedule is empty");
  }
  return [schedules = std::move(schedules), boundaries = std::move(boundaries)](const array& step) {
    array out = astype(schedules[0](step), float32);
    for (size_t i = 0; i < boundaries.size(); ++i) {
      out = where(step < boundaries[i], out, astype(schedules[i + 1](step - boundaries[i]), float32));
    }
    return out;
  };
}

}  // namespace kiln::optimizers::schedulers
