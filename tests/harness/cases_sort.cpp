// Harness cases of sorting, selection and scans (Sort, ArgSort, Partition,
// ArgPartition, SearchSorted, Scan), checked against loops in double; and
// of unstack.
// A partition's order within each side is unspecified (the CPU and the GPU
// differ), so partition cases check a function of it that is not: each
// side sorted, around the kth element.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "harness/harness.h"
#include "test_util.h"

namespace kiln::harness {
namespace {

const std::vector<Dtype> kFloat = {float32, float16, bfloat16, float64};
const std::vector<Dtype> kData = {float32, float16, bfloat16, float64, int32, uint8, int64, int8, int16, uint16, uint64};

using Row = std::vector<double>;

// Applies f to every row of x (shape s) along axis; rows keep their length.
std::vector<double> along(const std::vector<double>& x, const Shape& s, int axis, const std::function<Row(const Row&)>& f) {
  int64_t outer = 1, inner = 1, n = s.empty() ? 1 : s[axis];
  for (int d = 0; d < axis; ++d) outer *= s[d];
  for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  std::vector<double> out(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      Row r(n);
      for (int64_t k = 0; k < n; ++k) r[k] = x[(o * n + k) * inner + i];
      Row y = f(r);
      for (int64_t k = 0; k < n; ++k) out[(o * n + k) * inner + i] = y[k];
    }
  return out;
}

bool nan_last_less(double a, double b) { return a < b || (std::isnan(b) && !std::isnan(a)); }

Row stable_order(const Row& r) {
  Row idx(r.size());
  std::iota(idx.begin(), idx.end(), 0.0);
  std::stable_sort(idx.begin(), idx.end(), [&](double i, double j) { return nan_last_less(r[i], r[j]); });
  return idx;
}
Row sorted(const Row& r) {
  Row y = r;
  std::stable_sort(y.begin(), y.end(), nan_last_less);
  return y;
}

// Cumulative fold in double; `ident` starts exclusive scans.
Row scan_row(const Row& r, bool reverse, bool inclusive, double ident, const std::function<double(double, double)>& f) {
  int64_t n = static_cast<int64_t>(r.size());
  Row y(n);
  double acc = ident;
  for (int64_t k = 0; k < n; ++k) {
    int64_t i = reverse ? n - 1 - k : k;
    if (inclusive) {
      acc = f(acc, r[i]);
      y[i] = acc;
    } else {
      y[i] = acc;
      acc = f(acc, r[i]);
    }
  }
  return y;
}

int norm(int axis, size_t nd) { return axis < 0 ? axis + static_cast<int>(nd) : axis; }

// partition's output with each side sorted: equal to a sort when valid.
array sides_sorted(const array& p, int kth, int axis) {
  int ax = norm(axis, p.ndim());
  int n = p.shape(ax);
  int k = kth < 0 ? kth + n : kth;
  Shape start(p.ndim(), 0), stop = p.shape();
  stop[ax] = k;
  array left = slice(p, start, stop);
  start[ax] = k;
  stop[ax] = k + 1;
  array mid = slice(p, start, stop);
  start[ax] = k + 1;
  stop[ax] = n;
  array right = slice(p, start, stop);
  return concatenate({sort(left, ax), mid, sort(right, ax)}, ax);
}

struct ScanKind {
  const char* op;
  double ident;
  std::function<double(double, double)> f;
  std::function<array(const array&, int, bool, bool)> fn;
  std::function<array(const array&, bool, bool)> flat;
  double lo, hi;
  std::vector<Dtype> dtypes;
};

}  // namespace

void register_sort() {
  struct AxisCase {
    Shape shape;
    int axis;  // -100: flattened
  };
  const std::vector<AxisCase> axis_cases = {{{7}, 0}, {{4, 9}, 1}, {{4, 9}, 0}, {{3, 4, 5}, -2}, {{2, 3, 4}, -100},
                                            {{1, 33}, -1}, {{5, 0}, 1}};
  for (const auto& t : axis_cases) {
    const bool flat = t.axis == -100;
    const int axis = flat ? 0 : norm(t.axis, t.shape.size());
    const std::string nm = test::fmt(t.shape) + (flat ? " flattened" : " axis " + std::to_string(t.axis));
    auto ref_of = [flat, axis](const std::function<Row(const Row&)>& f) {
      return [flat, axis, f](const Arrays& x) {
        Shape s = flat ? Shape{static_cast<int>(x[0].size())} : x[0].shape();
        return std::vector<std::vector<double>>{along(values(x[0]), s, axis, f)};
      };
    };
    add({.op = "sort",
         .primitive = "Sort",
         .name = nm,
         .fn = [flat, ax = t.axis](const Arrays& x) { return Arrays{flat ? sort(x[0]) : sort(x[0], ax)}; },
         .inputs = {in(t.shape)},
         .dtypes = kData,
         .ref = ref_of(sorted),
         .diff = {0},
         .grad2 = true});
    add({.op = "argsort",
         .primitive = "ArgSort",
         .name = nm,
         .fn = [flat, ax = t.axis](const Arrays& x) { return Arrays{flat ? argsort(x[0]) : argsort(x[0], ax)}; },
         .inputs = {in(t.shape)},
         .dtypes = kData,
         .ref = ref_of(stable_order)});
    if (test::numel(t.shape) == 0) continue;
    const int n = flat ? static_cast<int>(test::numel(t.shape)) : t.shape[axis];
    for (int kth : {0, n / 2, -1}) {
      const std::string pn = nm + " kth " + std::to_string(kth);
      add({.op = "partition",
           .primitive = "Partition",
           .name = pn,
           .fn = [flat, ax = t.axis, kth](const Arrays& x) {
             array p = flat ? partition(x[0], kth) : partition(x[0], kth, ax);
             return Arrays{sides_sorted(p, kth, flat ? 0 : ax)};
           },
           .inputs = {in(t.shape)},
           .dtypes = kData,
           .ref = ref_of(sorted),
           .diff = {0}});
      add({.op = "argpartition",
           .primitive = "ArgPartition",
           .name = pn,
           .fn = [flat, ax = t.axis, kth](const Arrays& x) {
             array v = flat ? reshape(x[0], {-1}) : x[0];
             int a = flat ? 0 : ax;
             array p = take_along_axis(v, argpartition(v, kth, a), a);
             return Arrays{sides_sorted(p, kth, a)};
           },
           .inputs = {in(t.shape)},
           .dtypes = kData,
           .ref = ref_of(sorted),
           .diff = {0}});
    }
    for (int k : {1, n / 2, n}) {
      // topk's order is unspecified (MLX): compare the sorted top k.
      add({.op = "topk",
           .primitive = k == n ? "composite" : "Partition",
           .name = nm + " k " + std::to_string(k),
           .fn = [flat, ax = t.axis, k](const Arrays& x) {
             array top = flat ? topk(x[0], k) : topk(x[0], k, ax);
             return Arrays{sort(top, flat ? 0 : ax)};
           },
           .inputs = {in(t.shape)},
           .dtypes = kData,
           .ref = [flat, axis, k](const Arrays& x) {
             Shape s = flat ? Shape{static_cast<int>(x[0].size())} : x[0].shape();
             auto full = along(values(x[0]), s, axis, sorted);
             // The last k of each sorted row.
             int64_t outer = 1, inner = 1, m = s[axis];
             for (int d = 0; d < axis; ++d) outer *= s[d];
             for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
             std::vector<double> out;
             for (int64_t o = 0; o < outer; ++o)
               for (int64_t j = m - k; j < m; ++j)
                 for (int64_t i = 0; i < inner; ++i) out.push_back(full[(o * m + j) * inner + i]);
             return std::vector<std::vector<double>>{out};
           },
           .diff = {0}});
    }
  }

  // searchsorted on a sequence sorted inside the function (the harness
  // draws random inputs); the sequence cannot be vmapped (MLX), so vmap is
  // checked over the values in test_sort.cpp.
  for (const char* side : {"left", "right"}) {
    for (const auto& [seq, vals] : {std::pair<Shape, Shape>{{9}, {4, 5}}, {{1}, {3}}, {{40}, {7}}}) {
      add({.op = "searchsorted",
           .primitive = "SearchSorted",
           .name = std::string(side) + " " + test::fmt(seq) + " values " + test::fmt(vals),
           .fn = [side](const Arrays& x) { return Arrays{searchsorted(sort(x[0]), x[1], side)}; },
           .inputs = {in(seq), in(vals)},
           .dtypes = kData,
           .ref = [right = std::string(side) == "right"](const Arrays& x) {
             Row s = sorted(values(x[0]));
             std::vector<double> out;
             for (double v : values(x[1])) {
               auto it = right ? std::upper_bound(s.begin(), s.end(), v, nan_last_less)
                               : std::lower_bound(s.begin(), s.end(), v, nan_last_less);
               out.push_back(static_cast<double>(it - s.begin()));
             }
             return std::vector<std::vector<double>>{out};
           },
           .vmap = false});
    }
  }

  const double inf = std::numeric_limits<double>::infinity();
  auto lae = [](double a, double b) {
    double hi = std::max(a, b), lo = std::min(a, b);
    return std::isinf(hi) ? hi : hi + std::log1p(std::exp(lo - hi));
  };
  const std::vector<ScanKind> kinds = {
      {"cumsum", 0.0, [](double a, double b) { return a + b; },
       [](const array& x, int ax, bool r, bool i) { return cumsum(x, ax, r, i); },
       [](const array& x, bool r, bool i) { return cumsum(x, r, i); }, -2, 2, kData},
      {"cumprod", 1.0, [](double a, double b) { return a * b; },
       [](const array& x, int ax, bool r, bool i) { return cumprod(x, ax, r, i); },
       [](const array& x, bool r, bool i) { return cumprod(x, r, i); }, -2, 2, kData},
      {"cummax", -inf, [](double a, double b) { return std::max(a, b); },
       [](const array& x, int ax, bool r, bool i) { return cummax(x, ax, r, i); },
       [](const array& x, bool r, bool i) { return cummax(x, r, i); }, -2, 2, kData},
      {"cummin", inf, [](double a, double b) { return std::min(a, b); },
       [](const array& x, int ax, bool r, bool i) { return cummin(x, ax, r, i); },
       [](const array& x, bool r, bool i) { return cummin(x, r, i); }, -2, 2, kData},
      {"logcumsumexp", -inf, lae, [](const array& x, int ax, bool r, bool i) { return logcumsumexp(x, ax, r, i); },
       [](const array& x, bool r, bool i) { return logcumsumexp(x, r, i); }, -3, 3, kFloat},
  };
  struct ScanCase {
    Shape shape;
    int axis;  // -100: flattened
    bool reverse, inclusive;
  };
  const std::vector<ScanCase> scan_cases = {{{7}, 0, false, true},        {{4, 6}, 1, true, true},
                                            {{4, 6}, 0, false, false},    {{3, 4, 5}, -2, true, false},
                                            {{2, 3, 4}, -100, false, true}, {{5, 0}, 1, false, true},
                                            {{3, 300}, -1, false, true}};
  for (const auto& kind : kinds) {
    for (const auto& t : scan_cases) {
      const bool flat = t.axis == -100;
      const int axis = flat ? 0 : norm(t.axis, t.shape.size());
      const bool is_prod = std::string(kind.op) == "cumprod";
      // Long products under/overflow; long rows make finite differences of
      // 16-bit inputs noisy: keep those cases to sums and extremes in wide types.
      if (is_prod && t.shape.back() == 300) continue;
      const bool long_row = t.shape.back() == 300;
      // An exclusive scan starts from an infinite identity for these: the
      // case zeroes it (finite differences cannot take inf - inf), and the
      // integer identities (the dtype's limits) are checked in test_scan.cpp.
      const bool infinite_identity = std::isinf(kind.ident) && !t.inclusive;
      std::vector<Dtype> dtypes = long_row ? std::vector<Dtype>{float32, float64} : kind.dtypes;
      if (infinite_identity) dtypes = kFloat;
      add({.op = kind.op,
           .primitive = "Scan",
           .name = test::fmt(t.shape) + (flat ? " flattened" : " axis " + std::to_string(t.axis)) +
                   (t.reverse ? " reverse" : "") + (t.inclusive ? "" : " exclusive"),
           .fn = [kind, flat, t, infinite_identity](const Arrays& x) {
             array y = flat ? kind.flat(x[0], t.reverse, t.inclusive) : kind.fn(x[0], t.axis, t.reverse, t.inclusive);
             return Arrays{infinite_identity ? where(isinf(y), zeros_like(y), y) : y};
           },
           .inputs = {in(t.shape, is_prod ? 0.5 : kind.lo, is_prod ? 1.5 : kind.hi)},
           .dtypes = dtypes,
           .ref = [kind, flat, axis, t](const Arrays& x) {
             Shape s = flat ? Shape{static_cast<int>(x[0].size())} : x[0].shape();
             auto r = along(values(x[0]), s, axis, [&](const Row& row) {
               return scan_row(row, t.reverse, t.inclusive, kind.ident, kind.f);
             });
             for (double& v : r) v = std::isinf(v) ? 0.0 : v;
             return std::vector<std::vector<double>>{r};
           },
           .diff = {0},
           .grad2 = !long_row});
    }
  }
  // unstack (a shape op, registered here to keep the shared case files
  // untouched): views of split + squeeze.
  for (int axis : {0, 1, -1}) {
    add({.op = "unstack",
         .primitive = "composite",
         .name = "(3,4,2) axis " + std::to_string(axis),
         .fn = [axis](const Arrays& x) { return unstack(x[0], axis); },
         .inputs = {in({3, 4, 2})},
         .dtypes = kData,
         .diff = {0}});
  }
  add({.op = "unstack",
       .primitive = "composite",
       .name = "(5) default axis",
       .fn = [](const Arrays& x) { return unstack(x[0]); },
       .inputs = {in({5})},
       .diff = {0}});

  // cumprod through zeros: the gradient of the first zero and after it.
  for (bool reverse : {false, true}) {
    for (bool inclusive : {true, false}) {
      add({.op = "cumprod",
           .primitive = "Scan",
           .name = std::string("(4,6) with zeros") + (reverse ? " reverse" : "") + (inclusive ? "" : " exclusive"),
           .fn = [reverse, inclusive](const Arrays& x) {
             // Round to integers in [-2, 2): zeros appear, then a smooth scale.
             array z = astype(stop_gradient(floor(x[1])), x[0].dtype());
             return Arrays{cumprod(x[0] * z, 1, reverse, inclusive)};
           },
           .inputs = {in({4, 6}, 0.5, 1.5), fixed({4, 6}, float64, -1, 2)},
           .dtypes = {float32, float64},
           .ref = [reverse, inclusive](const Arrays& x) {
             auto a = values(x[0]), b = values(x[1]);
             for (size_t i = 0; i < a.size(); ++i) a[i] *= std::floor(b[i]);
             return std::vector<std::vector<double>>{along(a, {4, 6}, 1, [&](const Row& r) {
               return scan_row(r, reverse, inclusive, 1.0, [](double p, double q) { return p * q; });
             })};
           },
           .diff = {0}});
    }
  }
}

}  // namespace kiln::harness
