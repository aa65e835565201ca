#pragma once
// The transposing tile of binary.cu's 16-byte kernel (binary_tiled_vec),
// for elements up to 4 bytes: a 64 x 64 tile, 256 threads, kTx = 64 / G of
// them across a tile row and each with kPasses rows kTy apart, G = 16 /
// sizeof(T). An input that runs
// down the tile's columns (a transposed view: row stride 1) is read as G
// consecutive elements of its memory rows - G rows of one tile column per
// load - and scattered into shared memory, from where the tile's rows are
// read back as G-element groups. Callers check that every dim and stride
// involved is a multiple of G and the pointers 16-byte aligned.
#include "backend/cuda/kernel_utils.cuh"

namespace kiln::cuda {

template <typename T>
struct VecTile {
  using V = Vec<T>;
  static constexpr int kT = 64, G = V::n, kTx = kT / G, kTy = 256 / kTx, kPasses = kT / kTy;
  using Shared = T[kT][kT + 1];

  // This thread's loads of `src` (element [r, c] at src[r + c * ld]) for
  // the tile at (r0, c0); all issued before any is used.
  static __device__ __forceinline__ void load(const T* __restrict__ src, int64_t ld, int64_t r0, int64_t c0,
                                              int64_t rows, int64_t cols, V (&g)[kPasses]) {
    const int tx = threadIdx.x % kTx, ty = threadIdx.x / kTx;
#pragma unroll
    for (int p = 0; p < kPasses; ++p) {
      const int64_t r = r0 + G * tx, c = c0 + ty + p * kTy;
      if (r < rows && c < cols) g[p] = *reinterpret_cast<const V*>(src + r + c * ld);
    }
  }

  // The loaded groups into the shared tile, transposed: tile[c][r].
  static __device__ __forceinline__ void scatter(const V (&g)[kPasses], Shared& tile) {
    const int tx = threadIdx.x % kTx, ty = threadIdx.x / kTx;
#pragma unroll
    for (int p = 0; p < kPasses; ++p) {
#pragma unroll
      for (int k = 0; k < G; ++k) tile[ty + p * kTy][G * tx + k] = g[p].v[k];
    }
  }
};

}  // namespace kiln::cuda
