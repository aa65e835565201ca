#pragma once
// Facts about dtypes (MLX's mlx/utils.h): the limits of the float and
// integer types, and the dtype that arrays promote to together.
#include <cstdint>
#include <vector>

#include "kiln/array.h"
#include "kiln/dtype.h"

namespace kiln {

// Limits of a floating-point dtype (complex64: those of its float32 parts,
// with dtype float32, as numpy and MLX); throws kiln::Error for other dtypes
// (MLX throws std::invalid_argument).
struct finfo {
  explicit finfo(Dtype dtype);
  Dtype dtype;
  int bits;
  double min;  // the most negative finite value (numpy's finfo.min)
  double max;
  double eps;  // the gap between 1 and the next value
  double smallest_normal;
};

// Limits of an integer dtype; throws kiln::Error for bool and the floats.
struct iinfo {
  explicit iinfo(Dtype dtype);
  Dtype dtype;
  int64_t min;
  uint64_t max;
};

// The dtype the arrays promote to together (promote_types over them).
Dtype result_type(const array& a, const array& b);
Dtype result_type(const array& a, const array& b, const array& c);
Dtype result_type(const std::vector<array>& arrays);

// The shape two shapes broadcast to (numpy's rules); throws kiln::Error
// naming both when they do not.
Shape broadcast_shapes(const Shape& s1, const Shape& s2);

}  // namespace kiln
