// Cases of the MLX ops written as compositions in src/core/ops_numpy_extras.cpp
// and ops_masked_products.cpp: windows, diff, median, count_nonzero,
// vecdot, trunc, reciprocal, positive, logical_xor, number_of_elements,
// depends, block_masked_mm, gather_mm, segmented_mm, hadamard_transform,
// masked_scatter and the accumulating slice updates. References are
// written out with loops (numpy's definitions), not the ops themselves.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "harness/harness.h"

namespace kiln::harness {
namespace {

using V = std::vector<double>;
using VV = std::vector<V>;

void comp(std::string op, std::string name, OpFn fn, std::vector<Input> inputs, RefFn ref, std::vector<int> diff = {},
          std::vector<Dtype> dtypes = {float32, float16, bfloat16, float64}) {
  add({.op = std::move(op),
       .primitive = "composite",
       .name = std::move(name),
       .fn = std::move(fn),
       .inputs = std::move(inputs),
       .dtypes = std::move(dtypes),
       .ref = std::move(ref),
       .diff = std::move(diff)});
}

// A window of size M times the input (so the case has a dtype and a vmap).
void window_case(const char* op, int M, std::function<array(int)> f, std::function<double(int, int)> w) {
  add({.op = op,
       .primitive = "composite",
       .name = "M " + std::to_string(M),
       .fn = [f, M](const Arrays& x) { return Arrays{multiply(x[0], f(M))}; },
       .inputs = {in({M})},
       .dtypes = {float32},  // windows are float32 (MLX)
       .ref = [w, M](const Arrays& x) {
         V v = values(x[0]);
         for (int i = 0; i < M; ++i) v[i] *= M == 1 ? 1.0 : w(i, M);
         return VV{v};
       },
       .diff = {0}});
}

// Row-major (rows x cols) matrix product of doubles.
V matmul_ref(const V& a, const V& b, int M, int K, int N) {
  V c(static_cast<size_t>(M) * N, 0.0);
  for (int i = 0; i < M; ++i)
    for (int k = 0; k < K; ++k)
      for (int j = 0; j < N; ++j) c[i * N + j] += a[i * K + k] * b[k * N + j];
  return c;
}

}  // namespace

void register_numpy_extras() {
  const double pi = std::numbers::pi;
  window_case("hanning", 7, [](int M) { return hanning(M); },
              [pi](int n, int M) { return 0.5 - 0.5 * std::cos(2 * pi * n / (M - 1)); });
  window_case("hamming", 6, [](int M) { return hamming(M); },
              [pi](int n, int M) { return 0.54 - 0.46 * std::cos(2 * pi * n / (M - 1)); });
  window_case("bartlett", 9, [](int M) { return bartlett(M); },
              [](int n, int M) { return 1.0 - std::abs(2.0 * n / (M - 1) - 1.0); });
  window_case("blackman", 8, [](int M) { return blackman(M); }, [pi](int n, int M) {
    return 0.42 - 0.5 * std::cos(2 * pi * n / (M - 1)) + 0.08 * std::cos(4 * pi * n / (M - 1));
  });
  window_case("hanning", 1, [](int M) { return hanning(M); }, [](int, int) { return 1.0; });

  comp("diff", "(4,6) n 2 axis -1", [](const Arrays& x) { return Arrays{diff(x[0], 2, -1)}; }, {in({4, 6})},
       [](const Arrays& x) {
         V a = values(x[0]), out;
         for (int r = 0; r < 4; ++r)
           for (int j = 0; j < 4; ++j) out.push_back(a[r * 6 + j + 2] - 2 * a[r * 6 + j + 1] + a[r * 6 + j]);
         return VV{out};
       },
       {0});
  comp("diff", "(5,3) axis 0", [](const Arrays& x) { return Arrays{diff(x[0], 1, 0)}; }, {in({5, 3})},
       [](const Arrays& x) {
         V a = values(x[0]), out;
         for (int i = 0; i < 4; ++i)
           for (int j = 0; j < 3; ++j) out.push_back(a[(i + 1) * 3 + j] - a[i * 3 + j]);
         return VV{out};
       },
       {0});

  auto median_ref = [](V v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  };
  comp("median", "(3,5) axis 1", [](const Arrays& x) { return Arrays{median(x[0], 1)}; }, {in({3, 5})},
       [median_ref](const Arrays& x) {
         V a = values(x[0]), out;
         for (int r = 0; r < 3; ++r) out.push_back(median_ref(V(a.begin() + r * 5, a.begin() + r * 5 + 5)));
         return VV{out};
       },
       {0}, {float32, float64});
  comp("median", "(4,3,2) axes 0,2 keepdims", [](const Arrays& x) { return Arrays{median(x[0], {0, 2}, true)}; },
       {in({4, 3, 2})},
       [median_ref](const Arrays& x) {
         V a = values(x[0]), out;
         for (int j = 0; j < 3; ++j) {
           V col;
           for (int i = 0; i < 4; ++i)
             for (int k = 0; k < 2; ++k) col.push_back(a[(i * 3 + j) * 2 + k]);
           out.push_back(median_ref(col));
         }
         return VV{out};
       },
       {0}, {float32, float64});
  comp("median", "all (7)", [](const Arrays& x) { return Arrays{median(x[0])}; }, {in({7})},
       [median_ref](const Arrays& x) { return VV{{median_ref(values(x[0]))}}; }, {0}, {float32, float64});

  comp("count_nonzero", "(4,5) axis 0", [](const Arrays& x) { return Arrays{count_nonzero(x[0], 0)}; },
       {in({4, 5}, -2, 2)},
       [](const Arrays& x) {
         V a = values(x[0]), out(5, 0.0);
         for (int i = 0; i < 20; ++i) out[i % 5] += a[i] != 0;
         return VV{out};
       },
       {}, {float32, int32});

  comp("vecdot", "(3,4)x(3,4)", [](const Arrays& x) { return Arrays{vecdot(x[0], x[1])}; }, {in({3, 4}), in({3, 4})},
       [](const Arrays& x) {
         V a = values(x[0]), b = values(x[1]), out(3, 0.0);
         for (int i = 0; i < 12; ++i) out[i / 4] += a[i] * b[i];
         return VV{out};
       },
       {0, 1});
  comp("trunc", "(3,5)", [](const Arrays& x) { return Arrays{trunc(x[0])}; }, {in({3, 5}, -4, 4)},
       [](const Arrays& x) {
         V a = values(x[0]);
         for (auto& v : a) v = std::trunc(v);
         return VV{a};
       });
  comp("reciprocal", "(3,5)", [](const Arrays& x) { return Arrays{reciprocal(x[0])}; }, {in({3, 5}, 0.5, 3)},
       [](const Arrays& x) {
         V a = values(x[0]);
         for (auto& v : a) v = 1.0 / v;
         return VV{a};
       },
       {0});
  comp("positive", "(2,3)", [](const Arrays& x) { return Arrays{positive(x[0])}; }, {in({2, 3})},
       [](const Arrays& x) { return VV{values(x[0])}; }, {0});
  comp("logical_xor", "(3,4)x(4)", [](const Arrays& x) { return Arrays{logical_xor(x[0], x[1])}; },
       {in({3, 4}, -1, 1), in({4}, -1, 1)},
       [](const Arrays& x) {
         V a = values(x[0]), b = values(x[1]), out;
         for (int i = 0; i < 12; ++i) out.push_back((a[i] != 0) != (b[i % 4] != 0));
         return VV{out};
       },
       {}, {float32, int32});
  comp("number_of_elements", "(3,4,5) axes 0,2 inverted",
       [](const Arrays& x) { return Arrays{multiply(x[0], number_of_elements(x[0], {0, -1}, true, x[0].dtype()))}; },
       {in({3, 4, 5})},
       [](const Arrays& x) {
         V a = values(x[0]);
         for (auto& v : a) v /= 15.0;
         return VV{a};
       },
       {0}, {float32, float64});
  comp("depends", "(3)x(2,2)",
       [](const Arrays& x) { return depends(Arrays{multiply(x[0], x[0])}, Arrays{exp(x[1])}); }, {in({3}), in({2, 2})},
       [](const Arrays& x) {
         V a = values(x[0]);
         for (auto& v : a) v *= v;
         return VV{a};
       },
       {0, 1});

  // block_masked_mm: (70 x 40) @ (40 x 33) with 32-blocks (partial last
  // tiles): a boolean output mask and float operand masks.
  add({.op = "block_masked_mm",
       .primitive = "composite",
       .name = "bool out mask, float operand masks",
       .fn = [](const Arrays& x) {
         array mo = array(std::vector<bool>{true, false, false, true, true, true}, {3, 2});
         array ml = array(std::vector<float>{1, 0.5f, 0, 2, 1, 1}, {3, 2});
         array mr = array(std::vector<float>{1, 0, -1, 3}, {2, 2});
         return Arrays{block_masked_mm(x[0], x[1], 32, mo, ml, mr)};
       },
       .inputs = {in({70, 40}), in({40, 33})},
       .dtypes = {float32, float64},
       .ref = [](const Arrays& x) {
         const int M = 70, K = 40, N = 33;
         const bool mo[3][2] = {{true, false}, {false, true}, {true, true}};
         const double ml[3][2] = {{1, 0.5}, {0, 2}, {1, 1}}, mr[2][2] = {{1, 0}, {-1, 3}};
         V a = values(x[0]), b = values(x[1]);
         for (int i = 0; i < M; ++i)
           for (int k = 0; k < K; ++k) a[i * K + k] *= ml[i / 32][k / 32];
         for (int k = 0; k < K; ++k)
           for (int j = 0; j < N; ++j) b[k * N + j] *= mr[k / 32][j / 32];
         V c = matmul_ref(a, b, M, K, N);
         for (int i = 0; i < M; ++i)
           for (int j = 0; j < N; ++j)
             if (!mo[i / 32][j / 32]) c[i * N + j] = 0;
         return VV{c};
       },
       .layouts = false,
       .diff = {0, 1},
       .vmap = false});

  add({.op = "gather_mm",
       .primitive = "composite",
       .name = "(3,4,5)x(2,5,6) indices (4)",
       .fn = [](const Arrays& x) {
         return Arrays{gather_mm(x[0], x[1], array({2, 0, 1, 2}, {4}, uint32), array({1, 1, 0, 1}, {4}, int32))};
       },
       .inputs = {in({3, 4, 5}), in({2, 5, 6})},
       .dtypes = {float32, float64},
       .ref = [](const Arrays& x) {
         V a = values(x[0]), b = values(x[1]), out;
         const int li[4] = {2, 0, 1, 2}, ri[4] = {1, 1, 0, 1};
         for (int p = 0; p < 4; ++p) {
           V c = matmul_ref(V(a.begin() + li[p] * 20, a.begin() + li[p] * 20 + 20),
                            V(b.begin() + ri[p] * 30, b.begin() + ri[p] * 30 + 30), 4, 5, 6);
           out.insert(out.end(), c.begin(), c.end());
         }
         return VV{out};
       },
       .diff = {0, 1}});

  add({.op = "segmented_mm",
       .primitive = "composite",
       .name = "(4,9)x(9,3) segments (3,2)",
       .fn = [](const Arrays& x) { return Arrays{segmented_mm(x[0], x[1], array({0, 4, 4, 9, 2, 2}, {3, 2}))}; },
       .inputs = {in({4, 9}), in({9, 3})},
       .dtypes = {float32, float64},
       .ref = [](const Arrays& x) {
         V a = values(x[0]), b = values(x[1]), out;
         const int seg[3][2] = {{0, 4}, {4, 9}, {2, 2}};
         for (auto& s : seg) {
           V c(12, 0.0);
           for (int i = 0; i < 4; ++i)
             for (int k = s[0]; k < s[1]; ++k)
               for (int j = 0; j < 3; ++j) c[i * 3 + j] += a[i * 9 + k] * b[k * 3 + j];
           out.insert(out.end(), c.begin(), c.end());
         }
         return VV{out};
       },
       .diff = {0, 1}});

  for (int n : {1, 2, 16}) {
    comp("hadamard_transform", "(3," + std::to_string(n) + ")",
         [](const Arrays& x) { return Arrays{hadamard_transform(x[0])}; }, {in({3, n})},
         [n](const Arrays& x) {
           // Sylvester's H_n: entry (i, j) is (-1)^popcount(i & j).
           V a = values(x[0]), out(3 * n, 0.0);
           for (int r = 0; r < 3; ++r)
             for (int j = 0; j < n; ++j)
               for (int i = 0; i < n; ++i)
                 out[r * n + j] += a[r * n + i] * (__builtin_popcount(i & j) % 2 ? -1.0 : 1.0) / std::sqrt(n);
           return VV{out};
         },
         {0});
  }

  add({.op = "masked_scatter",
       .primitive = "composite",
       .name = "(3,4) mask (3) values (2,4)",
       .fn = [](const Arrays& x) {
         return Arrays{masked_scatter(x[0], array(std::vector<bool>{true, false, true}, {3}), x[1])};
       },
       .inputs = {in({3, 4}), in({2, 4})},
       .dtypes = {float32, float64},
       .ref = [](const Arrays& x) {
         V a = values(x[0]), v = values(x[1]);
         for (int j = 0; j < 4; ++j) {
           a[j] = v[j];
           a[8 + j] = v[4 + j];
         }
         return VV{a};
       },
       .diff = {0, 1}});
  add({.op = "masked_scatter",
       .primitive = "composite",
       .name = "(2,3,2) mask (2,3) values (2) broadcast",
       .fn = [](const Arrays& x) {
         return Arrays{masked_scatter(x[0], array(std::vector<bool>{false, true, true, false, false, true}, {2, 3}), x[1])};
       },
       .inputs = {in({2, 3, 2}), in({2})},
       .dtypes = {float32, float64},
       .ref = [](const Arrays& x) {
         // values broadcast to (mask.size, 2): every selected row gets them.
         V a = values(x[0]), v = values(x[1]);
         for (int r : {1, 2, 5}) {
           a[2 * r] = v[0];
           a[2 * r + 1] = v[1];
         }
         return VV{a};
       },
       .diff = {0}});

  struct SliceOp {
    const char* name;
    std::function<array(const array&, const array&)> fn;
    std::function<double(double, double)> f;
  };
  for (const SliceOp& op : std::vector<SliceOp>{
           {"slice_update_add", [](const array& a, const array& u) { return slice_update_add(a, u, {1, 0}, {4, 5}, {2, 2}); },
            [](double x, double u) { return x + u; }},
           {"slice_update_prod", [](const array& a, const array& u) { return slice_update_prod(a, u, {1, 0}, {4, 5}, {2, 2}); },
            [](double x, double u) { return x * u; }},
           {"slice_update_max", [](const array& a, const array& u) { return slice_update_max(a, u, {1, 0}, {4, 5}, {2, 2}); },
            [](double x, double u) { return std::max(x, u); }},
           {"slice_update_min", [](const array& a, const array& u) { return slice_update_min(a, u, {1, 0}, {4, 5}, {2, 2}); },
            [](double x, double u) { return std::min(x, u); }}}) {
    comp(op.name, "(5,6) rows 1:4:2 cols 0:5:2", [fn = op.fn](const Arrays& x) { return Arrays{fn(x[0], x[1])}; },
         {in({5, 6}), in({2, 3})},
         [f = op.f](const Arrays& x) {
           V a = values(x[0]), u = values(x[1]);
           for (int i = 0; i < 2; ++i)
             for (int j = 0; j < 3; ++j) a[(1 + 2 * i) * 6 + 2 * j] = f(a[(1 + 2 * i) * 6 + 2 * j], u[i * 3 + j]);
           return VV{a};
         },
         std::string(op.name) == "slice_update_add" || std::string(op.name) == "slice_update_prod" ? std::vector<int>{0, 1}
                                                                                                   : std::vector<int>{},
         {float32, float64});
  }
}

}  // namespace kiln::harness
