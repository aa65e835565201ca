// kiln::compile: trace once per input signature, simplify, fuse, replay.
//
// Tracing calls fn on placeholder arrays and records every node that
// depends on them into a tape (post-order). Nodes that do not depend on the
// inputs (scalars made inside fn, captured arrays) are kept as constants,
// except broadcasts of scalars, which stay nodes that fusion absorbs.
// The tape is simplified (no-op views and casts removed, common
// subexpressions merged through Primitive::is_equivalent, dead nodes
// dropped), then each maximal DAG of elementwise nodes (Unary, Binary,
// Select, Copy, and Broadcasts feeding them) whose intermediates are used
// only inside it becomes one Compiled node. A call replays the tape on the
// real inputs: fresh lazy nodes that share the cached primitives.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <cstdlib>
#include <map>
#include <mutex>
#include <queue>
#include <set>
#include <unordered_map>

#include "core/array_desc.h"
#include "core/compiled.h"
#include "core/ops_util.h"
#include "core/primitives.h"
#include "core/scheduler.h"
#include "kiln/compile.h"

namespace kiln {
namespace {

// The global CompileMode; the environment can switch compile off at start-up.
CompileMode initial_mode() {
  return std::getenv("KILN_DISABLE_COMPILE") || std::getenv("MLX_DISABLE_COMPILE") ? CompileMode::disabled
                                                                                    : CompileMode::enabled;
}
std::atomic<CompileMode> mode{initial_mode()};
std::atomic<int64_t> trace_count{0};
std::mutex stats_mutex;
detail::CompileStats last_stats;

struct TapeNode {
  std::shared_ptr<Primitive> prim;
  Shape shape;
  Dtype dtype;
  std::vector<int> args;  // value ids
  // A multi-output primitive's outputs are one node each, told apart by
  // their position; replay builds the siblings together.
  std::shared_ptr<const ArrayDesc::Siblings> siblings;
  int position = 0;
};

// Value ids: [0, n_inputs) inputs, then constants, then tape nodes.
struct Trace {
  int n_inputs = 0;
  std::vector<array> constants;
  std::vector<TapeNode> nodes;
  std::vector<int> outputs;

  int first_node() const { return n_inputs + static_cast<int>(constants.size()); }
};

bool is_evaluated_scalar(const array& a) {
  return a.desc()->get_status() == Status::available && a.size() == 1 && a.desc()->buffer;
}

// ---- tracing ----

Trace trace(const ArrayFn& fn, const std::vector<array>& inputs, int* traced_nodes) {
  Stream st = to_stream({});
  std::vector<array> ph;
  std::unordered_map<const ArrayDesc*, int> ids;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ph.push_back(array(inputs[i].shape(), inputs[i].dtype(), std::make_shared<Placeholder>(st), {}));
    ids[ph.back().desc().get()] = static_cast<int>(i);
  }
  std::vector<array> outs = fn(ph);

  // Post-order of the lazy part of the graph, stopping at placeholders and
  // at nodes that are already evaluated or scheduled.
  auto is_leaf = [&](const array& a) {
    return ids.count(a.desc().get()) || !a.has_primitive() || a.desc()->get_status() != Status::unscheduled;
  };
  std::vector<array> order;
  std::unordered_map<const ArrayDesc*, bool> depends;  // node -> depends on an input
  {
    std::set<const ArrayDesc*> seen;
    struct Frame {
      array node;
      size_t next;
    };
    std::vector<Frame> stack;
    for (const auto& o : outs) {
      if (is_leaf(o) || !seen.insert(o.desc().get()).second) continue;
      stack.push_back({o, 0});
      while (!stack.empty()) {
        Frame& f = stack.back();
        const auto& in = f.node.inputs();
        if (f.next < in.size()) {
          const array& a = in[f.next++];
          if (!is_leaf(a) && seen.insert(a.desc().get()).second) stack.push_back({a, 0});
          continue;
        }
        order.push_back(f.node);
        stack.pop_back();
      }
    }
  }
  // A broadcast of an evaluated scalar (`x * 0.5f` broadcasts the 0.5) is
  // kept as a tape node, not a constant: a fused region then reads the
  // scalar itself (one value, passed by value on the GPU), and equal scalars
  // are one constant.
  auto is_scalar_broadcast = [](const array& n) {
    const auto& in = n.inputs();
    return in.size() == 1 && is_evaluated_scalar(in[0]) && dynamic_cast<const Broadcast*>(n.primitive().get());
  };
  for (const auto& n : order) {
    bool dep = is_scalar_broadcast(n);
    for (const auto& a : n.inputs()) {
      dep = dep || ids.count(a.desc().get()) || (depends.count(a.desc().get()) && depends[a.desc().get()]);
    }
    depends[n.desc().get()] = dep;
  }

  Trace t;
  t.n_inputs = static_cast<int>(inputs.size());
  // Constants first (their ids must precede the nodes'), then the nodes.
  std::vector<array> consts;
  std::unordered_map<const ArrayDesc*, int> const_ids;
  auto add_const = [&](const array& a) {
    if (ids.count(a.desc().get()) || const_ids.count(a.desc().get())) return;
    // Equal evaluated scalars are one constant.
    if (is_evaluated_scalar(a)) {
      for (size_t k = 0; k < consts.size(); ++k) {
        const array& c = consts[k];
        if (is_evaluated_scalar(c) && c.dtype() == a.dtype() && c.shape() == a.shape() &&
            std::memcmp(detail::data_ptr(c), detail::data_ptr(a), a.itemsize()) == 0) {
          const_ids[a.desc().get()] = static_cast<int>(k);
          return;
        }
      }
    }
    const_ids[a.desc().get()] = static_cast<int>(consts.size());
    consts.push_back(a);
  };
  std::vector<array> dep_nodes;
  for (const auto& n : order) {
    if (!depends[n.desc().get()]) continue;
    dep_nodes.push_back(n);
    for (const auto& a : n.inputs()) {
      if (!ids.count(a.desc().get()) && !(depends.count(a.desc().get()) && depends[a.desc().get()])) add_const(a);
    }
  }
  for (const auto& o : outs) {
    if (!ids.count(o.desc().get()) && !(depends.count(o.desc().get()) && depends[o.desc().get()])) add_const(o);
  }
  t.constants = consts;
  for (auto& [d, k] : const_ids) ids[d] = t.n_inputs + k;
  for (const auto& n : dep_nodes) {
    TapeNode tn{n.primitive(), n.shape(), n.dtype(), {}, n.desc()->siblings, n.desc()->position};
    for (const auto& a : n.inputs()) tn.args.push_back(ids.at(a.desc().get()));
    ids[n.desc().get()] = t.first_node() + static_cast<int>(t.nodes.size());
    t.nodes.push_back(std::move(tn));
  }
  for (const auto& o : outs) t.outputs.push_back(ids.at(o.desc().get()));
  *traced_nodes = static_cast<int>(t.nodes.size());
  return t;
}

// ---- simplification ----

struct ValueInfo {
  Shape shape;
  Dtype dtype;
};

std::vector<ValueInfo> value_infos(const Trace& t, const std::vector<array>& inputs) {
  std::vector<ValueInfo> v;
  for (const auto& a : inputs) v.push_back({a.shape(), a.dtype()});
  for (const auto& a : t.constants) v.push_back({a.shape(), a.dtype()});
  for (const auto& n : t.nodes) v.push_back({n.shape, n.dtype});
  return v;
}

bool is_noop(const TapeNode& n, const ValueInfo& in) {
  const Primitive* p = n.prim.get();
  if (n.args.size() != 1 || in.shape != n.shape) return false;
  if (dynamic_cast<const Reshape*>(p) || dynamic_cast<const Broadcast*>(p)) return true;
  if (dynamic_cast<const Copy*>(p)) return in.dtype == n.dtype;
  if (auto* tr = dynamic_cast<const Transpose*>(p)) {
    for (size_t i = 0; i < tr->axes().size(); ++i) {
      if (tr->axes()[i] != static_cast<int>(i)) return false;
    }
    return true;
  }
  if (auto* s = dynamic_cast<const Slice*>(p)) {
    for (size_t i = 0; i < s->start().size(); ++i) {
      if (s->start()[i] != 0 || s->step()[i] != 1) return false;
    }
    return true;
  }
  return false;
}

// Removes no-ops, merges common subexpressions and drops dead nodes.
Trace simplify(const Trace& t, const std::vector<array>& inputs) {
  std::vector<ValueInfo> info = value_infos(t, inputs);
  int base = t.first_node();
  std::vector<int> rep(info.size());
  for (size_t i = 0; i < rep.size(); ++i) rep[i] = static_cast<int>(i);
  // Key: primitive name, dtype, shape, inputs, output position -> candidates.
  std::map<std::tuple<std::string, int, Shape, std::vector<int>, int>, std::vector<int>> seen;
  std::vector<TapeNode> nodes = t.nodes;
  for (size_t k = 0; k < nodes.size(); ++k) {
    TapeNode& n = nodes[k];
    int id = base + static_cast<int>(k);
    for (int& a : n.args) a = rep[a];
    if (n.args.size() == 1 && is_noop(n, info[n.args[0]])) {
      rep[id] = n.args[0];
      continue;
    }
    auto key = std::make_tuple(std::string(n.prim->name()), static_cast<int>(n.dtype), n.shape, n.args, n.position);
    auto& cands = seen[key];
    bool merged = false;
    for (int c : cands) {
      const TapeNode& other = nodes[c - base];
      if (other.prim == n.prim || n.prim->is_equivalent(*other.prim)) {
        rep[id] = c;
        merged = true;
        break;
      }
    }
    if (!merged) cands.push_back(id);
  }
  // Live nodes from the outputs.
  std::vector<char> live(info.size(), 0);
  std::vector<int> outputs;
  for (int o : t.outputs) {
    outputs.push_back(rep[o]);
    live[rep[o]] = 1;
  }
  for (int k = static_cast<int>(nodes.size()) - 1; k >= 0; --k) {
    int id = base + k;
    if (!live[id] || rep[id] != id) continue;
    for (int a : nodes[k].args) live[a] = 1;
  }
  Trace out;
  out.n_inputs = t.n_inputs;
  std::vector<int> remap(info.size(), -1);
  for (int i = 0; i < t.n_inputs; ++i) remap[i] = i;
  for (size_t c = 0; c < t.constants.size(); ++c) {
    int id = t.n_inputs + static_cast<int>(c);
    if (!live[id]) continue;
    remap[id] = t.n_inputs + static_cast<int>(out.constants.size());
    out.constants.push_back(t.constants[c]);
  }
  int nb = out.first_node();
  for (size_t k = 0; k < nodes.size(); ++k) {
    int id = base + static_cast<int>(k);
    if (!live[id] || rep[id] != id) continue;
    TapeNode n = nodes[k];
    for (int& a : n.args) a = remap[a];
    remap[id] = nb + static_cast<int>(out.nodes.size());
    out.nodes.push_back(std::move(n));
  }
  for (int o : outputs) out.outputs.push_back(remap[o]);
  return out;
}

// ---- fusion ----

// Both backends fuse: the CPU through its code generator or interpreter,
// the GPU through NVRTC (backend/cuda/compiled_codegen.h), each op the
// same definition the unfused kernels use.
bool is_fusible_op(const TapeNode& n) {
  const Primitive* p = n.prim.get();
  // A signed integer power stays its own node: its kernel checks for negative
  // exponents (an error), which a fused kernel cannot report.
  if (auto* b = dynamic_cast<const Binary*>(p)) {
    return b->op() != BinaryOp::power || !is_integral(n.dtype) || !is_signed(n.dtype);
  }
  return dynamic_cast<const Unary*>(p) || dynamic_cast<const Select*>(p) || dynamic_cast<const Copy*>(p);
}

bool is_broadcast(const TapeNode& n) { return dynamic_cast<const Broadcast*>(n.prim.get()); }

// GPU regions are fused unless KILN_GPU_FUSION=0: then compile on a GPU
// stream still simplifies the graph and runs the unfused kernels (a switch
// to rule the generated kernels out when chasing a problem). Read at each
// trace, so tests can switch it.
bool gpu_fusion_enabled() {
  const char* v = std::getenv("KILN_GPU_FUSION");
  return !(v && std::string(v) == "0");
}

// A GPU region's kernel takes its inputs as parameters and is built by
// NVRTC at first use: bounded inputs keep the parameters small, bounded ops
// keep a build short (a long chain becomes a few kernels).
constexpr size_t kMaxGpuRegionInputs = 32;
constexpr int kMaxGpuRegionOps = 256;

FusedStep make_step(const TapeNode& n, const std::vector<int>& args, const std::vector<ValueInfo>& info,
                    const std::vector<int>& node_args) {
  FusedStep s{};
  s.args[0] = s.args[1] = s.args[2] = -1;
  for (size_t i = 0; i < args.size(); ++i) s.args[i] = args[i];
  s.out_dtype = n.dtype;
  const Primitive* p = n.prim.get();
  if (auto* u = dynamic_cast<const Unary*>(p)) {
    s.kind = FusedStep::Kind::unary;
    s.op = static_cast<uint8_t>(u->op());
    s.in_dtype = info[node_args[0]].dtype;
  } else if (auto* b = dynamic_cast<const Binary*>(p)) {
    s.kind = FusedStep::Kind::binary;
    s.op = static_cast<uint8_t>(b->op());
    s.in_dtype = info[node_args[0]].dtype;
  } else if (dynamic_cast<const Select*>(p)) {
    s.kind = FusedStep::Kind::select;
    s.in_dtype = info[node_args[1]].dtype;
  } else {
    s.kind = FusedStep::Kind::cast;
    s.in_dtype = info[node_args[0]].dtype;
  }
  return s;
}

// Replaces each region of >= 2 elementwise ops by one Compiled node. An op
// joins the region of its consumer only when every consumer is in the
// region and it is not an output, so a region has exactly one output (its
// root) and never depends on itself through an outside node. A broadcast
// joins as a view the region reads through (the region takes its input):
// it may serve several regions, and stays a node while others read it.
Trace fuse(const Trace& t, const std::vector<array>& inputs, int* regions) {
  std::vector<ValueInfo> info = value_infos(t, inputs);
  // complex64 and the fp8 types are not fused: the generated kernels have
  // no complex or fp8 type.
  auto fusible = [&](const TapeNode& n) {
    if (!is_fusible_op(n) || n.dtype == complex64 || is_fp8(n.dtype)) return false;
    for (int a : n.args) {
      if (info[a].dtype == complex64 || is_fp8(info[a].dtype)) return false;
    }
    return true;
  };
  int base = t.first_node();
  int nn = static_cast<int>(t.nodes.size());
  std::vector<std::vector<int>> consumers(info.size());
  for (int k = 0; k < nn; ++k) {
    for (int a : t.nodes[k].args) {
      auto& c = consumers[a];
      if (c.empty() || c.back() != k) c.push_back(k);
    }
  }
  std::vector<char> is_output(info.size(), 0);
  for (int o : t.outputs) is_output[o] = 1;

  std::vector<int> region_of(nn, -1);  // root node index
  std::vector<char> removed(nn, 0);
  std::map<int, std::shared_ptr<Compiled>> compiled_at;
  std::map<int, std::vector<int>> compiled_args;
  *regions = 0;
  for (int r = nn - 1; r >= 0; --r) {
    if (region_of[r] >= 0 || !fusible(t.nodes[r])) continue;
    const Shape& shape = t.nodes[r].shape;
    const Stream stream = t.nodes[r].prim->stream();
    const bool gpu = stream.device.type == Device::gpu;
    if (gpu && !gpu_fusion_enabled()) continue;
    std::set<int> outside;  // values the region reads from outside (GPU bound)
    int n_ops = 1;
    std::vector<int> members;
    std::priority_queue<int> pq;
    std::set<int> queued;
    region_of[r] = r;
    members.push_back(r);
    auto push_args = [&](int k) {
      for (int a : t.nodes[k].args) {
        if (a >= base && queued.insert(a - base).second) pq.push(a - base);
      }
    };
    for (int a : t.nodes[r].args) outside.insert(a);
    push_args(r);
    while (!pq.empty()) {
      int k = pq.top();
      pq.pop();
      const TapeNode& n = t.nodes[k];
      if (region_of[k] >= 0 || is_output[base + k] || n.shape != shape || !(n.prim->stream() == stream)) continue;
      const bool bcast = is_broadcast(n);
      if (!fusible(n) && !bcast) continue;
      bool all_in = true;
      for (int c : consumers[base + k]) all_in = all_in && region_of[c] == r;
      if (!all_in && !bcast) continue;
      if (gpu) {
        // Taking k in replaces it by its arguments among the region's inputs.
        std::set<int> grown = outside;
        grown.erase(base + k);
        for (int a : n.args) grown.insert(a);
        if (grown.size() > kMaxGpuRegionInputs || (is_fusible_op(n) && n_ops >= kMaxGpuRegionOps)) continue;
        outside = std::move(grown);
      }
      n_ops += is_fusible_op(n) ? 1 : 0;
      members.push_back(k);
      if (!bcast) {
        region_of[k] = r;
        push_args(k);
      }
    }
    int ops = 0;
    for (int k : members) ops += fusible(t.nodes[k]) ? 1 : 0;
    if (ops < 2) {
      for (int k : members) region_of[k] = -1;
      region_of[r] = r;  // done; stays a plain node
      continue;
    }
    std::sort(members.begin(), members.end());
    const std::set<int> member_set(members.begin(), members.end());
    auto is_member = [&](int v) { return v >= base && member_set.count(v - base) > 0; };
    // External inputs and local value numbers.
    std::vector<int> ext;  // value ids
    std::map<int, int> local;
    auto local_of = [&](int v) {
      auto it = local.find(v);
      if (it != local.end()) return it->second;
      // An external value; a Broadcast member stands for its input.
      int src = v;
      if (is_member(v) && is_broadcast(t.nodes[v - base])) src = t.nodes[v - base].args[0];
      auto it2 = std::find(ext.begin(), ext.end(), src);
      int idx = static_cast<int>(it2 - ext.begin());
      if (it2 == ext.end()) ext.push_back(src);
      local[v] = idx;
      return idx;
    };
    // First pass: number the external inputs in order of use.
    for (int k : members) {
      if (!fusible(t.nodes[k])) continue;
      for (int a : t.nodes[k].args) {
        if (!(is_member(a) && !is_broadcast(t.nodes[a - base]))) local_of(a);
      }
    }
    std::vector<Dtype> in_dtypes;
    for (int v : ext) in_dtypes.push_back(info[v].dtype);
    std::vector<FusedStep> steps;
    int nin = static_cast<int>(ext.size());
    for (int k : members) {
      const TapeNode& n = t.nodes[k];
      if (!fusible(n)) continue;
      std::vector<int> largs;
      for (int a : n.args) largs.push_back(local_of(a));
      steps.push_back(make_step(n, largs, info, n.args));
      local[base + k] = nin + static_cast<int>(steps.size()) - 1;
    }
    for (int k : members) removed[k] = k != r && !is_broadcast(t.nodes[k]);
    compiled_at[r] = std::make_shared<Compiled>(t.nodes[r].prim->stream(), in_dtypes, steps);
    compiled_args[r] = ext;
    ++*regions;
  }

  Trace out;
  out.n_inputs = t.n_inputs;
  out.constants = t.constants;
  out.outputs = t.outputs;
  std::vector<int> remap(info.size());
  for (int i = 0; i < base; ++i) remap[i] = i;
  for (int k = 0; k < nn; ++k) {
    if (removed[k]) continue;
    TapeNode n = t.nodes[k];
    auto it = compiled_at.find(k);
    if (it != compiled_at.end()) {
      n.prim = it->second;
      n.args = compiled_args[k];
    }
    for (int& a : n.args) a = remap[a];
    remap[base + k] = base + static_cast<int>(out.nodes.size());
    out.nodes.push_back(std::move(n));
  }
  for (int& o : out.outputs) o = remap[o];
  return out;
}

std::vector<array> replay(const Trace& t, const std::vector<array>& inputs) {
  std::vector<array> values(inputs.begin(), inputs.end());
  values.reserve(t.first_node() + t.nodes.size());
  for (const auto& c : t.constants) values.push_back(c);
  // The outputs of each multi-output node built so far (by primitive and inputs).
  std::map<std::pair<const Primitive*, std::vector<int>>, std::vector<array>> groups;
  for (const auto& n : t.nodes) {
    std::vector<array> args;
    args.reserve(n.args.size());
    for (int a : n.args) args.push_back(values[a]);
    if (!n.siblings) {
      values.push_back(array(n.shape, n.dtype, n.prim, std::move(args)));
      continue;
    }
    auto key = std::make_pair(n.prim.get(), n.args);
    auto it = groups.find(key);
    if (it == groups.end()) {
      it = groups.emplace(key, array::make_arrays(n.siblings->shapes, n.siblings->dtypes, n.prim, std::move(args)))
               .first;
    }
    values.push_back(it->second[n.position]);
  }
  std::vector<array> outs;
  for (int o : t.outputs) outs.push_back(values[o]);
  return outs;
}

// The inputs' dtypes and shapes, and the default stream the trace's ops
// land on (a trace made for the GPU must not serve a CPU call).
std::string signature(const std::vector<array>& inputs) {
  const Stream st = to_stream({});
  std::string key = std::to_string(static_cast<int>(st.device.type)) + "." + std::to_string(st.device.index) + "." +
                    std::to_string(st.index) + "|";
  for (const auto& a : inputs) {
    key += std::to_string(static_cast<int>(a.dtype()));
    key += ':';
    for (int d : a.shape()) key += std::to_string(d) + ",";
    key += ';';
  }
  return key;
}

struct CompiledFn {
  ArrayFn fn;
  std::mutex mutex;
  std::unordered_map<std::string, std::shared_ptr<const Trace>> cache;
};

}  // namespace

ArrayFn compile(ArrayFn fn, bool /*shapeless: see compile.h*/) {
  if (!fn) throw Error("[compile] needs a function (got an empty std::function)");
  auto state = std::make_shared<CompiledFn>();
  state->fn = std::move(fn);
  return [state](const std::vector<array>& inputs) -> std::vector<array> {
    // Under a transformation the function runs as plain ops, which the
    // transformation's rules know (compile of a transformed function still fuses).
    const CompileMode m = mode.load();
    if (m == CompileMode::disabled || KeepGraphScope::active()) return state->fn(inputs);
    const bool simplifying = m != CompileMode::no_simplify, fusing = m != CompileMode::no_fuse;
    // A trace is made for one mode: switching modes traces again.
    std::string key = std::to_string(static_cast<int>(m)) + "#" + signature(inputs);
    std::shared_ptr<const Trace> tr;
    {
      std::lock_guard lock(state->mutex);
      auto it = state->cache.find(key);
      if (it != state->cache.end()) tr = it->second;
    }
    if (!tr) {
      detail::CompileStats stats;
      Trace raw = trace(state->fn, inputs, &stats.traced_nodes);
      Trace simple = simplifying ? simplify(raw, inputs) : std::move(raw);
      stats.simplified_nodes = static_cast<int>(simple.nodes.size());
      Trace done = fusing ? fuse(simple, inputs, &stats.fused_regions) : std::move(simple);
      // Simplified again: broadcasts every region read through are dead now.
      if (simplifying && fusing) done = simplify(done, inputs);
      auto fused = std::make_shared<Trace>(std::move(done));
      stats.final_nodes = static_cast<int>(fused->nodes.size());
      stats.constants = static_cast<int>(fused->constants.size());
      trace_count.fetch_add(1);
      {
        std::lock_guard lock(stats_mutex);
        last_stats = stats;
      }
      std::lock_guard lock(state->mutex);
      state->cache[key] = fused;
      tr = fused;
    }
    return replay(*tr, inputs);
  };
}

void disable_compile() { mode = CompileMode::disabled; }
void enable_compile() { mode = CompileMode::enabled; }
void set_compile_mode(CompileMode m) { mode = m; }

namespace detail {
int64_t compile_trace_count() { return trace_count.load(); }
CompileStats last_compile_stats() {
  std::lock_guard lock(stats_mutex);
  return last_stats;
}
}  // namespace detail

// ---- the primitives' device-independent parts ----

Compiled::Compiled(Stream s, std::vector<Dtype> input_dtypes, std::vector<FusedStep> steps)
    : Primitive(s), input_dtypes_(std::move(input_dtypes)), steps_(std::move(steps)) {}
Compiled::~Compiled() = default;

bool Compiled::is_equivalent(const Primitive& o) const {
  auto* c = dynamic_cast<const Compiled*>(&o);
  return c && c->structure() == structure();
}

std::string Compiled::structure() const {
  std::string s = "in(";
  for (size_t i = 0; i < input_dtypes_.size(); ++i) s += std::string(i ? "," : "") + dtype_name(input_dtypes_[i]);
  s += ")";
  int v = static_cast<int>(input_dtypes_.size());
  for (const auto& st : steps_) {
    s += " v" + std::to_string(v++) + "=";
    switch (st.kind) {
      case FusedStep::Kind::unary: s += unary_op_name(static_cast<UnaryOp>(st.op)); break;
      case FusedStep::Kind::binary: s += binary_op_name(static_cast<BinaryOp>(st.op)); break;
      case FusedStep::Kind::select: s += "where"; break;
      case FusedStep::Kind::cast: s += "cast"; break;
    }
    s += std::string("<") + dtype_name(st.in_dtype) + "->" + dtype_name(st.out_dtype) + ">(";
    for (int k = 0; k < 3 && st.args[k] >= 0; ++k) s += (k ? ",v" : "v") + std::to_string(st.args[k]);
    s += ")";
  }
  return s;
}

void* Compiled::codegen_kernel(const std::string& layouts, const std::function<void*()>& build) {
  std::lock_guard lock(codegen_mutex_);
  auto it = codegen_kernels_.find(layouts);
  if (it != codegen_kernels_.end()) return it->second;
  void* fn = build();
  codegen_kernels_[layouts] = fn;
  return fn;
}

void Placeholder::eval_cpu(const std::vector<array>&, array&) {
  throw Error("[compile] a traced function cannot evaluate its inputs (item, data or eval inside fn)");
}
void Placeholder::eval_gpu(const std::vector<array>&, array&) {
  throw Error("[compile] a traced function cannot evaluate its inputs (item, data or eval inside fn)");
}

}  // namespace kiln
