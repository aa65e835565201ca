#include "core/allocator.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "kiln/error.h"
#include "kiln/memory.h"

namespace kiln {
namespace {

// Sizes are rounded up to a size class so that slightly different requests
// share cached blocks: 64-byte granules below 4 KiB, then 1/8 of the next
// power of two.
size_t size_class(size_t bytes) {
  if (bytes <= 4096) return (bytes + 63) & ~size_t{63};
  size_t p = 4096;
  while (p < bytes) p <<= 1;
  size_t step = p / 8;
  return (bytes + step - 1) / step * step;
}

class HostAllocator {
 public:
  static HostAllocator& instance() {
    // Never destroyed: buffers held by static arrays may be freed after main.
    static HostAllocator* a = new HostAllocator();
    return *a;
  }

  void* allocate(size_t requested, size_t& actual, const char* op) {
    size_t bytes = size_class(requested == 0 ? 1 : requested);
    std::unique_lock lock(mutex_);
    auto it = cache_.find(bytes);
    if (it != cache_.end()) {
      void* p = it->second;
      cache_.erase(it);
      cache_bytes_ -= bytes;
      note_active(bytes);
      actual = bytes;
      return p;
    }
    if (active_ + cache_bytes_ + bytes > limit_) drop_cache();
    if (active_ + bytes > limit_) {
      throw Error(std::string("[") + op + "] allocating " + std::to_string(requested) +
                  " bytes would exceed the memory limit of " + std::to_string(limit_) + " bytes (" +
                  std::to_string(active_) + " bytes active)");
    }
    lock.unlock();
    void* p = std::aligned_alloc(64, bytes);
    if (p == nullptr) {
      throw Error(std::string("[") + op + "] out of host memory allocating " + std::to_string(requested) +
                  " bytes");
    }
    lock.lock();
    note_active(bytes);
    actual = bytes;
    return p;
  }

  void release(void* p, size_t bytes) {
    std::lock_guard lock(mutex_);
    active_ -= bytes;
    if (active_ + cache_bytes_ + bytes <= limit_ && bytes <= kMaxCachedBlock) {
      cache_.emplace(bytes, p);
      cache_bytes_ += bytes;
    } else {
      std::free(p);
    }
  }

  size_t active() { std::lock_guard l(mutex_); return active_; }
  size_t peak() { std::lock_guard l(mutex_); return peak_; }
  void reset_peak() { std::lock_guard l(mutex_); peak_ = active_; }
  size_t cached() { std::lock_guard l(mutex_); return cache_bytes_; }
  size_t limit() { std::lock_guard l(mutex_); return limit_; }
  size_t set_limit(size_t l) {
    std::lock_guard lock(mutex_);
    size_t old = limit_;
    limit_ = l;
    if (active_ + cache_bytes_ > limit_) drop_cache();
    return old;
  }
  void clear() { std::lock_guard l(mutex_); drop_cache(); }

 private:
  static constexpr size_t kMaxCachedBlock = size_t{1} << 34;

  void note_active(size_t bytes) {
    active_ += bytes;
    if (active_ > peak_) peak_ = active_;
  }
  void drop_cache() {
    for (auto& [size, p] : cache_) std::free(p);
    cache_.clear();
    cache_bytes_ = 0;
  }

  std::mutex mutex_;
  std::multimap<size_t, void*> cache_;
  size_t cache_bytes_ = 0;
  size_t active_ = 0;
  size_t peak_ = 0;
  size_t limit_ = ~size_t{0};
};

}  // namespace

Buffer::~Buffer() { HostAllocator::instance().release(ptr_, size_); }

std::shared_ptr<Buffer> allocator::malloc(size_t bytes, const char* op) {
  size_t actual = 0;
  void* p = HostAllocator::instance().allocate(bytes, actual, op);
  return std::make_shared<Buffer>(p, actual);
}

size_t get_active_memory() { return HostAllocator::instance().active(); }
size_t get_peak_memory() { return HostAllocator::instance().peak(); }
void reset_peak_memory() { HostAllocator::instance().reset_peak(); }
size_t get_cache_memory() { return HostAllocator::instance().cached(); }
size_t set_memory_limit(size_t limit) { return HostAllocator::instance().set_limit(limit); }
size_t get_memory_limit() { return HostAllocator::instance().limit(); }
void clear_cache() { HostAllocator::instance().clear(); }

}  // namespace kiln
