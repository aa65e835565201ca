#pragma once
// Shared pieces of the op layer: argument checks that throw kiln::Error
// naming the op, the shapes and the dtypes; broadcasting; node creation.
#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/object_pool.h"
#include "core/primitive.h"
#include "kiln/array.h"

namespace kiln {

std::string format_shape(const Shape& shape);  // "(3,4)"
// "(3,4) float32, (5) int32"
std::string describe(std::initializer_list<const array*> arrays);
std::string describe(const std::vector<array>& arrays);

// Throws "[op] message; inputs: (3,4) float32, ...".
[[noreturn]] void fail(const char* op, const std::string& message, std::initializer_list<const array*> inputs);
[[noreturn]] void fail(const char* op, const std::string& message, const std::vector<array>& inputs);

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op, std::initializer_list<const array*> inputs);
// Normalizes a possibly negative axis; throws for an axis out of range.
int normalize_axis(int axis, int ndim, const char* op, const array& a);
// Normalizes, sorts and checks for duplicates.
std::vector<int> normalize_axes(const std::vector<int>& axes, int ndim, const char* op, const array& a);

template <typename P, typename... Args>
array make_node(Shape shape, Dtype dtype, std::vector<array> inputs, Stream s, Args&&... args) {
  return array(std::move(shape), dtype, detail::make_pooled<P>(s, std::forward<Args>(args)...), std::move(inputs));
}

int64_t shape_size(const Shape& shape);

}  // namespace kiln
