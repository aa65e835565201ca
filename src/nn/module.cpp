// kiln::nn::Module: the parameter registry and what walks it (parameters,
// update, freeze, train, save/load), and nn::value_and_grad.
#include <algorithm>
#include <unordered_map>

#include "core/ops_util.h"
#include "kiln/io.h"
#include "kiln/nn.h"
#include "kiln/transforms.h"

namespace kiln::nn {
namespace {

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

std::string list_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 8; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 8) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return out;
}

}  // namespace

void Module::check_new_name(const std::string& name) const {
  if (name.empty()) throw Error("[Module] a parameter or child needs a name");
  for (auto& [n, p] : params_) {
    if (n == name) throw Error("[Module] the name " + name + " is registered twice");
  }
  for (auto& [n, c] : children_) {
    if (n == name) throw Error("[Module] the name " + name + " is registered twice");
  }
}

void Module::register_parameter(const std::string& name, array* slot) {
  check_new_name(name);
  if (name.find('.') != std::string::npos) throw Error("[Module] parameter name " + name + " contains a dot");
  params_.emplace_back(name, slot);
}

void Module::add_child(const std::string& name, std::function<Module*()> get) {
  check_new_name(name);
  children_.emplace_back(name, std::move(get));
}

void Module::collect(const std::string& prefix, Params& out, bool trainable_only) const {
  for (auto& [name, slot] : params_) {
    if (trainable_only && frozen_.count(name)) continue;
    out.insert_or_assign(join(prefix, name), *slot);
  }
  for (auto& [name, get] : children_) {
    if (Module* child = get()) child->collect(join(prefix, name), out, trainable_only);
  }
}

Params Module::parameters() const {
  Params out;
  collect("", out, false);
  return out;
}

Params Module::trainable_parameters() const {
  Params out;
  collect("", out, true);
  return out;
}

array* Module::find_parameter(const std::string& dotted) {
  for (auto& [name, slot] : params_) {
    if (name == dotted) return slot;
  }
  // Child names may hold dots themselves ("layers.0"): match whole prefixes.
  for (auto& [name, get] : children_) {
    if (dotted.size() > name.size() && dotted.compare(0, name.size(), name) == 0 && dotted[name.size()] == '.') {
      if (Module* child = get()) {
        if (array* p = child->find_parameter(dotted.substr(name.size() + 1))) return p;
      }
    }
  }
  return nullptr;
}

Module& Module::update(const Params& params, bool strict) {
  std::vector<std::pair<array*, const array*>> writes;
  std::vector<std::string> unknown;
  for (auto& [name, value] : params) {
    if (array* slot = find_parameter(name)) {
      writes.emplace_back(slot, &value);
    } else {
      unknown.push_back(name);
    }
  }
  if (strict && !unknown.empty()) {
    throw Error("[Module::update] not parameters of the model: " + list_names(unknown));
  }
  for (auto& [slot, value] : writes) *slot = *value;
  return *this;
}

Module& Module::apply(const std::function<array(const array&)>& fn) {
  Params mapped = parameters();
  for (auto& [name, value] : mapped) value = fn(value);
  return update(mapped);
}

Module& Module::set_dtype(Dtype dtype) {
  if (!is_floating_point(dtype)) {
    throw Error(std::string("[Module::set_dtype] parameters must stay floating point, got ") + dtype_name(dtype));
  }
  return apply([dtype](const array& p) { return is_floating_point(p.dtype()) ? astype(p, dtype) : p; });
}

Module& Module::set_frozen(bool frozen, bool recurse, const std::vector<std::string>& keys, bool strict) {
  const char* op = frozen ? "[Module::freeze]" : "[Module::unfreeze]";
  std::vector<std::string> names = keys;
  if (keys.empty()) {
    for (auto& [name, slot] : params_) names.push_back(name);
  }
  for (const auto& key : names) {
    bool known = std::any_of(params_.begin(), params_.end(), [&](auto& p) { return p.first == key; });
    if (!known) {
      if (strict) throw Error(std::string(op) + " " + key + " is not a parameter of this module");
      continue;
    }
    if (frozen) {
      frozen_.insert(key);
    } else {
      frozen_.erase(key);
    }
  }
  if (recurse) {
    for (auto& [name, get] : children_) {
      // Keys given for the top module need not exist in every child.
      if (Module* child = get()) child->set_frozen(frozen, true, keys, false);
    }
  }
  return *this;
}

Module& Module::freeze(bool recurse, const std::vector<std::string>& keys, bool strict) {
  return set_frozen(true, recurse, keys, strict);
}

Module& Module::unfreeze(bool recurse, const std::vector<std::string>& keys, bool strict) {
  return set_frozen(false, recurse, keys, strict);
}

Module& Module::train(bool mode) {
  apply_to_modules([mode](const std::string&, Module& m) { m.training_ = mode; });
  return *this;
}

std::vector<std::pair<std::string, Module*>> Module::children() const {
  std::vector<std::pair<std::string, Module*>> out;
  for (auto& [name, get] : children_) {
    if (Module* child = get()) out.emplace_back(name, child);
  }
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  apply_to_modules([&out](const std::string& name, Module& m) { out.emplace_back(name, &m); });
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::leaf_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  apply_to_modules([&out](const std::string& name, Module& m) {
    if (m.children().empty()) out.emplace_back(name, &m);
  });
  return out;
}

void Module::apply_to_modules(const std::function<void(const std::string&, Module&)>& fn) {
  // Explicit stack: deep models must not exhaust the C++ stack.
  std::vector<std::pair<std::string, Module*>> stack{{"", this}};
  while (!stack.empty()) {
    auto [name, m] = stack.back();
    stack.pop_back();
    fn(name, *m);
    auto kids = m->children();
    for (auto it = kids.rbegin(); it != kids.rend(); ++it) stack.emplace_back(join(name, it->first), it->second);
  }
}

void Module::save_weights(const std::string& path) const {
  Params p = parameters();
  save_safetensors(path, std::unordered_map<std::string, array>(p.begin(), p.end()));
}

Module& Module::load_weights(const std::string& path, bool strict) {
  auto [arrays, metadata] = load_safetensors(path);
  return load_weights(Params(arrays.begin(), arrays.end()), strict);
}

Module& Module::load_weights(const Params& weights, bool strict) {
  if (strict) {
    Params own = parameters();
    std::vector<std::string> missing, extra;
    for (auto& [name, p] : own) {
      if (!weights.count(name)) missing.push_back(name);
    }
    for (auto& [name, w] : weights) {
      auto it = own.find(name);
      if (it == own.end()) {
        extra.push_back(name);
      } else if (it->second.shape() != w.shape()) {
        throw Error("[Module::load_weights] " + name + " has shape " + format_shape(it->second.shape()) +
                    " in the model but " + format_shape(w.shape()) + " in the weights");
      }
    }
    if (!missing.empty()) throw Error("[Module::load_weights] missing parameters: " + list_names(missing));
    if (!extra.empty()) throw Error("[Module::load_weights] parameters not in the model: " + list_names(extra));
  }
  return update(weights, strict);
}

namespace {

// Puts the model's parameters back when the traced call ends, also when
// the user's function throws.
class RestoreParams {
 public:
  RestoreParams(Module& model, Params saved) : model_(model), saved_(std::move(saved)) {}
  ~RestoreParams() { model_.update(saved_); }

 private:
  Module& model_;
  Params saved_;
};

}  // namespace

std::function<std::pair<std::vector<array>, Params>(const std::vector<array>&)> value_and_grad(
    Module& model, std::function<std::vector<array>(const std::vector<array>&)> fn) {
  if (!fn) throw Error("[nn::value_and_grad] the function is empty");
  return [&model, fn = std::move(fn)](const std::vector<array>& inputs) {
    Params trainable = model.trainable_parameters();
    std::vector<std::string> names;
    std::vector<array> args;
    for (auto& [name, p] : trainable) {
      names.push_back(name);
      args.push_back(p);
    }
    const int n = static_cast<int>(args.size());
    args.insert(args.end(), inputs.begin(), inputs.end());
    std::vector<int> argnums(n);
    for (int i = 0; i < n; ++i) argnums[i] = i;
    auto traced = [&](const std::vector<array>& all) {
      RestoreParams restore(model, trainable);
      Params p;
      for (int i = 0; i < n; ++i) p.insert_or_assign(names[i], all[i]);
      model.update(p);
      return fn(std::vector<array>(all.begin() + n, all.end()));
    };
    if (n == 0) return std::make_pair(traced(args), Params{});
    auto [values, grads] = kiln::value_and_grad(traced, argnums)(args);
    Params named;
    for (int i = 0; i < n; ++i) named.insert_or_assign(names[i], grads[i]);
    return std::make_pair(std::move(values), std::move(named));
  };
}

std::function<std::pair<array, Params>(const std::vector<array>&)> value_and_grad(
    Module& model, std::function<array(const std::vector<array>&)> fn) {
  if (!fn) throw Error("[nn::value_and_grad] the function is empty");
  auto vg = value_and_grad(model, [fn = std::move(fn)](const std::vector<array>& in) {
    return std::vector<array>{fn(in)};
  });
  return [vg](const std::vector<array>& inputs) {
    auto [values, grads] = vg(inputs);
    return std::make_pair(values[0], std::move(grads));
  };
}

}  // namespace kiln::nn
