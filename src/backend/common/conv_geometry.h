#pragma once
// The index math of a convolution (core/primitives_conv.h), written once for
// the CPU and CUDA kernels: which input element an output position reads
// through a weight tap. Padding, input dilation and flip are all folded into
// conv_source(), so a kernel never materializes the padded or dilated input.
#include <cstdint>
#include <vector>

#if defined(__CUDACC__)
#define KILN_CONV_HD __host__ __device__
#else
#define KILN_CONV_HD
#endif

namespace kiln::conv {

inline constexpr int kMaxSpatial = 3;

// A convolution's sizes, by value (kernel arguments). Spatial arrays past
// `nd` hold size 1 and no padding, so loops may always run over three axes.
struct Geometry {
  int nd;
  int64_t N, C, O, groups, Cg, Og;  // Cg = C / groups, Og = O / groups
  int64_t in[kMaxSpatial], out[kMaxSpatial], k[kMaxSpatial];
  int64_t stride[kMaxSpatial], pad_lo[kMaxSpatial], kdil[kMaxSpatial], idil[kMaxSpatial];
  bool flip;
  int64_t out_points;  // product of out[]: output positions per batch entry
  int64_t taps;        // product of k[]: weight taps per channel
  int64_t patch;       // taps * Cg: the reduction length (one im2col row)
};

// The geometry of x [N, S.., C], w [O, K.., Cg] -> out [N, P.., O].
inline Geometry make_geometry(const std::vector<int>& x_shape, const std::vector<int>& w_shape,
                              const std::vector<int>& out_shape, const std::vector<int>& stride,
                              const std::vector<int>& padding_lo, const std::vector<int>& kernel_dilation,
                              const std::vector<int>& input_dilation, int groups, bool flip) {
  Geometry g{};
  g.nd = static_cast<int>(x_shape.size()) - 2;
  g.N = x_shape[0];
  g.C = x_shape.back();
  g.O = w_shape[0];
  g.groups = groups;
  g.Cg = g.C / groups;
  g.Og = g.O / groups;
  g.flip = flip;
  g.out_points = 1;
  g.taps = 1;
  for (int d = 0; d < kMaxSpatial; ++d) {
    bool used = d < g.nd;
    g.in[d] = used ? x_shape[1 + d] : 1;
    g.out[d] = used ? out_shape[1 + d] : 1;
    g.k[d] = used ? w_shape[1 + d] : 1;
    g.stride[d] = used ? stride[d] : 1;
    g.pad_lo[d] = used ? padding_lo[d] : 0;
    g.kdil[d] = used ? kernel_dilation[d] : 1;
    g.idil[d] = used ? input_dilation[d] : 1;
    g.out_points *= g.out[d];
    g.taps *= g.k[d];
  }
  g.patch = g.taps * g.Cg;
  return g;
}

// The input coordinate along spatial axis d that output coordinate p reads
// through weight tap t, or -1 where that falls into padding or between the
// elements of a dilated input.
KILN_CONV_HD inline int64_t conv_source(const Geometry& g, int d, int64_t p, int64_t t) {
  int64_t tap = g.flip ? g.k[d] - 1 - t : t;
  int64_t m = p * g.stride[d] + tap * g.kdil[d] - g.pad_lo[d];
  if (m < 0 || m % g.idil[d] != 0) return -1;
  m /= g.idil[d];
  return m < g.in[d] ? m : -1;
}

// Splits a linear index over three axes of sizes n[0..2] (row-major).
KILN_CONV_HD inline void unravel3(int64_t i, const int64_t (&n)[kMaxSpatial], int64_t (&c)[kMaxSpatial]) {
  c[2] = i % n[2];
  i /= n[2];
  c[1] = i % n[1];
  c[0] = i / n[1];
}

}  // namespace kiln::conv
