#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/array.h"

namespace kiln {
// Back-pressure on a stream's queue (see StreamWorker::submit in
// scheduler.cpp): at most this many submissions, nodes and output bytes wait
// there before a submitter blocks.
constexpr int kMaxQueuedBatches = 64;
constexpr int64_t kMaxQueuedNodes = int64_t{1} << 16;
constexpr size_t kMaxQueuedBytes = size_t{1} << 30;
// A stream's worker thread exits after this long without work (a program
// that creates many streams does not keep a thread for each).
constexpr std::chrono::milliseconds kStreamIdleTimeout{1000};

// Runs one node's primitive on its stream's backend, after waiting for its
// inputs; records failures in the node instead of throwing. `scratch`, if
// given, is a vector the caller reuses from node to node for the outputs.
void evaluate_node(array& node, const Stream& stream, std::vector<array>* scratch = nullptr);

// The two halves of evaluate_node, for backends that evaluate a batch of
// nodes together (the CUDA graph encoder). wait_for_inputs blocks until the
// node's inputs are computed, skipping those in `same_batch` (sorted; they
// are computed earlier in the same batch); it returns false, with the node's
// error set, when an input failed. finish_node publishes the node: status
// available with its inputs detached, or failed with its buffer dropped and
// its primitive and inputs kept (the next eval runs it again).
bool wait_for_inputs(ArrayDesc& d, const std::vector<const ArrayDesc*>* same_batch);
void finish_node(array& node);
// Every output of node's primitive in order (node and its siblings; an
// output nobody holds is a scratch array), as eval_cpu/eval_gpu take them.
std::vector<array> node_outputs(const array& node);
// The node's inputs for a backend that holds them until its kernels ran: a
// copy, as finish_node detaches the node (or keeps its graph: a failed node
// runs again, a transform walks the graph).
std::vector<array> inputs_to_hold(const ArrayDesc& d);

// While one is alive on a thread, nodes that thread schedules keep their
// primitive and inputs after they run (transformations walk them later).
class KeepGraphScope {
 public:
  KeepGraphScope();
  ~KeepGraphScope();
  KeepGraphScope(const KeepGraphScope&) = delete;
  KeepGraphScope& operator=(const KeepGraphScope&) = delete;
  static bool active();
};

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
// Evaluates a batch (consecutive nodes of one eval on one GPU stream), on
// the stream's worker; may record them into one CUDA graph. Resets each
// handle in `nodes` once that node is published.
void gpu_evaluate_batch(std::vector<array>& nodes, const Stream& stream);
// Blocks until the last GPU write of a's buffer has finished.
void gpu_wait_ready(const array& a);
// Blocks until the stream's device work has finished.
void gpu_synchronize(const Stream& stream);
}  // namespace kiln
