// fast::cuda_kernel and fast::cpu_kernel (include/kiln/fast.h): argument
// checks, the generated signature around the user's body, and the
// CustomKernel primitive's rules. The backends add their preambles and
// compile (backend/cpu/custom_kernel.cpp, backend/cuda/custom_kernel.cu).
#include <cctype>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "core/ops_util.h"
#include "core/primitives_custom_kernel.h"
#include "kiln/fast.h"

namespace kiln {
namespace {

enum class Target { cpu, cuda };

const char* op_name(Target t) { return t == Target::cpu ? "fast::cpu_kernel" : "fast::cuda_kernel"; }

[[noreturn]] void fail(Target t, const std::string& msg) { throw Error(std::string("[") + op_name(t) + "] " + msg); }

bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

const char* element_type(Target t, Dtype d) {
  switch (d) {
    case bool_: return "bool";
    case uint8: return "uint8_t";
    case uint32: return "uint32_t";
    case int8: return "int8_t";
    case int32: return "int32_t";
    case int64: return "int64_t";
    case float16: return t == Target::cpu ? "float16_t" : "__half";
    case bfloat16: return t == Target::cpu ? "bfloat16_t" : "__nv_bfloat16";
    case float32: return "float";
    case float64: return "double";
  }
  return "";
}

std::string template_suffix(const std::vector<std::pair<std::string, fast::TemplateArg>>& args) {
  std::string s;
  for (const auto& [name, arg] : args) {
    if (const int* i = std::get_if<int>(&arg)) s += "_" + std::string(*i < 0 ? "m" : "") + std::to_string(std::abs(*i));
    else if (const bool* b = std::get_if<bool>(&arg)) s += *b ? "_t" : "_f";
    else s += std::string("_") + dtype_name(std::get<Dtype>(arg));
  }
  return s;
}

std::string template_constants(Target t, const std::vector<std::pair<std::string, fast::TemplateArg>>& args) {
  std::string s;
  for (const auto& [name, arg] : args) {
    if (const int* i = std::get_if<int>(&arg)) s += "  constexpr int " + name + " = " + std::to_string(*i) + ";\n";
    else if (const bool* b = std::get_if<bool>(&arg)) s += "  constexpr bool " + name + " = " + (*b ? "true" : "false") + ";\n";
    else s += "  using " + name + " = " + element_type(t, std::get<Dtype>(arg)) + ";\n";
  }
  return s.empty() ? s : s + "\n";
}

struct Spec {
  Target target;
  std::string name;
  std::vector<std::string> input_names, output_names;
  std::string source, header;
  bool ensure_row_contiguous;
  int shared_memory;
  std::vector<KernelShapeInfo> shape_infos;
};

// The parameters of the kernel (CUDA) or of its body function (CPU).
std::string parameters(const Spec& k, const std::vector<array>& inputs, const std::vector<Dtype>& out_dtypes) {
  const bool cpu = k.target == Target::cpu;
  std::vector<std::string> p;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string& n = k.input_names[i];
    p.push_back("const " + std::string(element_type(k.target, inputs[i].dtype())) + "* " + n);
    const KernelShapeInfo& si = k.shape_infos[i];
    if (si.shape) p.push_back(std::string(cpu ? "const kiln::Shape& " : "const kiln::Shape ") + n + "_shape");
    if (si.strides) p.push_back(std::string(cpu ? "const kiln::Strides& " : "const kiln::Strides ") + n + "_strides");
    if (si.ndim) p.push_back("const int " + n + "_ndim");
  }
  for (size_t i = 0; i < out_dtypes.size(); ++i) {
    p.push_back(std::string(element_type(k.target, out_dtypes[i])) + "* " + k.output_names[i]);
  }
  if (cpu) {
    p.push_back("const kiln::GridIndex thread_position_in_grid");
    p.push_back("const kiln::GridIndex threads_per_grid");
  }
  std::string s;
  for (size_t i = 0; i < p.size(); ++i) s += "    " + p[i] + (i + 1 < p.size() ? ",\n" : "");
  return s;
}

// The arguments of the CPU body function, from the entry point's argument
// array (one pointer per parameter, in order).
std::string cpu_arguments(const Spec& k, const std::vector<array>& inputs, const std::vector<Dtype>& out_dtypes) {
  std::string call;
  int a = 0;
  auto arg = [&](const std::string& cast) {
    call += (call.empty() ? "" : ", ") + cast + "(args[" + std::to_string(a++) + "])";
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    arg("static_cast<const " + std::string(element_type(k.target, inputs[i].dtype())) + "*>");
    const KernelShapeInfo& si = k.shape_infos[i];
    if (si.shape) arg("*static_cast<const kiln::Shape*>");
    if (si.strides) arg("*static_cast<const kiln::Strides*>");
    if (si.ndim) arg("*static_cast<const int*>");
  }
  for (Dtype d : out_dtypes) arg("static_cast<" + std::string(element_type(k.target, d)) + "*>");
  return call;
}

std::vector<array> launch(const Spec& k, const std::vector<array>& inputs, const std::vector<Shape>& output_shapes,
                          const std::vector<Dtype>& output_dtypes, std::tuple<int, int, int> grid,
                          std::tuple<int, int, int> threadgroup,
                          const std::vector<std::pair<std::string, fast::TemplateArg>>& template_args,
                          std::optional<float> init_value, bool verbose, StreamOrDevice s_) {
  const Target t = k.target;
  if (inputs.size() != k.input_names.size()) {
    fail(t, "expected " + std::to_string(k.input_names.size()) + " inputs, got " + std::to_string(inputs.size()));
  }
  if (output_shapes.size() != k.output_names.size() || output_dtypes.size() != k.output_names.size()) {
    fail(t, "expected " + std::to_string(k.output_names.size()) + " output shapes and dtypes, got " +
                std::to_string(output_shapes.size()) + " shapes and " + std::to_string(output_dtypes.size()) +
                " dtypes");
  }
  for (size_t i = 0; i < output_shapes.size(); ++i) {
    for (int d : output_shapes[i]) {
      if (d < 0) fail(t, "output " + k.output_names[i] + " has a negative dimension in shape " + format_shape(output_shapes[i]));
    }
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const KernelShapeInfo& si = k.shape_infos[i];
    if ((si.shape || si.strides) && inputs[i].ndim() > kKernelMaxNdim) {
      fail(t, "input " + k.input_names[i] + " of shape " + format_shape(inputs[i].shape()) + " has more than " +
                  std::to_string(kKernelMaxNdim) + " dimensions (its shape or strides are read)");
    }
  }
  const std::array<int, 3> g{std::get<0>(grid), std::get<1>(grid), std::get<2>(grid)};
  const std::array<int, 3> tg{std::get<0>(threadgroup), std::get<1>(threadgroup), std::get<2>(threadgroup)};
  for (int d = 0; d < 3; ++d) {
    if (g[d] < 1 || tg[d] < 1) {
      fail(t, "grid (" + std::to_string(g[0]) + ", " + std::to_string(g[1]) + ", " + std::to_string(g[2]) +
                  ") and threadgroup (" + std::to_string(tg[0]) + ", " + std::to_string(tg[1]) + ", " +
                  std::to_string(tg[2]) + ") must be positive");
    }
  }
  if (t == Target::cuda && static_cast<int64_t>(std::min(tg[0], g[0])) * std::min(tg[1], g[1]) * std::min(tg[2], g[2]) > 1024) {
    fail(t, "a threadgroup has at most 1024 threads, got (" + std::to_string(tg[0]) + ", " + std::to_string(tg[1]) +
                ", " + std::to_string(tg[2]) + ")");
  }
  for (const auto& [name, arg] : template_args) {
    if (!is_identifier(name)) fail(t, "template argument name '" + name + "' is not an identifier");
  }

  // Without a stream or device, cpu_kernel runs on the CPU's default stream.
  if (t == Target::cpu && std::holds_alternative<std::monostate>(s_)) s_ = Device::cpu;
  Device::DeviceType where = std::holds_alternative<Stream>(s_)   ? std::get<Stream>(s_).device.type
                             : std::holds_alternative<Device>(s_) ? std::get<Device>(s_).type
                                                                  : default_device().type;
  if (t == Target::cpu && where != Device::cpu) fail(t, "runs on CPU streams only (use fast::cuda_kernel on the GPU)");
  if (t == Target::cuda && where != Device::gpu) fail(t, "runs on GPU streams only (use fast::cpu_kernel on the CPU)");
  Stream s = to_stream(s_);

  std::string kernel_name = "custom_kernel_" + k.name + template_suffix(template_args);
  std::string body = "{\n" + template_constants(t, template_args) + k.source + "\n}\n";
  std::string src = k.header + "\n";
  if (t == Target::cuda) {
    src += "extern \"C\" __global__ void " + kernel_name + "(\n" + parameters(k, inputs, output_dtypes) + ") " + body;
  } else {
    std::string fn = "kiln_body_" + kernel_name;
    src += "static inline void " + fn + "(\n" + parameters(k, inputs, output_dtypes) + ") " + body;
    src += "\nextern \"C\" void " + kernel_name +
           "(void* const* args, const int64_t* grid, int64_t begin, int64_t end) {\n"
           "  const kiln::GridIndex threads{grid[0], grid[1], grid[2], grid[0] * grid[1] * grid[2]};\n"
           "  for (int64_t i = begin; i < end; ++i) {\n"
           "    const kiln::GridIndex pos{i % grid[0], (i / grid[0]) % grid[1], i / (grid[0] * grid[1]), i};\n"
           "    " + fn + "(" + cpu_arguments(k, inputs, output_dtypes) + ", pos, threads);\n"
           "  }\n}\n";
  }
  if (verbose) {
    std::cout << "Generated source code for `" << kernel_name << "`:\n```\n" << src << "```" << std::endl;
  }
  auto prim = std::make_shared<CustomKernel>(s, kernel_name, std::move(src), g, tg, k.shape_infos,
                                             k.ensure_row_contiguous, init_value, k.shared_memory, output_shapes);
  return array::make_arrays(output_shapes, output_dtypes, prim, inputs);
}

fast::CustomKernelFunction make_kernel(Spec k) {
  const Target t = k.target;
  if (!is_identifier(k.name)) fail(t, "kernel name '" + k.name + "' is not an identifier");
  if (k.output_names.empty()) fail(t, "needs at least one output");
  std::vector<std::string> all = k.input_names;
  all.insert(all.end(), k.output_names.begin(), k.output_names.end());
  for (size_t i = 0; i < all.size(); ++i) {
    if (!is_identifier(all[i])) fail(t, "argument name '" + all[i] + "' is not an identifier");
    for (size_t j = 0; j < i; ++j) {
      if (all[i] == all[j]) fail(t, "argument name '" + all[i] + "' is used twice");
    }
  }
  if (k.shared_memory < 0) fail(t, "shared_memory must be >= 0, got " + std::to_string(k.shared_memory));
  for (const auto& n : k.input_names) {
    k.shape_infos.push_back({k.source.find(n + "_shape") != std::string::npos,
                             k.source.find(n + "_strides") != std::string::npos,
                             k.source.find(n + "_ndim") != std::string::npos});
  }
  return [k = std::move(k)](const std::vector<array>& inputs, const std::vector<Shape>& output_shapes,
                            const std::vector<Dtype>& output_dtypes, std::tuple<int, int, int> grid,
                            std::tuple<int, int, int> threadgroup,
                            std::vector<std::pair<std::string, fast::TemplateArg>> template_args,
                            std::optional<float> init_value, bool verbose, StreamOrDevice s) {
    return launch(k, inputs, output_shapes, output_dtypes, grid, threadgroup, template_args, init_value, verbose, s);
  };
}

[[noreturn]] void no_rule(const char* rule) {
  throw Error(std::string("[CustomKernel] custom kernels have no ") + rule +
              " rule (write one with custom_vjp, or use plain ops)");
}

}  // namespace

namespace fast {

CustomKernelFunction cuda_kernel(const std::string& name, const std::vector<std::string>& input_names,
                                 const std::vector<std::string>& output_names, const std::string& source,
                                 const std::string& header, bool ensure_row_contiguous, int shared_memory) {
  return make_kernel({Target::cuda, name, input_names, output_names, source, header, ensure_row_contiguous,
                      shared_memory, {}});
}

CustomKernelFunction cpu_kernel(const std::string& name, const std::vector<std::string>& input_names,
                                const std::vector<std::string>& output_names, const std::string& source,
                                const std::string& header, bool ensure_row_contiguous) {
  return make_kernel({Target::cpu, name, input_names, output_names, source, header, ensure_row_contiguous, 0, {}});
}

}  // namespace fast

std::vector<array> CustomKernel::vjp(const std::vector<array>&, const std::vector<array>&, const std::vector<int>&,
                                     const std::vector<array>&) {
  no_rule("vjp");
}
std::vector<array> CustomKernel::jvp(const std::vector<array>&, const std::vector<array>&, const std::vector<int>&) {
  no_rule("jvp");
}
std::pair<std::vector<array>, std::vector<int>> CustomKernel::vmap(const std::vector<array>&, const std::vector<int>&) {
  no_rule("vmap");
}
std::vector<Shape> CustomKernel::output_shapes(const std::vector<array>&) { return output_shapes_; }

bool CustomKernel::is_equivalent(const Primitive& o) const {
  const auto* k = dynamic_cast<const CustomKernel*>(&o);
  return k && k->kernel_name_ == kernel_name_ && k->source_ == source_ && k->grid_ == grid_ &&
         k->threadgroup_ == threadgroup_ && k->shape_infos_ == shape_infos_ &&
         k->ensure_row_contiguous_ == ensure_row_contiguous_ && k->init_value_ == init_value_ &&
         k->shared_memory_ == shared_memory_ && k->output_shapes_ == output_shapes_;
}

std::string CustomKernel::describe() const {
  std::ostringstream os;
  os << "CustomKernel(" << kernel_name_ << ", grid (" << grid_[0] << ", " << grid_[1] << ", " << grid_[2]
     << "), threadgroup (" << threadgroup_[0] << ", " << threadgroup_[1] << ", " << threadgroup_[2] << "))";
  return os.str();
}

}  // namespace kiln
