#pragma once
// Einstein summation (numpy.einsum, MLX's einsum.h): subscripts such as
// "ij,jk->ik", with an ellipsis "..." for broadcast leading axes, repeated
// subscripts within an operand (diagonals), and the implicit output mode
// (no "->": the subscripts seen once, in alphabetical order, after the
// ellipsis axes). Built from ordinary ops: a greedy path contracts one pair
// of operands at a time through tensordot-style matmuls, so derivatives,
// vmap and the GPU come from those ops.
#include <string>
#include <utility>
#include <vector>

#include "kiln/array.h"
#include "kiln/device.h"

namespace kiln {

// The contraction order einsum would use, as MLX returns it: the operand
// positions contracted at each step (in the list of operands left at that
// step, the result appended last) and a printable report of the path.
std::pair<std::vector<std::vector<int>>, std::string> einsum_path(const std::string& subscripts,
                                                                  const std::vector<array>& operands);

array einsum(const std::string& subscripts, const std::vector<array>& operands, StreamOrDevice s = {});

}  // namespace kiln
