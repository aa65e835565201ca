// Harness cases of MLX's gather / scatter family (GatherSlices, Scatter),
// the dynamic slices (DynamicSlice, DynamicSliceUpdate) and the views
// as_strided (AsStrided) and view (View), each against a float64 loop.
#include <algorithm>
#include <cstring>
#include <random>

#include "harness/harness.h"
#include "test_util.h"

namespace kiln::harness {
namespace {

const std::vector<Dtype> kData = {float32, float16, bfloat16, float64, int32, uint8, int64};

int64_t flat_of(const std::vector<int>& pos, const Shape& s) {
  int64_t j = 0;
  for (size_t d = 0; d < s.size(); ++d) j = j * s[d] + pos[d];
  return j;
}

// The index arrays x[first, last) broadcast together, wrapped per axis.
std::vector<std::vector<int>> wrapped_indices(const Arrays& x, size_t first, size_t last, const std::vector<int>& axes,
                                              const Shape& a, Shape& ishape) {
  ishape = {};
  for (size_t j = first; j < last; ++j) ishape = broadcast_shape(ishape, x[j].shape());
  std::vector<std::vector<int>> out;
  for (size_t j = first; j < last; ++j) {
    std::vector<int> w;
    int n = a[axes[j - first]];
    for (double v : broadcast_values(x[j], ishape)) w.push_back(static_cast<int>(v < 0 ? v + n : v));
    out.push_back(w);
  }
  return out;
}

// out[i, s] = a[s + start(i)] with start(i) the indices on `axes`, 0 elsewhere.
std::vector<std::vector<double>> gather_ref(const Arrays& x, const std::vector<int>& axes, const Shape& sizes) {
  const Shape& s = x[0].shape();
  auto a = values(x[0]);
  Shape ishape;
  auto idx = wrapped_indices(x, 1, x.size(), axes, s, ishape);
  std::vector<double> out;
  for (int64_t i = 0; i < test::numel(ishape); ++i) {
    for (int64_t k = 0; k < test::numel(sizes); ++k) {
      auto pos = test::unravel(k, sizes);
      for (size_t j = 0; j < axes.size(); ++j) pos[axes[j]] += idx[j][i];
      out.push_back(a[flat_of(pos, s)]);
    }
  }
  return {out};
}

double combine(double o, double v, const std::string& mode) {
  if (mode == "scatter") return v;
  if (mode == "scatter_add") return o + v;
  if (mode == "scatter_prod") return o * v;
  if (mode == "scatter_max") return std::max(o, v);
  return std::min(o, v);
}

std::vector<std::vector<double>> scatter_ref(const Arrays& x, const std::vector<int>& axes, const std::string& mode) {
  const Shape& s = x[0].shape();
  auto out = values(x[0]);
  Shape ishape;
  auto idx = wrapped_indices(x, 1, x.size() - 1, axes, s, ishape);
  const array& u = x.back();
  auto uv = values(u);
  Shape slice(u.shape().end() - s.size(), u.shape().end());
  int64_t n_slice = test::numel(slice);
  for (int64_t i = 0; i < test::numel(ishape); ++i) {
    for (int64_t k = 0; k < n_slice; ++k) {
      auto pos = test::unravel(k, slice);
      for (size_t j = 0; j < axes.size(); ++j) pos[axes[j]] += idx[j][i];
      double& o = out[flat_of(pos, s)];
      o = combine(o, uv[i * n_slice + k], mode);
    }
  }
  return {out};
}

// The dynamic start on each axis, wrapped once and clamped (see ops.h).
std::vector<int> clamped(const array& start, const std::vector<int>& axes, const Shape& dims, const Shape& sizes) {
  auto v = values(start);
  std::vector<int> out(dims.size(), 0);
  for (size_t j = 0; j < axes.size(); ++j) {
    int ax = axes[j];
    int s = static_cast<int>(v[j] < 0 ? v[j] + dims[ax] : v[j]);
    out[ax] = std::clamp(s, 0, dims[ax] - sizes[ax]);
  }
  return out;
}

// Distinct indices in [0, n): a plain scatter keeps one of repeated writes,
// so its cases write each position once.
Input distinct(int count, int n) {
  return Input{.shape = {count}, .make = [count, n] {
                 static std::mt19937 g(7);
                 std::vector<int> p(n);
                 for (int i = 0; i < n; ++i) p[i] = i;
                 std::shuffle(p.begin(), p.end(), g);
                 p.resize(count);
                 return array(p, {count}, int32);
               }};
}

}  // namespace

void register_gather() {
  struct GatherCase {
    Shape a;
    std::vector<Shape> ind;
    std::vector<int> axes;
    Shape sizes;
    bool single;  // the single-array overload
  };
  for (const auto& t : {GatherCase{{5, 4}, {{3}}, {0}, {1, 4}, true},
                        GatherCase{{6, 7}, {{2, 3}, {3}}, {0, 1}, {2, 3}, false},
                        GatherCase{{3, 4, 5}, {{4}}, {-1}, {3, 2, 1}, true},
                        GatherCase{{4, 5}, {}, {}, {2, 3}, false},
                        GatherCase{{2, 3, 4}, {{2, 2}, {2, 1}}, {2, 0}, {1, 3, 2}, false},
                        GatherCase{{50, 33}, {{70}}, {0}, {1, 33}, true}}) {
    std::vector<int> axes;
    for (int ax : t.axes) axes.push_back(ax < 0 ? ax + static_cast<int>(t.a.size()) : ax);
    std::vector<Input> inputs = {in(t.a)};
    for (size_t j = 0; j < t.ind.size(); ++j) {
      int n = t.a[axes[j]], room = n - t.sizes[axes[j]] + 1;
      // Negative indices where a slice of one leaves room for them.
      inputs.push_back(fixed(t.ind[j], int32, room == n ? -n : 0, room));
    }
    std::string name = test::fmt(t.a) + " axes";
    for (int ax : t.axes) name += " " + std::to_string(ax);
    name += " slice " + test::fmt(t.sizes) + (t.single ? " single" : "");
    add({.op = "gather",
         .primitive = "GatherSlices",
         .name = name,
         .fn = [t](const Arrays& x) {
           if (t.single) return Arrays{gather(x[0], x[1], t.axes[0], t.sizes)};
           return Arrays{gather(x[0], Arrays(x.begin() + 1, x.end()), t.axes, t.sizes)};
         },
         .inputs = inputs,
         .dtypes = kData,
         .ref = [axes, sizes = t.sizes](const Arrays& x) { return gather_ref(x, axes, sizes); },
         .diff = {0},
         .grad2 = true});
  }

  struct ScatterCase {
    std::string op;
    Shape a;
    std::vector<Input> ind;
    std::vector<int> axes;
    Shape upd;
    bool single;
  };
  std::vector<ScatterCase> scatters = {
      {"scatter", {6, 4}, {distinct(3, 6)}, {0}, {3, 1, 4}, true},
      {"scatter", {5, 6}, {distinct(3, 5), fixed({3}, int32, 0, 5)}, {0, 1}, {3, 1, 2}, false},
      {"scatter_add", {5, 4}, {fixed({7}, int32, -5, 5)}, {0}, {7, 1, 4}, true},
      {"scatter_add", {6, 6}, {fixed({4}, int32, 0, 5), fixed({2, 1}, int32, 0, 5)}, {0, 1}, {2, 4, 2, 2}, false},
      {"scatter_add", {3, 4, 5}, {fixed({6}, int32, -5, 5)}, {2}, {6, 2, 4, 1}, false},
      {"scatter_add", {40, 33}, {fixed({90}, int32, 0, 40)}, {0}, {90, 1, 33}, true},
      {"scatter_prod", {5, 4}, {fixed({6}, int32, -5, 5)}, {0}, {6, 1, 4}, true},
      {"scatter_prod", {4, 5}, {fixed({3}, int32, 0, 4), fixed({3}, int32, 0, 4)}, {0, 1}, {3, 1, 2}, false},
      {"scatter_max", {5, 4}, {fixed({6}, int32, -5, 5)}, {0}, {6, 1, 4}, true},
      {"scatter_max", {4, 5}, {fixed({2, 3}, int32, 0, 4)}, {1}, {2, 3, 4, 2}, false},
      {"scatter_min", {5, 4}, {fixed({6}, int32, -5, 5)}, {0}, {6, 1, 4}, true},
      {"scatter_min", {4, 5}, {fixed({3}, int32, 0, 3), fixed({3}, int32, 0, 5)}, {0, 1}, {3, 2, 1}, false},
  };
  for (const auto& t : scatters) {
    std::vector<Input> inputs = {t.op == "scatter_prod" ? in(t.a, 0.5, 1.5) : in(t.a)};
    inputs.insert(inputs.end(), t.ind.begin(), t.ind.end());
    inputs.push_back(t.op == "scatter_prod" ? in(t.upd, 0.5, 1.5) : in(t.upd));
    const bool many = test::numel(t.upd) > 1000;
    std::string name = test::fmt(t.a) + " updates " + test::fmt(t.upd) + " axes";
    for (int ax : t.axes) name += " " + std::to_string(ax);
    if (t.single) name += " single";
    const int last = static_cast<int>(inputs.size()) - 1;
    add({.op = t.op,
         .primitive = "Scatter",
         .name = name,
         .fn = [t](const Arrays& x) {
           Arrays idx(x.begin() + 1, x.end() - 1);
           using Many = array (*)(const array&, const std::vector<array>&, const array&, const std::vector<int>&,
                                  StreamOrDevice);
           using One = array (*)(const array&, const array&, const array&, int, StreamOrDevice);
           Many many_fn = t.op == "scatter"       ? static_cast<Many>(scatter)
                          : t.op == "scatter_add" ? static_cast<Many>(scatter_add)
                          : t.op == "scatter_prod" ? static_cast<Many>(scatter_prod)
                          : t.op == "scatter_max" ? static_cast<Many>(scatter_max)
                                                  : static_cast<Many>(scatter_min);
           One one_fn = t.op == "scatter"       ? static_cast<One>(scatter)
                        : t.op == "scatter_add" ? static_cast<One>(scatter_add)
                        : t.op == "scatter_prod" ? static_cast<One>(scatter_prod)
                        : t.op == "scatter_max" ? static_cast<One>(scatter_max)
                                                : static_cast<One>(scatter_min);
           if (t.single) return Arrays{one_fn(x[0], idx[0], x.back(), t.axes[0], {})};
           return Arrays{many_fn(x[0], idx, x.back(), t.axes, {})};
         },
         .inputs = inputs,
         // Many adds into one element round at every step in a 16-bit type.
         .dtypes = many ? std::vector<Dtype>{float32, float64, int32} : kData,
         .ref = [t](const Arrays& x) { return scatter_ref(x, t.axes, t.op); },
         .diff = {0, last},
         .grad2 = true});
  }

  struct DynCase {
    Shape a;
    std::vector<int> axes;
    Shape sizes;
  };
  for (const auto& t : {DynCase{{6, 5}, {0}, {3, 5}}, DynCase{{5, 6, 4}, {2, 0}, {2, 6, 3}},
                        DynCase{{4, 7}, {-1}, {2, 3}}}) {
    std::vector<int> axes;
    for (int ax : t.axes) axes.push_back(ax < 0 ? ax + static_cast<int>(t.a.size()) : ax);
    const int k = static_cast<int>(t.axes.size());
    std::string name = test::fmt(t.a) + " axes";
    for (int ax : t.axes) name += " " + std::to_string(ax);
    name += " size " + test::fmt(t.sizes);
    // Starts past either end are clamped.
    add({.op = "slice",
         .primitive = "DynamicSlice",
         .name = name,
         .fn = [t](const Arrays& x) { return Arrays{slice(x[0], x[1], t.axes, t.sizes)}; },
         .inputs = {in(t.a), fixed({k}, int32, -9, 9)},
         .dtypes = kData,
         .ref = [axes, t](const Arrays& x) {
           auto st = clamped(x[1], axes, t.a, t.sizes);
           auto a = values(x[0]);
           std::vector<double> out;
           for (int64_t i = 0; i < test::numel(t.sizes); ++i) {
             auto pos = test::unravel(i, t.sizes);
             for (size_t d = 0; d < pos.size(); ++d) pos[d] += st[d];
             out.push_back(a[flat_of(pos, t.a)]);
           }
           return std::vector<std::vector<double>>{out};
         },
         .diff = {0},
         .grad2 = true});
  }

  struct DynUpdateCase {
    Shape src, upd;
    std::vector<int> axes;
  };
  for (const auto& t : {DynUpdateCase{{6, 5}, {2, 5}, {0}}, DynUpdateCase{{4, 5, 6}, {3, 4}, {0, 2}},
                        DynUpdateCase{{5, 6}, {1, 3}, {1, 0}}}) {
    const int k = static_cast<int>(t.axes.size());
    std::string name = test::fmt(t.src) + " update " + test::fmt(t.upd) + " axes";
    for (int ax : t.axes) name += " " + std::to_string(ax);
    add({.op = "slice_update",
         .primitive = "DynamicSliceUpdate",
         .name = name,
         .fn = [t](const Arrays& x) { return Arrays{slice_update(x[0], x[1], x[2], t.axes)}; },
         .inputs = {in(t.src), in(t.upd), fixed({k}, int32, -9, 9)},
         .dtypes = kData,
         .ref = [t](const Arrays& x) {
           // The update's shape with the missing leading dims (1 where sliced).
           int lead = static_cast<int>(t.src.size() - t.upd.size());
           Shape us(t.src.begin(), t.src.begin() + lead);
           us.insert(us.end(), t.upd.begin(), t.upd.end());
           for (int ax : t.axes) if (ax < lead) us[ax] = 1;
           auto st = clamped(x[2], t.axes, t.src, us);
           auto out = values(x[0]);
           auto u = broadcast_values(x[1], us);
           for (int64_t i = 0; i < test::numel(us); ++i) {
             auto pos = test::unravel(i, us);
             for (size_t d = 0; d < pos.size(); ++d) pos[d] += st[d];
             out[flat_of(pos, t.src)] = u[i];
           }
           return std::vector<std::vector<double>>{out};
         },
         .diff = {0, 1},
         .grad2 = true});
  }

  struct StridedCase {
    Shape a, shape;
    Strides strides;
    size_t offset;
  };
  for (const auto& t : {StridedCase{{4, 6}, {3, 3}, {6, 2}, 1}, StridedCase{{10}, {4, 3}, {2, 1}, 1},
                        StridedCase{{3, 4}, {2, 2, 3}, {0, 4, -1}, 3}, StridedCase{{5}, {}, {}, 4}}) {
    std::string name = test::fmt(t.a) + " as " + test::fmt(t.shape) + " strides";
    for (auto s : t.strides) name += " " + std::to_string(s);
    name += " offset " + std::to_string(t.offset);
    add({.op = "as_strided",
         .primitive = "AsStrided",
         .name = name,
         .fn = [t](const Arrays& x) { return Arrays{as_strided(x[0], t.shape, t.strides, t.offset)}; },
         .inputs = {in(t.a)},
         .dtypes = kData,
         .ref = [t](const Arrays& x) {
           auto a = values(x[0]);  // row-major, as as_strided sees it
           std::vector<double> out;
           for (int64_t i = 0; i < test::numel(t.shape); ++i) {
             auto pos = test::unravel(i, t.shape);
             int64_t off = static_cast<int64_t>(t.offset);
             for (size_t d = 0; d < pos.size(); ++d) off += pos[d] * t.strides[d];
             out.push_back(a[off]);
           }
           return std::vector<std::vector<double>>{out};
         },
         .diff = {0},
         .grad2 = true});
  }

  // view: the bytes of the inputs (exact in the float64 copies) read as the
  // new type; integer targets only (other bit patterns may be NaN).
  struct ViewCase {
    Shape a;
    Dtype from, to;
  };
  for (const auto& t : {ViewCase{{3, 4}, float32, int32}, ViewCase{{3, 4}, float32, uint8},
                        ViewCase{{2, 3, 8}, int8, int32}, ViewCase{{5, 2}, int64, uint8}}) {
    add({.op = "view",
         .primitive = "View",
         .name = test::fmt(t.a) + " " + dtype_name(t.from) + " as " + dtype_name(t.to),
         .fn = [to = t.to](const Arrays& x) { return Arrays{view(x[0], to)}; },
         // A fixed dtype: the reference sees the input's own type (not float64).
         .inputs = {t.from == int64 ? fixed(t.a, int64, -1e6, 1e6) : fixed(t.a, t.from, -2, 2)},
         .dtypes = {t.from},
         .ref = [t](const Arrays& x) {
           auto v = values(x[0]);
           std::vector<unsigned char> bytes;
           for (double d : v) {
             unsigned char b[8];
             size_t n = size_of(t.from);
             switch (t.from) {
               case float32: { float f = static_cast<float>(d); std::memcpy(b, &f, 4); break; }
               case int8: { int8_t i = static_cast<int8_t>(d); std::memcpy(b, &i, 1); break; }
               default: { int64_t i = static_cast<int64_t>(d); std::memcpy(b, &i, 8); break; }
             }
             bytes.insert(bytes.end(), b, b + n);
           }
           std::vector<double> out;
           size_t m = size_of(t.to);
           for (size_t i = 0; i + m <= bytes.size(); i += m) {
             switch (t.to) {
               case int32: { int32_t r; std::memcpy(&r, &bytes[i], 4); out.push_back(r); break; }
               default: out.push_back(bytes[i]); break;
             }
           }
           return std::vector<std::vector<double>>{out};
         }});
  }
}

}  // namespace kiln::harness
