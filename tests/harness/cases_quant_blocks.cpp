// Op-harness cases of llama.cpp's block formats (core/quantize_blocks.h),
// through the detail:: functions the public quantize / dequantize /
// quantized_matmul call for a block `mode`.
#include <cstring>
#include <random>

#include "backend/cpu/quant_blocks_cpu.h"
#include "core/block_format.h"
#include "core/quantize_blocks.h"
#include "harness/harness.h"
#include "quant_blocks_ref.h"

namespace kiln::harness {
namespace {

// Random blocks with finite fp16 scales: quantized random floats.
array blocks(const std::string& mode, int n, int k, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n) * k);
  for (auto& e : v) e = d(gen);
  array w = detail::block_quantize(array(v, {n, k}, float32), mode, Device::cpu)[0];
  w.eval();
  return w;
}

}  // namespace

void register_quant_blocks() {
  for (const std::string mode : {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"}) {
    const int k = mode.back() == 'k' ? 256 : 64;
    add({.op = "quantized_matmul",
         .primitive = "BlockQuantizedMatmul",
         .name = mode + " (3," + std::to_string(k) + ") x (5," + std::to_string(k) + ")^T",
         .fn = [mode](const Arrays& x) {
           return Arrays{detail::block_quantized_matmul(x[0], x[1], true, mode, {})};
         },
         .inputs = {in({3, k}), Input{{5, 0}, 0, 0, uint8, [mode, k] { return blocks(mode, 5, k, 7); }}},
         .dtypes = {float32, float16, bfloat16},
         // The CPU rounds x to 8 bits (ops.h): the reference does too, in
         // float64; the GPU does not, within the bound of that rounding.
         .ref = [mode, k](const Arrays& x) {
           return std::vector<std::vector<double>>{
               test::block_product(values(x[0]), k, x[1], mode, cpu::block_x_int8())};
         },
         .diff = {0},
         .gpu_slack = [mode, k](const Arrays& x) {
           return std::vector<std::vector<double>>{
               cpu::block_x_int8() ? test::x8_bound(values(x[0]), k, x[1], mode) : std::vector<double>(15, 0.0)};
         }});
    add({.op = "dequantize",
         .primitive = "BlockDequantize",
         .name = mode + " (4," + std::to_string(k) + ")",
         .fn = [mode](const Arrays& x) { return Arrays{detail::block_dequantize(x[0], mode, float32, {})}; },
         .inputs = {Input{{4, 0}, 0, 0, uint8, [mode, k] { return blocks(mode, 4, k, 8); }}},
         .dtypes = {float32}});
    add({.op = "quantize",
         .primitive = "BlockQuantize",
         .name = mode + " (2," + std::to_string(k) + ")",
         .fn = [mode](const Arrays& x) { return Arrays{detail::block_quantize(x[0], mode, {})[0]}; },
         .inputs = {in({2, k})},
         .dtypes = {float32}});
  }
}

}  // namespace kiln::harness
