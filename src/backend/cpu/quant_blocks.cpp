// llama.cpp's block formats on the CPU: quantize (ggml's reference
// quantizers), dequantize (bit for bit gguf-py's numpy decoders) and the
// block quantized matmul.
//
// This file is compiled with -ffp-contract=off (CMakeLists.txt): decoding
// must round a * q and then + b separately, as numpy does, to be bit-exact.
//
// quantized_matmul: x rounded to 8 bits (the default, include/kiln/ops.h)
// goes to the fused decode + dot product kernels of quant_blocks_qmv_int8.cpp
// (8 rows at a time), whatever M (one pass over the blocks per group of
// rows; measured by the `qmv_q4_0` ... rows of `kiln bench` and `kiln bench
// llm`'s pp). x as it is (float64, KILN_BLOCK_X=float): up to kQmvRows rows
// through quant_blocks_qmv.cpp / quant_blocks_qmv_bf16.cpp; more rows decode
// w one tile of rows at a time into float32 (a tile stays in L2 while it is
// used) and run Kiln's float32 GEMM on it.
#include <cstring>
#include <vector>

#include "backend/cpu/cast.h"
#include "backend/cpu/copy.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/quant_blocks_cpu.h"
#include "backend/cpu/quant_blocks_math.h"
#include "backend/cpu/threading.h"
#include "core/array_desc.h"
#include "core/primitives.h"

namespace kiln {
namespace {

constexpr int64_t kQmvRows = 8;

// A row-major copy of `a` converted to `t` when it is not one already.
const char* row_major(const array& a, Dtype t, std::vector<char>& store) {
  if (a.dtype() == t && detail::is_row_contiguous(a.shape(), a.desc()->strides)) return detail::data_ptr(a);
  store.resize(a.size() * size_of(t));
  cpu::copy_strided(detail::data_ptr(a), a.dtype(), a.shape(), a.desc()->strides, store.data(), t,
                    row_major_strides(a.shape()));
  return store.data();
}

// Decodes `blocks` consecutive blocks into float32.
void decode_blocks(BlockFormat f, const uint8_t* w, int64_t blocks, float* out) {
  const BlockLayout& l = block_layout(f);
  int sub = qb::sub_size(f), subs = l.block / sub;
  for (int64_t b = 0; b < blocks; ++b, w += l.bytes, out += l.block) {
    for (int j = 0; j < subs; ++j) {
      float a, c;
      qb::sub_params(f, w, j, a, c);
      for (int i = j * sub; i < (j + 1) * sub; ++i) out[i] = qb::decode(a, c, qb::quant_value(f, w, i));
    }
  }
}

}  // namespace

namespace cpu {

void block_decode_rows(BlockFormat f, const uint8_t* w, int64_t rows, int64_t k, float* out) {
  int64_t per_row = k / block_layout(f).block;
  int64_t bytes = per_row * block_layout(f).bytes;
  parallel_for(rows * per_row, 64, [&](int64_t b0, int64_t b1) {
    // Work in row segments so a row's blocks are contiguous in w and out.
    for (int64_t b = b0; b < b1;) {
      int64_t r = b / per_row, in_row = b % per_row;
      int64_t n = std::min(b1 - b, per_row - in_row);
      decode_blocks(f, w + r * bytes + in_row * block_layout(f).bytes, n, out + r * k + in_row * block_layout(f).block);
      b += n;
    }
  });
}

}  // namespace cpu

void BlockQuantize::eval_cpu(const std::vector<array>& inputs, array& out) {
  detail::allocate(out, "quantize");
  if (out.size() == 0) return;
  std::vector<char> store;
  const float* x = reinterpret_cast<const float*>(row_major(inputs[0], float32, store));
  const BlockLayout& l = block_layout(format_);
  auto* y = reinterpret_cast<uint8_t*>(detail::data_ptr(out));
  int64_t blocks = static_cast<int64_t>(inputs[0].size()) / l.block;
  // The K formats' scale search costs ~100x the memory traffic: a small grain.
  cpu::parallel_for(blocks, l.block == 32 ? 256 : 8, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) qb::quantize_block(format_, x + b * l.block, y + b * l.bytes);
  });
}

void BlockDequantize::eval_cpu(const std::vector<array>& inputs, array& out) {
  detail::allocate(out, "dequantize");
  if (out.size() == 0) return;
  std::vector<char> store;
  const auto* w = reinterpret_cast<const uint8_t*>(row_major(inputs[0], uint8, store));
  int64_t k = out.shape(-1);
  int64_t rows = static_cast<int64_t>(out.size()) / k;
  if (out.dtype() == float32) {
    cpu::block_decode_rows(format_, w, rows, k, reinterpret_cast<float*>(detail::data_ptr(out)));
    return;
  }
  std::vector<float> tmp(out.size());
  cpu::block_decode_rows(format_, w, rows, k, tmp.data());
  cpu::cast_contiguous(tmp.data(), float32, detail::data_ptr(out), out.dtype(), tmp.size());
}

void BlockQuantizedMatmul::eval_cpu(const std::vector<array>& inputs, array& out) {
  detail::allocate(out, "quantized_matmul");
  if (out.size() == 0) return;
  const array& xa = inputs[0];
  int64_t n = inputs[1].shape(0), k = xa.shape(-1);
  int64_t rows = static_cast<int64_t>(out.size()) / n;
  float* y = out.dtype() == float32 ? reinterpret_cast<float*>(detail::data_ptr(out)) : nullptr;
  std::vector<float> ystore;
  if (!y) {
    ystore.resize(out.size());
    y = ystore.data();
  }
  if (k == 0) {
    std::fill(y, y + out.size(), 0.f);
  } else {
    std::vector<char> xs, ws;
    const float* x = reinterpret_cast<const float*>(row_major(xa, float32, xs));
    const auto* w = reinterpret_cast<const uint8_t*>(row_major(inputs[1], uint8, ws));
    // x rounded to 8-bit blocks (quant_blocks_cpu.h; the default).
    const bool round_x = xa.dtype() != float64 && cpu::block_x_int8();
    if (round_x) {
      // The 8-bit QMV whatever M (it takes 8 rows at a time): each group of
      // rows reads the blocks once more, and that costs less than decoding
      // every weight to float32 for the GEMM below (VNNI's int8 products
      // are 4 times as dense as float32 FMAs). Measured: docs/performance.md,
      // "CPU prefill on block formats" (session 18).
      cpu::block_qmv_int8(format_, x, rows, w, n, k, y);
    } else if (rows <= kQmvRows) {
      const bool bf16 = xa.dtype() == bfloat16 && cpu::cpu_target() >= cpu::CpuTarget::avx512_bf16 &&
                        cpu::block_qmv_bf16_supported(format_);
      if (bf16) {
        cpu::block_qmv_bf16(format_, x, rows, w, n, k, y);
      } else {
        cpu::block_qmv(format_, x, rows, w, n, k, y);
      }
    } else {
      // Tiles of ~4 MB of decoded weights.
      int64_t tile = std::max<int64_t>(16, std::min<int64_t>(n, (int64_t{1} << 20) / k));
      std::vector<float> wt(tile * k);
      int64_t row_bytes = k / block_layout(format_).block * block_layout(format_).bytes;
      for (int64_t n0 = 0; n0 < n; n0 += tile) {
        int64_t nt = std::min(tile, n - n0);
        cpu::block_decode_rows(format_, w + n0 * row_bytes, nt, k, wt.data());
        // B[k, j] = tile[j, k]: row stride 1, column stride k.
        cpu::gemm_f32({rows, nt, k, x, k, 1, wt.data(), 1, k, y + n0, n, cpu_threads()});
      }
    }
  }
  if (out.dtype() != float32) cpu::cast_contiguous(y, float32, detail::data_ptr(out), out.dtype(), out.size());
}

}  // namespace kiln
