// The CUDA runtime side of the backend: device discovery, one cudaStream_t
// per kiln GPU stream, device memory, events between streams and the host,
// and lazy migration of buffers between host and device.
//
// Ordering model: every node evaluated on a GPU stream records an event
// after its kernels into each buffer it wrote (Buffer::event). A GPU
// consumer on another stream waits on it with cudaStreamWaitEvent (in_ptr);
// a host reader waits on it before copying the device copy over
// (copy_device_to_host); eval waits on the outputs' events. Inputs (and
// scratch buffers) of a node are held in a per-stream in-flight list until
// an event recorded after the node's kernels has completed, so a buffer's
// device memory is never reused while a kernel may still read it.
#include <cuda_runtime.h>

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/cuda_common.h"
#include "core/scheduler.h"

namespace kiln {
namespace cuda {
namespace {

struct DeviceInfo {
  int count = 0;
  std::string reason;
  int sm_count = 0;
};

const DeviceInfo& device_info() {
  static const DeviceInfo info = [] {
    DeviceInfo d;
    cudaError_t e = cudaGetDeviceCount(&d.count);
    if (e != cudaSuccess || d.count == 0) {
      d.count = 0;
      d.reason = std::string("no CUDA GPU is available (") +
                 (e != cudaSuccess ? cudaGetErrorString(e) : "no device found") + ")";
      cudaGetLastError();
    } else {
      cudaDeviceGetAttribute(&d.sm_count, cudaDevAttrMultiProcessorCount, 0);
    }
    return d;
  }();
  return info;
}

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

struct InFlight {
  cudaEvent_t done;
  std::vector<array> inputs;
  std::vector<std::shared_ptr<Buffer>> scratch;
};

struct StreamState {
  cudaStream_t stream = nullptr;
  int device = 0;
  std::mutex mutex;  // guards in_flight (the worker and synchronize)
  std::deque<InFlight> in_flight;

  // Releases the records whose kernels have finished (all of them when wait).
  void retire(bool wait) {
    std::deque<InFlight> done;
    {
      std::lock_guard lock(mutex);
      while (!in_flight.empty()) {
        cudaError_t e = wait ? cudaEventSynchronize(in_flight.front().done) : cudaEventQuery(in_flight.front().done);
        if (e == cudaErrorNotReady) break;
        if (e != cudaSuccess) throw_cuda_error("synchronize", "cudaEventQuery", e);
        done.push_back(std::move(in_flight.front()));
        in_flight.pop_front();
      }
    }
    // Outside the lock: dropping inputs frees buffers.
    for (auto& f : done) EventPool::instance().put(f.done);
  }
};

std::mutex streams_mutex;
std::map<int, std::unique_ptr<StreamState>>& stream_table() {
  static auto* t = new std::map<int, std::unique_ptr<StreamState>>();
  return *t;
}

StreamState& stream_state(const Stream& s) {
  std::lock_guard lock(streams_mutex);
  auto& slot = stream_table()[s.index];
  if (!slot) {
    slot = std::make_unique<StreamState>();
    slot->device = s.device.index;
    KILN_CUDA_CHECK("stream", cudaSetDevice(s.device.index));
    KILN_CUDA_CHECK("stream", cudaStreamCreateWithFlags(&slot->stream, cudaStreamNonBlocking));
  }
  return *slot;
}

thread_local StreamState* tl_state = nullptr;
thread_local int tl_stream_index = -1;
thread_local std::vector<Buffer*> tl_written;
thread_local std::vector<std::shared_ptr<Buffer>> tl_scratch;

}  // namespace

void throw_cuda_error(const char* op, const char* what, cudaError_t e) {
  cudaGetLastError();  // clear a sticky launch error so later ops can run
  throw Error(std::string("[") + op + "] CUDA error " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
              ") in " + what);
}

cudaStream_t current_stream() {
  if (!tl_state) throw Error("[cuda] no GPU stream is active on this thread");
  return tl_state->stream;
}
int current_stream_index() { return tl_stream_index; }
int device_sm_count() { return device_info().sm_count; }

const char* in_ptr(const array& a) {
  const auto& d = *a.desc();
  Buffer& b = *d.buffer;
  if (!(b.valid() & Buffer::kDevice)) {
    std::lock_guard lock(b.migrate_mutex());
    if (!(b.valid() & Buffer::kDevice)) {
      if (!b.device_raw()) b.set_device_raw(allocator::device_alloc(b.size(), "to_device"));
      KILN_CUDA_CHECK("to_device", cudaMemcpyAsync(b.device_raw(), b.host_raw(), b.size(), cudaMemcpyHostToDevice,
                                                   current_stream()));
      if (!b.event) b.event = EventPool::instance().get();
      KILN_CUDA_CHECK("to_device", cudaEventRecord(static_cast<cudaEvent_t>(b.event), current_stream()));
      b.event_stream = tl_stream_index;
      b.set_valid(b.valid() | Buffer::kDevice);
    }
  }
  if (b.event && b.event_stream != tl_stream_index) {
    KILN_CUDA_CHECK("wait", cudaStreamWaitEvent(current_stream(), static_cast<cudaEvent_t>(b.event), 0));
  }
  return static_cast<const char*>(b.device_raw()) + d.offset * static_cast<int64_t>(size_of(d.dtype));
}

char* out_ptr(array& out) {
  auto& d = *out.desc();
  Buffer& b = *d.buffer;
  if (!b.device_raw()) b.set_device_raw(allocator::device_alloc(b.size(), "to_device"));
  b.set_valid(Buffer::kDevice);
  bool seen = false;
  for (Buffer* w : tl_written) seen = seen || w == &b;
  if (!seen) tl_written.push_back(&b);
  return static_cast<char*>(b.device_raw()) + d.offset * static_cast<int64_t>(size_of(d.dtype));
}

void allocate(array& out, const char* op) {
  auto& d = *out.desc();
  d.buffer = allocator::malloc_device(d.size * size_of(d.dtype), op);
  d.strides = row_major_strides(d.shape);
  d.offset = 0;
}

void allocate_or_donate(array& out, const array& in, const char* op) {
  const auto& id = in.desc();
  if (id->buffer && id->buffer.use_count() == 1 && id.use_count() == 1 && id->offset == 0 &&
      (id->buffer->valid() & Buffer::kDevice) && id->size == out.size() &&
      size_of(id->dtype) == size_of(out.dtype()) && detail::is_row_contiguous(id->shape, id->strides) &&
      id->buffer->size() >= out.nbytes()) {
    auto& d = *out.desc();
    d.buffer = id->buffer;
    d.strides = row_major_strides(d.shape);
    d.offset = 0;
    return;
  }
  allocate(out, op);
}

void* scratch(size_t bytes, const char* op) {
  auto b = allocator::malloc_device(bytes, op);
  void* p = b->device_raw();
  tl_scratch.push_back(std::move(b));
  return p;
}

}  // namespace cuda

using namespace cuda;

bool gpu_available() { return device_info().count > 0; }
int gpu_count() { return device_info().count; }
std::string device_unavailable_reason(const Device& d) {
  if (d.type == Device::cpu) return "cpu device " + std::to_string(d.index) + " does not exist (only cpu 0)";
  if (!gpu_available()) return "the gpu device is not available: " + device_info().reason;
  return "gpu device " + std::to_string(d.index) + " does not exist (" + std::to_string(gpu_count()) +
         " GPU(s) present)";
}

void gpu_begin_node(const Stream& stream) {
  if (tl_stream_index != stream.index) {
    tl_state = &stream_state(stream);
    tl_stream_index = stream.index;
    KILN_CUDA_CHECK("stream", cudaSetDevice(tl_state->device));
  }
  tl_written.clear();
  tl_scratch.clear();
}

void gpu_end_node(const Stream& stream, std::vector<array>&& inputs) {
  StreamState& st = *tl_state;
  for (Buffer* b : tl_written) {
    if (!b->event) b->event = EventPool::instance().get();
    KILN_CUDA_CHECK("event", cudaEventRecord(static_cast<cudaEvent_t>(b->event), st.stream));
    b->event_stream = stream.index;
  }
  tl_written.clear();
  std::vector<array> held = std::move(inputs);
  inputs.clear();
  if (!held.empty() || !tl_scratch.empty()) {
    InFlight f{EventPool::instance().get(), std::move(held), std::move(tl_scratch)};
    KILN_CUDA_CHECK("event", cudaEventRecord(f.done, st.stream));
    std::lock_guard lock(st.mutex);
    st.in_flight.push_back(std::move(f));
  }
  tl_scratch.clear();
  st.retire(false);
}

void gpu_wait_ready(const array& a) {
  const auto& b = a.desc()->buffer;
  if (b && b->event && (b->valid() & Buffer::kDevice)) {
    KILN_CUDA_CHECK("eval", cudaEventSynchronize(static_cast<cudaEvent_t>(b->event)));
  }
}

void gpu_synchronize(const Stream& s) {
  StreamState& st = stream_state(s);
  KILN_CUDA_CHECK("synchronize", cudaStreamSynchronize(st.stream));
  st.retire(true);
}

namespace gpu {
void* raw_device_malloc(size_t bytes) {
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
}
void raw_device_free(void* p) { cudaFree(p); }
void copy_device_to_host(Buffer& b, void* host) {
  if (b.event) KILN_CUDA_CHECK("to_host", cudaEventSynchronize(static_cast<cudaEvent_t>(b.event)));
  KILN_CUDA_CHECK("to_host", cudaMemcpy(host, b.device_raw(), b.size(), cudaMemcpyDeviceToHost));
}
void release_event(void* event) { EventPool::instance().put(static_cast<cudaEvent_t>(event)); }
void synchronize_all() {
  if (gpu_available()) cudaDeviceSynchronize();
}
}  // namespace gpu

}  // namespace kiln
