#pragma once
// The llama.cpp (GGML) block formats Kiln reads and writes: their names and
// the size of a block in weights and in bytes. Plain C++ with no
// dependencies so that the CUDA kernels include it too.
#include <cstdint>
#include <type_traits>
#include <utility>

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

// fn(std::integral_constant<BlockFormat, F>{}) for the runtime format f: the
// one switch from a format to its compile-time kernels (both backends).
template <typename Fn>
decltype(auto) dispatch_format(BlockFormat f, Fn&& fn) {
  using enum BlockFormat;
  switch (f) {
    case q4_0: return std::forward<Fn>(fn)(std::integral_constant<BlockFormat, q4_0>{});
    case q4_1: return std::forward<Fn>(fn)(std::integral_constant<BlockFormat, q4_1>{});
    case q5_0: return std::forward<Fn>(fn)(std::integral_constant<BlockFormat, q5_0>{});
    case q5_1: return std::forward<Fn>(fn)(std::integral_constant<BlockFormat, q5_1>{});
    case q8_0: return std::forward<Fn>(fn)(std::integral_constant<BlockFormat, q8_0>{});
    case q2_k: return std::forward<Fn>(fn)(std::integral_constant<BlockFormat, q2_k>{});
    case q3_k: return std::forward<Fn>(fn)(std::integral_constant<BlockFormat, q3_k>{});
    case q4_k: return std::forward<Fn>(fn)(std::integral_constant<BlockFormat, q4_k>{});
    case q5_k: return std::forward<Fn>(fn)(std::integral_constant<BlockFormat, q5_k>{});
    case q6_k: return std::forward<Fn>(fn)(std::integral_constant<BlockFormat, q6_k>{});
  }
  __builtin_unreachable();  // every enumerator is a case
}

}  // namespace kiln
