#pragma once
// Sorting, selection and scan primitives (MLX's Sort, ArgSort, Partition,
// ArgPartition, SearchSorted, Scan). The order every one of them uses is
// numpy's: NaN after every number, -0.0 equal to +0.0, ties keep their
// input order (a stable sort).
#include <cstdint>

#include "core/primitives.h"

namespace kiln {

// The sorted values along axis (already normalized).
class Sort : public Primitive {
 public:
  Sort(Stream s, int axis) : Primitive(s), axis_(axis) {}
  KILN_PRIMITIVE_BODY(Sort)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  int axis() const { return axis_; }

 private:
  int axis_;
};

// The (uint32) indices that stably sort the values along axis.
class ArgSort : public Primitive {
 public:
  ArgSort(Stream s, int axis) : Primitive(s), axis_(axis) {}
  KILN_PRIMITIVE_BODY(ArgSort)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  int axis() const { return axis_; }

 private:
  int axis_;
};

// Values along axis rearranged so that position kth holds the value a sort
// would put there, no larger value before it and no smaller one after it
// (the order within each side is unspecified).
class Partition : public Primitive {
 public:
  Partition(Stream s, int kth, int axis) : Primitive(s), kth_(kth), axis_(axis) {}
  KILN_PRIMITIVE_BODY(Partition)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  int kth() const { return kth_; }
  int axis() const { return axis_; }

 private:
  int kth_, axis_;
};

// The (uint32) indices that partition the values as Partition does.
class ArgPartition : public Primitive {
 public:
  ArgPartition(Stream s, int kth, int axis) : Primitive(s), kth_(kth), axis_(axis) {}
  KILN_PRIMITIVE_BODY(ArgPartition)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  int kth() const { return kth_; }
  int axis() const { return axis_; }

 private:
  int kth_, axis_;
};

// inputs: a 1-d sorted sequence and values (both of one dtype); output
// (uint32, values' shape): the insertion point of each value, the first
// (left) or past the last (right) position of equal values.
class SearchSorted : public Primitive {
 public:
  SearchSorted(Stream s, bool right) : Primitive(s), right_(right) {}
  KILN_PRIMITIVE_BODY(SearchSorted)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  bool right() const { return right_; }

 private:
  bool right_;
};

enum class ScanOp : uint8_t { sum, prod, max, min, logaddexp };
const char* scan_op_name(ScanOp op);  // the public op: "cumsum", ...

// Cumulative op along axis; exclusive scans start from the identity (0, 1,
// the lowest / highest value, -inf), reverse scans run from the end.
// The output dtype is the input's (int32 for a sum of bool).
class Scan : public Primitive {
 public:
  Scan(Stream s, ScanOp op, int axis, bool reverse, bool inclusive)
      : Primitive(s), op_(op), axis_(axis), reverse_(reverse), inclusive_(inclusive) {}
  KILN_PRIMITIVE_BODY(Scan)
  KILN_TRANSFORM_RULES
  bool is_equivalent(const Primitive& o) const override;
  std::string describe() const override;
  ScanOp op() const { return op_; }
  int axis() const { return axis_; }
  bool reverse() const { return reverse_; }
  bool inclusive() const { return inclusive_; }

 private:
  ScanOp op_;
  int axis_;
  bool reverse_, inclusive_;
};

}  // namespace kiln
