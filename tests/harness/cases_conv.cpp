// Harness cases of the convolutions (conv1d/2d/3d, conv_transpose1d/2d/3d,
// conv_general; primitive Convolution): 1-3 spatial axes, strides,
// symmetric and per-side padding (negative too), kernel and input dilation,
// groups (depthwise included), flip, 1x1 kernels and odd sizes, on every
// layout of the harness, with vjp / jvp / vmap / grad of grad.
// The references are loops in double written from the definitions, apart
// from the kernels' index math: the forward one materializes the dilated,
// padded input and the flipped kernel, then correlates; the transposed one
// scatters each input element through the kernel.
#include <algorithm>
#include <string>
#include <tuple>

#include "harness/harness.h"
#include "test_util.h"

namespace kiln::harness {
namespace {

using Ints = std::vector<int>;

struct Spec {
  Ints stride, lo, hi, kdil, idil;
  int groups = 1;
  bool flip = false;
};

int64_t flat_index(const Shape& shape, const Ints& idx) {
  int64_t f = 0;
  for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + idx[d];
  return f;
}

// Odometer step over `shape`; false after the last index.
bool next(Ints& idx, const Shape& shape) {
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    if (++idx[d] < shape[d]) return true;
    idx[d] = 0;
  }
  return false;
}

// The forward convolution from its definition.
std::vector<double> conv_reference(const array& x, const array& w, const Spec& sp) {
  const Shape xs = x.shape(), ws = w.shape();
  const int nd = static_cast<int>(xs.size()) - 2;
  const auto xv = values(x), wv = values(w);
  // The input dilated (input_dilation - 1 zeros between elements), then
  // padded by lo / hi (negative: cropped).
  Shape ds = xs;
  for (int d = 0; d < nd; ++d) ds[1 + d] = (xs[1 + d] - 1) * sp.idil[d] + 1 + sp.lo[d] + sp.hi[d];
  std::vector<double> xd(test::numel(ds), 0.0);
  Ints i(xs.size(), 0);
  do {
    Ints j = i;
    bool inside = true;
    for (int d = 0; d < nd; ++d) {
      j[1 + d] = i[1 + d] * sp.idil[d] + sp.lo[d];
      inside = inside && j[1 + d] >= 0 && j[1 + d] < ds[1 + d];
    }
    if (inside) xd[flat_index(ds, j)] = xv[flat_index(xs, i)];
  } while (next(i, xs));
  // The kernel, flipped along its spatial axes when asked.
  std::vector<double> wf(wv.size());
  Ints k(ws.size(), 0);
  do {
    Ints src = k;
    for (int d = 0; d < nd && sp.flip; ++d) src[1 + d] = ws[1 + d] - 1 - k[1 + d];
    wf[flat_index(ws, k)] = wv[flat_index(ws, src)];
  } while (next(k, ws));
  // Correlation with stride and kernel dilation.
  Shape os = xs;
  os.back() = ws[0];
  for (int d = 0; d < nd; ++d) os[1 + d] = (ds[1 + d] - ((ws[1 + d] - 1) * sp.kdil[d] + 1)) / sp.stride[d] + 1;
  const int cg = ws.back(), og = ws[0] / sp.groups;
  std::vector<double> out(test::numel(os), 0.0);
  Ints o(os.size(), 0);
  Shape taps(ws.begin() + 1, ws.end());  // [K.., Cg]
  do {
    double acc = 0;
    Ints t(taps.size(), 0);
    do {
      Ints j(ds.size());
      j[0] = o[0];
      for (int d = 0; d < nd; ++d) j[1 + d] = o[1 + d] * sp.stride[d] + t[d] * sp.kdil[d];
      j.back() = (o.back() / og) * cg + t.back();
      Ints wi{o.back()};
      wi.insert(wi.end(), t.begin(), t.end());
      acc += xd[flat_index(ds, j)] * wf[flat_index(ws, wi)];
    } while (next(t, taps));
    out[flat_index(os, o)] = acc;
  } while (test::numel(os) > 0 && next(o, os));
  return out;
}

// The transposed convolution: every input element scattered through the
// kernel, out[n, i * stride + k * dilation - padding, o] += x[n, i, c] w[o, k, c].
std::vector<double> conv_transpose_reference(const array& x, const array& w, const Ints& stride, const Ints& padding,
                                             const Ints& dilation, const Ints& output_padding, int groups) {
  const Shape xs = x.shape(), ws = w.shape();
  const int nd = static_cast<int>(xs.size()) - 2;
  const auto xv = values(x), wv = values(w);
  Shape os = xs;
  os.back() = ws[0];
  for (int d = 0; d < nd; ++d) {
    os[1 + d] = (xs[1 + d] - 1) * stride[d] - 2 * padding[d] + dilation[d] * (ws[1 + d] - 1) + 1 + output_padding[d];
  }
  const int cg = ws.back(), og = ws[0] / groups;
  std::vector<double> out(test::numel(os), 0.0);
  Ints i(xs.size(), 0);
  do {
    const int grp = i.back() / cg, c = i.back() % cg;
    Ints k(ws.size() - 2, 0);
    Shape ks(ws.begin() + 1, ws.end() - 1);
    do {
      Ints j(os.size());
      j[0] = i[0];
      bool inside = true;
      for (int d = 0; d < nd; ++d) {
        j[1 + d] = i[1 + d] * stride[d] + k[d] * dilation[d] - padding[d];
        inside = inside && j[1 + d] >= 0 && j[1 + d] < os[1 + d];
      }
      if (!inside) continue;
      for (int o = grp * og; o < (grp + 1) * og; ++o) {
        j.back() = o;
        Ints wi{o};
        wi.insert(wi.end(), k.begin(), k.end());
        wi.push_back(c);
        out[flat_index(os, j)] += xv[flat_index(xs, i)] * wv[flat_index(ws, wi)];
      }
    } while (next(k, ks));
  } while (next(i, xs));
  return out;
}

std::string ints(const Ints& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(v[i]);
  }
  return s + ")";
}

std::pair<int, int> pair2(const Ints& v) { return {v[0], v[1]}; }
std::tuple<int, int, int> tuple3(const Ints& v) { return {v[0], v[1], v[2]}; }

void add_conv(const char* op, const Shape& xs, const Shape& ws, Spec sp, bool grad2 = false) {
  const int nd = static_cast<int>(xs.size()) - 2;
  auto fill = [nd](Ints& v, int def) {
    if (v.empty()) v.assign(nd, def);
  };
  fill(sp.stride, 1), fill(sp.lo, 0), fill(sp.hi, 0), fill(sp.kdil, 1), fill(sp.idil, 1);
  const std::string op_name = op;
  OpFn fn = [op_name, nd, sp](const Arrays& x) {
    if (op_name == "conv_general") {
      return Arrays{conv_general(x[0], x[1], sp.stride, sp.lo, sp.hi, sp.kdil, sp.idil, sp.groups, sp.flip)};
    }
    if (nd == 1) return Arrays{conv1d(x[0], x[1], sp.stride[0], sp.lo[0], sp.kdil[0], sp.groups)};
    if (nd == 2) return Arrays{conv2d(x[0], x[1], pair2(sp.stride), pair2(sp.lo), pair2(sp.kdil), sp.groups)};
    return Arrays{conv3d(x[0], x[1], tuple3(sp.stride), tuple3(sp.lo), tuple3(sp.kdil), sp.groups)};
  };
  std::string name = test::fmt(xs) + " * " + test::fmt(ws) + " stride " + ints(sp.stride) + " pad " + ints(sp.lo) +
                     "/" + ints(sp.hi) + " dil " + ints(sp.kdil) + " idil " + ints(sp.idil) + " groups " +
                     std::to_string(sp.groups) + (sp.flip ? " flip" : "");
  add({.op = op,
       .primitive = "Convolution",
       .name = name,
       .fn = fn,
       .inputs = {in(xs), in(ws)},
       .ref = [sp](const Arrays& x) { return std::vector<std::vector<double>>{conv_reference(x[0], x[1], sp)}; },
       .diff = {0, 1},
       .grad2 = grad2,
       .rtol_scale = 2.0});
}

void add_transpose(const Shape& xs, const Shape& ws, Ints stride, Ints padding, Ints dilation, Ints output_padding,
                   int groups, bool grad2 = false) {
  const int nd = static_cast<int>(xs.size()) - 2;
  const char* op = nd == 1 ? "conv_transpose1d" : nd == 2 ? "conv_transpose2d" : "conv_transpose3d";
  OpFn fn = [=](const Arrays& x) {
    if (nd == 1) return Arrays{conv_transpose1d(x[0], x[1], stride[0], padding[0], dilation[0], output_padding[0], groups)};
    if (nd == 2) {
      return Arrays{conv_transpose2d(x[0], x[1], pair2(stride), pair2(padding), pair2(dilation), pair2(output_padding),
                                     groups)};
    }
    return Arrays{conv_transpose3d(x[0], x[1], tuple3(stride), tuple3(padding), tuple3(dilation),
                                   tuple3(output_padding), groups)};
  };
  add({.op = op,
       .primitive = "Convolution",
       .name = test::fmt(xs) + " * " + test::fmt(ws) + " stride " + ints(stride) + " pad " + ints(padding) + " dil " +
               ints(dilation) + " outpad " + ints(output_padding) + " groups " + std::to_string(groups),
       .fn = fn,
       .inputs = {in(xs), in(ws)},
       .ref = [=](const Arrays& x) {
         return std::vector<std::vector<double>>{
             conv_transpose_reference(x[0], x[1], stride, padding, dilation, output_padding, groups)};
       },
       .diff = {0, 1},
       .grad2 = grad2,
       .rtol_scale = 2.0});
}

}  // namespace

void register_conv() {
  // conv1d: plain, strided + padded + dilated, groups, depthwise with a
  // channel multiplier, a kernel as long as the padded input.
  add_conv("conv1d", {2, 9, 3}, {4, 3, 3}, {}, true);
  add_conv("conv1d", {2, 13, 2}, {3, 3, 2}, {.stride = {2}, .lo = {1}, .hi = {1}, .kdil = {2}});
  add_conv("conv1d", {2, 10, 6}, {6, 3, 2}, {.lo = {2}, .hi = {2}, .groups = 3});
  add_conv("conv1d", {1, 11, 4}, {8, 3, 1}, {.stride = {3}, .lo = {1}, .hi = {1}, .groups = 4});
  add_conv("conv1d", {3, 5, 2}, {2, 7, 2}, {.lo = {1}, .hi = {1}});

  // conv2d: padded, mixed stride / padding / dilation, groups, depthwise,
  // 1x1 (the pointwise GEMM path) with and without stride.
  add_conv("conv2d", {2, 7, 6, 3}, {5, 3, 3, 3}, {.lo = {1, 1}, .hi = {1, 1}}, true);
  add_conv("conv2d", {1, 9, 8, 2}, {3, 3, 2, 2}, {.stride = {2, 1}, .lo = {1, 2}, .hi = {1, 2}, .kdil = {1, 2}});
  add_conv("conv2d", {1, 6, 5, 4}, {6, 2, 3, 2}, {.stride = {1, 2}, .groups = 2});
  add_conv("conv2d", {2, 6, 7, 5}, {5, 3, 3, 1}, {.lo = {1, 1}, .hi = {1, 1}, .groups = 5}, true);
  add_conv("conv2d", {2, 5, 4, 8}, {6, 1, 1, 8}, {});
  add_conv("conv2d", {2, 5, 7, 3}, {4, 1, 1, 3}, {.stride = {2, 3}});

  // conv3d: padded, strided and dilated, groups.
  add_conv("conv3d", {1, 4, 5, 4, 2}, {3, 2, 3, 2, 2}, {.lo = {1, 0, 1}, .hi = {1, 0, 1}});
  add_conv("conv3d", {2, 5, 6, 5, 1}, {2, 2, 2, 3, 1}, {.stride = {2, 1, 2}, .kdil = {2, 2, 1}});
  add_conv("conv3d", {1, 3, 4, 4, 4}, {4, 2, 2, 2, 2}, {.lo = {1, 1, 1}, .hi = {1, 1, 1}, .groups = 2});

  // conv_general: per-side padding, input dilation, flip, negative padding.
  add_conv("conv_general", {2, 7, 3}, {2, 3, 3}, {.lo = {2}, .hi = {0}, .kdil = {2}, .flip = true}, true);
  add_conv("conv_general", {1, 5, 6, 2}, {3, 3, 2, 2},
           {.stride = {1, 2}, .lo = {2, 0}, .hi = {1, 3}, .idil = {2, 3}, .flip = true});
  add_conv("conv_general", {2, 9, 8, 2}, {2, 3, 3, 2}, {.lo = {-1, 1}, .hi = {0, -2}, .kdil = {1, 2}});
  add_conv("conv_general", {1, 4, 3, 3, 2}, {2, 2, 2, 1, 1},
           {.stride = {2, 1, 1}, .lo = {1, 0, 2}, .hi = {0, 1, 0}, .idil = {1, 2, 1}, .groups = 2, .flip = true});

  // Transposed: stride, padding, dilation, output padding, groups.
  add_transpose({2, 5, 3}, {4, 3, 3}, {2}, {1}, {1}, {1}, 1, true);
  add_transpose({1, 6, 4}, {4, 2, 2}, {3}, {0}, {2}, {0}, 2);
  add_transpose({1, 4, 5, 2}, {3, 3, 3, 2}, {2, 2}, {1, 0}, {1, 2}, {1, 0}, 1);
  add_transpose({2, 3, 4, 4}, {4, 2, 3, 2}, {1, 2}, {0, 1}, {1, 1}, {0, 1}, 2);
  add_transpose({1, 3, 3, 2, 2}, {2, 2, 2, 2, 2}, {2, 2, 1}, {0, 1, 0}, {1, 1, 2}, {1, 0, 0}, 1);
}

}  // namespace kiln::harness
