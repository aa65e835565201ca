#include "backend/cuda/graph_encoder.h"

#include <algorithm>
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
    const char* replay = std::getenv("KILN_CUDA_GRAPH_REPLAY");
    g->replay = !(replay && std::string(replay) == "0");
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

void count_graph_replay(size_t kiln_nodes, uint64_t prepare_ns, uint64_t launch_ns) {
  std::lock_guard lock(stats_mutex);
  ++stats.replayed;
  ++stats.launched;
  stats.nodes += kiln_nodes;
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
  for (auto& [key, e] : map_) {
    for (auto& v : e.variants) cudaGraphExecDestroy(v.exec);
  }
}

cudaGraphExec_t GraphExecCache::get(uint64_t key, cudaGraph_t graph, cudaStream_t stream, size_t kiln_nodes,
                                    bool add_variant) {
  auto it = map_.find(key);
  if (it != map_.end()) {
    Entry& e = it->second;
    ages_.splice(ages_.begin(), ages_, e.age);
    ++e.recordings;
    if (!e.variants.empty() && (!add_variant || e.variants.size() >= kMaxVariants)) {
      // Refresh the least recently used variant and make it the first.
      std::rotate(e.variants.begin(), e.variants.end() - 1, e.variants.end());
      Variant& v = e.variants.front();
      cudaGraphExecUpdateResultInfo info{};
      if (cudaGraphExecUpdate(v.exec, graph, &info) == cudaSuccess) {
        v.plan.reset();
        std::lock_guard lock(stats_mutex);
        ++stats.updated;
        ++stats.launched;
        stats.nodes += kiln_nodes;
        return v.exec;
      }
      // A different topology under the same signature: build a new one.
      cudaGetLastError();
      KILN_CUDA_CHECK("graph", cudaStreamSynchronize(stream));
      cudaGraphExecDestroy(v.exec);
      e.variants.erase(e.variants.begin());
    }
  } else {
    if (map_.size() >= capacity_) {
      // The oldest executables may still run from an earlier launch.
      KILN_CUDA_CHECK("graph", cudaStreamSynchronize(stream));
      uint64_t old = ages_.back();
      for (auto& v : map_[old].variants) cudaGraphExecDestroy(v.exec);
      map_.erase(old);
      ages_.pop_back();
    }
    ages_.push_front(key);
    it = map_.emplace(key, Entry{ages_.begin(), 1, {}}).first;
  }
  cudaGraphExec_t exec = nullptr;
  KILN_CUDA_CHECK("graph", cudaGraphInstantiate(&exec, graph, 0));
  auto& variants = it->second.variants;
  variants.insert(variants.begin(), Variant{exec, nullptr});
  std::lock_guard lock(stats_mutex);
  ++stats.instantiated;
  ++stats.launched;
  stats.nodes += kiln_nodes;
  return exec;
}

uint32_t GraphExecCache::recordings(uint64_t key) const {
  auto it = map_.find(key);
  return it == map_.end() ? 0 : it->second.recordings;
}

std::vector<GraphExecCache::Variant>* GraphExecCache::variants(uint64_t key) {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second.variants;
}

cudaGraphExec_t GraphExecCache::use(uint64_t key, size_t v) {
  Entry& e = map_.at(key);
  ages_.splice(ages_.begin(), ages_, e.age);
  std::rotate(e.variants.begin(), e.variants.begin() + static_cast<std::ptrdiff_t>(v),
              e.variants.begin() + static_cast<std::ptrdiff_t>(v) + 1);
  return e.variants.front().exec;
}

void GraphExecCache::set_plan(uint64_t key, std::unique_ptr<Plan> plan) {
  auto it = map_.find(key);
  if (it != map_.end() && !it->second.variants.empty()) it->second.variants.front().plan = std::move(plan);
}

}  // namespace kiln::cuda
