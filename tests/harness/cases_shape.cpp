// Harness cases of the shape and data-movement ops (Reshape, Transpose,
// Broadcast, Slice, SliceUpdate, Concatenate, StopGradient). Their float64
// reference is the op itself on the contiguous float64 input (data
// movement is exact), except transpose and slice, checked against loops.
#include "harness/harness.h"
#include "test_util.h"

namespace kiln::harness {
namespace {

const std::vector<Dtype> kAll = {float32, float16, bfloat16, float64, int32,  bool_, uint8,
                                 int8,    uint32,  int64,    uint16,  int16,  uint64};

// A one-input data-movement case, differentiable and batchable.
void move_case(const char* op, const char* prim, const Shape& shape, std::function<array(const array&)> f,
               RefFn ref = {}) {
  add({.op = op,
       .primitive = prim,
       .name = test::fmt(shape),
       .fn = [f](const Arrays& x) { return Arrays{f(x[0])}; },
       .inputs = {in(shape)},
       .dtypes = kAll,
       .ref = std::move(ref),
       .diff = {0},
       .grad2 = true});
}

// Python slicing on values (start/stop already in range, any step).
RefFn slice_ref(Shape start, Shape stop, Shape step) {
  return [start, stop, step](const Arrays& x) {
    const Shape& s = x[0].shape();
    auto v = values(x[0]);
    Shape out;
    for (size_t d = 0; d < s.size(); ++d) {
      int n = step[d] > 0 ? (stop[d] - start[d] + step[d] - 1) / step[d] : (start[d] - stop[d] - step[d] - 1) / -step[d];
      out.push_back(std::max(n, 0));
    }
    std::vector<double> r(test::numel(out));
    for (size_t i = 0; i < r.size(); ++i) {
      auto idx = test::unravel(static_cast<int64_t>(i), out);
      int64_t j = 0;
      for (size_t d = 0; d < s.size(); ++d) j = j * s[d] + start[d] + idx[d] * step[d];
      r[i] = v[j];
    }
    return std::vector<std::vector<double>>{r};
  };
}

}  // namespace

void register_shape() {
  move_case("reshape", "Reshape", {3, 4}, [](const array& a) { return reshape(a, {2, -1, 3}); });
  move_case("reshape", "Reshape", {2, 3, 5}, [](const array& a) { return reshape(a, {30}); });
  move_case("reshape", "Reshape", {0, 4}, [](const array& a) { return reshape(a, {2, 0, 2}); });
  move_case("transpose", "Transpose", {2, 3, 4}, [](const array& a) { return transpose(a, {2, 0, 1}); },
            [](const Arrays& x) {
              const Shape& s = x[0].shape();
              auto v = values(x[0]);
              std::vector<double> r;
              for (int k = 0; k < s[2]; ++k)
                for (int i = 0; i < s[0]; ++i)
                  for (int j = 0; j < s[1]; ++j) r.push_back(v[(i * s[1] + j) * s[2] + k]);
              return std::vector<std::vector<double>>{r};
            });
  move_case("transpose", "Transpose", {3, 5}, [](const array& a) { return transpose(a); });
  move_case("swapaxes", "Transpose", {2, 3, 4}, [](const array& a) { return swapaxes(a, 0, -1); });
  move_case("expand_dims", "Reshape", {3, 5}, [](const array& a) { return expand_dims(a, {0, 3}); });
  move_case("squeeze", "Reshape", {3, 1, 5, 1}, [](const array& a) { return squeeze(a); });
  move_case("squeeze", "Reshape", {1, 4}, [](const array& a) { return squeeze(a, 0); });
  move_case("flatten", "Reshape", {2, 3, 4}, [](const array& a) { return flatten(a, 1, 2); });
  move_case("flatten", "Reshape", {3, 5}, [](const array& a) { return flatten(a); });
  move_case("broadcast_to", "Broadcast", {3, 1}, [](const array& a) { return broadcast_to(a, {2, 3, 4}); });
  move_case("broadcast_to", "Broadcast", {}, [](const array& a) { return broadcast_to(a, {5}); });
  move_case("broadcast_to", "Broadcast", {1, 3}, [](const array& a) { return broadcast_to(a, {0, 3}); });
  move_case("slice", "Slice", {5, 7}, [](const array& a) { return slice(a, {1, 0}, {4, 7}, {1, 2}); },
            slice_ref({1, 0}, {4, 7}, {1, 2}));
  move_case("slice", "Slice", {6, 5}, [](const array& a) { return slice(a, {-1, 4}, {-7, 0}, {-2, -3}); },
            slice_ref({5, 4}, {-1, 0}, {-2, -3}));
  move_case("slice", "Slice", {2, 3, 4}, [](const array& a) { return slice(a, {0, 1, 1}, {2, 3, 3}); },
            slice_ref({0, 1, 1}, {2, 3, 3}, {1, 1, 1}));
  move_case("slice", "Slice", {4, 3}, [](const array& a) { return slice(a, {2, 0}, {2, 3}); });
  move_case("flip", "Slice", {3, 5}, [](const array& a) { return flip(a); });
  move_case("flip", "Slice", {2, 3, 4}, [](const array& a) { return flip(a, {1}); });
  move_case("repeat", "Broadcast", {3, 5}, [](const array& a) { return repeat(a, 3, 1); });
  move_case("repeat", "Broadcast", {2, 3}, [](const array& a) { return repeat(a, 2); });
  move_case("tile", "Broadcast", {3, 5}, [](const array& a) { return tile(a, {2, 1, 2}); });
  move_case("tile", "Broadcast", {7}, [](const array& a) { return tile(a, {3}); });
  move_case("split", "Slice", {6, 5}, [](const array& a) { return split(a, 3, 0)[1]; });

  // Several inputs or outputs.
  add({.op = "split",
       .primitive = "Slice",
       .name = "(3,7) at (2,5) axis 1, every output",
       .fn = [](const Arrays& x) { return split(x[0], Shape{2, 5}, 1); },
       .inputs = {in({3, 7})},
       .dtypes = kAll,
       .diff = {0}});
  add({.op = "slice_update",
       .primitive = "SliceUpdate",
       .name = "(5,6) rows 1:4 step 2, update (2,1)",
       .fn = [](const Arrays& x) { return Arrays{slice_update(x[0], x[1], {1, 0}, {4, 6}, {2, 1})}; },
       .inputs = {in({5, 6}), in({2, 1})},
       .dtypes = kAll,
       .diff = {0, 1},
       .grad2 = true});
  add({.op = "slice_update",
       .primitive = "SliceUpdate",
       .name = "(2,3,4) [:, 1:3, ::-1]",
       .fn = [](const Arrays& x) { return Arrays{slice_update(x[0], x[1], {0, 1, -1}, {2, 3, -5}, {1, 1, -1})}; },
       .inputs = {in({2, 3, 4}), in({2, 2, 4})},
       .dtypes = kAll,
       .diff = {0, 1}});
  add({.op = "pad",
       .primitive = "SliceUpdate",
       .name = "(3,4) ((1,2),(0,3)) value array",
       .fn = [](const Arrays& x) { return Arrays{pad(x[0], {{1, 2}, {0, 3}}, x[1])}; },
       .inputs = {in({3, 4}), in({})},
       .dtypes = kAll,
       .diff = {0, 1}});
  add({.op = "pad",
       .primitive = "SliceUpdate",
       .name = "(2,3,1) 1",
       .fn = [](const Arrays& x) { return Arrays{pad(x[0], 1)}; },
       .inputs = {in({2, 3, 1})},
       .dtypes = kAll,
       .diff = {0}});
  add({.op = "concatenate",
       .primitive = "Concatenate",
       .name = "(3,2),(3,5),(3,0) axis 1",
       .fn = [](const Arrays& x) { return Arrays{concatenate({x[0], x[1], x[2]}, 1)}; },
       .inputs = {in({3, 2}), in({3, 5}), in({3, 0})},
       .dtypes = kAll,
       .diff = {0, 1, 2},
       .grad2 = true});
  add({.op = "concatenate",
       .primitive = "Concatenate",
       .name = "(2,3),(4) flattened",
       .fn = [](const Arrays& x) { return Arrays{concatenate({x[0], x[1]})}; },
       .inputs = {in({2, 3}), in({4})},
       .dtypes = kAll,
       .diff = {0, 1}});
  add({.op = "stack",
       .primitive = "Concatenate",
       .name = "2 x (3,4) axis 1",
       .fn = [](const Arrays& x) { return Arrays{stack({x[0], x[1]}, 1)}; },
       .inputs = {in({3, 4}), in({3, 4})},
       .dtypes = kAll,
       .diff = {0, 1}});
  add({.op = "stack",
       .primitive = "Concatenate",
       .name = "3 x () axis 0",
       .fn = [](const Arrays& x) { return Arrays{stack({x[0], x[1], x[2]})}; },
       .inputs = {in({}), in({}), in({})},
       .dtypes = kAll,
       .diff = {0, 1, 2}});
  // One input used twice: the cotangents of both uses add up.
  add({.op = "concatenate",
       .primitive = "Concatenate",
       .name = "x with itself, axis 0",
       .fn = [](const Arrays& x) { return Arrays{concatenate({x[0], x[0]}, 0)}; },
       .inputs = {in({2, 3})},
       .diff = {0},
       .grad2 = true});
  add({.op = "slice_update",
       .primitive = "SliceUpdate",
       .name = "x into itself reversed",
       .fn = [](const Arrays& x) { return Arrays{slice_update(x[0], flip(x[0], {1}), {0, 0}, {3, 4})}; },
       .inputs = {in({3, 4})},
       .diff = {0}});

  // stop_gradient: the identity forward (its zero derivative is checked in
  // test_op_harness.cpp; finite differences see the identity).
  add({.op = "stop_gradient",
       .primitive = "StopGradient",
       .name = "(3,5)",
       .fn = [](const Arrays& x) { return Arrays{stop_gradient(x[0])}; },
       .inputs = {in({3, 5})},
       .dtypes = kAll});
}

}  // namespace kiln::harness
