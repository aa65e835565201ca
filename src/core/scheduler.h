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

// Hooks of the GPU backend into the scheduler (no-ops in a CPU-only build).
// Called on a GPU stream's worker before eval_gpu: makes `stream` the
// stream kernels are enqueued on.
void gpu_begin_node(const Stream& stream);
// After a successful eval_gpu: records an event for the buffers the node
// wrote (consumers wait on it) and keeps `inputs` alive until the stream
// has passed the node's kernels.
void gpu_end_node(const Stream& stream, std::vector<array>&& inputs);
// Blocks until the last GPU write of a's buffer has finished.
void gpu_wait_ready(const array& a);
// Blocks until the stream's device work has finished.
void gpu_synchronize(const Stream& stream);
}  // namespace kiln
