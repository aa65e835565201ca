#include "backend/cuda/graph_encoder.h"

#include <cstdlib>
#include <mutex>
#include <string>

#include "backend/cuda/cuda_common.h"
#include "core/array_desc.h"
#include "core/primitive.h"

namespace kiln::cuda {
namespace {

size_t env_size(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  unsigned long long x = std::strtoull(v, &end, 10);
  return (end && *end == '\0') ? static_cast<size_t>(x) : fallback;
}

std::mutex stats_mutex;
GraphStats stats;

// 64-bit mixing (splitmix64 finalizer) folded over the values.
struct Hasher {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  void add(uint64_t v) {
    uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    h = z ^ (z >> 31);
  }
  void add_layout(const ArrayDesc& d) {
    add(static_cast<uint64_t>(d.dtype));
    add(d.shape.size());
    for (auto s : d.shape) add(static_cast<uint64_t>(s));
    for (auto s : d.strides) add(static_cast<uint64_t>(s));
  }
};

}  // namespace

GraphSettings& graph_settings() {
  static GraphSettings* s = [] {
    auto* g = new GraphSettings();
    const char* on = std::getenv("KILN_CUDA_GRAPHS");
    g->enabled = !(on && std::string(on) == "0");
    g->min_nodes = env_size("KILN_CUDA_GRAPH_MIN_NODES", 2);
    g->max_nodes = env_size("KILN_CUDA_GRAPH_MAX_NODES", 1024);
    g->max_bytes = env_size("KILN_CUDA_GRAPH_MAX_BYTES", size_t{256} << 20);
    return g;
  }();
  return *s;
}

GraphStats graph_stats() {
  std::lock_guard lock(stats_mutex);
  return stats;
}
void count_graph_fallback() {
  std::lock_guard lock(stats_mutex);
  ++stats.fallbacks;
}

void count_graph_time(uint64_t capture_ns, uint64_t prepare_ns, uint64_t launch_ns) {
  std::lock_guard lock(stats_mutex);
  stats.capture_ns += capture_ns;
  stats.prepare_ns += prepare_ns;
  stats.launch_ns += launch_ns;
}

uint64_t batch_signature(const std::vector<array>& nodes, size_t begin, size_t end) {
  Hasher h;
  h.add(end - begin);
  for (size_t i = begin; i < end; ++i) {
    const ArrayDesc& d = *nodes[i].desc();
    // The name's address identifies the primitive class (a string literal).
    h.add(reinterpret_cast<uintptr_t>(d.primitive->name()));
    h.add(static_cast<uint64_t>(d.dtype));
    for (auto s : d.shape) h.add(static_cast<uint64_t>(s));
    h.add(d.inputs.size());
    for (const auto& in : d.inputs) h.add_layout(*in.desc());
  }
  return h.h;
}

GraphExecCache::~GraphExecCache() {
  for (auto& [key, e] : map_) cudaGraphExecDestroy(e.exec);
}

cudaGraphExec_t GraphExecCache::get(uint64_t key, cudaGraph_t graph, cudaStream_t stream, size_t kiln_nodes) {
  auto it = map_.find(key);
  if (it != map_.end()) {
    cudaGraphExecUpdateResultInfo info{};
    if (cudaGraphExecUpdate(it->second.exec, graph, &info) == cudaSuccess) {
      ages_.splice(ages_.begin(), ages_, it->second.age);
      std::lock_guard lock(stats_mutex);
      ++stats.updated;
      ++stats.launched;
      stats.nodes += kiln_nodes;
      return it->second.exec;
    }
    // A different topology under the same signature: build a new one.
    cudaGetLastError();
    KILN_CUDA_CHECK("graph", cudaStreamSynchronize(stream));
    cudaGraphExecDestroy(it->second.exec);
    ages_.erase(it->second.age);
    map_.erase(it);
  }
  if (map_.size() >= capacity_) {
    // The oldest executable may still run from an earlier launch.
    KILN_CUDA_CHECK("graph", cudaStreamSynchronize(stream));
    uint64_t old = ages_.back();
    cudaGraphExecDestroy(map_[old].exec);
    map_.erase(old);
    ages_.pop_back();
  }
  cudaGraphExec_t exec = nullptr;
  KILN_CUDA_CHECK("graph", cudaGraphInstantiate(&exec, graph, 0));
  ages_.push_front(key);
  map_[key] = Entry{exec, ages_.begin()};
  std::lock_guard lock(stats_mutex);
  ++stats.instantiated;
  ++stats.launched;
  stats.nodes += kiln_nodes;
  return exec;
}

}  // namespace kiln::cuda
