// Convolution on the CPU (kiln bench row D3 conv2d).
//
// Why it is shaped so: a convolution with enough channels is a GEMM once
// each output position's receptive field is laid out as one row (im2col):
// [N * P, taps * Cg] x [taps * Cg, Og] per group, and Kiln's packed GEMM
// (gemm.h) then runs at its matrix-multiply rate on all cores. The rows are
// built a chunk at a time (a few MB, so the patches of a large batch never
// exist all at once), gathered straight from the input's strides with
// padding, input dilation and flip folded into the index math of
// backend/common/conv_geometry.h, so non-contiguous inputs cost no copy.
// A 1x1 convolution with unit stride reads the input itself as the GEMM's
// left operand. Depthwise convolutions (one input channel per group) have a
// reduction of only `taps` per output: a GEMM would be a sliver, so a direct
// loop runs instead, each output position accumulating taps x channels in
// registers over contiguous channel vectors.
// float32 and the 16-bit floats compute in float32 (the latter gathered and
// widened by im2col), float64 in double through OpenBLAS's dgemm.
#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/common/conv_geometry.h"
#include "backend/cpu/cast.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/threading.h"
#include "core/array_desc.h"
#include "core/primitives_conv.h"

namespace kiln {
namespace {

using conv::Geometry;

// Element strides of a [N, S.., C] operand over the fixed five axes of the
// geometry (absent spatial axes get stride 0).
struct Strides5 {
  int64_t n, s[conv::kMaxSpatial], c;
};
Strides5 strides5(const array& a) {
  const auto& st = a.desc()->strides;
  int nd = static_cast<int>(a.ndim()) - 2;
  Strides5 r{st[0], {0, 0, 0}, st.back()};
  for (int d = 0; d < nd; ++d) r.s[d] = st[1 + d];
  return r;
}

// The input offset (elements, negative for flipped layouts) that output
// position p reads through tap t; false where it reads padding.
bool source_offset(const Geometry& g, const Strides5& xs, const int64_t (&p)[3], const int64_t (&t)[3],
                   int64_t& off) {
  off = 0;
  for (int d = 0; d < conv::kMaxSpatial; ++d) {
    int64_t m = conv::conv_source(g, d, p[d], t[d]);
    if (m < 0) return false;
    off += m * xs.s[d];
  }
  return true;
}

// The weight as a row-major [O, taps * Cg] matrix of A (a view when it
// already is one).
template <typename T, typename A>
const A* packed_weight(const array& w, const Geometry& g, std::vector<A>& store) {
  const T* p = reinterpret_cast<const T*>(detail::data_ptr(w));
  if constexpr (std::is_same_v<T, A>) {
    if (detail::is_row_contiguous(w.shape(), w.desc()->strides)) return p;
  }
  Strides5 ws = strides5(w);
  store.resize(g.O * g.patch);
  for (int64_t o = 0; o < g.O; ++o) {
    for (int64_t t = 0; t < g.taps; ++t) {
      int64_t k[3];
      conv::unravel3(t, g.k, k);
      const T* src = p + o * ws.n + k[0] * ws.s[0] + k[1] * ws.s[1] + k[2] * ws.s[2];
      A* dst = store.data() + o * g.patch + t * g.Cg;
      for (int64_t c = 0; c < g.Cg; ++c) dst[c] = cpu::convert<A>(src[c * ws.c]);
    }
  }
  return store.data();
}

// Rows [r0, r1) of group q's patch matrix into cols ([r1 - r0, patch]).
template <typename T, typename A>
void im2col(const T* x, const Strides5& xs, const Geometry& g, int64_t q, int64_t r0, int64_t r1, A* cols) {
  cpu::parallel_for(r1 - r0, 16, [&](int64_t b, int64_t e) {
    for (int64_t r = r0 + b; r < r0 + e; ++r) {
      int64_t n = r / g.out_points, p[3];
      conv::unravel3(r % g.out_points, g.out, p);
      const T* base = x + n * xs.n + q * g.Cg * xs.c;
      A* row = cols + (r - r0) * g.patch;
      for (int64_t t = 0; t < g.taps; ++t) {
        int64_t k[3];
        conv::unravel3(t, g.k, k);
        int64_t off;
        A* dst = row + t * g.Cg;
        if (!source_offset(g, xs, p, k, off)) {
          std::fill(dst, dst + g.Cg, A(0));
        } else if (std::is_same_v<T, A> && xs.c == 1) {
          std::memcpy(dst, base + off, g.Cg * sizeof(A));
        } else {
          for (int64_t c = 0; c < g.Cg; ++c) dst[c] = cpu::convert<A>(base[off + c * xs.c]);
        }
      }
    }
  });
}

// C[M, Og] (leading dimension ldc) = A[M, patch] (row stride lda) x wq^T,
// wq the group's [Og, patch] block of the packed weight.
template <typename A>
void gemm(const A* a, int64_t lda, const A* wq, A* c, int64_t ldc, int64_t M, const Geometry& g) {
  if constexpr (std::is_same_v<A, double>) {
    openblas_set_num_threads(cpu_threads());
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, g.Og, g.patch, 1.0, a, lda, wq, g.patch, 0.0, c, ldc);
  } else {
    cpu::gemm_f32({M, g.Og, g.patch, a, lda, 1, wq, 1, g.patch, c, ldc, cpu_threads()});
  }
}

// The im2col + GEMM path: out [N * P, O] row-major.
template <typename T, typename A>
void conv_gemm(const array& x, const array& w, const Geometry& g, T* out) {
  std::vector<A> wstore;
  const A* wp = packed_weight<T, A>(w, g, wstore);
  const T* xp = reinterpret_cast<const T*>(detail::data_ptr(x));
  const Strides5 xs = strides5(x);
  const int64_t M = g.N * g.out_points;
  constexpr bool direct_out = std::is_same_v<T, A>;

  if constexpr (direct_out) {
    bool pointwise = g.taps == 1 && detail::is_row_contiguous(x.shape(), x.desc()->strides);
    for (int d = 0; d < conv::kMaxSpatial; ++d) {
      pointwise = pointwise && g.stride[d] == 1 && g.pad_lo[d] == 0 && g.idil[d] == 1 && g.in[d] == g.out[d];
    }
    if (pointwise) {
      for (int64_t q = 0; q < g.groups; ++q) {
        gemm<A>(xp + q * g.Cg, g.C, wp + q * g.Og * g.patch, out + q * g.Og, g.O, M, g);
      }
      return;
    }
  }

  // Rows per chunk: the patches of a chunk take about 8 MB.
  const int64_t chunk = std::min<int64_t>(M, std::max<int64_t>(64, (int64_t{8} << 20) / (g.patch * sizeof(A))));
  std::vector<A> cols(chunk * g.patch);
  std::vector<A> acc(direct_out ? 0 : chunk * g.O);
  for (int64_t r0 = 0; r0 < M; r0 += chunk) {
    const int64_t r1 = std::min(M, r0 + chunk);
    A* c = direct_out ? reinterpret_cast<A*>(out) + r0 * g.O : acc.data();
    for (int64_t q = 0; q < g.groups; ++q) {
      im2col<T, A>(xp, xs, g, q, r0, r1, cols.data());
      gemm<A>(cols.data(), g.patch, wp + q * g.Og * g.patch, c + q * g.Og, g.O, r1 - r0, g);
    }
    if constexpr (!direct_out) {
      cpu::parallel_for((r1 - r0) * g.O, 1 << 14, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) out[r0 * g.O + i] = cpu::convert<T>(acc[i]);
      });
    }
  }
}

// Depthwise (Cg == 1): out[n, p, o] = sum_t x[n, src(p, t), o / Og] * w[o, t].
template <typename T, typename A>
void conv_depthwise(const array& x, const array& w, const Geometry& g, T* out) {
  // The weight tap-major, [taps, O], so the channel loop reads it contiguously.
  std::vector<A> wstore;
  const A* wp = packed_weight<T, A>(w, g, wstore);
  std::vector<A> wt(g.taps * g.O);
  for (int64_t o = 0; o < g.O; ++o)
    for (int64_t t = 0; t < g.taps; ++t) wt[t * g.O + o] = wp[o * g.taps + t];
  const T* xp = reinterpret_cast<const T*>(detail::data_ptr(x));
  const Strides5 xs = strides5(x);
  cpu::parallel_for(g.N * g.out_points, 4, [&](int64_t b, int64_t e) {
    std::vector<A> acc(g.O), xv(g.C);
    for (int64_t r = b; r < e; ++r) {
      int64_t n = r / g.out_points, p[3];
      conv::unravel3(r % g.out_points, g.out, p);
      std::fill(acc.begin(), acc.end(), A(0));
      for (int64_t t = 0; t < g.taps; ++t) {
        int64_t k[3];
        conv::unravel3(t, g.k, k);
        int64_t off;
        if (!source_offset(g, xs, p, k, off)) continue;
        const T* src = xp + n * xs.n + off;
        for (int64_t c = 0; c < g.C; ++c) xv[c] = cpu::convert<A>(src[c * xs.c]);
        const A* wrow = wt.data() + t * g.O;
        if (g.Og == 1) {
          for (int64_t o = 0; o < g.O; ++o) acc[o] += xv[o] * wrow[o];
        } else {
          for (int64_t o = 0; o < g.O; ++o) acc[o] += xv[o / g.Og] * wrow[o];
        }
      }
      T* dst = out + r * g.O;
      for (int64_t o = 0; o < g.O; ++o) dst[o] = cpu::convert<T>(acc[o]);
    }
  });
}

template <typename T, typename A>
void run(const array& x, const array& w, const Geometry& g, array& out) {
  T* o = reinterpret_cast<T*>(detail::data_ptr(out));
  if (g.Cg == 1 && g.groups > 1) conv_depthwise<T, A>(x, w, g, o);
  else conv_gemm<T, A>(x, w, g, o);
}

}  // namespace

void Convolution::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& x = inputs[0];
  const array& w = inputs[1];
  detail::allocate(out, name());
  if (out.size() == 0) return;
  const Geometry g = conv::make_geometry(x.shape(), w.shape(), out.shape(), stride_, padding_lo_,
                                         kernel_dilation_, input_dilation_, groups_, flip_);
  if (g.patch == 0) {
    std::memset(detail::data_ptr(out), 0, out.nbytes());
    return;
  }
  switch (out.dtype()) {
    case float32: return run<float, float>(x, w, g, out);
    case float64: return run<double, double>(x, w, g, out);
    case float16: return run<float16_t, float>(x, w, g, out);
    case bfloat16: return run<bfloat16_t, float>(x, w, g, out);
    default: throw Error(std::string("[conv] no CPU kernel for ") + dtype_name(out.dtype()));
  }
}

}  // namespace kiln
