// The harness runner: the checks of harness.h for one case.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <random>
#include <set>
#include <sstream>

#include "core/primitives.h"
#include "core/primitives_linalg.h"
#include "core/primitives_scaled_mm.h"
#include "harness/harness.h"
#include "test_util.h"

namespace kiln::harness {

std::vector<Case>& registry() {
  static std::vector<Case> cases;
  return cases;
}

Case& add(Case c) {
  registry().push_back(std::move(c));
  return registry().back();
}

void register_all() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_elementwise();
    register_reduce();
    register_shape();
    register_index();
    register_gather();
    register_creation();
    register_composite();
    register_sort();
    register_fast();
    register_attention();
    register_quant();
    register_quant_blocks();
    register_quant_fp();
    register_conv();
    register_linalg();
    register_numpy_extras();
    register_complex();
    register_fp8();
  });
}

std::vector<double> values(const array& a) { return test::to_double(a); }

// Numpy broadcasting of b's values to shape `out` (b's shape right-aligned),
// walking `out` with an odometer (the references run on every case).
std::vector<double> broadcast_values(const array& b, const Shape& out) {
  auto vb = values(b);
  const int nd = static_cast<int>(out.size());
  const Shape& sb = b.shape();
  const int off = nd - static_cast<int>(sb.size());
  std::vector<int64_t> stride(nd, 0);
  for (int64_t d = nd - 1, st = 1; d >= off; --d) {
    stride[d] = sb[d - off] == 1 ? 0 : st;
    st *= sb[d - off];
  }
  std::vector<double> r(test::numel(out));
  std::vector<int> idx(nd, 0);
  int64_t j = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    r[i] = vb[j];
    for (int d = nd - 1; d >= 0; --d) {
      j += stride[d];
      if (++idx[d] < out[d]) break;
      j -= stride[d] * out[d];
      idx[d] = 0;
    }
  }
  return r;
}

Shape broadcast_shape(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    int da = i < a.size() ? a[a.size() - 1 - i] : 1, db = i < b.size() ? b[b.size() - 1 - i] : 1;
    out[out.size() - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

RefFn ref_unary(std::function<double(double)> f) {
  return [f](const Arrays& in) {
    auto v = values(in[0]);
    for (auto& x : v) x = f(x);
    return std::vector<std::vector<double>>{v};
  };
}

RefFn ref_binary(std::function<double(double, double)> f) {
  return [f](const Arrays& in) {
    Shape out = broadcast_shape(in[0].shape(), in[1].shape());
    auto a = broadcast_values(in[0], out), b = broadcast_values(in[1], out);
    for (size_t i = 0; i < a.size(); ++i) a[i] = f(a[i], b[i]);
    return std::vector<std::vector<double>>{a};
  };
}

namespace {

using test::Layout;

// A failed comparison's message, or empty.
std::string compare(const std::vector<double>& got, const std::vector<double>& want, double rtol,
                    const std::vector<double>* slack = nullptr) {
  if (got.size() != want.size()) {
    return "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  }
  double scale = 1.0;
  for (double w : want) {
    if (std::isfinite(w)) scale = std::max(scale, std::fabs(w));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) && std::isnan(got[i])) continue;
    if (std::isinf(want[i]) && got[i] == want[i]) continue;
    // Relative to the element, with an absolute floor at the output's scale
    // (cancellation in sums and differences).
    double err = std::fabs(got[i] - want[i]);
    if (!(err <= rtol * (std::fabs(want[i]) + scale) + (slack ? (*slack)[i] : 0.0))) {
      std::ostringstream os;
      os << "element " << i << ": got " << got[i] << ", want " << want[i] << " (rtol " << rtol << ")";
      return os.str();
    }
  }
  return "";
}

double dtype_rtol(Dtype t) {
  if (!is_floating_point(t)) return 0.0;
  return 2.0 * test::tolerance(t);
}

// Deterministic per case and variant, so the CPU and GPU runs see the same inputs.
std::mt19937_64 case_rng(const Case& c, const std::string& variant) {
  return std::mt19937_64(std::hash<std::string>{}(c.op + "|" + c.name + "|" + variant));
}

array random_values(const Shape& shape, Dtype t, double lo, double hi, std::mt19937_64& g) {
  // Unsigned types take the range shifted to start at 0 (a negative double
  // converted to an unsigned type is undefined).
  if (is_integral(t) && !is_signed(t) && t != bool_ && lo < 0) {
    hi -= lo;
    lo = 0;
  }
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(test::numel(shape));
  for (auto& x : v) {
    x = dist(g);
    if (t == bool_) {
      x = x > (lo + hi) / 2 ? 1.0 : 0.0;
    } else if (is_integral(t)) {
      x = std::floor(x);
    }
  }
  return astype(array(v, shape, float64), t, Device::cpu);
}

Dtype input_dtype(const Input& in, Dtype case_dtype) { return in.dtype ? *in.dtype : case_dtype; }

Arrays make_inputs(const Case& c, Dtype t, Layout layout, std::mt19937_64& g) {
  Arrays xs;
  for (const auto& in : c.inputs) {
    if (in.make) {
      xs.push_back(in.make());
      continue;
    }
    Dtype dt = input_dtype(in, t);
    xs.push_back(test::make_input(in.shape, layout,
                                  [&](const Shape& s) { return random_values(s, dt, in.lo, in.hi, g); }));
  }
  eval(xs);
  return xs;
}

// The same values in float64 (inputs of a fixed dtype are kept).
// The reference precision of a case's inputs: float64, or int64 for ops
// defined on integers only (bitwise ops), where float64 is not an input
// they take.
Arrays as_f64(const Case& c, const Arrays& xs) {
  bool integer_op = std::none_of(c.dtypes.begin(), c.dtypes.end(), [](Dtype t) { return is_floating_point(t); });
  Arrays out;
  for (size_t i = 0; i < xs.size(); ++i) {
    bool keep = c.inputs[i].dtype || c.inputs[i].make;
    out.push_back(keep ? xs[i] : astype(xs[i], integer_op ? int64 : float64, Device::cpu));
  }
  return out;
}

std::string describe_inputs(const Arrays& xs) {
  std::ostringstream os;
  for (size_t i = 0; i < xs.size(); ++i) os << (i ? ", " : "") << test::fmt(xs[i].shape()) << " " << dtype_name(xs[i].dtype());
  return os.str();
}

struct DeviceScope {
  Device saved = default_device();
  explicit DeviceScope(Device d) { set_default_device(d); }
  ~DeviceScope() { set_default_device(saved); }
};

// Runs a check, turning an exception or a message into a failure.
void check(Outcome& o, std::vector<std::string>& failures, const std::string& what,
           const std::function<std::string()>& body) {
  std::string msg;
  try {
    msg = body();
  } catch (const std::exception& e) {
    msg = std::string("threw: ") + e.what();
  }
  // KILN_HARNESS_VERBOSE=1 lists every check as it runs.
  static const bool verbose = std::getenv("KILN_HARNESS_VERBOSE") != nullptr;
  if (verbose) std::printf("%s %s\n", msg.empty() ? "pass" : "FAIL", what.c_str());
  if (msg.empty()) {
    if (o == Outcome::kNotRun) o = Outcome::kPass;
  } else {
    o = Outcome::kFail;
    failures.push_back(what + ": " + msg);
  }
}

std::string check_forward(const Case& c, Dtype t, Layout layout, Arrays* cpu_out, Arrays* inputs) {
  auto g = case_rng(c, std::string(dtype_name(t)) + test::layout_name(layout));
  Arrays xs = make_inputs(c, t, layout, g);
  Arrays x64 = as_f64(c, xs);
  Arrays outs = c.fn(xs);
  std::string where = " [" + describe_inputs(xs) + "]";
  if (layout == Layout::kContiguous && t == c.dtypes.front() && c.primitive != "composite") {
    auto prims = graph_primitives(outs);
    if (std::find(prims.begin(), prims.end(), c.primitive) == prims.end()) {
      std::string found;
      for (const auto& p : prims) found += " " + p;
      return "the graph has no " + c.primitive + " (it has" + found + ")" + where;
    }
  }
  Arrays ref_outs = c.fn(x64);
  std::vector<std::vector<double>> want;
  if (c.ref) {
    want = c.ref(x64);
  } else {
    for (const auto& r : ref_outs) want.push_back(values(r));
  }
  if (outs.size() != want.size()) return "output count" + where;
  for (size_t o = 0; o < outs.size(); ++o) {
    if (outs[o].shape() != ref_outs[o].shape()) {
      return "output " + std::to_string(o) + " shape " + test::fmt(outs[o].shape()) + " != " +
             test::fmt(ref_outs[o].shape()) + where;
    }
    auto err = compare(values(outs[o]), want[o], dtype_rtol(outs[o].dtype()) * c.rtol_scale);
    if (!err.empty()) return "output " + std::to_string(o) + " " + err + where;
  }
  if (cpu_out) *cpu_out = outs;
  if (inputs) *inputs = xs;
  return "";
}

std::string check_gpu(const Case& c, const Arrays& xs, const Arrays& cpu) {
  Arrays gpu;
  {
    DeviceScope scope(Device::gpu);
    gpu = c.fn(xs);
    eval(gpu);
  }
  std::string where = " [" + describe_inputs(xs) + "]";
  std::vector<std::vector<double>> slack;
  if (c.gpu_slack) slack = c.gpu_slack(as_f64(c, xs));
  for (size_t o = 0; o < gpu.size(); ++o) {
    if (gpu[o].shape() != cpu[o].shape() || gpu[o].dtype() != cpu[o].dtype()) {
      return "output " + std::to_string(o) + " shape/dtype differs" + where;
    }
    auto err = compare(values(gpu[o]), values(cpu[o]), 2.0 * dtype_rtol(gpu[o].dtype()),
                       slack.empty() ? nullptr : &slack[o]);
    if (!err.empty()) return "output " + std::to_string(o) + " " + err + where;
  }
  return "";
}

double dot(const array& a, const array& b) {
  auto x = values(a), y = values(b);
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
  return s;
}

// fn as a function of the differentiable inputs only (the others fixed).
OpFn restrict(const Case& c, const Arrays& x) {
  return [&c, x](const Arrays& d) {
    Arrays full = x;
    for (size_t i = 0; i < c.diff.size(); ++i) full[c.diff[i]] = d[i];
    return c.fn(full);
  };
}

Arrays pick(const Arrays& x, const std::vector<int>& idx) {
  Arrays out;
  for (int i : idx) out.push_back(x[i]);
  return out;
}

Arrays axpy(const Arrays& x, double h, const Arrays& v) {
  Arrays out;
  for (size_t i = 0; i < x.size(); ++i) out.push_back(x[i] + array(h, float64) * v[i]);
  return out;
}

constexpr double kStep = 1e-5;

// Central differences of every output of f along v.
Arrays finite_differences(const OpFn& f, const Arrays& x, const Arrays& v) {
  Arrays plus = f(axpy(x, kStep, v)), minus = f(axpy(x, -kStep, v));
  Arrays out;
  for (size_t o = 0; o < plus.size(); ++o) {
    out.push_back(is_floating_point(plus[o].dtype())
                      ? (plus[o] - minus[o]) / array(2 * kStep, float64)
                      : zeros(plus[o].shape(), float64));
  }
  return out;
}

struct Transforms {
  Arrays x;   // all inputs (float64 where the case dtype applies)
  Arrays xd;  // the differentiable ones
  Arrays v;   // a direction per differentiable input
};

Transforms transform_inputs(const Case& c, Layout layout) {
  auto g = case_rng(c, std::string("transforms ") + test::layout_name(layout));
  Transforms t;
  t.x = make_inputs(c, float64, layout, g);
  t.xd = pick(t.x, c.diff);
  for (const auto& d : t.xd) t.v.push_back(random_values(d.shape(), float64, -1.0, 1.0, g));
  return t;
}

std::string check_jvp(const Case& c, const Transforms& t) {
  OpFn f = restrict(c, t.x);
  auto fd = finite_differences(f, t.xd, t.v);
  auto [outs, tans] = jvp(f, t.xd, t.v);
  for (size_t o = 0; o < fd.size(); ++o) {
    if (!is_floating_point(outs[o].dtype())) continue;
    if (tans[o].shape() != outs[o].shape()) return "tangent shape " + test::fmt(tans[o].shape());
    auto err = compare(values(tans[o]), values(fd[o]), c.fd_rtol);
    if (!err.empty()) return "output " + std::to_string(o) + " vs finite differences: " + err;
  }
  return "";
}

std::string check_vjp(const Case& c, const Transforms& t) {
  OpFn f = restrict(c, t.x);
  auto g = case_rng(c, "cotangents");
  Arrays outs = f(t.xd);
  Arrays us;
  for (const auto& o : outs) {
    us.push_back(is_floating_point(o.dtype()) ? random_values(o.shape(), float64, -1.0, 1.0, g) : zeros_like(o));
  }
  auto fd = finite_differences(f, t.xd, t.v);
  auto [vals, cots] = vjp(f, t.xd, us);
  double lhs = 0, rhs = 0, scale = 1.0;
  for (size_t o = 0; o < outs.size(); ++o) {
    if (!is_floating_point(outs[o].dtype())) continue;
    lhs += dot(us[o], fd[o]);
    scale += std::fabs(values(sum(abs(us[o] * fd[o]))).at(0));
  }
  for (size_t i = 0; i < cots.size(); ++i) {
    if (cots[i].shape() != t.xd[i].shape()) {
      return "cotangent " + std::to_string(i) + " shape " + test::fmt(cots[i].shape()) + " != " +
             test::fmt(t.xd[i].shape());
    }
    rhs += dot(cots[i], t.v[i]);
  }
  if (!(std::fabs(lhs - rhs) <= c.fd_rtol * scale)) {
    std::ostringstream os;
    os << "<u, J v> by finite differences " << lhs << " != <vjp(u), v> " << rhs;
    return os.str();
  }
  // The same vjp in float32 agrees with float64 to float32's precision, in
  // the inputs' dtype (a rule that loses precision or the dtype shows here).
  Arrays x32 = t.x;
  for (size_t i = 0; i < x32.size(); ++i) {
    if (!c.inputs[i].dtype && !c.inputs[i].make) x32[i] = astype(t.x[i], float32);
  }
  OpFn f32 = restrict(c, x32);
  Arrays xd32 = pick(x32, c.diff), us32;
  Arrays outs32 = f32(xd32);
  for (size_t o = 0; o < outs32.size(); ++o) us32.push_back(astype(us[o], outs32[o].dtype()));
  auto cots32 = vjp(f32, xd32, us32).second;
  for (size_t i = 0; i < cots32.size(); ++i) {
    if (cots32[i].dtype() != float32) return "float32 cotangent " + std::to_string(i) + " is " + dtype_name(cots32[i].dtype());
    auto err = compare(values(cots32[i]), values(cots[i]), 1e-4);
    if (!err.empty()) return "float32 cotangent " + std::to_string(i) + " vs float64: " + err;
  }
  return "";
}

std::string check_grad2(const Case& c, const Transforms& t) {
  auto g = case_rng(c, "grad2");
  OpFn f = restrict(c, t.x);
  Arrays outs = f(t.xd);
  Arrays w, w2;
  for (const auto& o : outs) w.push_back(random_values(o.shape(), float64, -1.0, 1.0, g));
  for (const auto& d : t.xd) w2.push_back(random_values(d.shape(), float64, -1.0, 1.0, g));
  std::vector<int> argnums(t.xd.size());
  for (size_t i = 0; i < argnums.size(); ++i) argnums[i] = static_cast<int>(i);
  auto scalar_f = [f, w](const Arrays& d) {
    Arrays o = f(d);
    array s = array(0.0, float64);
    for (size_t i = 0; i < o.size(); ++i) s = s + sum(astype(o[i], float64) * w[i]);
    return s;
  };
  auto grad_f = grad(std::function<array(const Arrays&)>(scalar_f), argnums);
  // h(d) = <grad f(d), w2>, a scalar whose gradient needs f's second derivative.
  auto h = [grad_f, w2](const Arrays& d) {
    Arrays gs = grad_f(d);
    array s = array(0.0, float64);
    for (size_t i = 0; i < gs.size(); ++i) s = s + sum(gs[i] * w2[i]);
    return s;
  };
  auto gh = grad(std::function<array(const Arrays&)>(h), argnums)(t.xd);
  double analytic = 0;
  for (size_t i = 0; i < gh.size(); ++i) analytic += dot(gh[i], t.v[i]);
  double fd = (h(axpy(t.xd, kStep, t.v)).item<double>() - h(axpy(t.xd, -kStep, t.v)).item<double>()) / (2 * kStep);
  if (!(std::fabs(analytic - fd) <= c.fd_rtol * (1.0 + std::fabs(fd)))) {
    std::ostringstream os;
    os << "<grad <grad f, w>, v> " << analytic << " != finite differences " << fd;
    return os.str();
  }
  return "";
}

// x with its leading axis moved to the end.
array first_axis_last(const array& x) {
  std::vector<int> perm;
  for (int d = 1; d < x.ndim(); ++d) perm.push_back(d);
  perm.push_back(0);
  return transpose(x, perm);
}

// Slice b of x along `axis`, without that axis.
array unbatch(const array& xb, int axis, int b) {
  Shape start(xb.ndim(), 0), stop = xb.shape();
  start[axis] = b;
  stop[axis] = b + 1;
  return squeeze(slice(xb, start, stop), axis);
}

std::string check_vmap_with(const Case& c, const Arrays& xb, const std::vector<int>& in_axes,
                            const std::vector<int>& out_axes_wanted) {
  Arrays got = vmap(c.fn, in_axes, out_axes_wanted)(xb);
  std::vector<Arrays> per;
  for (int b = 0; b < 3; ++b) {
    Arrays xs;
    for (size_t i = 0; i < xb.size(); ++i) xs.push_back(in_axes[i] < 0 ? xb[i] : unbatch(xb[i], in_axes[i], b));
    per.push_back(c.fn(xs));
  }
  for (size_t o = 0; o < got.size(); ++o) {
    Arrays slices;
    for (int b = 0; b < 3; ++b) slices.push_back(per[b][o]);
    array want = stack(slices, out_axes_wanted.empty() ? 0 : out_axes_wanted[o]);
    if (got[o].shape() != want.shape() || got[o].dtype() != want.dtype()) {
      return "output " + std::to_string(o) + " " + test::fmt(got[o].shape()) + " " + dtype_name(got[o].dtype()) +
             " != " + test::fmt(want.shape()) + " " + dtype_name(want.dtype());
    }
    auto err = compare(values(got[o]), values(want), 1e-12);
    if (!err.empty()) return "output " + std::to_string(o) + " " + err;
  }
  return "";
}

std::string check_vmap(const Case& c) {
  auto g = case_rng(c, "vmap");
  // A batch of 3 distinct inputs of each kind (int64 for integer-only ops).
  bool integer_op = std::none_of(c.dtypes.begin(), c.dtypes.end(), [](Dtype t) { return is_floating_point(t); });
  Arrays xb;
  for (const auto& in : c.inputs) {
    if (in.make) {
      xb.push_back(stack({in.make(), in.make(), in.make()}, 0));
      continue;
    }
    Shape s = in.shape;
    s.insert(s.begin(), 3);
    xb.push_back(random_values(s, input_dtype(in, integer_op ? int64 : float64), in.lo, in.hi, g));
  }
  auto err = check_vmap_with(c, xb, std::vector<int>(xb.size(), 0), {});
  if (!err.empty()) return "in_axes 0: " + err;
  // The same with batched inputs that are strided views.
  Arrays xs_strided;
  for (size_t i = 0; i < xb.size(); ++i) {
    xs_strided.push_back(c.inputs[i].make ? xb[i] : test::make_input(xb[i].shape(), Layout::kStrided, [&](const Shape& s) {
      return random_values(s, xb[i].dtype(), c.inputs[i].lo, c.inputs[i].hi, g);
    }));
  }
  err = check_vmap_with(c, xs_strided, std::vector<int>(xb.size(), 0), {});
  if (!err.empty()) return "in_axes 0, strided inputs: " + err;
  // The first input batched on axis 1 (when it has an axis), the others unbatched.
  Arrays xb2 = xb;
  std::vector<int> axes(xb.size(), -1);
  axes[0] = xb[0].ndim() >= 2 ? 1 : 0;
  if (axes[0] == 1) xb2[0] = swapaxes(xb[0], 0, 1);
  for (size_t i = 1; i < xb.size(); ++i) xb2[i] = unbatch(xb[i], 0, 0);
  std::vector<int> out_axes;
  Arrays probe;
  {
    Arrays xs;
    for (size_t i = 0; i < xb2.size(); ++i) xs.push_back(axes[i] < 0 ? xb2[i] : unbatch(xb2[i], axes[i], 0));
    probe = c.fn(xs);
  }
  for (const auto& o : probe) out_axes.push_back(o.ndim() >= 1 ? 1 : 0);
  err = check_vmap_with(c, xb2, axes, out_axes);
  if (!err.empty()) return "in_axis " + std::to_string(axes[0]) + ", out_axis 1, others unbatched: " + err;
  // Every input batched on its last axis.
  if (xb[0].ndim() >= 3) {
    Arrays xl;
    std::vector<int> last;
    for (const auto& x : xb) {
      last.push_back(x.ndim() - 1);
      xl.push_back(first_axis_last(x));
    }
    err = check_vmap_with(c, xl, last, {});
    if (!err.empty()) return "in_axes last: " + err;
  }
  if (xb.size() < 2) return "";
  // Each input alone batched (indices, values, a second operand), the others not.
  for (size_t k = 0; k < xb.size(); ++k) {
    Arrays xk;
    std::vector<int> axes_k(xb.size(), -1);
    for (size_t i = 0; i < xb.size(); ++i) xk.push_back(i == k ? xb[i] : unbatch(xb[i], 0, 0));
    axes_k[k] = 0;
    err = check_vmap_with(c, xk, axes_k, {});
    if (!err.empty()) return "only input " + std::to_string(k) + " batched: " + err;
  }
  return "";
}

}  // namespace

Result run_case(const Case& c, const RunOptions& opts) {
  Result r;
  const bool gpu = opts.gpu && is_available(Device::gpu);
  for (Dtype t : c.dtypes) {
    for (Layout layout : test::kLayouts) {
      if (!c.layouts && layout != Layout::kContiguous) continue;
      std::string what = std::string("forward ") + dtype_name(t) + " " + test::layout_name(layout);
      Arrays cpu, xs;
      if (opts.cpu || gpu) check(r.cpu, r.failures, "cpu " + what, [&] { return check_forward(c, t, layout, &cpu, &xs); });
      if (gpu && !cpu.empty()) check(r.gpu, r.failures, "gpu " + what, [&] { return check_gpu(c, xs, cpu); });
    }
  }
  if (!opts.cpu) r.cpu = Outcome::kNotRun;
  if (!opts.transforms) return r;
  DeviceScope device(opts.transform_device);
  // Derivatives at contiguous inputs and at strided views (the cotangent of
  // a view has the view's logical shape).
  for (Layout layout : {Layout::kContiguous, Layout::kStrided}) {
    if (c.diff.empty() || (!c.layouts && layout != Layout::kContiguous)) break;
    const std::string where = std::string(" (") + test::layout_name(layout) + " inputs)";
    Transforms t;
    check(r.vjp, r.failures, "vjp" + where, [&] {
      t = transform_inputs(c, layout);
      return check_vjp(c, t);
    });
    if (c.jvp && !t.x.empty()) check(r.jvp, r.failures, "jvp" + where, [&] { return check_jvp(c, t); });
    if (c.grad2 && !t.x.empty()) check(r.grad2, r.failures, "grad of grad" + where, [&] { return check_grad2(c, t); });
  }
  if (c.vmap && !c.inputs.empty()) check(r.vmap, r.failures, "vmap", [&] { return check_vmap(c); });
  return r;
}

std::vector<std::string> graph_primitives(const Arrays& outputs) {
  std::vector<std::string> names;
  std::vector<array> stack_(outputs.begin(), outputs.end());
  std::vector<uintptr_t> seen;
  while (!stack_.empty()) {
    array a = stack_.back();
    stack_.pop_back();
    if (std::find(seen.begin(), seen.end(), a.id()) != seen.end() || !a.has_primitive()) continue;
    seen.push_back(a.id());
    Primitive* p = a.primitive().get();
    std::string n = p->name();
    if (auto* u = dynamic_cast<Unary*>(p)) n += std::string(":") + unary_op_name(u->op());
    if (auto* b = dynamic_cast<Binary*>(p)) n += std::string(":") + binary_op_name(b->op());
    if (auto* red = dynamic_cast<Reduce*>(p)) n += std::string(":") + reduce_op_name(red->op());
    names.push_back(n);
    for (const auto& in : a.inputs()) stack_.push_back(in);
  }
  return names;
}

std::vector<std::string> required_primitives() {
  std::vector<std::string> out;
#define KILN_HARNESS_NAME(NAME) out.push_back(#NAME);
  KILN_FOR_EACH_PRIMITIVE(KILN_HARNESS_NAME)
  KILN_FOR_EACH_MULTI_OUTPUT_PRIMITIVE(KILN_HARNESS_NAME)
  KILN_FOR_EACH_LINALG_PRIMITIVE(KILN_HARNESS_NAME)
  KILN_FOR_EACH_FP8_PRIMITIVE(KILN_HARNESS_NAME)
#undef KILN_HARNESS_NAME
  // Nodes the ops build for GPU streams only, never for the CPU graphs the
  // harness checks: tests/cuda/test_cuda_quant_blocks.cpp compares them
  // with the ops they stand for, bit for bit.
  const std::set<std::string> gpu_only = {"FusedBlockQMV"};
  std::vector<std::string> expanded;
  for (const auto& n : out) {
    if (gpu_only.count(n)) continue;
    if (n == "Unary") {
      for (int i = 0; i < kUnaryOpCount; ++i) expanded.push_back(n + ":" + unary_op_name(static_cast<UnaryOp>(i)));
    } else if (n == "Binary") {
      for (int i = 0; i < kBinaryOpCount; ++i) expanded.push_back(n + ":" + binary_op_name(static_cast<BinaryOp>(i)));
    } else if (n == "Reduce") {
      for (int i = 0; i < kReduceOpCount; ++i) expanded.push_back(n + ":" + reduce_op_name(static_cast<ReduceOp>(i)));
    } else {
      expanded.push_back(n);
    }
  }
  return expanded;
}

std::string coverage_table(const std::vector<Case>& cases, const std::vector<Result>& results) {
  struct Row {
    std::string op, prim;
    int cases = 0;
    int pass[6] = {}, run[6] = {};
  };
  std::vector<Row> rows;
  for (size_t i = 0; i < cases.size(); ++i) {
    auto it = std::find_if(rows.begin(), rows.end(),
                           [&](const Row& r) { return r.op == cases[i].op && r.prim == cases[i].primitive; });
    if (it == rows.end()) {
      rows.push_back(Row{cases[i].op, cases[i].primitive});
      it = rows.end() - 1;
    }
    ++it->cases;
    const Result& r = results[i];
    Outcome os[6] = {r.cpu, r.gpu, r.vjp, r.jvp, r.vmap, r.grad2};
    for (int k = 0; k < 6; ++k) {
      if (os[k] != Outcome::kNotRun) ++it->run[k];
      if (os[k] == Outcome::kPass) ++it->pass[k];
    }
  }
  std::ostringstream os;
  auto cell = [](int pass, int run) { return run == 0 ? std::string("-") : std::to_string(pass) + "/" + std::to_string(run); };
  char line[256];
  std::snprintf(line, sizeof line, "%-18s %-26s %5s %6s %6s %6s %6s %6s %6s\n", "op", "primitive", "cases", "cpu", "gpu",
                "vjp", "jvp", "vmap", "grad2");
  os << line;
  for (const auto& r : rows) {
    std::snprintf(line, sizeof line, "%-18s %-26s %5d %6s %6s %6s %6s %6s %6s\n", r.op.c_str(), r.prim.c_str(), r.cases,
                  cell(r.pass[0], r.run[0]).c_str(), cell(r.pass[1], r.run[1]).c_str(), cell(r.pass[2], r.run[2]).c_str(),
                  cell(r.pass[3], r.run[3]).c_str(), cell(r.pass[4], r.run[4]).c_str(), cell(r.pass[5], r.run[5]).c_str());
    os << line;
  }
  return os.str();
}

}  // namespace kiln::harness
