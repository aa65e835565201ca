#pragma once
// MLX's general gather / scatter (slices started by index arrays on some
// axes), the dynamic slices (a start read from an array at evaluation) and
// the views as_strided and view (a bitcast). Ops: src/core/ops_index.cpp;
// rules: src/core/rules_index.cpp; kernels: backend/cpu/gather_scatter.cpp,
// backend/cuda/gather_scatter.cu.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/primitives.h"

namespace kiln {

// gather: inputs a, then one index array per entry of axes (one dtype, one
// shape I, already broadcast); output I + slice_sizes. Axes normalized.
class GatherSlices : public Primitive {
 public:
  bool accepts_fp8() const override { return true; }
  GatherSlices(Stream s, std::vector<int> axes, Shape slice_sizes)
      : Primitive(s), axes_(std::move(axes)), slice_sizes_(std::move(slice_sizes)) {}
  KILN_PRIMITIVE_BODY(GatherSlices)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  const std::vector<int>& axes() const { return axes_; }
  const Shape& slice_sizes() const { return slice_sizes_; }

 private:
  std::vector<int> axes_;
  Shape slice_sizes_;
};

// scatter, scatter_add/prod/max/min: inputs a, the index arrays (as
// GatherSlices), updates of shape I + a slice shape (a's rank, a's dtype).
class Scatter : public Primitive {
 public:
  enum class Reduce : uint8_t { none, sum, prod, max, min };
  Scatter(Stream s, Reduce reduce, std::vector<int> axes) : Primitive(s), reduce_(reduce), axes_(std::move(axes)) {}
  KILN_PRIMITIVE_BODY(Scatter)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  std::string describe() const override;
  Reduce reduce() const { return reduce_; }
  const std::vector<int>& axes() const { return axes_; }

 private:
  Reduce reduce_;
  std::vector<int> axes_;
};
// The public op of a reduce mode ("scatter_add", ...).
const char* scatter_op_name(Scatter::Reduce r);

// slice(a, start, axes, slice_size): inputs a, start (1-d integer, one per axis).
class DynamicSlice : public Primitive {
 public:
  bool accepts_fp8() const override { return true; }
  DynamicSlice(Stream s, std::vector<int> axes, Shape slice_size)
      : Primitive(s), axes_(std::move(axes)), slice_size_(std::move(slice_size)) {}
  KILN_PRIMITIVE_BODY(DynamicSlice)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  const std::vector<int>& axes() const { return axes_; }
  const Shape& slice_size() const { return slice_size_; }

 private:
  std::vector<int> axes_;
  Shape slice_size_;
};

// slice_update(src, update, start, axes): inputs src, update (src's rank and
// dtype; its shape is the slice's), start.
class DynamicSliceUpdate : public Primitive {
 public:
  bool accepts_fp8() const override { return true; }
  DynamicSliceUpdate(Stream s, std::vector<int> axes) : Primitive(s), axes_(std::move(axes)) {}
  KILN_PRIMITIVE_BODY(DynamicSliceUpdate)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  const std::vector<int>& axes() const { return axes_; }

 private:
  std::vector<int> axes_;
};

// as_strided: a view of a row-major input (the op makes it one).
class AsStrided : public Primitive {
 public:
  bool accepts_fp8() const override { return true; }
  AsStrided(Stream s, Shape shape, Strides strides, int64_t offset)
      : Primitive(s), shape_(std::move(shape)), strides_(std::move(strides)), offset_(offset) {}
  KILN_PRIMITIVE_BODY(AsStrided)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  int64_t offset() const { return offset_; }

 private:
  Shape shape_;
  Strides strides_;
  int64_t offset_;
};

// view: the input's bytes as the output's dtype; a view of the buffer when
// the layout allows, else a row-major copy first.
class View : public Primitive {
 public:
  bool accepts_fp8() const override { return true; }
  View(Stream s, Dtype dtype) : Primitive(s), dtype_(dtype) {}
  KILN_PRIMITIVE_BODY(View)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  Dtype dtype() const { return dtype_; }
  // The input's strides and offset in elements of the output type, or
  // nothing when its layout cannot express them (every backend then copies
  // the bytes to row-major first). Defined in backend/cpu/gather_scatter.cpp.
  std::optional<std::pair<Strides, int64_t>> layout_of(const array& input) const;

 private:
  Dtype dtype_;
};

}  // namespace kiln

namespace kiln {
// The scatter ops with the reduce mode as a parameter (the rules use it).
array scatter_with(const array& a, const std::vector<array>& indices, const array& updates,
                   const std::vector<int>& axes, Scatter::Reduce reduce, StreamOrDevice s = {});
}  // namespace kiln
