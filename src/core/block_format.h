#pragma once
// The llama.cpp (GGML) block formats Kiln reads and writes: their names and
// the size of a block in weights and in bytes. Plain C++ with no
// dependencies so that the CUDA kernels include it too.
#include <cstdint>

namespace kiln {

enum class BlockFormat : uint8_t { q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k };
inline constexpr int kBlockFormatCount = static_cast<int>(BlockFormat::q6_k) + 1;

struct BlockLayout {
  const char* name;  // the `mode` string of the public ops
  int block;         // weights per block
  int bytes;         // bytes per block (ggml's type_size)
};

// In BlockFormat's order; sizes as ggml's GGML_QUANT_SIZES.
inline constexpr BlockLayout kBlockLayouts[kBlockFormatCount] = {
    {"q4_0", 32, 18},   {"q4_1", 32, 20},   {"q5_0", 32, 22},   {"q5_1", 32, 24},   {"q8_0", 32, 34},
    {"q2_k", 256, 84},  {"q3_k", 256, 110}, {"q4_k", 256, 144}, {"q5_k", 256, 176}, {"q6_k", 256, 210},
};

constexpr const BlockLayout& block_layout(BlockFormat f) { return kBlockLayouts[static_cast<int>(f)]; }

}  // namespace kiln
