#pragma once
// Buffers and the caching allocator. A Buffer owns one logical allocation
// that may have a host copy, a device copy, or both; flags say which copies
// are valid, and the stale side is refreshed lazily when someone on that
// side asks for a pointer. When the last reference goes, each copy returns
// to a size-class cache so that the next eval of the same graph reuses it
// instead of calling the system.
#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>

namespace kiln {

class Buffer {
 public:
  enum : uint8_t { kHost = 1, kDevice = 2 };

  // A host buffer (host copy valid).
  Buffer(void* host, size_t size) : host_(host), size_(size), valid_(kHost) {}
  // A device buffer (device copy valid, no host copy yet).
  struct DeviceTag {};
  Buffer(DeviceTag, void* device, size_t size) : device_(device), size_(size), valid_(kDevice) {}
  // Host memory Kiln does not own: `deleter` runs when the buffer dies.
  // A read-only buffer is never donated to an op's output, so nothing
  // writes it (a memory-mapped file, a caller's constant data).
  struct ExternalTag {};
  Buffer(ExternalTag, void* host, size_t size, std::function<void(void*)> deleter, bool read_only)
      : host_(host), size_(size), valid_(kHost), deleter_(std::move(deleter)), external_(true),
        read_only_(read_only) {}
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // Host pointer to valid data: the common case is one load of the flags;
  // otherwise the device copy is brought over (after waiting for the kernel
  // that wrote it).
  void* ptr() {
    if (valid_.load(std::memory_order_acquire) & kHost) return host_;
    return migrate_to_host();
  }
  size_t size() const { return size_; }
  uint8_t valid() const { return valid_.load(std::memory_order_acquire); }
  // May an op take this buffer over and write its output into it?
  bool donatable() const { return !read_only_; }
  bool is_external() const { return external_; }
  bool is_read_only() const { return read_only_; }

  // Used by the GPU backend (src/backend/cuda): the raw copies, the flags,
  // and the event recorded after the last GPU write (a cudaEvent_t).
  void* host_raw() const { return host_; }
  void* device_raw() const { return device_; }
  void set_host_raw(void* p) { host_ = p; }
  void set_device_raw(void* p) { device_ = p; }
  void set_valid(uint8_t v) { valid_.store(v, std::memory_order_release); }
  std::mutex& migrate_mutex() { return mutex_; }
  // Shared by every buffer one node (or one CUDA graph) wrote; the last
  // owner gives the event back to the backend's pool. Guarded by
  // migrate_mutex() where another stream may read it concurrently.
  std::shared_ptr<void> event;
  int event_stream = -1;  // kiln stream index the event was recorded on
  // References to this buffer held by the GPU backend's in-flight records
  // (queued kernels read it) and their stream: (stream + 1) << 32 | count,
  // the stream bits all ones when records of several streams hold it. A
  // later kernel on that one stream runs after them and may write it over.
  std::atomic<uint64_t> stream_holds{0};

 private:
  void* migrate_to_host();

  void* host_ = nullptr;
  void* device_ = nullptr;
  size_t size_;
  std::atomic<uint8_t> valid_;
  std::mutex mutex_;
  std::function<void(void*)> deleter_;
  bool external_ = false;
  bool read_only_ = false;
};

namespace allocator {
// Allocates host memory (64-byte aligned). Throws kiln::Error naming `op`
// when the memory limit would be exceeded even after the cache is dropped.
std::shared_ptr<Buffer> malloc(size_t bytes, const char* op);
// Allocates device memory (GPU builds only); same limit and counters.
std::shared_ptr<Buffer> malloc_device(size_t bytes, const char* op);
// The raw halves, for the GPU backend's migrations.
void* host_alloc(size_t bytes, const char* op);
void* device_alloc(size_t bytes, const char* op);
// Rounds a request to the size class the caches use.
size_t size_class(size_t bytes);
}  // namespace allocator

// Implemented by the GPU backend, or by the stub in a CPU-only build
// (src/backend/no_gpu.cpp).
namespace gpu {
void* raw_device_malloc(size_t bytes);  // nullptr when out of memory
void raw_device_free(void* p);
// Waits for the last GPU write of `b` and copies its device copy to `host`.
void copy_device_to_host(Buffer& b, void* host);
// Blocks until all GPU work has finished (used before retrying an OOM).
void synchronize_all();
}  // namespace gpu

}  // namespace kiln
