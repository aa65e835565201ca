#pragma once
// The encoder's graph side: settings, counters, the batch signature and the
// per-stream cache of instantiated CUDA graphs.
//
// A GPU stream's worker records a batch of nodes (one eval's consecutive
// nodes on that stream) by stream capture into a cudaGraph_t, then launches
// it as one unit. Instantiating a graph costs far more than launching it, so
// executable graphs are cached by the batch's signature (primitives, shapes,
// dtypes, strides): a repeated step (a decode step) finds its executable and
// only refreshes the kernel arguments with cudaGraphExecUpdate.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "backend/cuda/graph_plan.h"
#include "kiln/array.h"

namespace kiln::cuda {

struct GraphSettings {
  std::atomic<bool> enabled;          // KILN_CUDA_GRAPHS=0 turns graphs off
  std::atomic<size_t> min_nodes;      // smaller batches launch eagerly
  std::atomic<size_t> max_nodes;      // longer batches are cut into graphs of this size
  std::atomic<size_t> max_bytes;      // outputs one graph may hold alive at once
  std::atomic<bool> replay;           // KILN_CUDA_GRAPH_REPLAY=0: record every batch (no plans)
};
GraphSettings& graph_settings();

// Counters for tests and the benchmark (monotonic, all streams).
struct GraphStats {
  uint64_t launched = 0;      // graphs launched
  uint64_t instantiated = 0;  // executables built from scratch
  uint64_t updated = 0;       // cached executables reused through cudaGraphExecUpdate
  uint64_t replayed = 0;      // cached executables launched as they were, nothing recorded (graph_plan.h)
  uint64_t nodes = 0;         // kiln nodes recorded into launched graphs
  uint64_t fallbacks = 0;     // batches that could not be captured and ran eagerly
  // Host time spent, in nanoseconds: recording the nodes (eval_gpu under
  // capture), ending the capture and updating or instantiating the
  // executable, and launching it.
  uint64_t capture_ns = 0, prepare_ns = 0, launch_ns = 0;
};
GraphStats graph_stats();
void count_graph_fallback();
void count_graph_time(uint64_t capture_ns, uint64_t prepare_ns, uint64_t launch_ns);
void count_graph_replay(size_t kiln_nodes, uint64_t prepare_ns, uint64_t launch_ns);

// A hash of what decides a batch's graph topology: each node's primitive,
// output and input shapes, dtypes and strides.
uint64_t batch_signature(const std::vector<array>& nodes, size_t begin, size_t end);

// Executable graphs of one stream, least recently used dropped first. A
// signature may have up to kMaxVariants executables, each with the plan of
// its last recording: a step whose output feeds the next step alternates
// between two sets of buffers, and each set replays its own executable.
class GraphExecCache {
 public:
  static constexpr size_t kMaxVariants = 4;
  struct Variant {
    cudaGraphExec_t exec;
    std::unique_ptr<Plan> plan;  // nullptr: not replayable
  };

  explicit GraphExecCache(size_t capacity = 64) : capacity_(capacity) {}
  ~GraphExecCache();
  // An executable for `graph`, made the first variant of `key`: a new one
  // when `add_variant` and the key has fewer than kMaxVariants, else its
  // least recently used one brought up to date (cudaGraphExecUpdate; a new
  // one when that fails). `stream` is synchronized before an executable is
  // destroyed. Throws kiln::Error on a CUDA failure.
  cudaGraphExec_t get(uint64_t key, cudaGraph_t graph, cudaStream_t stream, size_t kiln_nodes, bool add_variant);
  // How many times `key` has been recorded (0: not cached).
  uint32_t recordings(uint64_t key) const;
  // The variants of `key`, most recently used first (nullptr: none).
  std::vector<Variant>* variants(uint64_t key);
  // Marks variant `v` of `key` most recently used (it becomes the first);
  // returns its executable.
  cudaGraphExec_t use(uint64_t key, size_t v);
  // Attaches the plan recorded with the executable `get` just returned.
  void set_plan(uint64_t key, std::unique_ptr<Plan> plan);

 private:
  struct Entry {
    std::list<uint64_t>::iterator age;
    uint32_t recordings = 0;
    std::vector<Variant> variants;  // most recently used first
  };
  size_t capacity_;
  std::unordered_map<uint64_t, Entry> map_;
  std::list<uint64_t> ages_;  // front = most recently used
};

}  // namespace kiln::cuda
