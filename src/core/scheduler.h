#pragma once
#include <string>

#include "kiln/array.h"

namespace kiln {
// Runs one node's primitive on its stream's backend, after waiting for its
// inputs; records failures in the node instead of throwing.
void evaluate_node(array& node, const Stream& stream);

// Provided by the GPU backend (or its stub in a CPU-only build).
bool gpu_available();
int gpu_count();
std::string device_unavailable_reason(const Device& d);
}  // namespace kiln
