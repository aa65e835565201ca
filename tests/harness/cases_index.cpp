// Harness cases of the gathers and scatters (Gather, GatherAxis,
// ScatterAxis), checked against numpy-semantics loops.
#include "harness/harness.h"
#include "test_util.h"

namespace kiln::harness {
namespace {

const std::vector<Dtype> kData = {float32, float16, bfloat16, float64, int32, uint8, int64, int16, uint64};

int wrap(double i, int n) { return static_cast<int>(i < 0 ? i + n : i); }

// take(a, indices, axis): out[pre, idx..., post] = a[pre, indices[idx...], post].
std::vector<std::vector<double>> take_ref(const Arrays& x, int axis) {
  const Shape& s = x[0].shape();
  auto a = values(x[0]), ind = values(x[1]);
  int64_t pre = 1, post = 1;
  for (int d = 0; d < axis; ++d) pre *= s[d];
  for (size_t d = axis + 1; d < s.size(); ++d) post *= s[d];
  std::vector<double> out;
  for (int64_t p = 0; p < pre; ++p)
    for (double i : ind)
      for (int64_t q = 0; q < post; ++q) out.push_back(a[(p * s[axis] + wrap(i, s[axis])) * post + q]);
  return {out};
}

// The flat offset in `s` of index `idx` with idx[axis] replaced by k.
int64_t offset_with(const Shape& s, std::vector<int> idx, int axis, int k) {
  idx[axis] = k;
  int64_t j = 0;
  for (size_t d = 0; d < s.size(); ++d) j = j * s[d] + idx[d];
  return j;
}

// indices broadcast against a except on axis (the shape of the result of take_along_axis).
Shape along_shape(const Shape& a, const Shape& ind, int axis) {
  Shape out = broadcast_shape(a, ind);
  out[axis] = ind[axis];
  return out;
}

std::vector<std::vector<double>> take_along_ref(const Arrays& x, int axis) {
  const Shape& s = x[0].shape();
  Shape out = along_shape(s, x[1].shape(), axis);
  auto a = values(x[0]);
  auto ind = broadcast_values(x[1], out);
  std::vector<double> r(ind.size());
  for (size_t i = 0; i < r.size(); ++i) {
    auto idx = test::unravel(static_cast<int64_t>(i), out);
    r[i] = a[offset_with(s, idx, axis, wrap(ind[i], s[axis]))];
  }
  return {r};
}

std::vector<std::vector<double>> scatter_ref(const Arrays& x, int axis, bool add) {
  const Shape& s = x[0].shape();
  Shape is = along_shape(s, x[1].shape(), axis);
  auto a = values(x[0]);
  auto ind = broadcast_values(x[1], is), val = broadcast_values(x[2], is);
  for (size_t i = 0; i < ind.size(); ++i) {
    auto idx = test::unravel(static_cast<int64_t>(i), is);
    double& dst = a[offset_with(s, idx, axis, wrap(ind[i], s[axis]))];
    dst = add ? dst + val[i] : val[i];
  }
  return {a};
}

}  // namespace

void register_index() {
  struct TakeCase {
    Shape a, ind;
    int axis;  // -100: flattened
  };
  for (const auto& t : {TakeCase{{5, 4}, {3}, 0}, TakeCase{{3, 7}, {2, 4}, 1}, TakeCase{{2, 3, 4}, {5}, -1},
                        TakeCase{{6}, {}, 0}, TakeCase{{3, 4}, {0}, 1}, TakeCase{{3, 4}, {2, 3}, -100}, TakeCase{{50, 33}, {70}, 0}}) {
    const bool flat = t.axis == -100;
    const int n = flat ? static_cast<int>(test::numel(t.a)) : t.a[t.axis < 0 ? t.axis + t.a.size() : t.axis];
    const int axis = t.axis < 0 && !flat ? t.axis + static_cast<int>(t.a.size()) : t.axis;
    add({.op = "take",
         .primitive = "Gather",
         .name = test::fmt(t.a) + " indices " + test::fmt(t.ind) + (flat ? " flattened" : " axis " + std::to_string(axis)),
         .fn = [flat, axis](const Arrays& x) { return Arrays{flat ? take(x[0], x[1]) : take(x[0], x[1], axis)}; },
         // Negative indices count from the end.
         .inputs = {in(t.a), fixed(t.ind, int32, -n, n)},
         .dtypes = kData,
         .ref = [flat, axis](const Arrays& x) {
           return flat ? take_ref({reshape(x[0], {-1}), x[1]}, 0) : take_ref(x, axis);
         },
         .diff = {0},
         .grad2 = true});
  }

  struct AlongCase {
    Shape a, ind;
    int axis;
  };
  for (const auto& t : {AlongCase{{4, 5}, {4, 3}, 1}, AlongCase{{4, 5}, {2, 1}, 0}, AlongCase{{2, 3, 4}, {1, 3, 6}, 2},
                        AlongCase{{3, 5}, {3, 0}, 1}}) {
    const int n = t.a[t.axis];
    add({.op = "take_along_axis",
         .primitive = "GatherAxis",
         .name = test::fmt(t.a) + " indices " + test::fmt(t.ind) + " axis " + std::to_string(t.axis),
         .fn = [axis = t.axis](const Arrays& x) { return Arrays{take_along_axis(x[0], x[1], axis)}; },
         .inputs = {in(t.a), fixed(t.ind, int32, -n, n)},
         .dtypes = kData,
         .ref = [axis = t.axis](const Arrays& x) { return take_along_ref(x, axis); },
         .diff = {0},
         .grad2 = true});
  }

  // Scatters. put_along_axis keeps one of repeated writes, so its cases
  // write one index per row (no repeats); scatter_add_axis repeats freely.
  struct ScatterCase {
    Shape a, ind, val;
    int axis;
    bool add;
  };
  for (const auto& t : {ScatterCase{{4, 5}, {4, 1}, {4, 1}, 1, false}, ScatterCase{{4, 5}, {1, 5}, {1}, 0, false},
                        ScatterCase{{2, 3, 4}, {2, 3, 1}, {2, 3, 1}, -1, false},
                        ScatterCase{{4, 5}, {4, 7}, {4, 7}, 1, true}, ScatterCase{{3, 4}, {6, 1}, {6, 4}, 0, true},
                        ScatterCase{{2, 3, 4}, {2, 2, 4}, {1, 2, 1}, 1, true},
                        ScatterCase{{40, 33}, {90, 33}, {90, 33}, 0, true}}) {
    const int axis = t.axis < 0 ? t.axis + static_cast<int>(t.a.size()) : t.axis;
    const int n = t.a[axis];
    const bool is_add = t.add;
    // Many adds into one element round at every step in a 16-bit type.
    const bool many = test::numel(t.ind) > 1000;
    add({.op = is_add ? "scatter_add_axis" : "put_along_axis",
         .primitive = "ScatterAxis",
         .name = test::fmt(t.a) + " indices " + test::fmt(t.ind) + " values " + test::fmt(t.val) + " axis " +
                 std::to_string(t.axis),
         .fn = [is_add, axis = t.axis](const Arrays& x) {
           return Arrays{is_add ? scatter_add_axis(x[0], x[1], x[2], axis) : put_along_axis(x[0], x[1], x[2], axis)};
         },
         .inputs = {in(t.a), fixed(t.ind, int32, -n, n), in(t.val)},
         .dtypes = many ? std::vector<Dtype>{float32, float64, int32} : kData,
         .ref = [is_add, axis](const Arrays& x) {
           // values broadcast to the indices' shape first.
           Shape is = along_shape(x[0].shape(), x[1].shape(), axis);
           return scatter_ref({x[0], x[1], broadcast_to(x[2], is)}, axis, is_add);
         },
         .diff = {0, 2},
         .grad2 = true});
  }
}

}  // namespace kiln::harness
