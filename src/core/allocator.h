#pragma once
// Buffers and the caching allocator. A Buffer owns one allocation; when the
// last reference goes, the memory returns to a size-class cache so that the
// next eval of the same graph reuses it instead of calling the system.
#include <cstddef>
#include <memory>

namespace kiln {

class Buffer {
 public:
  Buffer(void* ptr, size_t size) : ptr_(ptr), size_(size) {}
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* ptr() const { return ptr_; }
  size_t size() const { return size_; }

 private:
  void* ptr_;
  size_t size_;
};

namespace allocator {
// Allocates host memory (64-byte aligned). Throws kiln::Error naming `op`
// when the memory limit would be exceeded even after the cache is dropped.
std::shared_ptr<Buffer> malloc(size_t bytes, const char* op);
}  // namespace allocator

}  // namespace kiln
