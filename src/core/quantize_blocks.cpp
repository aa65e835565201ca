// Placeholder until the block formats land: no mode is a block format, so the
// public ops reject "q4_0" etc. as unknown modes.
#include "core/quantize_blocks.h"

#include "kiln/error.h"

namespace kiln::detail {

bool is_block_format(const std::string&) { return false; }

std::vector<array> block_quantize(const array&, const std::string& mode, StreamOrDevice) {
  throw Error("[quantize] unknown mode '" + mode + "'");
}
array block_dequantize(const array&, const std::string& mode, Dtype, StreamOrDevice) {
  throw Error("[dequantize] unknown mode '" + mode + "'");
}
array block_quantized_matmul(const array&, const array&, bool, const std::string& mode, StreamOrDevice) {
  throw Error("[quantized_matmul] unknown mode '" + mode + "'");
}

}  // namespace kiln::detail
