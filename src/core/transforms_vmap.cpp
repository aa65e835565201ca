// vmap, custom_function / custom_vjp, checkpoint and stop_gradient, and
// the helpers the rules share (transform_util.h).
//
// vmap traces fun once on placeholders shaped like one slice of each
// mapped input, then replays the traced graph on the real inputs, calling
// each primitive's batched rule: the result is one graph over the whole
// batch, not a loop.
#include <unordered_map>
#include <unordered_set>

#include "core/array_desc.h"
#include "core/compiled.h"
#include "core/ops_util.h"
#include "core/primitives.h"
#include "core/scheduler.h"
#include "core/transform_util.h"
#include "kiln/ops.h"
#include "kiln/transforms.h"

namespace kiln {
namespace detail {
namespace {
thread_local std::vector<Stream> tl_rule_streams;
}

RuleStreamScope::RuleStreamScope(Stream s) { tl_rule_streams.push_back(s); }
RuleStreamScope::~RuleStreamScope() { tl_rule_streams.pop_back(); }
std::optional<Stream> rule_stream() {
  if (tl_rule_streams.empty()) return std::nullopt;
  return tl_rule_streams.back();
}

array move_axis(const array& a, int from, int to) {
  if (from == to) return a;
  std::vector<int> perm;
  for (int i = 0; i < a.ndim(); ++i) {
    if (i != from) perm.push_back(i);
  }
  perm.insert(perm.begin() + to, from);
  return transpose(a, perm);
}

array batch_first(const array& a, int axis, int n) {
  if (axis >= 0) return move_axis(a, axis, 0);
  array x = expand_dims(a, 0);
  if (n < 0) return x;
  Shape s = x.shape();
  s[0] = n;
  return broadcast_to(x, s);
}

namespace {
const void* group_key(const array& a) {
  const auto& d = a.desc();
  return d->siblings ? static_cast<const void*>(d->siblings.get()) : static_cast<const void*>(d.get());
}
}  // namespace

std::vector<array> dependent_tape(const std::vector<array>& sources, const std::vector<array>& outputs,
                                  bool through_stop_gradient, std::unordered_set<const ArrayDesc*>& depends) {
  auto leaf = [through_stop_gradient](const array& a) {
    if (!a.has_primitive()) return true;
    return !through_stop_gradient && dynamic_cast<StopGradient*>(a.primitive().get()) != nullptr;
  };
  std::unordered_set<const void*> seen;
  for (const auto& s : sources) {
    depends.insert(s.desc().get());
    seen.insert(group_key(s));
  }
  std::vector<array> order;
  struct Frame {
    array node;
    size_t next;
  };
  std::vector<Frame> stack;
  for (const auto& o : outputs) {
    if (leaf(o) || !seen.insert(group_key(o)).second) continue;
    stack.push_back({o, 0});
    while (!stack.empty()) {
      Frame& f = stack.back();
      const auto& in = f.node.inputs();
      if (f.next < in.size()) {
        const array& a = in[f.next++];
        if (!leaf(a) && seen.insert(group_key(a)).second) stack.push_back({a, 0});
        continue;
      }
      order.push_back(f.node);
      stack.pop_back();
    }
  }
  std::vector<array> tape;
  for (const auto& n : order) {
    bool dep = false;
    for (const auto& a : n.inputs()) dep = dep || depends.count(a.desc().get());
    if (!dep) continue;
    for (const auto& o : n.outputs()) depends.insert(o.desc().get());
    tape.push_back(n);
  }
  return tape;
}

int batch_size(const std::vector<array>& inputs, const std::vector<int>& axes) {
  int n = -1;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (axes[i] < 0) continue;
    int m = inputs[i].shape(axes[i]);
    if (n >= 0 && m != n) {
      throw Error("[vmap] mapped inputs have different sizes along their mapped axes (" + std::to_string(n) +
                  " and " + std::to_string(m) + ")");
    }
    n = m;
  }
  return n;
}

}  // namespace detail

std::function<std::vector<array>(const std::vector<array>&)> vmap(
    const std::function<std::vector<array>(const std::vector<array>&)>& fun, const std::vector<int>& in_axes,
    const std::vector<int>& out_axes) {
  if (!fun) throw Error("[vmap] needs a function (got an empty std::function)");
  return [fun, in_axes, out_axes](const std::vector<array>& inputs) -> std::vector<array> {
    std::vector<int> ax = in_axes.empty() ? std::vector<int>(inputs.size(), 0) : in_axes;
    if (ax.size() != inputs.size()) {
      throw Error("[vmap] got " + std::to_string(ax.size()) + " in_axes for " + std::to_string(inputs.size()) +
                  " inputs");
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (ax[i] < -1 || ax[i] >= inputs[i].ndim()) {
        throw Error("[vmap] in_axes[" + std::to_string(i) + "] = " + std::to_string(ax[i]) +
                    " is out of range for an input of shape " + format_shape(inputs[i].shape()));
      }
    }
    int n = detail::batch_size(inputs, ax);
    if (n < 0) throw Error("[vmap] at least one input must be mapped (every in_axis is -1)");

    Stream st = to_stream({});
    std::vector<array> placeholders, args;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (ax[i] < 0) {
        args.push_back(inputs[i]);
        continue;
      }
      Shape s = inputs[i].shape();
      s.erase(s.begin() + ax[i]);
      placeholders.push_back(array(s, inputs[i].dtype(), std::make_shared<Placeholder>(st), {}));
      args.push_back(placeholders.back());
    }
    std::vector<array> outs;
    {
      KeepGraphScope keep;  // also makes compile run fun uncompiled
      outs = fun(args);
    }
    std::vector<int> oax = out_axes.empty() ? std::vector<int>(outs.size(), 0) : out_axes;
    if (oax.size() != outs.size()) {
      throw Error("[vmap] got " + std::to_string(oax.size()) + " out_axes for " + std::to_string(outs.size()) +
                  " outputs");
    }

    // Replay: each traced array -> (batched array, its batch axis).
    std::unordered_map<const ArrayDesc*, std::pair<array, int>> mapped;
    {
      size_t k = 0;
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (ax[i] >= 0) mapped.emplace(placeholders[k++].desc().get(), std::make_pair(inputs[i], ax[i]));
      }
    }
    std::unordered_set<const ArrayDesc*> depends;
    std::vector<array> tape = detail::dependent_tape(placeholders, outs, true, depends);
    std::vector<array> keep_alive;
    for (const auto& node : tape) {
      std::vector<array> ins;
      std::vector<int> axes;
      for (const auto& in : node.inputs()) {
        auto m = mapped.find(in.desc().get());
        if (m != mapped.end()) {
          ins.push_back(m->second.first);
          axes.push_back(m->second.second);
        } else {
          ins.push_back(in);
          axes.push_back(-1);
        }
      }
      std::vector<array> originals = node.outputs();
      auto [res, res_axes] = [&] {
        detail::RuleStreamScope scope(node.primitive()->stream());
        return node.primitive()->vmap(ins, axes);
      }();
      if (res.size() != originals.size() || res_axes.size() != res.size()) {
        throw Error(std::string("[vmap] the vmap rule of ") + node.primitive()->name() + " returned " +
                    std::to_string(res.size()) + " outputs for " + std::to_string(originals.size()));
      }
      for (size_t k = 0; k < res.size(); ++k) {
        array r = res[k].dtype() == originals[k].dtype() ? res[k] : astype(res[k], originals[k].dtype());
        mapped.insert_or_assign(originals[k].desc().get(), std::make_pair(r, res_axes[k]));
      }
      keep_alive.insert(keep_alive.end(), originals.begin(), originals.end());  // their descs key `mapped`
    }

    std::vector<array> result;
    for (size_t i = 0; i < outs.size(); ++i) {
      int to = oax[i];
      auto m = mapped.find(outs[i].desc().get());
      if (m == mapped.end()) {
        // Independent of the mapped inputs: the same value for each slice.
        if (to < 0 || to > outs[i].ndim()) throw Error("[vmap] out_axes[" + std::to_string(i) + "] is out of range");
        array e = expand_dims(outs[i], to);
        Shape s = e.shape();
        s[to] = n;
        result.push_back(broadcast_to(e, s));
        continue;
      }
      const auto& [r, from] = m->second;
      if (to < 0 || to >= r.ndim()) {
        throw Error("[vmap] out_axes[" + std::to_string(i) + "] = " + std::to_string(to) +
                    " is out of range for an output of rank " + std::to_string(r.ndim() - 1));
      }
      result.push_back(detail::move_axis(r, from, to));
    }
    return result;
  };
}

std::function<array(const array&)> vmap(const std::function<array(const array&)>& fun, int in_axis, int out_axis) {
  if (!fun) throw Error("[vmap] needs a function (got an empty std::function)");
  auto v = vmap([fun](const std::vector<array>& x) { return std::vector<array>{fun(x[0])}; }, {in_axis}, {out_axis});
  return [v](const array& x) { return v({x})[0]; };
}

std::function<array(const array&, const array&)> vmap(const std::function<array(const array&, const array&)>& fun,
                                                      int in_axis_a, int in_axis_b, int out_axis) {
  if (!fun) throw Error("[vmap] needs a function (got an empty std::function)");
  auto v = vmap([fun](const std::vector<array>& x) { return std::vector<array>{fun(x[0], x[1])}; },
                {in_axis_a, in_axis_b}, {out_axis});
  return [v](const array& a, const array& b) { return v({a, b})[0]; };
}

// ---- custom_function ----

namespace {

// The outputs of a custom function: views of fun's (stop-gradient) outputs,
// whose transformations are the user's rules. Inputs: fun's arguments,
// then fun's outputs.
class CustomTransforms : public Primitive {
 public:
  CustomTransforms(Stream s, int num_outputs, std::function<std::vector<array>(const std::vector<array>&)> fun,
                   std::optional<CustomVjpFn> vjp, std::optional<CustomJvpFn> jvp, std::optional<CustomVmapFn> vmap)
      : Primitive(s), num_outputs_(num_outputs), fun_(std::move(fun)), vjp_(std::move(vjp)), jvp_(std::move(jvp)),
        vmap_(std::move(vmap)) {}
  const char* name() const override { return "CustomTransforms"; }

  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override { forward(inputs, outputs); }
  void eval_gpu(const std::vector<array>& inputs, std::vector<array>& outputs) override { forward(inputs, outputs); }

  std::vector<array> vjp(const std::vector<array>& primals, const std::vector<array>& cotangents,
                         const std::vector<int>& argnums, const std::vector<array>& outputs) override {
    std::vector<array> args(primals.begin(), primals.end() - num_outputs_);
    std::vector<array> all;
    if (vjp_) {
      all = (*vjp_)(args, cotangents, outputs);
    } else {
      all = kiln::vjp(fun_, args, cotangents).second;
    }
    if (all.size() != args.size()) {
      throw Error("[custom_function] the vjp returned " + std::to_string(all.size()) + " cotangents for " +
                  std::to_string(args.size()) + " inputs");
    }
    std::vector<array> out;
    for (int a : argnums) out.push_back(a < static_cast<int>(args.size()) ? all[a] : zeros_like(primals[a]));
    return out;
  }
  std::vector<array> jvp(const std::vector<array>& primals, const std::vector<array>& tangents,
                         const std::vector<int>& argnums) override {
    std::vector<array> args(primals.begin(), primals.end() - num_outputs_);
    std::vector<int> arg_nums;
    std::vector<array> arg_tans;
    for (size_t k = 0; k < argnums.size(); ++k) {
      if (argnums[k] < static_cast<int>(args.size())) {
        arg_nums.push_back(argnums[k]);
        arg_tans.push_back(tangents[k]);
      }
    }
    if (jvp_) return (*jvp_)(args, arg_tans, arg_nums);
    std::vector<array> full;
    for (const auto& a : args) full.push_back(zeros_like(a));
    for (size_t k = 0; k < arg_nums.size(); ++k) full[arg_nums[k]] = arg_tans[k];
    return kiln::jvp(fun_, args, full).second;
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& inputs,
                                                       const std::vector<int>& axes) override {
    std::vector<array> args(inputs.begin(), inputs.end() - num_outputs_);
    std::vector<int> arg_axes(axes.begin(), axes.end() - num_outputs_);
    if (vmap_) return (*vmap_)(args, arg_axes);
    std::vector<array> outs = kiln::vmap(fun_, arg_axes, std::vector<int>(num_outputs_, 0))(args);
    return {outs, std::vector<int>(outs.size(), 0)};
  }
  std::vector<Shape> output_shapes(const std::vector<array>& inputs) override {
    std::vector<Shape> s;
    for (size_t i = inputs.size() - num_outputs_; i < inputs.size(); ++i) s.push_back(inputs[i].shape());
    return s;
  }

 private:
  void forward(const std::vector<array>& inputs, std::vector<array>& outputs) {
    size_t first = inputs.size() - num_outputs_;
    for (size_t i = 0; i < outputs.size(); ++i) {
      const array& src = inputs[first + i];
      detail::share_buffer(outputs[i], src, src.desc()->strides, src.desc()->offset);
    }
  }

  int num_outputs_;
  std::function<std::vector<array>(const std::vector<array>&)> fun_;
  std::optional<CustomVjpFn> vjp_;
  std::optional<CustomJvpFn> jvp_;
  std::optional<CustomVmapFn> vmap_;
};

}  // namespace

std::function<std::vector<array>(const std::vector<array>&)> custom_function(
    std::function<std::vector<array>(const std::vector<array>&)> fun, std::optional<CustomVjpFn> fun_vjp,
    std::optional<CustomJvpFn> fun_jvp, std::optional<CustomVmapFn> fun_vmap) {
  if (!fun) throw Error("[custom_function] needs a function (got an empty std::function)");
  return [fun, fun_vjp, fun_jvp, fun_vmap](const std::vector<array>& args) {
    std::vector<array> outs = fun(args);
    if (outs.empty()) return outs;
    std::vector<array> inputs = args;
    std::vector<Shape> shapes;
    std::vector<Dtype> dtypes;
    for (auto& o : outs) {
      shapes.push_back(o.shape());
      dtypes.push_back(o.dtype());
      inputs.push_back(stop_gradient(o));
    }
    auto p = std::make_shared<CustomTransforms>(to_stream({}), static_cast<int>(outs.size()), fun, fun_vjp, fun_jvp,
                                                fun_vmap);
    return array::make_arrays(std::move(shapes), dtypes, p, inputs);
  };
}

std::function<std::vector<array>(const std::vector<array>&)> custom_vjp(
    std::function<std::vector<array>(const std::vector<array>&)> fun, CustomVjpFn fun_vjp) {
  if (!fun_vjp) throw Error("[custom_vjp] needs a vjp function (got an empty std::function)");
  return custom_function(std::move(fun), std::move(fun_vjp));
}

std::function<std::vector<array>(const std::vector<array>&)> checkpoint(
    std::function<std::vector<array>(const std::vector<array>&)> fun) {
  if (!fun) throw Error("[checkpoint] needs a function (got an empty std::function)");
  // The forward keeps only fun's outputs (stop-gradient views); the vjp
  // runs fun again from the inputs to rebuild what it needs.
  CustomVjpFn recompute = [fun](const std::vector<array>& primals, const std::vector<array>& cotangents,
                                const std::vector<array>&) { return kiln::vjp(fun, primals, cotangents).second; };
  return custom_function(fun, recompute);
}

array stop_gradient(const array& a, StreamOrDevice s) {
  return make_node<StopGradient>(a.shape(), a.dtype(), {a}, to_stream(s));
}

void StopGradient::eval_cpu(const std::vector<array>& inputs, array& out) {
  detail::share_buffer(out, inputs[0], inputs[0].desc()->strides, inputs[0].desc()->offset);
}
void StopGradient::eval_gpu(const std::vector<array>& inputs, array& out) { eval_cpu(inputs, out); }

}  // namespace kiln
