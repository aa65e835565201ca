#pragma once
// Pools of the CUDA runtime side (device.cpp only): events shared by the
// buffers one node or graph wrote, host-mapped slots for deferred index
// errors, and the pinned staging ring small host inputs reach the device
// through.
#include <cuda_runtime.h>

#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/cuda_common.h"

namespace kiln::cuda {

class EventPool {
 public:
  static EventPool& instance() {
    static EventPool* p = new EventPool();
    return *p;
  }
  cudaEvent_t get() {
    {
      std::lock_guard lock(mutex_);
      if (!free_.empty()) {
        cudaEvent_t e = free_.back();
        free_.pop_back();
        return e;
      }
    }
    cudaEvent_t e;
    KILN_CUDA_CHECK("event", cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  void put(cudaEvent_t e) {
    std::lock_guard lock(mutex_);
    free_.push_back(e);
  }

 private:
  std::mutex mutex_;
  std::vector<cudaEvent_t> free_;
};

// A pooled event owned by every buffer and in-flight record that uses it.
inline std::shared_ptr<void> new_event() {
  cudaEvent_t e = EventPool::instance().get();
  return std::shared_ptr<void>(e, [](void* p) { EventPool::instance().put(static_cast<cudaEvent_t>(p)); });
}
inline cudaEvent_t raw(const std::shared_ptr<void>& e) { return static_cast<cudaEvent_t>(e.get()); }


// Host-mapped slots for deferred index errors, allocated once per process
// (outside any capture) and recycled when the last IndexCheck holding one
// is dropped (its node retired, or the plan that replays it went).
class IndexSlotPool {
 public:
  static IndexSlotPool& instance() {
    static IndexSlotPool* p = new IndexSlotPool();
    return *p;
  }
  IndexErrorSlot* get() {
    std::lock_guard lock(mutex_);
    if (!base_) {
      constexpr size_t kSlots = 1 << 14;
      void* p = nullptr;
      if (cudaHostAlloc(&p, kSlots * sizeof(IndexErrorSlot), cudaHostAllocMapped) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
      }
      base_ = static_cast<IndexErrorSlot*>(p);
      for (size_t i = 0; i < kSlots; ++i) free_.push_back(base_ + i);
    }
    if (free_.empty()) return nullptr;
    IndexErrorSlot* s = free_.back();
    free_.pop_back();
    s->flag = 0;
    return s;
  }
  void put(IndexErrorSlot* s) {
    std::lock_guard lock(mutex_);
    free_.push_back(s);
  }

 private:
  std::mutex mutex_;
  IndexErrorSlot* base_ = nullptr;
  std::vector<IndexErrorSlot*> free_;
};

// Pinned host memory through which small host inputs reach the device: a
// copy from pageable memory is synchronous (and in a capture it is not
// allowed at all), one from pinned memory is an ordinary async copy (a
// memcpy node in a graph). Space is handed out in stream order and freed
// when the in-flight record of the node that used it retires.
class StagingRing {
 public:
  static constexpr size_t kBytes = size_t{4} << 20;
  static constexpr size_t kMaxItem = size_t{64} << 10;  // larger inputs use the plain path

  // Called when the stream is created (pinned allocation is not allowed
  // during a capture); without it take() always says full.
  void init() {
    void* p = nullptr;
    if (cudaHostAlloc(&p, kBytes, cudaHostAllocDefault) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    base_ = static_cast<char*>(p);
  }

  // Space for `bytes` (64-byte aligned), or nullptr when the ring is full.
  char* take(size_t bytes) {
    if (!base_) return nullptr;
    bytes = (bytes + 63) & ~size_t{63};
    std::lock_guard lock(mutex_);
    // Positions grow without bound; the live window is [tail_, head_).
    size_t at = head_ % kBytes;
    size_t skip = (at + bytes > kBytes) ? kBytes - at : 0;  // never wrap an item
    if (head_ + skip + bytes - tail_ > kBytes) return nullptr;
    head_ += skip;
    char* p = base_ + head_ % kBytes;
    head_ += bytes;
    return p;
  }
  int64_t mark() {
    std::lock_guard lock(mutex_);
    return static_cast<int64_t>(head_);
  }
  void release_to(int64_t mark) {
    std::lock_guard lock(mutex_);
    if (mark > static_cast<int64_t>(tail_)) tail_ = static_cast<size_t>(mark);
  }

 private:
  std::mutex mutex_;
  char* base_ = nullptr;
  size_t head_ = 0, tail_ = 0;
};


}  // namespace kiln::cuda
