// The parameters of each exportable primitive family: written by
// serialize_primitive, read back by rebuild_node. Enum values are written
// by name so that a file survives reordered enums.
#include "core/export_params.h"

#include <functional>
#include <map>
#include <string>

#include "core/ops_util.h"
#include "core/primitives.h"
#include "core/primitives_fast_norm.h"
#include "core/primitives_index.h"
#include "core/primitives_quant.h"
#include "core/primitives_sort.h"
#include "kiln/fast.h"
#include "kiln/ops.h"

namespace kiln::detail {
namespace {

using json = nlohmann::json;

template <typename P>
const P* as(const Primitive& p) {
  return dynamic_cast<const P*>(&p);
}

// An enum value from its name (names from `name_of` over [0, count)).
template <typename E>
E by_name(const std::string& want, int count, const char* (*name_of)(E), const char* what) {
  for (int i = 0; i < count; ++i) {
    if (want == name_of(static_cast<E>(i))) return static_cast<E>(i);
  }
  throw Error(std::string("[import_function] unknown ") + what + " \"" + want + "\"");
}

Dtype dtype_by_name(const std::string& n) {
  for (Dtype t : {bool_, uint8, uint32, int8, int32, int64, float16, bfloat16, float32, float64}) {
    if (n == dtype_name(t)) return t;
  }
  throw Error("[import_function] unknown dtype \"" + n + "\"");
}

const char* scatter_axis_name(ScatterAxis::Reduce r) { return r == ScatterAxis::Reduce::sum ? "sum" : "none"; }
const char* scatter_reduce_name(Scatter::Reduce r) { return scatter_op_name(r); }
const char* scan_name(ScanOp op) { return scan_op_name(op); }

json quant(const QuantParams& p) {
  return {{"group_size", p.group_size}, {"bits", p.bits}, {"mode", quant_mode_name(p.mode)}};
}
// Files written before the microscaling modes have no "mode": affine.
QuantParams quant(const json& j) {
  QuantParams p{j.at("group_size").get<int>(), j.at("bits").get<int>()};
  if (j.contains("mode") && !quant_mode_from_name(j.at("mode").get<std::string>(), p.mode)) {
    throw Error("[import_function] unknown quantization mode " + j.at("mode").dump());
  }
  return p;
}

}  // namespace

json serialize_primitive(const Primitive& p) {
  json j = json::object();
  if (auto* x = as<Unary>(p)) j["op"] = unary_op_name(x->op());
  else if (auto* x = as<Binary>(p)) j["op"] = binary_op_name(x->op());
  else if (as<Select>(p) || as<Softmax>(p) || as<Matmul>(p) || as<StopGradient>(p)) {}
  else if (auto* x = as<Copy>(p)) j["view_if_contiguous"] = x->view_if_contiguous();
  else if (auto* x = as<Arange>(p)) j = {{"start", x->start()}, {"step", x->step()}};
  else if (auto* x = as<Reshape>(p)) j["shape"] = x->shape();
  else if (auto* x = as<Transpose>(p)) j["axes"] = x->axes();
  else if (auto* x = as<Broadcast>(p)) j["shape"] = x->shape();
  else if (auto* x = as<Slice>(p)) j = {{"start", x->start()}, {"step", x->step()}, {"shape", x->shape()}};
  else if (auto* x = as<SliceUpdate>(p)) j = {{"start", x->start()}, {"step", x->step()}};
  else if (auto* x = as<Reduce>(p)) j = {{"op", reduce_op_name(x->op())}, {"axes", x->axes()}};
  else if (auto* x = as<ArgReduce>(p)) j = {{"is_max", x->is_max()}, {"axis", x->axis()}};
  else if (auto* x = as<Gather>(p)) j["axis"] = x->axis();
  else if (auto* x = as<GatherAxis>(p)) j["axis"] = x->axis();
  else if (auto* x = as<Concatenate>(p)) j["axis"] = x->axis();
  else if (auto* x = as<RandomBits>(p)) j["shape"] = x->shape();
  else if (auto* x = as<ScatterAxis>(p)) j = {{"reduce", scatter_axis_name(x->reduce())}, {"axis", x->axis()}};
  else if (auto* x = as<GatherSlices>(p)) j = {{"axes", x->axes()}, {"slice_sizes", x->slice_sizes()}};
  else if (auto* x = as<Scatter>(p)) j = {{"reduce", scatter_reduce_name(x->reduce())}, {"axes", x->axes()}};
  else if (auto* x = as<DynamicSlice>(p)) j = {{"axes", x->axes()}, {"slice_size", x->slice_size()}};
  else if (auto* x = as<DynamicSliceUpdate>(p)) j["axes"] = x->axes();
  else if (auto* x = as<AsStrided>(p)) j = {{"shape", x->shape()}, {"strides", x->strides()}, {"offset", x->offset()}};
  else if (auto* x = as<View>(p)) j["dtype"] = dtype_name(x->dtype());
  else if (auto* x = as<Sort>(p)) j["axis"] = x->axis();
  else if (auto* x = as<ArgSort>(p)) j["axis"] = x->axis();
  else if (auto* x = as<Partition>(p)) j = {{"kth", x->kth()}, {"axis", x->axis()}};
  else if (auto* x = as<ArgPartition>(p)) j = {{"kth", x->kth()}, {"axis", x->axis()}};
  else if (auto* x = as<SearchSorted>(p)) j["right"] = x->right();
  else if (auto* x = as<Scan>(p)) {
    j = {{"op", scan_op_name(x->op())}, {"axis", x->axis()}, {"reverse", x->reverse()}, {"inclusive", x->inclusive()}};
  }
  else if (auto* x = as<Quantize>(p)) j = quant(x->params());
  else if (auto* x = as<Dequantize>(p)) j = quant(x->params());
  else if (auto* x = as<QuantizedMatmul>(p)) j = {{"quant", quant(x->params())}, {"transpose", x->transpose()}};
  else if (auto* x = as<GatherQMM>(p)) j = {{"quant", quant(x->params())}, {"transpose", x->transpose()}};
  else if (auto* x = as<RMSNorm>(p)) j["eps"] = x->eps();
  else if (auto* x = as<AddRMSNorm>(p)) j["eps"] = x->eps();
  else if (auto* x = as<LayerNorm>(p)) j["eps"] = x->eps();
  else throw Error(std::string("[export_function] the primitive ") + p.describe() + " cannot be exported yet");
  return {{"name", p.name()}, {"params", j}};
}

std::vector<array> rebuild_node(const json& prim, const std::vector<array>& in, const std::vector<Shape>& shapes,
                                const std::vector<Dtype>& dtypes, bool reshaped, Stream s) {
  const std::string name = prim.at("name").get<std::string>();
  const json& j = prim.at("params");
  auto fixed_shape = [&] {
    if (reshaped) {
      throw Error("[import_function] " + name + " fixes its input shapes in its parameters; this shapeless import "
                  "cannot give it inputs of new shapes (" + describe(in) + ")");
    }
  };
  // Families rebuilt through their ops (which check the new shapes).
  if (name == "Reshape") return {reshape(in[0], j.at("shape").get<Shape>(), s)};
  if (name == "Broadcast") return {broadcast_to(in[0], j.at("shape").get<Shape>(), s)};
  if (name == "RMSNorm") {
    std::optional<array> w;
    if (in[1].ndim() == 1) w = in[1];
    return {fast::rms_norm(in[0], w, j.at("eps").get<float>(), s)};
  }
  if (name == "AddRMSNorm") {
    std::optional<array> w;
    if (in[2].ndim() == 1) w = in[2];
    auto [h, y] = fast::add_rms_norm(in[0], in[1], w, j.at("eps").get<float>(), s);
    return {h, y};
  }
  if (name == "LayerNorm") {
    std::optional<array> w, b;
    if (in[1].ndim() == 1) w = in[1];
    if (in[2].ndim() == 1) b = in[2];
    return {fast::layer_norm(in[0], w, b, j.at("eps").get<float>(), s)};
  }
  using Make = std::function<std::shared_ptr<Primitive>()>;
  auto shp = [&](const char* k) { return j.at(k).get<Shape>(); };
  auto axes = [&](const char* k) { return j.at(k).get<std::vector<int>>(); };
  auto i = [&](const char* k) { return j.at(k).get<int>(); };
  auto b = [&](const char* k) { return j.at(k).get<bool>(); };
  const std::map<std::string, Make> polymorphic = {
      {"Unary", [&] { return std::make_shared<Unary>(s, by_name(j.at("op").get<std::string>(), kUnaryOpCount,
                                                                   unary_op_name, "unary op")); }},
      {"Binary", [&] { return std::make_shared<Binary>(s, by_name(j.at("op").get<std::string>(), kBinaryOpCount,
                                                                     binary_op_name, "binary op")); }},
      {"Select", [&] { return std::make_shared<Select>(s); }},
      {"Softmax", [&] { return std::make_shared<Softmax>(s); }},
      {"Matmul", [&] { return std::make_shared<Matmul>(s); }},
      {"StopGradient", [&] { return std::make_shared<StopGradient>(s); }},
      {"Copy", [&] { return std::make_shared<Copy>(s, b("view_if_contiguous")); }},
      {"Transpose", [&] { return std::make_shared<Transpose>(s, axes("axes")); }},
      {"Reduce", [&] { return std::make_shared<Reduce>(s, by_name(j.at("op").get<std::string>(), kReduceOpCount,
                                                                     reduce_op_name, "reduce op"), axes("axes")); }},
      {"ArgReduce", [&] { return std::make_shared<ArgReduce>(s, b("is_max"), i("axis")); }},
      {"Gather", [&] { return std::make_shared<Gather>(s, i("axis")); }},
      {"GatherAxis", [&] { return std::make_shared<GatherAxis>(s, i("axis")); }},
      {"Concatenate", [&] { return std::make_shared<Concatenate>(s, i("axis")); }},
      {"ScatterAxis", [&] { return std::make_shared<ScatterAxis>(s, by_name(j.at("reduce").get<std::string>(), 2,
                                                                               scatter_axis_name, "reduce"), i("axis")); }},
      {"Scatter", [&] { return std::make_shared<Scatter>(s, by_name(j.at("reduce").get<std::string>(), 5,
                                                                       scatter_reduce_name, "reduce"), axes("axes")); }},
      {"DynamicSliceUpdate", [&] { return std::make_shared<DynamicSliceUpdate>(s, axes("axes")); }},
      {"View", [&] { return std::make_shared<View>(s, dtype_by_name(j.at("dtype").get<std::string>())); }},
      {"Sort", [&] { return std::make_shared<Sort>(s, i("axis")); }},
      {"ArgSort", [&] { return std::make_shared<ArgSort>(s, i("axis")); }},
      {"Partition", [&] { return std::make_shared<Partition>(s, i("kth"), i("axis")); }},
      {"ArgPartition", [&] { return std::make_shared<ArgPartition>(s, i("kth"), i("axis")); }},
      {"SearchSorted", [&] { return std::make_shared<SearchSorted>(s, b("right")); }},
      {"Scan", [&] { return std::make_shared<Scan>(s, by_name(j.at("op").get<std::string>(), 5, scan_name, "scan op"),
                                                   i("axis"), b("reverse"), b("inclusive")); }},
      {"Quantize", [&] { return std::make_shared<Quantize>(s, quant(j)); }},
      {"Dequantize", [&] { return std::make_shared<Dequantize>(s, quant(j), dtypes.at(0)); }},
      {"QuantizedMatmul", [&] { return std::make_shared<QuantizedMatmul>(s, quant(j.at("quant")), b("transpose")); }},
      {"GatherQMM", [&] { return std::make_shared<GatherQMM>(s, quant(j.at("quant")), b("transpose")); }},
  };
  const std::map<std::string, Make> fixed = {
      {"Arange", [&] { return std::make_shared<Arange>(s, j.at("start").get<double>(), j.at("step").get<double>(),
                                                       shapes[0][0]); }},
      {"Slice", [&] { return std::make_shared<Slice>(s, shp("start"), shp("step"), shp("shape")); }},
      {"SliceUpdate", [&] { return std::make_shared<SliceUpdate>(s, shp("start"), shp("step")); }},
      {"RandomBits", [&] { return std::make_shared<RandomBits>(s, shp("shape")); }},
      {"GatherSlices", [&] { return std::make_shared<GatherSlices>(s, axes("axes"), shp("slice_sizes")); }},
      {"DynamicSlice", [&] { return std::make_shared<DynamicSlice>(s, axes("axes"), shp("slice_size")); }},
      {"AsStrided", [&] { return std::make_shared<AsStrided>(s, shp("shape"), j.at("strides").get<Strides>(),
                                                             j.at("offset").get<int64_t>()); }},
  };
  std::shared_ptr<Primitive> p;
  if (auto it = polymorphic.find(name); it != polymorphic.end()) {
    p = it->second();
  } else if (auto f = fixed.find(name); f != fixed.end()) {
    fixed_shape();
    p = f->second();
  } else {
    throw Error("[import_function] unknown primitive \"" + name + "\"");
  }
  std::vector<Shape> out = reshaped ? p->output_shapes(in) : shapes;
  if (out.size() == 1) return {array(out[0], dtypes[0], p, in)};
  return array::make_arrays(out, dtypes, p, in);
}

}  // namespace kiln::detail
