// Harness cases of the reductions (Reduce, ArgReduce, and mean / var /
// logsumexp built on them), Softmax and Matmul.
#include <algorithm>
#include <cmath>
#include <limits>

#include "harness/harness.h"
#include "test_util.h"

namespace kiln::harness {
namespace {

using Group = std::vector<double>;
using Fold = std::function<double(const Group&)>;

// Folds each group of x over `axes` (empty: every axis); row-major over
// the kept axes.
std::vector<double> reduce_ref(const array& x, std::vector<int> axes, const Fold& fold) {
  const Shape& s = x.shape();
  const int nd = static_cast<int>(s.size());
  if (axes.empty()) {
    for (int d = 0; d < nd; ++d) axes.push_back(d);
  }
  for (auto& a : axes) a = a < 0 ? a + nd : a;
  Shape out_shape = s;
  for (int a : axes) out_shape[a] = 1;
  auto v = values(x);
  std::vector<Group> groups(test::numel(out_shape));
  // The group of each element: its index with the reduced axes zeroed.
  std::vector<int64_t> gstride(nd, 0);
  for (int64_t d = nd - 1, st = 1; d >= 0; --d) {
    gstride[d] = out_shape[d] == 1 ? 0 : st;
    st *= out_shape[d];
  }
  std::vector<int> idx(nd, 0);
  int64_t j = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    groups[j].push_back(v[i]);
    for (int d = nd - 1; d >= 0; --d) {
      j += gstride[d];
      if (++idx[d] < s[d]) break;
      j -= gstride[d] * s[d];
      idx[d] = 0;
    }
  }
  std::vector<double> out;
  for (const auto& g : groups) out.push_back(fold(g));
  return out;
}

double fold_sum(const Group& g) {
  double s = 0;
  for (double x : g) s += x;
  return s;
}
double fold_mean(const Group& g) { return fold_sum(g) / static_cast<double>(g.size()); }
double fold_var(const Group& g) {
  double m = fold_mean(g), s = 0;
  for (double x : g) s += (x - m) * (x - m);
  return s / static_cast<double>(g.size());
}
double fold_std(const Group& g) { return std::sqrt(fold_var(g)); }
double fold_prod(const Group& g) {
  double p = 1;
  for (double x : g) p *= x;
  return p;
}
double fold_max(const Group& g) { return *std::max_element(g.begin(), g.end()); }
double fold_min(const Group& g) { return *std::min_element(g.begin(), g.end()); }
double fold_all(const Group& g) { return std::all_of(g.begin(), g.end(), [](double x) { return x != 0; }); }
double fold_any(const Group& g) { return std::any_of(g.begin(), g.end(), [](double x) { return x != 0; }); }
double fold_lse(const Group& g) {
  double m = fold_max(g), s = 0;
  for (double x : g) s += std::exp(x - m);
  return m + std::log(s);
}
double fold_argmax(const Group& g) { return static_cast<double>(std::max_element(g.begin(), g.end()) - g.begin()); }
double fold_argmin(const Group& g) { return static_cast<double>(std::min_element(g.begin(), g.end()) - g.begin()); }

using AxesFn = array (*)(const array&, const std::vector<int>&, bool, StreamOrDevice);
using AllFn = array (*)(const array&, bool, StreamOrDevice);

struct ReduceSpec {
  const char* name;
  const char* primitive;
  AxesFn axes_fn;
  AllFn all_fn;
  Fold fold;
  double lo, hi;
  bool diff;
  bool empty_ok;  // defined on an empty axis
  std::vector<Dtype> dtypes;
};

array var0(const array& a, const std::vector<int>& axes, bool keepdims, StreamOrDevice s) {
  return var(a, axes, keepdims, 0, s);
}
array var0_all(const array& a, bool keepdims, StreamOrDevice s) { return var(a, keepdims, 0, s); }
array std0(const array& a, const std::vector<int>& axes, bool keepdims, StreamOrDevice s) {
  return kiln::std(a, axes, keepdims, 0, s);
}
array std0_all(const array& a, bool keepdims, StreamOrDevice s) { return kiln::std(a, keepdims, 0, s); }

const std::vector<Dtype> kFloats = {float32, float16, bfloat16, float64};
const std::vector<Dtype> kFloatsInt = {float32, float16, bfloat16, float64, int32};
const std::vector<Dtype> kEvery = {float32, float16, bfloat16, float64, int32, uint8, int8,
                                   uint32,  int64,   uint16,   int16,   uint64};

const ReduceSpec kReduce[] = {
    {"sum", "Reduce:sum", sum, sum, fold_sum, -2, 2, true, true, kFloatsInt},
    {"sum", "Reduce:sum", sum, sum, fold_sum, 0, 1, false, true, {bool_}},
    {"prod", "Reduce:prod", prod, prod, fold_prod, 0.5, 1.5, true, true, kFloats},
    {"prod", "Reduce:prod", prod, prod, fold_prod, -3, 3, false, true, {int32}},
    {"max", "Reduce:max", max, max, fold_max, -2, 2, true, false, kEvery},
    {"min", "Reduce:min", min, min, fold_min, -2, 2, true, false, kEvery},
    {"all", "Reduce:all", all, all, fold_all, 0, 1, false, true, {bool_, float32}},
    {"any", "Reduce:any", any, any, fold_any, 0, 1, false, true, {bool_, float32}},
    {"mean", "Reduce:sum", mean, mean, fold_mean, -2, 2, true, false, kFloatsInt},
    {"var", "Reduce:sum", var0, var0_all, fold_var, -2, 2, true, false, kFloats},
    {"std", "Reduce:sum", std0, std0_all, fold_std, -2, 2, true, false, kFloats},
    {"logsumexp", "Reduce:max", logsumexp, logsumexp, fold_lse, -3, 3, true, false, kFloats},
};

struct AxesCase {
  Shape shape;
  std::vector<int> axes;  // empty: the overload over every axis
  bool keepdims;
};
const AxesCase kAxes[] = {
    {{3, 5}, {1}, false}, {{2, 3, 4}, {0, 2}, true}, {{2, 3, 4}, {}, false}, {{7}, {-1}, false}, {{5, 1, 3}, {1}, false},
    {{37, 129}, {1}, false}, {{37, 129}, {0}, false}};
// How many values each output reduces.
int64_t reduced_count(const AxesCase& ac) {
  if (ac.axes.empty()) return test::numel(ac.shape);
  int64_t n = 1;
  for (int a : ac.axes) n *= ac.shape[a < 0 ? a + static_cast<int>(ac.shape.size()) : a];
  return n;
}
// Reductions of and to empty arrays (for the ops with an identity).
const AxesCase kEmpty[] = {{{0, 3}, {1}, false}, {{0, 3}, {0}, true}};

// numpy matmul on values: 1-d operands promoted, batch axes broadcast.
std::vector<std::vector<double>> matmul_ref(const Arrays& x) {
  Shape sa = x[0].shape(), sb = x[1].shape();
  if (sa.size() == 1) sa.insert(sa.begin(), 1);
  if (sb.size() == 1) sb.push_back(1);
  const int m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
  Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  Shape batch = broadcast_shape(ba, bb);
  Shape fa = batch, fb = batch;
  fa.insert(fa.end(), {m, k});
  fb.insert(fb.end(), {k, n});
  auto va = broadcast_values(reshape(x[0], sa), fa), vb = broadcast_values(reshape(x[1], sb), fb);
  const int64_t nb = test::numel(batch);
  std::vector<double> out(nb * m * n, 0.0);
  for (int64_t b = 0; b < nb; ++b) {
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        double s = 0;
        for (int l = 0; l < k; ++l) s += va[(b * m + i) * k + l] * vb[(b * k + l) * n + j];
        out[(b * m + i) * n + j] = s;
      }
    }
  }
  return {out};
}

// Softmax over `axes` (empty: all) of x.
std::vector<double> softmax_ref(const array& x, const std::vector<int>& axes) {
  const int nd = x.ndim();
  Shape s = x.shape();
  auto lse = reduce_ref(x, axes, fold_lse);
  Shape kept = s;
  if (axes.empty()) {
    kept.assign(nd, 1);
  } else {
    for (int a : axes) kept[a < 0 ? a + nd : a] = 1;
  }
  auto b = broadcast_values(array(lse, kept, float64), s);
  auto v = values(x);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::exp(v[i] - b[i]);
  return v;
}

}  // namespace

void register_reduce() {
  for (const auto& r : kReduce) {
    std::vector<AxesCase> cases(std::begin(kAxes), std::end(kAxes));
    if (r.empty_ok) cases.insert(cases.end(), std::begin(kEmpty), std::end(kEmpty));
    for (const auto& ac : cases) {
      // A product of 37 or more values leaves the range of float16 and int32.
      if (std::string(r.name) == "prod" && test::numel(ac.shape) > 100) continue;
      Case c;
      c.op = r.name;
      c.primitive = r.primitive;
      c.name = test::fmt(ac.shape) + " axes " + (ac.axes.empty() ? "all" : test::fmt(ac.axes)) +
               (ac.keepdims ? " keepdims" : "") + (r.diff ? "" : " (zero derivative)");
      AxesFn f = r.axes_fn;
      AllFn fa = r.all_fn;
      auto axes = ac.axes;
      bool keep = ac.keepdims;
      c.fn = [f, fa, axes, keep](const Arrays& x) { return Arrays{axes.empty() ? fa(x[0], keep, {}) : f(x[0], axes, keep, {})}; };
      Fold fold = r.fold;
      c.ref = [fold, axes](const Arrays& x) { return std::vector<std::vector<double>>{reduce_ref(x[0], axes, fold)}; };
      c.inputs = {in(ac.shape, r.lo, r.hi)};
      c.dtypes = r.dtypes;
      c.diff = {0};
      c.grad2 = r.diff;
      // The std of one value is 0, where sqrt has no derivative (nan, as MLX's).
      if (std::string(r.name) == "std" && reduced_count(ac) == 1) {
        c.diff = {};
        c.grad2 = false;
        c.name += " (no derivative: one value)";
      }
      // Sums of bfloat16 round each partial to 8 bits.
      c.rtol_scale = 2.0;
      add(std::move(c));
    }
  }

  // argmax / argmin: along an axis and flattened; int32 inputs have ties
  // (the first index wins).
  for (bool is_max : {true, false}) {
    for (const auto& ac : {AxesCase{{3, 5}, {1}, false}, AxesCase{{2, 3, 4}, {0}, true}, AxesCase{{2, 3, 4}, {}, false},
                           AxesCase{{7}, {0}, false}}) {
      Case c;
      c.op = is_max ? "argmax" : "argmin";
      c.primitive = "ArgReduce";
      c.name = test::fmt(ac.shape) + " axis " + (ac.axes.empty() ? "none" : std::to_string(ac.axes[0]));
      auto axes = ac.axes;
      bool keep = ac.keepdims;
      c.fn = [is_max, axes, keep](const Arrays& x) {
        if (axes.empty()) return Arrays{is_max ? argmax(x[0], keep) : argmin(x[0], keep)};
        return Arrays{is_max ? argmax(x[0], axes[0], keep) : argmin(x[0], axes[0], keep)};
      };
      c.ref = [is_max, axes](const Arrays& x) {
        array flat = axes.empty() ? reshape(x[0], {-1}) : x[0];
        return std::vector<std::vector<double>>{
            reduce_ref(flat, axes.empty() ? std::vector<int>{0} : axes, is_max ? fold_argmax : fold_argmin)};
      };
      c.inputs = {in(ac.shape, -3, 3)};
      c.dtypes = {float32, float16, float64, int32, uint8, int64, int16, uint64};
      c.diff = {0};  // a zero derivative
      add(std::move(c));
    }
  }

  // softmax over the last axis, a list of axes, every axis.
  for (const auto& ac : {AxesCase{{3, 5}, {-1}, false}, AxesCase{{2, 3, 4}, {0, 2}, false},
                         AxesCase{{2, 3, 4}, {}, false}, AxesCase{{7}, {0}, false}, AxesCase{{9, 300}, {1}, false}}) {
    auto axes = ac.axes;
    // The fused kernel serves the last axis; other axes are composed.
    const bool last = axes.size() == 1 && (axes[0] == -1 || axes[0] == ac.shape.size() - 1);
    add({.op = "softmax",
         .primitive = last ? "Softmax" : "Reduce:sum",
         .name = test::fmt(ac.shape) + " axes " + (axes.empty() ? "all" : test::fmt(axes)),
         .fn = [axes](const Arrays& x) { return Arrays{axes.empty() ? softmax(x[0]) : softmax(x[0], axes)}; },
         .inputs = {in(ac.shape, -3, 3)},
         .ref = [axes](const Arrays& x) { return std::vector<std::vector<double>>{softmax_ref(x[0], axes)}; },
         .diff = {0},
         .grad2 = true});
  }

  // matmul: 2-d, batched, broadcast batch, 1-d on either side, empty K.
  const std::pair<Shape, Shape> kMatmul[] = {{{3, 4}, {4, 5}},       {{2, 3, 4}, {2, 4, 5}}, {{2, 1, 3, 4}, {3, 4, 2}},
                                             {{4}, {4, 5}},          {{3, 4}, {4}},          {{5}, {5}},
                                             {{2, 3, 0}, {0, 2}},    {{1, 7}, {7, 1}},       {{33, 65}, {65, 31}},
                                             {{3, 17, 40}, {40, 9}}};
  // One input on both sides: the cotangents of both uses add up.
  add({.op = "matmul",
       .primitive = "Matmul",
       .name = "x @ x.T",
       .fn = [](const Arrays& x) { return Arrays{matmul(x[0], transpose(x[0]))}; },
       .inputs = {in({3, 5})},
       .diff = {0},
       .grad2 = true});
  for (const auto& [sa, sb] : kMatmul) {
    add({.op = "matmul",
         .primitive = "Matmul",
         .name = test::fmt(sa) + "x" + test::fmt(sb),
         .fn = [](const Arrays& x) { return Arrays{matmul(x[0], x[1])}; },
         .inputs = {in(sa), in(sb)},
         .ref = matmul_ref,
         .diff = {0, 1},
         .grad2 = true,
         .rtol_scale = 2.0});
  }
}

}  // namespace kiln::harness
