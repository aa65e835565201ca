// kiln::optimizers: three steps of each optimizer against the update rule
// computed by hand in double, schedules' values, the optimizer state
// (saved and restored), and argument errors.
#include <cmath>

#include "kiln/optimizers.h"
#include "test_util.h"

namespace kiln {
namespace {

using test::all_close;
using test::random_array;
using test::to_double;

// The hyperparameters as the optimizer holds them (float32), in double.
double f32(float v) { return static_cast<double>(v); }

struct Problem {
  nn::Params params;
  std::vector<nn::Params> grads;  // one per step
};

// Two float64 parameters (a transposed one among them) and random
// gradients for three steps.
Problem make_problem() {
  Problem p;
  p.params = {{"a.weight", random_array({3, 4}, float64)}, {"b", transpose(random_array({5, 2}, float64))}};
  for (int s = 0; s < 3; ++s) {
    nn::Params g;
    for (auto& [name, v] : p.params) g.insert_or_assign(name, random_array(v.shape(), float64));
    p.grads.push_back(g);
  }
  return p;
}

// Runs the optimizer over the problem and checks each step against `rule`,
// which updates one element given (parameter, gradient, step 1-based,
// per-element state).
template <typename Rule>
void check_steps(optimizers::Optimizer& opt, const Problem& prob, Rule rule) {
  nn::Params params = prob.params;
  std::map<std::string, std::vector<double>> want, state_m, state_v;
  for (auto& [name, v] : params) {
    want[name] = to_double(v);
    state_m[name].assign(v.size(), 0.0);
    state_v[name].assign(v.size(), 0.0);
  }
  for (int step = 1; step <= 3; ++step) {
    nn::Params updated = opt.apply_gradients(prob.grads[step - 1], params);
    for (auto& [name, v] : updated) {
      auto g = to_double(prob.grads[step - 1].at(name));
      for (size_t i = 0; i < g.size(); ++i) rule(want[name][i], g[i], step, state_m[name][i], state_v[name][i]);
      EXPECT_TRUE(all_close(v, want[name], 1e-9, 1e-12)) << name << " step " << step;
      params.insert_or_assign(name, v);
    }
    EXPECT_EQ(opt.step().item<int>(), step);
  }
}

TEST(Optimizers, SgdPlainMomentumDampeningNesterov) {
  Problem prob = make_problem();
  const double lr = f32(0.1f);
  optimizers::SGD plain(0.1f);
  check_steps(plain, prob, [&](double& p, double g, int, double&, double&) { p -= lr * g; });

  optimizers::SGD heavy(0.1f, 0.9f, 0.01f, 0.25f);
  check_steps(heavy, prob, [&](double& p, double g, int, double& v, double&) {
    g += f32(0.01f) * p;
    v = f32(0.9f) * v + (1 - f32(0.25f)) * g;
    p -= lr * v;
  });

  optimizers::SGD nesterov(0.1f, 0.5f, 0.0f, 0.0f, true);
  check_steps(nesterov, prob, [&](double& p, double g, int, double& v, double&) {
    v = 0.5 * v + g;
    p -= lr * (g + 0.5 * v);
  });
  EXPECT_TRUE(test::throws_error([] { optimizers::SGD(0.1f, 0.0f, 0.0f, 0.0f, true); }, {"[SGD]", "Nesterov"}));
}

TEST(Optimizers, AdamWithAndWithoutBiasCorrectionAndAdamW) {
  Problem prob = make_problem();
  const double lr = f32(0.01f), b1 = f32(0.9f), b2 = f32(0.999f), eps = f32(1e-8f);
  auto adam_rule = [&](bool correct) {
    return [=](double& p, double g, int t, double& m, double& v) {
      m = b1 * m + (1 - b1) * g;
      v = b2 * v + (1 - b2) * g * g;
      if (correct) {
        p -= lr / (1 - std::pow(b1, t)) * m / (std::sqrt(v) / std::sqrt(1 - std::pow(b2, t)) + eps);
      } else {
        p -= lr * m / (std::sqrt(v) + eps);
      }
    };
  };
  optimizers::Adam adam(0.01f);
  check_steps(adam, prob, adam_rule(false));
  optimizers::Adam corrected(0.01f, {0.9f, 0.999f}, 1e-8f, true);
  check_steps(corrected, prob, adam_rule(true));

  optimizers::AdamW adamw(0.01f, {0.9f, 0.999f}, 1e-8f, 0.1f);
  auto inner = adam_rule(false);
  check_steps(adamw, prob, [&](double& p, double g, int t, double& m, double& v) {
    p *= 1 - lr * f32(0.1f);
    inner(p, g, t, m, v);
  });
  EXPECT_TRUE(test::throws_error([] { optimizers::Adam(0.1f, {0.9f}); }, {"[Adam]", "betas"}));
}

double value_at(const optimizers::Schedule& s, int step) { return s(array(step, int32)).item<double>(); }

TEST(Optimizers, SchedulesValues) {
  auto lin = optimizers::linear_schedule(0.0f, 1e-3f, 10);
  EXPECT_NEAR(value_at(lin, 0), 0.0, 1e-12);
  EXPECT_NEAR(value_at(lin, 4), 4e-4, 1e-9);
  EXPECT_NEAR(value_at(lin, 25), 1e-3, 1e-9);
  auto cosine = optimizers::schedulers::cosine_decay(0.1f, 100, 0.01f);
  for (int s : {0, 1, 37, 50, 100, 250}) {
    double want = 0.01 + 0.5 * (1 + std::cos(M_PI * std::min(s, 100) / 100.0)) * 0.09;
    EXPECT_NEAR(value_at(cosine, s), want, 1e-7) << s;
  }
  auto joined = optimizers::join_schedules({lin, cosine}, {10});
  EXPECT_NEAR(value_at(joined, 5), 5e-4, 1e-9);
  EXPECT_NEAR(value_at(joined, 10), 0.1, 1e-7);  // the cosine from its own step 0
  EXPECT_NEAR(value_at(joined, 60), value_at(cosine, 50), 1e-9);
  EXPECT_NEAR(value_at(optimizers::exponential_decay(0.5f, 0.9f), 3), 0.5 * std::pow(f32(0.9f), 3), 1e-7);
  EXPECT_NEAR(value_at(optimizers::step_decay(0.5f, 0.5f, 4), 9), 0.125, 1e-9);
  EXPECT_TRUE(test::throws_error([&] { optimizers::join_schedules({lin, cosine}, {}); }, {"[join_schedules]", "boundaries"}));
  EXPECT_TRUE(test::throws_error([] { optimizers::linear_schedule(0, 1, 0); }, {"[linear_schedule]"}));
  EXPECT_TRUE(test::throws_error([] { optimizers::cosine_decay(1, 0); }, {"[cosine_decay]"}));
}

TEST(Optimizers, ScheduledLearningRateStartsAtStepZero) {
  // SGD with lr(step) = 1 + step: the first update uses lr 1, then 2, 3.
  optimizers::SGD opt([](const array& step) { return astype(step, float32) + 1.0f; });
  nn::Params params{{"w", array(0.0, float64)}};
  nn::Params grads{{"w", array(1.0, float64)}};
  std::vector<double> seen;
  for (int i = 0; i < 3; ++i) {
    params = opt.apply_gradients(grads, params);
    seen.push_back(opt.learning_rate().item<double>());
  }
  EXPECT_EQ(seen, (std::vector<double>{1, 2, 3}));
  EXPECT_NEAR(params.at("w").item<double>(), -6.0, 1e-12);
  opt.set_learning_rate(0.5f);
  params = opt.apply_gradients(grads, params);
  EXPECT_NEAR(params.at("w").item<double>(), -6.5, 1e-12);
}

TEST(Optimizers, StateRestoresAndUpdateWritesTheModel) {
  Problem prob = make_problem();
  optimizers::Adam a(0.01f), b(0.01f);
  nn::Params pa = a.apply_gradients(prob.grads[0], prob.params);
  auto state = a.state();
  EXPECT_TRUE(state.count("step") && state.count("learning_rate") && state.count("a.weight.m") && state.count("b.v"));
  b.set_state(state);
  nn::Params next_a = a.apply_gradients(prob.grads[1], pa), next_b = b.apply_gradients(prob.grads[1], pa);
  for (auto& [name, v] : next_a) EXPECT_TRUE(all_close(next_b.at(name), to_double(v), 0.0)) << name;
  EXPECT_EQ(b.step().item<int>(), 2);
  EXPECT_TRUE(test::throws_error([&] { b.set_state({{"a.weight.m", array(1.0f)}}); }, {"[Optimizer::set_state]", "step"}));

  nn::Linear lin(3, 2);
  array w = lin.weight;
  optimizers::SGD sgd(1.0f);
  nn::Params grads{{"weight", ones({2, 3})}};
  sgd.update(lin, grads);
  EXPECT_TRUE(all_close(lin.weight, to_double(w - 1.0f), 1e-6));
  EXPECT_TRUE(test::throws_error([&] { sgd.update(lin, {{"gamma", ones({2})}}); },
                                 {"[Optimizer::apply_gradients]", "gamma"}));
  EXPECT_TRUE(test::throws_error([&] { sgd.update(lin, {{"bias", ones({3})}}); },
                                 {"[Optimizer::apply_gradients]", "bias"}));
}

}  // namespace
}  // namespace kiln
