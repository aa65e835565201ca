// Shape and data-movement ops against naive references: each case says which
// input element every output element reads (a gather map), and runs over
// several dtypes and input layouts (contiguous, transposed, strided, flipped,
// broadcast). Also: views share their input's buffer.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/copy.h"
#include "test_layouts.h"
#include "test_util.h"

namespace kiln::test {
namespace {


int64_t ravel(const std::vector<int>& idx, const Shape& shape) {
  int64_t o = 0;
  for (size_t d = 0; d < shape.size(); ++d) o = o * shape[d] + idx[d];
  return o;
}

// ---- input layouts: every layout produces the same logical shape ----


// Distinct-ish values so that a wrong index shows.
Gen value_gen(Dtype dt) {
  if (dt == bool_) return [](const Shape& s) { return random_array(s, bool_); };
  if (is_integral(dt)) return [dt](const Shape& s) { return random_array(s, dt, -1000, 1000); };
  return [dt](const Shape& s) { return random_array(s, dt, -100, 100); };
}

// Python's slice(start, stop, step).indices(n), expanded.
std::vector<int> slice_indices(int n, int start, int stop, int step) {
  auto clamp = [&](int v, bool is_start) {
    if (v < 0) v += n;
    if (step > 0) return std::clamp(v, 0, n);
    if (v < 0) return -1;
    if (v >= n) return n - 1;
    (void)is_start;
    return v;
  };
  int b = clamp(start, true), e = clamp(stop, false);
  std::vector<int> out;
  for (int i = b; step > 0 ? i < e : i > e; i += step) out.push_back(i);
  return out;
}

// ---- the gather table ----

// Where an output element comes from: (input number, multi-index), or
// nothing for a fill value.
using Source = std::optional<std::pair<int, std::vector<int>>>;

struct Case {
  std::string name;
  std::vector<Shape> in_shapes;
  std::function<std::vector<array>(const std::vector<array>&)> op;
  std::vector<Shape> out_shapes;
  // Source of element `o` of output `k`.
  std::function<Source(int k, const std::vector<int>& o)> src;
  double fill = 0;  // value of elements with no source (bool: nonzero -> 1)
};

Source from(std::vector<int> idx, int input = 0) { return std::make_pair(input, std::move(idx)); }

// A case with one input and one output.
Case unary(std::string name, Shape in, Shape out, std::function<array(const array&)> op,
           std::function<std::vector<int>(const std::vector<int>&)> src) {
  return Case{std::move(name), {std::move(in)},
              [op](const std::vector<array>& x) { return std::vector<array>{op(x[0])}; },
              {std::move(out)},
              [src](int, const std::vector<int>& o) { return from(src(o)); }};
}

// Reshape-like: the same row-major element order.
Case same_order(std::string name, Shape in, Shape out, std::function<array(const array&)> op) {
  return unary(std::move(name), in, out, std::move(op),
               [in, out](const std::vector<int>& o) { return unravel(ravel(o, out), in); });
}

Case slice_case(Shape in, Shape start, Shape stop, std::optional<Shape> strides) {
  Shape step = strides.value_or(Shape(in.size(), 1));
  std::vector<std::vector<int>> idx;
  Shape out;
  for (size_t d = 0; d < in.size(); ++d) {
    idx.push_back(slice_indices(in[d], start[d], stop[d], step[d]));
    out.push_back(static_cast<int>(idx.back().size()));
  }
  return unary("slice " + fmt(start) + ":" + fmt(stop) + ":" + fmt(step), in, out,
               [=](const array& a) { return strides ? slice(a, start, stop, *strides) : slice(a, start, stop); },
               [idx](const std::vector<int>& o) {
                 std::vector<int> i(o.size());
                 for (size_t d = 0; d < o.size(); ++d) i[d] = idx[d][o[d]];
                 return i;
               });
}

Case slice_update_case(Shape in, Shape upd, Shape start, Shape stop, std::optional<Shape> strides) {
  Shape step = strides.value_or(Shape(in.size(), 1));
  std::vector<std::vector<int>> idx;
  Shape sl;
  for (size_t d = 0; d < in.size(); ++d) {
    idx.push_back(slice_indices(in[d], start[d], stop[d], step[d]));
    sl.push_back(static_cast<int>(idx.back().size()));
  }
  return Case{"slice_update " + fmt(start) + ":" + fmt(stop) + ":" + fmt(step) + " with " + fmt(upd),
              {in, upd},
              [=](const std::vector<array>& x) {
                return std::vector<array>{strides ? slice_update(x[0], x[1], start, stop, *strides)
                                                  : slice_update(x[0], x[1], start, stop)};
              },
              {in},
              [=](int, const std::vector<int>& o) -> Source {
                std::vector<int> pos(o.size());  // position inside the slice
                for (size_t d = 0; d < o.size(); ++d) {
                  auto it = std::find(idx[d].begin(), idx[d].end(), o[d]);
                  if (it == idx[d].end()) return from(o);
                  pos[d] = static_cast<int>(it - idx[d].begin());
                }
                // Broadcast pos (slice shape) to the update's shape.
                std::vector<int> u(upd.size());
                for (size_t d = 0; d < upd.size(); ++d) {
                  int pd = static_cast<int>(pos.size() - upd.size() + d);
                  u[d] = upd[d] == 1 ? 0 : pos[pd];
                }
                return from(u, 1);
              }};
}

// take along `axis` (nullopt: flattened) with the given index values.
Case take_case(Shape in, std::vector<int> indices, Shape idx_shape, std::optional<int> axis, Dtype idx_dtype) {
  int nd = static_cast<int>(in.size());
  Shape out;
  int ax = axis ? (*axis < 0 ? *axis + nd : *axis) : 0;
  Shape eff_in = axis ? in : Shape{static_cast<int>(numel(in))};
  for (int d = 0; d < ax; ++d) out.push_back(eff_in[d]);
  for (int d : idx_shape) out.push_back(d);
  for (int d = ax + 1; d < static_cast<int>(eff_in.size()); ++d) out.push_back(eff_in[d]);
  std::string name = "take axis " + (axis ? std::to_string(*axis) : std::string("flat")) + " " +
                     dtype_name(idx_dtype) + " indices " + fmt(idx_shape);
  return unary(
      name, in, out,
      [=](const array& a) {
        array ind(indices, idx_shape, idx_dtype);
        return axis ? take(a, ind, *axis) : take(a, ind);
      },
      [=](const std::vector<int>& o) {
        int k = static_cast<int>(idx_shape.size());
        std::vector<int> io(o.begin() + ax, o.begin() + ax + k);
        int v = indices[ravel(io, idx_shape)];
        if (v < 0) v += eff_in[ax];
        std::vector<int> i(o.begin(), o.begin() + ax);
        i.push_back(v);
        i.insert(i.end(), o.begin() + ax + k, o.end());
        return axis ? i : unravel(i[0], in);
      });
}

std::vector<int> random_ints(int n, int lo, int hi) {
  std::uniform_int_distribution<int> dist(lo, hi - 1);
  std::vector<int> v(n);
  for (auto& x : v) x = dist(rng());
  return v;
}

std::vector<Case> make_cases() {
  std::vector<Case> c;
  // reshape / flatten
  c.push_back(same_order("reshape [5,-1]", {3, 4, 5}, {5, 12}, [](const array& a) { return reshape(a, {5, -1}); }));
  c.push_back(same_order("reshape [-1]", {3, 4, 5}, {60}, [](const array& a) { return reshape(a, {-1}); }));
  c.push_back(
      same_order("reshape [2,3,-1,5]", {6, 10}, {2, 3, 2, 5}, [](const array& a) { return reshape(a, {2, 3, -1, 5}); }));
  c.push_back(same_order("reshape [1,7,1,13]", {7, 13}, {1, 7, 1, 13},
                         [](const array& a) { return reshape(a, {1, 7, 1, 13}); }));
  c.push_back(same_order("flatten", {2, 3, 4, 5}, {120}, [](const array& a) { return flatten(a); }));
  c.push_back(same_order("flatten 1..2", {2, 3, 4, 5}, {2, 12, 5}, [](const array& a) { return flatten(a, 1, 2); }));
  c.push_back(
      same_order("flatten -2..-1", {2, 3, 4, 5}, {2, 3, 20}, [](const array& a) { return flatten(a, -2, -1); }));
  // expand_dims / squeeze
  c.push_back(same_order("expand_dims 1", {3, 4}, {3, 1, 4}, [](const array& a) { return expand_dims(a, 1); }));
  c.push_back(same_order("expand_dims -1", {3, 4}, {3, 4, 1}, [](const array& a) { return expand_dims(a, -1); }));
  c.push_back(
      same_order("expand_dims {0,3}", {3, 4}, {1, 3, 4, 1}, [](const array& a) { return expand_dims(a, {0, 3}); }));
  c.push_back(
      same_order("expand_dims {0,-1}", {3, 4}, {1, 3, 4, 1}, [](const array& a) { return expand_dims(a, {0, -1}); }));
  c.push_back(same_order("squeeze", {3, 1, 4, 1}, {3, 4}, [](const array& a) { return squeeze(a); }));
  c.push_back(same_order("squeeze 1", {3, 1, 4, 1}, {3, 4, 1}, [](const array& a) { return squeeze(a, 1); }));
  c.push_back(
      same_order("squeeze {-1,1}", {3, 1, 4, 1}, {3, 4}, [](const array& a) { return squeeze(a, {-1, 1}); }));
  // transpose / swapaxes
  c.push_back(unary("transpose {1,2,0}", {2, 3, 4}, {3, 4, 2}, [](const array& a) { return transpose(a, {1, 2, 0}); },
                    [](const std::vector<int>& o) { return std::vector<int>{o[2], o[0], o[1]}; }));
  c.push_back(unary("transpose", {2, 3, 4}, {4, 3, 2}, [](const array& a) { return transpose(a); },
                    [](const std::vector<int>& o) { return std::vector<int>{o[2], o[1], o[0]}; }));
  c.push_back(unary("transpose {0,2,1,3}", {2, 3, 4, 5}, {2, 4, 3, 5},
                    [](const array& a) { return transpose(a, {0, 2, 1, 3}); },
                    [](const std::vector<int>& o) { return std::vector<int>{o[0], o[2], o[1], o[3]}; }));
  c.push_back(unary("swapaxes 0,2", {2, 3, 4}, {4, 3, 2}, [](const array& a) { return swapaxes(a, 0, 2); },
                    [](const std::vector<int>& o) { return std::vector<int>{o[2], o[1], o[0]}; }));
  c.push_back(unary("swapaxes -1,-2", {2, 3, 4}, {2, 4, 3}, [](const array& a) { return swapaxes(a, -1, -2); },
                    [](const std::vector<int>& o) { return std::vector<int>{o[0], o[2], o[1]}; }));
  // broadcast_to
  c.push_back(unary("broadcast_to [2,3,5]", {3, 1}, {2, 3, 5}, [](const array& a) { return broadcast_to(a, {2, 3, 5}); },
                    [](const std::vector<int>& o) { return std::vector<int>{o[1], 0}; }));
  c.push_back(unary("broadcast_to [4,7,13]", {7, 13}, {4, 7, 13},
                    [](const array& a) { return broadcast_to(a, {4, 7, 13}); },
                    [](const std::vector<int>& o) { return std::vector<int>{o[1], o[2]}; }));
  c.push_back(same_order("broadcast_to same shape", {7, 13}, {7, 13},
                         [](const array& a) { return broadcast_to(a, {7, 13}); }));
  // slice
  c.push_back(slice_case({7, 13}, {1, 2}, {6, 11}, Shape{2, 3}));
  c.push_back(slice_case({7, 13}, {-1, -2}, {-8, 0}, Shape{-1, -2}));
  c.push_back(slice_case({7, 13}, {-100, 5}, {100, 1000}, Shape{1, 1}));
  c.push_back(slice_case({7, 13}, {100, -100}, {-100, 100}, Shape{-2, 1}));
  c.push_back(slice_case({7, 13}, {5, 0}, {2, 13}, Shape{1, 1}));    // empty
  c.push_back(slice_case({7, 13}, {0, 3}, {5, 9}, Shape{-1, 2}));    // empty, negative step
  c.push_back(slice_case({7, 13}, {2, 3}, {2, 9}, std::nullopt));     // empty
  c.push_back(slice_case({5, 3, 17}, {1, 0, 3}, {4, 3, 16}, std::nullopt));
  c.push_back(slice_case({5, 3, 17}, {4, 0, 16}, {-6, 3, 0}, Shape{-2, 1, -5}));
  c.push_back(slice_case({5, 3, 17}, {-2, 1, 1}, {5, 2, 17}, Shape{1, 1, 4}));
  // slice_update
  c.push_back(slice_update_case({7, 13}, {3, 13}, {1, 0}, {7, 13}, Shape{2, 1}));
  c.push_back(slice_update_case({7, 13}, {13}, {1, 0}, {7, 13}, Shape{2, 1}));  // broadcast update
  c.push_back(slice_update_case({7, 13}, {3, 1}, {-1, 10}, {-8, 2}, Shape{-3, -4}));
  c.push_back(slice_update_case({7, 13}, {3, 6}, {2, 3}, {5, 9}, std::nullopt));
  c.push_back(slice_update_case({5, 3, 17}, {1, 3, 4}, {4, 0, 16}, {-6, 3, 0}, Shape{-2, 1, -5}));
  // take
  c.push_back(take_case({5, 7}, random_ints(6, -7, 7), {3, 2}, 1, int32));
  c.push_back(take_case({5, 7}, random_ints(4, -5, 5), {4}, 0, int32));
  c.push_back(take_case({5, 7}, random_ints(4, -5, 5), {4}, -2, int64));
  c.push_back(take_case({5, 3, 4}, random_ints(5, 0, 3), {5}, 1, uint32));
  c.push_back(take_case({5, 7}, random_ints(6, -35, 35), {2, 3}, std::nullopt, int32));
  c.push_back(take_case({5, 7}, {34, 0, -1}, {3}, std::nullopt, int32));
  c.push_back(take_case({5, 7}, {3}, {}, 1, int32));  // 0-d indices drop the axis
  // take_along_axis
  {
    std::vector<int> iv = random_ints(12, 0, 6);
    c.push_back(unary("take_along_axis 1", {4, 6}, {4, 3},
                      [iv](const array& a) { return take_along_axis(a, array(iv, Shape{4, 3}, int32), 1); },
                      [iv](const std::vector<int>& o) { return std::vector<int>{o[0], iv[o[0] * 3 + o[1]]}; }));
    std::vector<int> iv0 = random_ints(12, 0, 4);
    c.push_back(unary("take_along_axis 0", {4, 6}, {2, 6},
                      [iv0](const array& a) { return take_along_axis(a, array(iv0, Shape{2, 6}, uint32), 0); },
                      [iv0](const std::vector<int>& o) { return std::vector<int>{iv0[o[0] * 6 + o[1]], o[1]}; }));
    std::vector<int> iv3 = random_ints(2 * 3 * 5, 0, 4);
    c.push_back(unary("take_along_axis -1", {2, 3, 4}, {2, 3, 5},
                      [iv3](const array& a) { return take_along_axis(a, array(iv3, Shape{2, 3, 5}, int32), -1); },
                      [iv3](const std::vector<int>& o) {
                        return std::vector<int>{o[0], o[1], iv3[(o[0] * 3 + o[1]) * 5 + o[2]]};
                      }));
  }
  // concatenate / stack / split
  c.push_back(Case{"concatenate axis 0",
                   {{2, 3}, {4, 3}, {1, 3}},
                   [](const std::vector<array>& x) { return std::vector<array>{concatenate(x, 0)}; },
                   {{7, 3}},
                   [](int, const std::vector<int>& o) {
                     if (o[0] < 2) return from(o, 0);
                     if (o[0] < 6) return from({o[0] - 2, o[1]}, 1);
                     return from({o[0] - 6, o[1]}, 2);
                   }});
  c.push_back(Case{"concatenate axis -1",
                   {{3, 2}, {3, 5}},
                   [](const std::vector<array>& x) { return std::vector<array>{concatenate(x, -1)}; },
                   {{3, 7}},
                   [](int, const std::vector<int>& o) {
                     return o[1] < 2 ? from(o, 0) : from({o[0], o[1] - 2}, 1);
                   }});
  c.push_back(Case{"concatenate flattened",
                   {{2, 3}, {4}},
                   [](const std::vector<array>& x) { return std::vector<array>{concatenate(x)}; },
                   {{10}},
                   [](int, const std::vector<int>& o) {
                     return o[0] < 6 ? from(unravel(o[0], {2, 3}), 0) : from({o[0] - 6}, 1);
                   }});
  c.push_back(Case{"stack axis 0",
                   {{2, 3}, {2, 3}, {2, 3}},
                   [](const std::vector<array>& x) { return std::vector<array>{stack(x, 0)}; },
                   {{3, 2, 3}},
                   [](int, const std::vector<int>& o) { return from({o[1], o[2]}, o[0]); }});
  c.push_back(Case{"stack default axis",
                   {{2, 3}, {2, 3}},
                   [](const std::vector<array>& x) { return std::vector<array>{stack(x)}; },
                   {{2, 2, 3}},
                   [](int, const std::vector<int>& o) { return from({o[1], o[2]}, o[0]); }});
  c.push_back(Case{"stack axis -1",
                   {{2, 3}, {2, 3}, {2, 3}},
                   [](const std::vector<array>& x) { return std::vector<array>{stack(x, -1)}; },
                   {{2, 3, 3}},
                   [](int, const std::vector<int>& o) { return from({o[0], o[1]}, o[2]); }});
  c.push_back(Case{"stack axis 1",
                   {{2, 3}, {2, 3}},
                   [](const std::vector<array>& x) { return std::vector<array>{stack(x, 1)}; },
                   {{2, 2, 3}},
                   [](int, const std::vector<int>& o) { return from({o[0], o[2]}, o[1]); }});
  c.push_back(Case{"split 3 axis 0",
                   {{6, 4}},
                   [](const std::vector<array>& x) { return split(x[0], 3, 0); },
                   {{2, 4}, {2, 4}, {2, 4}},
                   [](int k, const std::vector<int>& o) { return from({o[0] + 2 * k, o[1]}); }});
  c.push_back(Case{"split 2 default axis",
                   {{6, 5}},
                   [](const std::vector<array>& x) { return split(x[0], 2); },
                   {{3, 5}, {3, 5}},
                   [](int k, const std::vector<int>& o) { return from({o[0] + 3 * k, o[1]}); }});
  c.push_back(Case{"split indices {1,4} axis 1",
                   {{3, 7}},
                   [](const std::vector<array>& x) { return split(x[0], Shape{1, 4}, 1); },
                   {{3, 1}, {3, 3}, {3, 3}},
                   [](int k, const std::vector<int>& o) {
                     const int off[] = {0, 1, 4};
                     return from({o[0], o[1] + off[k]});
                   }});
  c.push_back(Case{"split indices {2} axis -1",
                   {{2, 3, 5}},
                   [](const std::vector<array>& x) { return split(x[0], Shape{2}, -1); },
                   {{2, 3, 2}, {2, 3, 3}},
                   [](int k, const std::vector<int>& o) { return from({o[0], o[1], o[2] + 2 * k}); }});
  // pad
  {
    Case p{"pad {{1,2},{0,3}} value 3",
           {{3, 4}},
           [](const std::vector<array>& x) { return std::vector<array>{pad(x[0], {{1, 2}, {0, 3}}, array(3))}; },
           {{6, 7}},
           [](int, const std::vector<int>& o) -> Source {
             if (o[0] < 1 || o[0] >= 4 || o[1] >= 4) return std::nullopt;
             return from({o[0] - 1, o[1]});
           },
           3.0};
    c.push_back(p);
    Case p2{"pad 2",
            {{3, 4}},
            [](const std::vector<array>& x) { return std::vector<array>{pad(x[0], 2)}; },
            {{7, 8}},
            [](int, const std::vector<int>& o) -> Source {
              if (o[0] < 2 || o[0] >= 5 || o[1] < 2 || o[1] >= 6) return std::nullopt;
              return from({o[0] - 2, o[1] - 2});
            },
            0.0};
    c.push_back(p2);
    Case p3{"pad 3-d {{0,0},{2,1},{1,0}}",
            {{2, 3, 4}},
            [](const std::vector<array>& x) {
              return std::vector<array>{pad(x[0], {{0, 0}, {2, 1}, {1, 0}}, array(1))};
            },
            {{2, 6, 5}},
            [](int, const std::vector<int>& o) -> Source {
              if (o[1] < 2 || o[1] >= 5 || o[2] < 1) return std::nullopt;
              return from({o[0], o[1] - 2, o[2] - 1});
            },
            1.0};
    c.push_back(p3);
  }
  // repeat / tile / flip
  c.push_back(unary("repeat 2 axis 1", {2, 3}, {2, 6}, [](const array& a) { return repeat(a, 2, 1); },
                    [](const std::vector<int>& o) { return std::vector<int>{o[0], o[1] / 2}; }));
  c.push_back(unary("repeat 3 axis 0", {2, 3}, {6, 3}, [](const array& a) { return repeat(a, 3, 0); },
                    [](const std::vector<int>& o) { return std::vector<int>{o[0] / 3, o[1]}; }));
  c.push_back(unary("repeat 2 axis -1", {2, 3, 4}, {2, 3, 8}, [](const array& a) { return repeat(a, 2, -1); },
                    [](const std::vector<int>& o) { return std::vector<int>{o[0], o[1], o[2] / 2}; }));
  c.push_back(unary("repeat 2 flattened", {2, 3}, {12}, [](const array& a) { return repeat(a, 2); },
                    [](const std::vector<int>& o) { return unravel(o[0] / 2, {2, 3}); }));
  c.push_back(unary("tile {2,2}", {2, 3}, {4, 6}, [](const array& a) { return tile(a, {2, 2}); },
                    [](const std::vector<int>& o) { return std::vector<int>{o[0] % 2, o[1] % 3}; }));
  c.push_back(unary("tile {3}", {2, 3}, {2, 9}, [](const array& a) { return tile(a, {3}); },
                    [](const std::vector<int>& o) { return std::vector<int>{o[0], o[1] % 3}; }));
  c.push_back(unary("tile {2,1,3}", {2, 3}, {2, 2, 9}, [](const array& a) { return tile(a, {2, 1, 3}); },
                    [](const std::vector<int>& o) { return std::vector<int>{o[1], o[2] % 3}; }));
  c.push_back(unary("flip {1}", {3, 4, 5}, {3, 4, 5}, [](const array& a) { return flip(a, {1}); },
                    [](const std::vector<int>& o) { return std::vector<int>{o[0], 3 - o[1], o[2]}; }));
  c.push_back(unary("flip {0,-1}", {3, 4, 5}, {3, 4, 5}, [](const array& a) { return flip(a, {0, -1}); },
                    [](const std::vector<int>& o) { return std::vector<int>{2 - o[0], o[1], 4 - o[2]}; }));
  c.push_back(unary("flip", {3, 4, 5}, {3, 4, 5}, [](const array& a) { return flip(a); },
                    [](const std::vector<int>& o) { return std::vector<int>{2 - o[0], 3 - o[1], 4 - o[2]}; }));
  // copy / contiguous
  c.push_back(same_order("copy", {7, 13}, {7, 13}, [](const array& a) { return copy(a); }));
  c.push_back(same_order("contiguous", {7, 13}, {7, 13}, [](const array& a) { return contiguous(a); }));
  c.push_back(same_order("contiguous 3-d", {5, 3, 17}, {5, 3, 17}, [](const array& a) { return contiguous(a); }));
  // compositions of views
  c.push_back(unary("composed: slice of transpose of reshape", {6, 10}, {5, 2},
                    [](const array& a) { return slice(transpose(reshape(a, {3, 20})), {1, 0}, {20, 3}, {4, 2}); },
                    [](const std::vector<int>& o) {
                      int flat = (2 * o[1]) * 20 + (1 + 4 * o[0]);  // element [2*o1, 1+4*o0] of the [3,20] view
                      return unravel(flat, {6, 10});
                    }));
  return c;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> c = make_cases();
  return c;
}

void run_case(const Case& c, Dtype dt, Layout layout) {
  SCOPED_TRACE(c.name + " " + dtype_name(dt) + " " + layout_name(layout));
  std::vector<array> in;
  std::vector<std::vector<double>> in_vals;
  for (const Shape& s : c.in_shapes) {
    in.push_back(make_input(s, layout, value_gen(dt)));
    in_vals.push_back(to_double(in.back()));
  }
  std::vector<array> out = c.op(in);
  ASSERT_EQ(out.size(), c.out_shapes.size());
  double fill = dt == bool_ ? (c.fill != 0) : c.fill;
  for (size_t k = 0; k < out.size(); ++k) {
    SCOPED_TRACE("output " + std::to_string(k));
    ASSERT_EQ(out[k].shape(), c.out_shapes[k]);
    EXPECT_STREQ(dtype_name(out[k].dtype()), dtype_name(dt));
    std::vector<double> want(numel(c.out_shapes[k]));
    for (size_t i = 0; i < want.size(); ++i) {
      Source s = c.src(static_cast<int>(k), unravel(static_cast<int64_t>(i), c.out_shapes[k]));
      want[i] = s ? in_vals[s->first][ravel(s->second, c.in_shapes[s->first])] : fill;
    }
    EXPECT_TRUE(all_close(out[k], want, 0.0));
  }
  // Ops are functional: the inputs are unchanged.
  for (size_t j = 0; j < in.size(); ++j) EXPECT_TRUE(all_close(in[j], in_vals[j], 0.0));
}

// One test per op family, each over every dtype and layout.
void run_family(const std::string& prefix) {
  int n = 0;
  for (const Case& c : cases()) {
    if (c.name.rfind(prefix, 0) != 0) continue;
    ++n;
    for (Dtype dt : {float32, bfloat16, int32, bool_, int64}) {
      for (Layout layout : kLayouts) run_case(c, dt, layout);
    }
  }
  EXPECT_GT(n, 0) << "no cases named " << prefix;
}

TEST(ShapeTest, Reshape) { run_family("reshape"); }
TEST(ShapeTest, Flatten) { run_family("flatten"); }
TEST(ShapeTest, ExpandDims) { run_family("expand_dims"); }
TEST(ShapeTest, Squeeze) { run_family("squeeze"); }
TEST(ShapeTest, Transpose) { run_family("transpose"); }
TEST(ShapeTest, Swapaxes) { run_family("swapaxes"); }
TEST(ShapeTest, BroadcastTo) { run_family("broadcast_to"); }
TEST(ShapeTest, Slice) { run_family("slice "); }
TEST(ShapeTest, SliceUpdate) { run_family("slice_update"); }
TEST(ShapeTest, Take) { run_family("take "); }
TEST(ShapeTest, TakeAlongAxis) { run_family("take_along_axis"); }
TEST(ShapeTest, Concatenate) { run_family("concatenate"); }
TEST(ShapeTest, Stack) { run_family("stack"); }
TEST(ShapeTest, Split) { run_family("split"); }
TEST(ShapeTest, Pad) { run_family("pad"); }
TEST(ShapeTest, Repeat) { run_family("repeat"); }
TEST(ShapeTest, Tile) { run_family("tile"); }
TEST(ShapeTest, Flip) { run_family("flip"); }
TEST(ShapeTest, CopyContiguous) {
  run_family("copy");
  run_family("contiguous");
}
TEST(ShapeTest, ComposedViews) { run_family("composed"); }

// contiguous(swapaxes(x, -1, -2)) runs the blocked transpose kernels: sizes
// around their 16x16 blocks and row bands, batches, sources with a row
// stride (slices), 4-byte dtypes of each kind and a 2-byte one; with
// streaming stores forced on (taken where output rows are whole multiples
// of 16 elements) and off.
TEST(ShapeTest, TransposeCopyBlocks) {
  struct Case {
    Shape shape;
    Dtype dt;
    bool sliced;  // x is a slice of a wider array
    bool flipped = false;  // x has its rows reversed (a negative row stride)
  };
  const Case cases[] = {{{16, 16}, float32, false}, {{17, 33}, float32, false}, {{65, 130}, int32, false},
                        {{64, 47}, uint32, true},   {{3, 33, 47}, float32, false}, {{2, 70, 18}, float32, true},
                        {{100, 16}, float16, false}, {{272, 1100}, float32, false}, {{2, 32, 48}, int32, false},
                        {{40, 33}, float32, false, true},  {{3, 18, 64}, int32, true, true}};
  for (size_t threshold : {size_t{0}, SIZE_MAX}) {
    cpu::set_streaming_threshold(threshold);
    for (const Case& c : cases) {
      SCOPED_TRACE(fmt(c.shape) + " " + dtype_name(c.dt) + (c.sliced ? " sliced" : "") + (c.flipped ? " flipped" : "") +
                   (threshold == 0 ? " streamed" : ""));
      Shape wide = c.shape;
      if (c.sliced) wide.back() += 3;
      array base = random_array(wide, c.dt, 0, 100);
      array x = c.sliced ? slice(base, Shape(c.shape.size(), 0), c.shape) : base;
      if (c.flipped) x = flip(x, {static_cast<int>(c.shape.size()) - 2});
      array t = contiguous(swapaxes(x, -1, -2));
      const int nd = static_cast<int>(c.shape.size());
      const int64_t rows = c.shape[nd - 2], cols = c.shape[nd - 1];
      const int64_t batches = numel(c.shape) / (rows * cols);
      Shape want_shape = c.shape;
      std::swap(want_shape[nd - 1], want_shape[nd - 2]);
      ASSERT_EQ(t.shape(), want_shape);
      std::vector<double> xv = to_double(x), tv = to_double(t);
      for (int64_t b = 0; b < batches; ++b) {
        for (int64_t i = 0; i < rows; ++i) {
          for (int64_t j = 0; j < cols; ++j) {
            ASSERT_EQ(tv[(b * cols + j) * rows + i], xv[(b * rows + i) * cols + j]) << b << " " << i << " " << j;
          }
        }
      }
    }
  }
  cpu::set_streaming_threshold(SIZE_MAX);
}

TEST(ShapeTest, PadValueCastAndFloat16) {
  array a = random_array({2, 3}, float16);
  std::vector<double> av = to_double(a);
  array p = pad(a, {{0, 1}, {2, 0}}, array(1.5f));
  EXPECT_STREQ(dtype_name(p.dtype()), dtype_name(float16));
  ASSERT_EQ(p.shape(), (Shape{3, 5}));
  std::vector<double> want;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 5; ++j) want.push_back(i < 2 && j >= 2 ? av[i * 3 + j - 2] : 1.5);
  }
  EXPECT_TRUE(all_close(p, want, 0.0));
}

TEST(ShapeTest, SliceUpdateCastsUpdate) {
  array src = random_array({4, 5}, float32);
  std::vector<double> sv = to_double(src);
  array upd = array(std::vector<int32_t>{7, -3}, Shape{2, 1});
  array r = slice_update(src, upd, {1, 1}, {3, 4});
  EXPECT_STREQ(dtype_name(r.dtype()), dtype_name(float32));
  std::vector<double> want = sv;
  for (int i = 1; i < 3; ++i) {
    for (int j = 1; j < 4; ++j) want[i * 5 + j] = i == 1 ? 7 : -3;
  }
  EXPECT_TRUE(all_close(r, want, 0.0));
  EXPECT_TRUE(all_close(src, sv, 0.0));
}

TEST(ShapeTest, TakeNonContiguousIndices) {
  array a = random_array({5, 7});
  std::vector<double> av = to_double(a);
  std::vector<int> iv = {0, 6, -1, 3, 2, -7};  // [2,3]; transposed -> [3,2]
  array idx = transpose(array(iv, Shape{2, 3}, int32));
  array r = take(a, idx, 1);
  ASSERT_EQ(r.shape(), (Shape{5, 3, 2}));
  std::vector<double> want;
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int k = 0; k < 2; ++k) {
        int v = iv[k * 3 + j];
        want.push_back(av[i * 7 + (v < 0 ? v + 7 : v)]);
      }
    }
  }
  EXPECT_TRUE(all_close(r, want, 0.0));
  // Broadcast (zero-stride) indices.
  array bidx = broadcast_to(array({4, -2}, int32), {3, 2});
  array rb = take(a, bidx);
  ASSERT_EQ(rb.shape(), (Shape{3, 2}));
  EXPECT_TRUE(all_close(rb, {av[4], av[33], av[4], av[33], av[4], av[33]}, 0.0));
}

// ---- views share the input buffer ----

TEST(ShapeTest, ViewsShareBuffer) {
  array a = random_array({6, 8});
  a.eval();
  const float* p = a.data<float>();
  array row = random_array({1, 8});
  array col = random_array({6, 1});
  array e = random_array({6, 1, 8});
  eval(row, col, e);
  struct View {
    const char* name;
    array v;
    const float* base;
    int64_t offset;
    Strides strides;  // entries of size-1 axes are not checked
  };
  const View views[] = {
      {"reshape", reshape(a, {4, 12}), p, 0, {12, 1}},
      {"reshape -1", reshape(a, {2, -1, 4}), p, 0, {24, 4, 1}},
      {"flatten", flatten(a), p, 0, {1}},
      {"transpose", transpose(a), p, 0, {1, 8}},
      {"swapaxes", swapaxes(a, 0, 1), p, 0, {1, 8}},
      {"slice", slice(a, {1, 2}, {5, 8}), p, 10, {8, 1}},
      {"strided slice", slice(a, {1, 2}, {6, 8}, {2, 3}), p, 10, {16, 3}},
      {"negative-step slice", slice(a, {5, 7}, {-100, -100}, {-1, -2}), p, 47, {-8, -2}},
      {"slice of transpose", slice(transpose(a), {2, 1}, {8, 6}, {3, 1}), p, 2 + 8, {3, 8}},
      {"expand_dims", expand_dims(a, 1), p, 0, {8, 0, 1}},
      {"squeeze", squeeze(e), e.data<float>(), 0, {8, 1}},
      {"squeeze axis", squeeze(e, 1), e.data<float>(), 0, {8, 1}},
      {"broadcast row", broadcast_to(row, {6, 8}), row.data<float>(), 0, {0, 1}},
      {"broadcast col", broadcast_to(col, {2, 6, 5}), col.data<float>(), 0, {0, 1, 0}},
      {"broadcast new axes", broadcast_to(a, {3, 6, 8}), p, 0, {0, 8, 1}},
      {"contiguous of contiguous", contiguous(a), p, 0, {8, 1}},
  };
  for (const View& v : views) {
    SCOPED_TRACE(v.name);
    v.v.eval();
    EXPECT_EQ(v.v.data<float>(), v.base + v.offset);
    const Strides& st = v.v.strides();
    ASSERT_EQ(st.size(), v.strides.size());
    for (size_t d = 0; d < st.size(); ++d) {
      if (v.v.shape()[d] != 1) {
        EXPECT_EQ(st[d], v.strides[d]) << "axis " << d;
      }
    }
  }
  // Copies own their buffer.
  array c = copy(a);
  c.eval();
  EXPECT_NE(c.data<float>(), p);
  EXPECT_TRUE(c.is_row_contiguous());
  array t = contiguous(transpose(a));
  t.eval();
  EXPECT_TRUE(t.is_row_contiguous());
  EXPECT_NE(t.data<float>(), p);
  EXPECT_FALSE(transpose(a).is_row_contiguous());
}

// ---- argument errors ----

TEST(ShapeTest, Errors) {
  array a = random_array({3, 4});
  EXPECT_TRUE(throws_error([&] { reshape(a, {5, 3}).eval(); }, {"reshape", "(3,4)", "(5,3)"}));
  EXPECT_TRUE(throws_error([&] { reshape(a, {5, -1}).eval(); }, {"reshape", "(3,4)"}));
  EXPECT_TRUE(throws_error([&] { reshape(a, {-1, -1}).eval(); }, {"reshape", "(3,4)"}));
  EXPECT_TRUE(throws_error([&] { transpose(a, {0, 0}).eval(); }, {"transpose", "(3,4)"}));
  EXPECT_TRUE(throws_error([&] { transpose(a, {0}).eval(); }, {"transpose", "(3,4)"}));
  EXPECT_TRUE(throws_error([&] { transpose(a, {0, 2}).eval(); }, {"transpose", "(3,4)"}));
  EXPECT_TRUE(throws_error([&] { swapaxes(a, 0, 2).eval(); }, {"swapaxes", "(3,4)"}));
  EXPECT_TRUE(throws_error([&] { expand_dims(a, 3).eval(); }, {"expand_dims", "(3,4)"}));
  EXPECT_TRUE(throws_error([&] { squeeze(a, 0).eval(); }, {"squeeze", "(3,4)"}));
  EXPECT_TRUE(throws_error([&] { squeeze(reshape(a, {3, 1, 4}), {1, 2}).eval(); }, {"squeeze", "(3,1,4)"}));
  EXPECT_TRUE(throws_error([&] { broadcast_to(random_array({3, 2}), {3, 4}).eval(); }, {"broadcast", "(3,2)", "(3,4)"}));
  EXPECT_TRUE(throws_error([&] { broadcast_to(a, {4}).eval(); }, {"broadcast", "(3,4)"}));
  EXPECT_TRUE(throws_error([&] { concatenate({a, random_array({3, 5})}, 0).eval(); }, {"concatenate", "(3,4)", "(3,5)"}));
  EXPECT_TRUE(throws_error([&] { concatenate({a, random_array({3, 4, 1})}, 0).eval(); }, {"concatenate"}));
  EXPECT_TRUE(throws_error([&] { concatenate({a, a}, 2).eval(); }, {"concatenate"}));
  EXPECT_TRUE(throws_error([&] { stack({a, random_array({4, 3})}).eval(); }, {"stack", "(3,4)", "(4,3)"}));
  EXPECT_TRUE(throws_error([&] { split(a, 3, 1); }, {"split", "(3,4)"}));
  EXPECT_TRUE(throws_error([&] { take(a, array({0}, int32), 2).eval(); }, {"take", "(3,4)"}));
  EXPECT_TRUE(throws_error([&] { take(a, array({0.5f}), 0).eval(); }, {"take"}));  // float indices
  EXPECT_TRUE(throws_error([&] { flip(a, {2}).eval(); }, {"flip", "(3,4)"}));
}

TEST(ShapeTest, TakeOutOfRangeThrowsAtEval) {
  array a = random_array({5, 7});
  struct Bad {
    const char* name;
    std::function<array()> make;
  };
  const Bad bad[] = {
      {"axis 1, index 7", [&] { return take(a, array({0, 7}, int32), 1); }},
      {"axis 1, index -8", [&] { return take(a, array({-8, 1}, int32), 1); }},
      {"axis 0, index 5 (int64)", [&] { return take(a, array(std::vector<int64_t>{5}, Shape{1}), 0); }},
      {"axis 0, uint32 index 1000", [&] { return take(a, array({1000u}, uint32), 0); }},
      {"flattened, index 35", [&] { return take(a, array({35}, int32)); }},
      {"flattened, index -36", [&] { return take(a, array({-36}, int32)); }},
      {"take_along_axis, index 7", [&] { return take_along_axis(a, full({5, 1}, 7, int32), 1); }},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.name);
    std::optional<array> r;
    EXPECT_NO_THROW(r = b.make());  // the index values are only known at evaluation
    if (r) {
      EXPECT_TRUE(throws_error([&] { r->eval(); }, {"take"}));
    }
  }
}

}  // namespace
}  // namespace kiln::test
