// export_function / import_function (kiln/export.h). The file: the magic
// "KILNFUN1", the byte length of a JSON header (8 bytes, little-endian),
// the header, then the bytes of the constants one after another. Values are
// numbered: the inputs (positional, then keyword arguments by sorted key),
// the constants, then each node's outputs in tape order.
#include "kiln/export.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>

#include "core/array_desc.h"
#include "core/export_params.h"
#include "core/ops_util.h"
#include "kiln/ops.h"

namespace kiln {

using json = nlohmann::json;

struct ExportedGraph {
  struct Node {
    json primitive;
    std::vector<int> args;
    std::vector<Shape> in_shapes, shapes;
    std::vector<Dtype> dtypes;
  };
  std::string metadata;
  bool shapeless = false;
  size_t n_args = 0;
  std::vector<std::string> kwarg_keys;
  std::vector<Shape> in_shapes;
  std::vector<Dtype> in_dtypes;
  std::vector<array> constants;  // evaluated
  std::vector<Node> nodes;
  std::vector<int> outputs;
};

namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'F', 'U', 'N', '1'};

Dtype parse_dtype(const std::string& n) {
  for (Dtype t : {bool_, uint8, uint16, uint32, uint64, int8, int16, int32, int64, float16, bfloat16, float32, float64}) {
    if (n == dtype_name(t)) return t;
  }
  throw Error("[import_function] unknown dtype \"" + n + "\"");
}

// Row-major bytes of an evaluated array.
std::vector<uint8_t> bytes_of(const array& a) {
  array b = view(contiguous(reshape(a, {-1}), Device::cpu), uint8, Device::cpu);
  b.eval();
  const uint8_t* p = b.data<uint8_t>();
  return std::vector<uint8_t>(p, p + b.size());
}

array from_bytes(const uint8_t* p, size_t n, const Shape& shape, Dtype t) {
  array raw(std::vector<uint8_t>(p, p + n), {static_cast<int>(n)}, uint8);
  array out = reshape(view(raw, t, Device::cpu), shape, Device::cpu);
  out.eval();
  return out;
}

// The graph from `inputs` to `outputs`: nodes in an order where each comes
// after its inputs; arrays the graph reads that are not inputs (evaluated
// or captured) become constants.
ExportedGraph trace(const std::vector<array>& inputs, const std::vector<array>& outputs) {
  ExportedGraph g;
  std::unordered_map<const ArrayDesc*, int> ids;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ids.emplace(inputs[i].desc().get(), static_cast<int>(i));
    g.in_shapes.push_back(inputs[i].shape());
    g.in_dtypes.push_back(inputs[i].dtype());
  }
  auto is_leaf = [&](const array& a) {
    return ids.count(a.desc().get()) || !a.has_primitive() || a.desc()->get_status() != Status::unscheduled;
  };
  // Post-order over nodes (a node: all outputs of one primitive).
  std::vector<std::vector<array>> order;
  std::set<const Primitive*> seen;
  struct Frame {
    std::vector<array> outs;
    std::vector<array> ins;
    size_t next;
  };
  for (const auto& o : outputs) {
    if (is_leaf(o) || !seen.insert(o.primitive().get()).second) continue;
    std::vector<Frame> stack;
    stack.push_back({o.outputs(), o.inputs(), 0});
    while (!stack.empty()) {
      Frame& f = stack.back();
      if (f.next < f.ins.size()) {
        const array a = f.ins[f.next++];
        if (!is_leaf(a) && seen.insert(a.primitive().get()).second) stack.push_back({a.outputs(), a.inputs(), 0});
        continue;
      }
      order.push_back(f.outs);
      stack.pop_back();
    }
  }
  // Constants first (their ids precede the nodes').
  std::vector<array> consts;
  auto add_const = [&](const array& a) {
    if (ids.count(a.desc().get())) return;
    ids.emplace(a.desc().get(), -1 - static_cast<int>(consts.size()));
    consts.push_back(a);
  };
  std::set<const ArrayDesc*> produced;
  for (const auto& outs : order) for (const auto& x : outs) produced.insert(x.desc().get());
  for (const auto& outs : order) {
    for (const auto& a : outs[0].inputs()) {
      if (!produced.count(a.desc().get())) add_const(a);
    }
  }
  for (const auto& o : outputs) {
    if (!produced.count(o.desc().get())) add_const(o);
  }
  eval(consts);
  int n_in = static_cast<int>(inputs.size()), n_const = static_cast<int>(consts.size());
  for (auto& [d, id] : ids) {
    if (id < 0) id = n_in + (-1 - id);
  }
  g.constants = consts;
  int next = n_in + n_const;
  for (const auto& outs : order) {
    ExportedGraph::Node n;
    n.primitive = detail::serialize_primitive(*outs[0].primitive());
    for (const auto& a : outs[0].inputs()) {
      n.args.push_back(ids.at(a.desc().get()));
      n.in_shapes.push_back(a.shape());
    }
    for (const auto& x : outs) {
      n.shapes.push_back(x.shape());
      n.dtypes.push_back(x.dtype());
      ids.emplace(x.desc().get(), next++);
    }
    g.nodes.push_back(std::move(n));
  }
  for (const auto& o : outputs) g.outputs.push_back(ids.at(o.desc().get()));
  return g;
}

void write(const std::string& file, const ExportedGraph& g) {
  json h;
  h["metadata"] = g.metadata;
  h["shapeless"] = g.shapeless;
  h["n_args"] = g.n_args;
  h["kwarg_keys"] = g.kwarg_keys;
  h["inputs"] = json::array();
  for (size_t i = 0; i < g.in_shapes.size(); ++i) {
    h["inputs"].push_back({{"shape", g.in_shapes[i]}, {"dtype", dtype_name(g.in_dtypes[i])}});
  }
  std::vector<std::vector<uint8_t>> blobs;
  h["constants"] = json::array();
  for (const auto& c : g.constants) {
    blobs.push_back(bytes_of(c));
    h["constants"].push_back({{"shape", c.shape()}, {"dtype", dtype_name(c.dtype())}, {"bytes", blobs.back().size()}});
  }
  h["nodes"] = json::array();
  for (const auto& n : g.nodes) {
    json dts = json::array();
    for (Dtype t : n.dtypes) dts.push_back(dtype_name(t));
    h["nodes"].push_back({{"primitive", n.primitive}, {"args", n.args}, {"in_shapes", n.in_shapes},
                          {"shapes", n.shapes}, {"dtypes", dts}});
  }
  h["outputs"] = g.outputs;
  std::string text = h.dump();
  std::ofstream os(file, std::ios::binary);
  if (!os) throw Error("[export_function] cannot open \"" + file + "\" for writing");
  uint64_t len = text.size();
  os.write(kMagic, 8);
  for (int k = 0; k < 8; ++k) os.put(static_cast<char>((len >> (8 * k)) & 0xff));
  os.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& b : blobs) os.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  if (!os) throw Error("[export_function] writing \"" + file + "\" failed");
}

void export_graph(const std::string& file, const std::vector<array>& inputs, const std::vector<array>& outputs,
                  size_t n_args, std::vector<std::string> keys, bool shapeless, const std::string& metadata) {
  ExportedGraph g = trace(inputs, outputs);
  g.n_args = n_args;
  g.kwarg_keys = std::move(keys);
  g.shapeless = shapeless;
  g.metadata = metadata;
  write(file, g);
}

std::vector<std::string> sorted_keys(const Kwargs& kwargs) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : kwargs) keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  return keys;
}

std::vector<array> run(const ExportedGraph& g, const std::vector<array>& inputs) {
  if (inputs.size() != g.in_shapes.size()) {
    throw Error("[import_function] the function takes " + std::to_string(g.in_shapes.size()) + " inputs, got " +
                std::to_string(inputs.size()));
  }
  bool reshaped = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    bool shape_ok = inputs[i].shape() == g.in_shapes[i];
    if (inputs[i].dtype() != g.in_dtypes[i] || (!shape_ok && !g.shapeless)) {
      throw Error("[import_function] input " + std::to_string(i) + " is " + format_shape(inputs[i].shape()) + " " +
                  dtype_name(inputs[i].dtype()) + "; the function was exported for " + format_shape(g.in_shapes[i]) +
                  " " + dtype_name(g.in_dtypes[i]));
    }
    reshaped = reshaped || !shape_ok;
  }
  std::vector<array> vals = inputs;
  vals.insert(vals.end(), g.constants.begin(), g.constants.end());
  Stream s = to_stream({});
  for (const auto& n : g.nodes) {
    std::vector<array> args;
    bool changed = false;
    for (size_t k = 0; k < n.args.size(); ++k) {
      args.push_back(vals.at(n.args[k]));
      changed = changed || args.back().shape() != n.in_shapes[k];
    }
    std::vector<array> outs = detail::rebuild_node(n.primitive, args, n.shapes, n.dtypes, reshaped && changed, s);
    vals.insert(vals.end(), outs.begin(), outs.end());
  }
  std::vector<array> out;
  for (int id : g.outputs) out.push_back(vals.at(id));
  return out;
}

}  // namespace

void export_function(const std::string& file, const std::function<std::vector<array>(const Args&)>& fun,
                     const Args& args, bool shapeless, const std::string& metadata) {
  export_graph(file, args, fun(args), args.size(), {}, shapeless, metadata);
}

void export_function(const std::string& file, const std::function<std::vector<array>(const Kwargs&)>& fun,
                     const Kwargs& kwargs, bool shapeless, const std::string& metadata) {
  export_function(file, [&](const Args&, const Kwargs& kw) { return fun(kw); }, Args{}, kwargs, shapeless, metadata);
}

void export_function(const std::string& file,
                     const std::function<std::vector<array>(const Args&, const Kwargs&)>& fun, const Args& args,
                     const Kwargs& kwargs, bool shapeless, const std::string& metadata) {
  std::vector<std::string> keys = sorted_keys(kwargs);
  std::vector<array> inputs = args;
  for (const auto& k : keys) inputs.push_back(kwargs.at(k));
  export_graph(file, inputs, fun(args, kwargs), args.size(), keys, shapeless, metadata);
}

ImportedFunction import_function(const std::string& file) {
  std::ifstream is(file, std::ios::binary);
  if (!is) throw Error("[import_function] cannot open \"" + file + "\"");
  char magic[8];
  unsigned char len_bytes[8];
  is.read(magic, 8);
  is.read(reinterpret_cast<char*>(len_bytes), 8);
  if (!is || std::memcmp(magic, kMagic, 8) != 0) {
    throw Error("[import_function] \"" + file + "\" is not a function exported by Kiln");
  }
  uint64_t len = 0;
  for (int k = 0; k < 8; ++k) len |= static_cast<uint64_t>(len_bytes[k]) << (8 * k);
  std::string text(len, '\0');
  is.read(text.data(), static_cast<std::streamsize>(len));
  std::vector<uint8_t> blob((std::istreambuf_iterator<char>(is)), std::istreambuf_iterator<char>());
  auto g = std::make_shared<ExportedGraph>();
  try {
    json h = json::parse(text);
    g->metadata = h.at("metadata").get<std::string>();
    g->shapeless = h.at("shapeless").get<bool>();
    g->n_args = h.at("n_args").get<size_t>();
    g->kwarg_keys = h.at("kwarg_keys").get<std::vector<std::string>>();
    for (const auto& in : h.at("inputs")) {
      g->in_shapes.push_back(in.at("shape").get<Shape>());
      g->in_dtypes.push_back(parse_dtype(in.at("dtype").get<std::string>()));
    }
    size_t at = 0;
    for (const auto& c : h.at("constants")) {
      size_t n = c.at("bytes").get<size_t>();
      if (at + n > blob.size()) throw Error("[import_function] \"" + file + "\" is truncated");
      g->constants.push_back(from_bytes(blob.data() + at, n, c.at("shape").get<Shape>(),
                                        parse_dtype(c.at("dtype").get<std::string>())));
      at += n;
    }
    for (const auto& jn : h.at("nodes")) {
      ExportedGraph::Node n;
      n.primitive = jn.at("primitive");
      n.args = jn.at("args").get<std::vector<int>>();
      n.in_shapes = jn.at("in_shapes").get<std::vector<Shape>>();
      n.shapes = jn.at("shapes").get<std::vector<Shape>>();
      for (const auto& t : jn.at("dtypes")) n.dtypes.push_back(parse_dtype(t.get<std::string>()));
      g->nodes.push_back(std::move(n));
    }
    g->outputs = h.at("outputs").get<std::vector<int>>();
  } catch (const json::exception& e) {
    throw Error("[import_function] \"" + file + "\" has a malformed header: " + e.what());
  }
  return ImportedFunction(g);
}

std::vector<array> ImportedFunction::operator()(const Args& args) const { return (*this)(args, Kwargs{}); }
std::vector<array> ImportedFunction::operator()(const Kwargs& kwargs) const { return (*this)(Args{}, kwargs); }
std::vector<array> ImportedFunction::operator()(const Args& args, const Kwargs& kwargs) const {
  const ExportedGraph& g = *graph_;
  if (args.size() != g.n_args || sorted_keys(kwargs) != g.kwarg_keys) {
    std::string want = std::to_string(g.n_args) + " positional arguments and keywords [";
    for (size_t i = 0; i < g.kwarg_keys.size(); ++i) want += (i ? ", " : "") + g.kwarg_keys[i];
    throw Error("[import_function] the function takes " + want + "], got " + std::to_string(args.size()) +
                " positional and " + std::to_string(kwargs.size()) + " keyword arguments");
  }
  std::vector<array> inputs = args;
  for (const auto& k : g.kwarg_keys) inputs.push_back(kwargs.at(k));
  return run(g, inputs);
}
const std::string& ImportedFunction::metadata() const { return graph_->metadata; }

}  // namespace kiln
