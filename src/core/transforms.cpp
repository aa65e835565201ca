// vjp, jvp and vmap: each calls the user's function on fresh "tracer"
// arrays, finds the part of the resulting graph that depends on them, and
// walks it calling each primitive's rule (backwards for vjp, forwards for
// jvp and vmap). The function runs under a KeepGraphScope, so nodes it
// evaluates on the way (item, eval) keep their primitive and inputs and
// the walk can still pass through them.
#include "kiln/transforms.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "core/array_desc.h"
#include "core/ops_util.h"
#include "core/primitives.h"
#include "core/scheduler.h"
#include "core/transform_util.h"
#include "kiln/ops.h"

namespace kiln {
namespace {

// A node standing for a primal inside the traced function: a view of it.
array make_tracer(const array& p) {
  return make_node<Reshape>(p.shape(), p.dtype(), {p}, to_stream({}), p.shape());
}

void check_fun(bool ok, const char* op) {
  if (!ok) throw Error(std::string("[") + op + "] needs a function (got an empty std::function)");
}

std::pair<std::vector<array>, std::vector<array>> vjp_impl(
    const std::function<std::vector<array>(const std::vector<array>&)>& fun, const std::vector<array>& primals,
    const std::vector<array>& cotangents, const std::vector<int>& argnums, const char* op) {
  check_fun(static_cast<bool>(fun), op);
  std::vector<array> tracers;
  for (const auto& p : primals) tracers.push_back(make_tracer(p));
  std::vector<array> outputs;
  {
    KeepGraphScope keep;
    outputs = fun(tracers);
  }
  if (cotangents.size() != outputs.size()) {
    throw Error(std::string("[") + op + "] got " + std::to_string(cotangents.size()) + " cotangents for " +
                std::to_string(outputs.size()) + " outputs");
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (cotangents[i].shape() != outputs[i].shape()) {
      throw Error(std::string("[") + op + "] cotangent " + std::to_string(i) + " has shape " +
                  format_shape(cotangents[i].shape()) + " but output " + std::to_string(i) + " has shape " +
                  format_shape(outputs[i].shape()));
    }
  }
  std::unordered_set<const ArrayDesc*> depends;
  std::vector<array> tape = detail::dependent_tape(tracers, outputs, false, depends);

  std::unordered_map<const ArrayDesc*, array> cot;
  auto accumulate = [&cot](const array& a, const array& c) {
    auto [it, inserted] = cot.try_emplace(a.desc().get(), c);
    if (!inserted) it->second = add(it->second, c);
  };
  for (size_t i = 0; i < outputs.size(); ++i) {
    array c = cotangents[i].dtype() == outputs[i].dtype() ? cotangents[i] : astype(cotangents[i], outputs[i].dtype());
    accumulate(outputs[i], c);
  }
  std::vector<array> keep_alive;  // the outputs whose descs key `cot`
  for (auto it = tape.rbegin(); it != tape.rend(); ++it) {
    std::vector<array> outs = it->outputs();
    std::vector<array> cots;
    bool any = false;
    for (const auto& o : outs) {
      auto c = cot.find(o.desc().get());
      if (c != cot.end()) {
        cots.push_back(c->second);
        any = true;
      } else {
        cots.push_back(zeros_like(o));
      }
    }
    if (!any) continue;
    const std::vector<array>& inputs = it->inputs();
    std::vector<int> args;
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (depends.count(inputs[k].desc().get())) args.push_back(static_cast<int>(k));
    }
    std::vector<array> grads = it->primitive()->vjp(inputs, cots, args, outs);
    if (grads.size() != args.size()) {
      throw Error(std::string("[") + op + "] the vjp rule of " + it->primitive()->name() + " returned " +
                  std::to_string(grads.size()) + " cotangents for " + std::to_string(args.size()) + " inputs");
    }
    for (size_t k = 0; k < args.size(); ++k) {
      const array& in = inputs[args[k]];
      array g = grads[k];
      if (g.dtype() != in.dtype()) g = astype(g, in.dtype());
      accumulate(in, g);
    }
    for (const auto& o : outs) cot.erase(o.desc().get());
    keep_alive.insert(keep_alive.end(), outs.begin(), outs.end());
  }
  std::vector<array> result;
  for (int a : argnums) {
    auto c = cot.find(tracers[a].desc().get());
    result.push_back(c != cot.end() ? c->second : zeros_like(primals[a]));
  }
  return {outputs, result};
}

}  // namespace

std::pair<std::vector<array>, std::vector<array>> vjp(
    const std::function<std::vector<array>(const std::vector<array>&)>& fun, const std::vector<array>& primals,
    const std::vector<array>& cotangents) {
  std::vector<int> all(primals.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  return vjp_impl(fun, primals, cotangents, all, "vjp");
}

std::pair<array, array> vjp(const std::function<array(const array&)>& fun, const array& primal,
                            const array& cotangent) {
  check_fun(static_cast<bool>(fun), "vjp");
  auto [outs, grads] = vjp([&fun](const std::vector<array>& x) { return std::vector<array>{fun(x[0])}; }, {primal},
                           {cotangent});
  return {outs[0], grads[0]};
}

std::pair<std::vector<array>, std::vector<array>> jvp(
    const std::function<std::vector<array>(const std::vector<array>&)>& fun, const std::vector<array>& primals,
    const std::vector<array>& tangents) {
  check_fun(static_cast<bool>(fun), "jvp");
  if (tangents.size() != primals.size()) {
    throw Error("[jvp] got " + std::to_string(tangents.size()) + " tangents for " + std::to_string(primals.size()) +
                " primals");
  }
  for (size_t i = 0; i < primals.size(); ++i) {
    if (tangents[i].shape() != primals[i].shape()) {
      throw Error("[jvp] tangent " + std::to_string(i) + " has shape " + format_shape(tangents[i].shape()) +
                  " but primal " + std::to_string(i) + " has shape " + format_shape(primals[i].shape()));
    }
  }
  std::vector<array> tracers;
  for (const auto& p : primals) tracers.push_back(make_tracer(p));
  std::vector<array> outputs;
  {
    KeepGraphScope keep;
    outputs = fun(tracers);
  }
  std::unordered_set<const ArrayDesc*> depends;
  std::vector<array> tape = detail::dependent_tape(tracers, outputs, false, depends);
  std::unordered_map<const ArrayDesc*, array> tan;
  for (size_t i = 0; i < tracers.size(); ++i) {
    array t = tangents[i].dtype() == primals[i].dtype() ? tangents[i] : astype(tangents[i], primals[i].dtype());
    tan.emplace(tracers[i].desc().get(), t);
  }
  std::vector<array> keep_alive;
  for (const auto& n : tape) {
    const std::vector<array>& inputs = n.inputs();
    std::vector<int> args;
    std::vector<array> ts;
    for (size_t k = 0; k < inputs.size(); ++k) {
      auto t = tan.find(inputs[k].desc().get());
      if (t == tan.end()) continue;
      args.push_back(static_cast<int>(k));
      ts.push_back(t->second);
    }
    if (args.empty()) continue;
    std::vector<array> outs = n.outputs();
    std::vector<array> res = n.primitive()->jvp(inputs, ts, args);
    if (res.size() != outs.size()) {
      throw Error(std::string("[jvp] the jvp rule of ") + n.primitive()->name() + " returned " +
                  std::to_string(res.size()) + " tangents for " + std::to_string(outs.size()) + " outputs");
    }
    for (size_t k = 0; k < outs.size(); ++k) {
      array r = res[k].dtype() == outs[k].dtype() ? res[k] : astype(res[k], outs[k].dtype());
      tan.insert_or_assign(outs[k].desc().get(), r);
    }
    keep_alive.insert(keep_alive.end(), outs.begin(), outs.end());
  }
  std::vector<array> result;
  for (const auto& o : outputs) {
    auto t = tan.find(o.desc().get());
    result.push_back(t != tan.end() ? t->second : zeros_like(o));
  }
  return {outputs, result};
}

std::pair<array, array> jvp(const std::function<array(const array&)>& fun, const array& primal,
                            const array& tangent) {
  check_fun(static_cast<bool>(fun), "jvp");
  auto [outs, tans] = jvp([&fun](const std::vector<array>& x) { return std::vector<array>{fun(x[0])}; }, {primal},
                          {tangent});
  return {outs[0], tans[0]};
}

ValueAndGradFn value_and_grad(const std::function<std::vector<array>(const std::vector<array>&)>& fun,
                              const std::vector<int>& argnums) {
  check_fun(static_cast<bool>(fun), "value_and_grad");
  if (argnums.empty()) throw Error("[value_and_grad] needs at least one argument to differentiate");
  std::vector<int> sorted = argnums;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    throw Error("[value_and_grad] argnums has a duplicate");
  }
  return [fun, argnums](const std::vector<array>& inputs) {
    for (int a : argnums) {
      if (a < 0 || a >= static_cast<int>(inputs.size())) {
        throw Error("[value_and_grad] argnum " + std::to_string(a) + " is out of range for " +
                    std::to_string(inputs.size()) + " inputs");
      }
    }
    // Differentiate the first output only; the others pass through.
    std::vector<array> values;
    auto first = [&fun, &values](const std::vector<array>& x) {
      values = fun(x);
      if (values.empty()) throw Error("[value_and_grad] the function returned no outputs");
      if (values[0].size() != 1) {
        throw Error("[value_and_grad] the function's first output must be a scalar, got shape " +
                    format_shape(values[0].shape()));
      }
      return std::vector<array>{values[0]};
    };
    auto [outs, grads] = vjp_impl(first, inputs, {array(1.0f)}, argnums, "value_and_grad");
    (void)outs;
    return std::make_pair(values, grads);
  };
}

std::function<std::pair<array, array>(const array&)> value_and_grad(const std::function<array(const array&)>& fun) {
  check_fun(static_cast<bool>(fun), "value_and_grad");
  return [fun](const array& x) {
    auto vg = value_and_grad([&fun](const std::vector<array>& in) { return std::vector<array>{fun(in[0])}; }, 0);
    auto [v, g] = vg({x});
    return std::make_pair(v[0], g[0]);
  };
}

SimpleValueAndGradFn value_and_grad(const std::function<array(const std::vector<array>&)>& fun,
                                    const std::vector<int>& argnums) {
  check_fun(static_cast<bool>(fun), "value_and_grad");
  auto vg = value_and_grad([fun](const std::vector<array>& in) { return std::vector<array>{fun(in)}; }, argnums);
  return [vg](const std::vector<array>& inputs) {
    auto [v, g] = vg(inputs);
    return std::make_pair(v[0], g);
  };
}

std::function<std::vector<array>(const std::vector<array>&)> grad(
    const std::function<array(const std::vector<array>&)>& fun, const std::vector<int>& argnums) {
  auto vg = value_and_grad(fun, argnums);
  return [vg](const std::vector<array>& inputs) { return vg(inputs).second; };
}

std::function<array(const array&)> grad(const std::function<array(const array&)>& fun) {
  auto vg = value_and_grad(fun);
  return [vg](const array& x) { return vg(x).second; };
}

}  // namespace kiln
