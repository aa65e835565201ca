#pragma once
// Writing a primitive as its name and parameters, and building a node of
// it again from them (export_function / import_function, core/export.cpp).
#include <nlohmann/json.hpp>

#include <vector>

#include "core/primitive.h"

namespace kiln::detail {

// {"name": ..., "params": {...}}; throws kiln::Error naming a primitive that
// cannot be written yet.
nlohmann::json serialize_primitive(const Primitive& p);

// The outputs of a node of the serialized primitive on `inputs`. shapes and
// dtypes are the outputs' as exported; with `reshaped` (the inputs' shapes
// differ from the exported ones, a shapeless import) the shapes are
// computed again, and a primitive whose parameters fix its shapes throws.
std::vector<array> rebuild_node(const nlohmann::json& prim, const std::vector<array>& inputs,
                                const std::vector<Shape>& shapes, const std::vector<Dtype>& dtypes, bool reshaped,
                                Stream s);

}  // namespace kiln::detail
