// The CUDA runtime side of the backend: device discovery, one cudaStream_t
// per kiln GPU stream, device memory, events between streams and the host,
// and lazy migration of buffers between host and device.
//
// Ordering model: after a node's kernels (or after a CUDA graph holding a
// whole batch of nodes) one event is recorded and shared by every buffer
// written (Buffer::event). A GPU consumer on another stream waits on it
// with cudaStreamWaitEvent (in_ptr); a host reader waits on it before
// copying the device copy over (copy_device_to_host); eval waits on the
// outputs' events. Inputs (and scratch buffers) are held in a per-stream
// in-flight list until that event has completed, so a buffer's device
// memory is never reused while a kernel may still read it.
//
// Batches (the encoder): the nodes one eval hands to a GPU stream are
// recorded by stream capture into one CUDA graph and launched at once
// (gpu_evaluate_batch); executables are cached by the batch's signature
// (graph_encoder.h). While a batch is captured nothing runs, so: its nodes
// are published only after the launch, inputs a node needs from the host
// are uploaded synchronously on a side stream, waits on other streams
// become external event-wait nodes, and device frees are deferred until no
// capture is under way. Any failure while capturing discards the graph and
// evaluates the batch eagerly, node by node, so errors land on the right
// node exactly as without graphs.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "backend/cpu/quant_blocks_cpu.h"
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/device_pools.h"
#include "backend/cuda/graph_encoder.h"
#include "backend/cuda/graph_plan.h"
#include "core/primitive.h"
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

// References an in-flight record holds (Buffer::stream_holds counts them).
void hold(Buffer& b, int stream) {
  const uint64_t tag = static_cast<uint64_t>(stream + 1) << 32;
  uint64_t h = b.stream_holds.load(std::memory_order_relaxed);
  while (true) {
    const uint64_t count = h & 0xffffffffu;
    const uint64_t who = count == 0 || (h & ~uint64_t{0xffffffffu}) == tag ? tag : ~uint64_t{0xffffffffu};
    if (b.stream_holds.compare_exchange_weak(h, who | (count + 1), std::memory_order_acq_rel)) return;
  }
}
void unhold(Buffer& b) {
  uint64_t h = b.stream_holds.load(std::memory_order_relaxed);
  while (true) {
    const uint64_t count = (h & 0xffffffffu) - 1;
    const uint64_t next = count == 0 ? 0 : (h & ~uint64_t{0xffffffffu}) | count;
    if (b.stream_holds.compare_exchange_weak(h, next, std::memory_order_acq_rel)) return;
  }
}

struct InFlight {
  std::shared_ptr<void> done;
  // What the queued kernels read: the buffers (not the arrays, so that an
  // array the next step writes over in place is not held), each counted in
  // its stream_holds until the record retires.
  std::vector<std::shared_ptr<Buffer>> inputs;
  std::vector<std::shared_ptr<Buffer>> scratch;
  std::vector<IndexCheck> checks;
  int64_t staging_mark = -1;  // staging ring position freed when done (-1: none)
  size_t held_bytes = 0;      // of the held inputs, for back-pressure
};

struct StreamState {
  cudaStream_t stream = nullptr;
  int device = 0;
  std::mutex mutex;  // guards in_flight and error (the worker and host waits)
  std::deque<InFlight> in_flight;
  size_t held_bytes = 0;  // sum over in_flight
  std::string error;      // a deferred index error not yet reported
  StagingRing staging;
  bool staged = false;  // this node (or batch) used the staging ring

  // Releases the records whose kernels have finished (all of them when wait).
  void retire(bool wait) {
    std::deque<InFlight> done;
    {
      std::lock_guard lock(mutex);
      while (!in_flight.empty()) {
        cudaEvent_t ev = raw(in_flight.front().done);
        cudaError_t e = wait ? cudaEventSynchronize(ev) : cudaEventQuery(ev);
        if (e == cudaErrorNotReady) break;
        if (e != cudaSuccess) throw_cuda_error("synchronize", "cudaEventQuery", e);
        for (auto& c : in_flight.front().checks) {
          const volatile IndexErrorSlot* slot = c.slot.get();
          if (slot->flag && error.empty()) error = c.describe(slot->value);
        }
        if (in_flight.front().staging_mark >= 0) staging.release_to(in_flight.front().staging_mark);
        held_bytes -= in_flight.front().held_bytes;
        done.push_back(std::move(in_flight.front()));
        in_flight.pop_front();
      }
    }
    // Outside the lock: dropping inputs frees buffers. Each hold is
    // uncounted before its reference goes (can_donate reads them in the
    // other order).
    for (InFlight& f : done) {
      for (auto& b : f.inputs) {
        unhold(*b);
        b.reset();
      }
    }
    done.clear();
  }

  // The held inputs' bytes that only in-flight records keep alive: a weight
  // or any other array its owner still holds costs nothing more to hold.
  // Called with `mutex` held.
  size_t exclusively_held_bytes() const {
    size_t bytes = 0;
    for (const auto& f : in_flight) {
      for (const auto& b : f.inputs) {
        if (b.use_count() == 1) bytes += b->size();
      }
    }
    return bytes;
  }

  // Throws (once) the deferred index error found by retire.
  void throw_deferred_error() {
    std::string e;
    {
      std::lock_guard lock(mutex);
      e.swap(error);
    }
    if (!e.empty()) throw Error(e);
  }

  // Host-to-device uploads while this stream is being captured.
  cudaStream_t upload = nullptr;
  GraphExecCache graphs;
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
    KILN_CUDA_CHECK("stream", cudaStreamCreateWithFlags(&slot->upload, cudaStreamNonBlocking));
    slot->staging.init();
  }
  return *slot;
}

StreamState* find_stream_state(int index) {
  std::lock_guard lock(streams_mutex);
  auto it = stream_table().find(index);
  return it == stream_table().end() ? nullptr : it->second.get();
}

thread_local StreamState* tl_state = nullptr;
thread_local int tl_stream_index = -1;
// The buffers written since gpu_begin_node, in order, and as a set (a
// captured batch writes hundreds: no linear search per output).
thread_local std::vector<Buffer*> tl_written;
thread_local std::unordered_set<const Buffer*> tl_written_set;
void forget_written() {
  tl_written.clear();
  tl_written_set.clear();
}
thread_local std::vector<std::shared_ptr<Buffer>> tl_scratch;
thread_local std::vector<IndexCheck> tl_checks;
thread_local bool tl_capturing = false;

// Checks registered by a node whose kernels will not run (a failed capture).
void drop_index_checks() { tl_checks.clear(); }

// Device frees wait while any stream is being captured (cudaFree would
// synchronize the device, which a capture forbids).
std::atomic<int> captures_underway{0};
std::mutex deferred_mutex;
std::vector<void*> deferred_frees;

void flush_deferred_frees() {
  std::vector<void*> frees;
  {
    std::lock_guard lock(deferred_mutex);
    if (captures_underway.load() != 0) return;
    frees.swap(deferred_frees);
  }
  for (void* p : frees) cudaFree(p);
}

}  // namespace

void throw_cuda_error(const char* op, const char* what, cudaError_t e) {
  cudaGetLastError();  // clear a sticky launch error so later ops can run
  throw Error(std::string("[") + op + "] CUDA error " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") in " +
              what);
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
  std::shared_ptr<void> event;
  int event_stream;
  {
    std::lock_guard lock(b.migrate_mutex());
    // A capture waits only on work still pending: an event that completed
    // (an upload or another stream's kernels of an earlier step) is dropped
    // instead of becoming an event-wait node, which a replayed graph cannot
    // have (graph_plan.h) and every launch pays for. An upload made for
    // this very capture always gets its wait node, so that a repeated step
    // records the same graph each time.
    if (tl_capturing && b.event && b.event_stream != tl_stream_index && cudaEventQuery(raw(b.event)) == cudaSuccess) {
      b.event.reset();
    }
    if (!(b.valid() & Buffer::kDevice)) {
      if (!b.device_raw()) b.set_device_raw(allocator::device_alloc(b.size(), "to_device"));
      char* staged = b.size() <= StagingRing::kMaxItem ? tl_state->staging.take(b.size()) : nullptr;
      if (staged) {
        // Small input: an async copy through pinned memory. In a capture it
        // runs on the side stream now, and the graph waits on its event.
        std::memcpy(staged, b.host_raw(), b.size());
        if (tl_capturing) plan_unreplayable("an input uploaded from the host during the capture");
        cudaStream_t on = tl_capturing ? tl_state->upload : current_stream();
        KILN_CUDA_CHECK("to_device", cudaMemcpyAsync(b.device_raw(), staged, b.size(), cudaMemcpyHostToDevice, on));
        b.event = new_event();
        KILN_CUDA_CHECK("to_device", cudaEventRecord(raw(b.event), on));
        b.event_stream = tl_capturing ? -1 : tl_stream_index;
        tl_state->staged = true;
      } else if (tl_capturing) {
        // Nothing on the captured stream runs before the launch: upload now.
        plan_unreplayable("an input uploaded from the host during the capture");
        KILN_CUDA_CHECK("to_device", cudaMemcpyAsync(b.device_raw(), b.host_raw(), b.size(), cudaMemcpyHostToDevice,
                                                     tl_state->upload));
        KILN_CUDA_CHECK("to_device", cudaStreamSynchronize(tl_state->upload));
        b.event.reset();
        b.event_stream = -1;
      } else {
        KILN_CUDA_CHECK("to_device", cudaMemcpyAsync(b.device_raw(), b.host_raw(), b.size(), cudaMemcpyHostToDevice,
                                                     current_stream()));
        b.event = new_event();
        KILN_CUDA_CHECK("to_device", cudaEventRecord(raw(b.event), current_stream()));
        b.event_stream = tl_stream_index;
      }
      b.set_valid(b.valid() | Buffer::kDevice);
    }
    event = b.event;
    event_stream = b.event_stream;
  }
  if (event && event_stream != tl_stream_index) {
    // In a capture, an event recorded outside it becomes an event-wait node.
    unsigned flags = tl_capturing ? cudaEventWaitExternal : cudaEventWaitDefault;
    if (tl_capturing) plan_unreplayable("a wait on another stream's event");
    KILN_CUDA_CHECK("wait", cudaStreamWaitEvent(current_stream(), raw(event), flags));
  }
  const char* p = static_cast<const char*>(b.device_raw()) + d.offset * static_cast<int64_t>(size_of(d.dtype));
  plan_in(a, p);
  return p;
}

namespace {
bool read_host_scalar(const array& a, void* value) {
  const auto& d = *a.desc();
  if (!d.buffer || size_of(d.dtype) > 8) return false;
  for (size_t k = 0; k < d.shape.size(); ++k) {
    if (d.shape[k] != 1 && d.strides[k] != 0) return false;
  }
  Buffer& b = *d.buffer;
  std::lock_guard lock(b.migrate_mutex());
  if ((b.valid() & Buffer::kDevice) || !(b.valid() & Buffer::kHost)) return false;
  std::memcpy(value, static_cast<const char*>(b.host_raw()) + d.offset * static_cast<int64_t>(size_of(d.dtype)),
              size_of(d.dtype));
  return true;
}
}  // namespace

bool host_scalar(const array& a, void* value) {
  const bool found = read_host_scalar(a, value);
  plan_scalar(a, found, value);
  return found;
}

char* out_ptr(array& out) {
  auto& d = *out.desc();
  Buffer& b = *d.buffer;
  if (!b.device_raw()) b.set_device_raw(allocator::device_alloc(b.size(), "to_device"));
  b.set_valid(Buffer::kDevice);
  if (tl_written_set.insert(&b).second) tl_written.push_back(&b);
  char* p = static_cast<char*>(b.device_raw()) + d.offset * static_cast<int64_t>(size_of(d.dtype));
  plan_out(out, p);
  return p;
}

bool complete_before_capture(const array& a) {
  const auto& b = a.desc()->buffer;
  return tl_capturing && b && !tl_written_set.count(b.get());
}

void allocate(array& out, const char* op) {
  auto& d = *out.desc();
  try {
    d.buffer = allocator::malloc_device(d.size * size_of(d.dtype), op);
  } catch (const Error& e) {
    throw Error(detail::allocation_failure(e, out));
  }
  d.strides = row_major_strides(d.shape);
  d.offset = 0;
}

bool only_stream_holds(const std::shared_ptr<Buffer>& b, int stream, long owners) {
  // The holds first: a record counts its reference after taking it and
  // uncounts it before dropping it, so a race can only refuse.
  const uint64_t h = b->stream_holds.load(std::memory_order_acquire);
  const long count = static_cast<long>(h & 0xffffffffu);
  if (count != 0 && (h >> 32) != static_cast<uint64_t>(stream + 1)) return false;
  return b.use_count() == owners + count;
}

bool can_donate(const std::shared_ptr<ArrayDesc>& in, int stream) {
  return in.use_count() == 1 && in->buffer && in->buffer->donatable() && only_stream_holds(in->buffer, stream, 1);
}

bool can_donate(const array& in) { return can_donate(in.desc(), tl_stream_index); }

void allocate_or_donate(array& out, const array& in, const char* op) {
  const auto& id = in.desc();
  if (id->buffer && can_donate(in) && id->offset == 0 && (id->buffer->valid() & Buffer::kDevice) &&
      id->size == out.size() && size_of(id->dtype) == size_of(out.dtype()) &&
      detail::is_row_contiguous(id->shape, id->strides) && id->buffer->size() >= out.nbytes()) {
    std::atomic_thread_fence(std::memory_order_acquire);  // see detail::allocate_or_donate
    auto& d = *out.desc();
    d.buffer = id->buffer;
    d.strides = row_major_strides(d.shape);
    d.offset = 0;
    return;
  }
  // KILN_VERBOSE: a large buffer that could not be written in place (a
  // decode step's cache copied instead of updated) says why, 20 times.
  static const bool verbose = std::getenv("KILN_VERBOSE") != nullptr;
  static std::atomic<long> told{0};
  if (verbose && id->buffer && id->buffer->size() >= (size_t{1} << 20) && told.fetch_add(1) < verbose_limit(20)) {
    std::fprintf(stderr,
                 "kiln: %s copied a %zu-byte input instead of writing over it (array held %ld times, buffer %ld)\n", op,
                 id->buffer->size(), static_cast<long>(id.use_count()), static_cast<long>(id->buffer.use_count()));
  }
  allocate(out, op);
}

IndexErrorSlot* index_error_slot(std::function<std::string(int64_t)> describe) {
  IndexErrorSlot* s = IndexSlotPool::instance().get();
  if (!s) return nullptr;
  IndexCheck c{std::shared_ptr<IndexErrorSlot>(s, [](IndexErrorSlot* p) { IndexSlotPool::instance().put(p); }),
               std::move(describe)};
  plan_check(c);
  tl_checks.push_back(std::move(c));
  return s;
}

void* scratch(size_t bytes, const char* op) {
  auto b = allocator::malloc_device(bytes, op);
  void* p = b->device_raw();
  plan_scratch(b);
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
  forget_written();
  tl_scratch.clear();
  // Left over only by a node that threw after launching: its slots may
  // still be written, so they are not recycled.
  tl_checks.clear();
}

namespace {

constexpr size_t kMaxHeldBytes = size_t{2} << 30;

// Publishes what the kernels enqueued since gpu_begin_node (one node, or a
// whole captured batch) wrote: one event after them, shared by the written
// buffers, and an in-flight record holding `held` and the scratch buffers.
void record_completion(StreamState& st, int stream_index, std::vector<array>&& held) {
  auto done = new_event();
  KILN_CUDA_CHECK("event", cudaEventRecord(raw(done), st.stream));
  for (Buffer* b : tl_written) {
    std::lock_guard lock(b->migrate_mutex());
    b->event = done;
    b->event_stream = stream_index;
  }
  forget_written();
  if (!held.empty() || !tl_scratch.empty() || !tl_checks.empty() || st.staged) {
    size_t bytes = 0;
    std::vector<std::shared_ptr<Buffer>> buffers;
    buffers.reserve(held.size());
    for (const auto& a : held) {
      if (!a.desc()->buffer) continue;
      buffers.push_back(a.desc()->buffer);  // the reference first, then its count
      hold(*buffers.back(), stream_index);
      bytes += buffers.back()->size();
    }
    held.clear();
    InFlight f{std::move(done),
               std::move(buffers),
               std::move(tl_scratch),
               std::move(tl_checks),
               st.staged ? st.staging.mark() : -1,
               bytes};
    st.staged = false;
    std::lock_guard lock(st.mutex);
    st.held_bytes += bytes;
    st.in_flight.push_back(std::move(f));
  }
  tl_scratch.clear();
  tl_checks.clear();
  st.retire(false);
  // Back-pressure: when the host runs far ahead of the GPU, the inputs held
  // for queued kernels pile up (a long chain over large arrays); wait for
  // the oldest work instead of growing memory without bound. Only what the
  // records alone keep alive counts: a decode step holds every weight of the
  // model, and waiting for it would serialize the host with the GPU.
  while (true) {
    std::shared_ptr<void> oldest;
    {
      std::lock_guard lock(st.mutex);
      if (st.held_bytes <= kMaxHeldBytes || st.in_flight.empty()) break;
      if (st.exclusively_held_bytes() <= kMaxHeldBytes) break;
      oldest = st.in_flight.front().done;
    }
    KILN_CUDA_CHECK("synchronize", cudaEventSynchronize(raw(oldest)));
    st.retire(false);
  }
}

using Clock = std::chrono::steady_clock;
uint64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

// Holds what a launched batch's kernels read until they ran, and publishes
// its nodes (with `error` when the launch failed).
void complete_batch(StreamState& st, std::vector<array>& nodes, size_t begin, size_t end, const Stream& stream,
                    std::vector<array>&& held, std::string error) {
  if (error.empty()) {
    try {
      for (size_t i = begin; i < end; ++i) {
        std::vector<array> in = inputs_to_hold(*nodes[i].desc());
        held.insert(held.end(), std::make_move_iterator(in.begin()), std::make_move_iterator(in.end()));
      }
      record_completion(st, stream.index, std::move(held));
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  for (size_t i = begin; i < end; ++i) {
    if (!error.empty()) nodes[i].desc()->error = error;
    finish_node(nodes[i]);
    detail::release(nodes[i]);
  }
}

// Waits until the last run that wrote `c`'s slot has been checked (its
// in-flight record retired): only the plan holds the slot then.
void wait_for_check(StreamState& st, const IndexCheck& c) {
  while (c.slot.use_count() > 1) {
    std::shared_ptr<void> oldest;
    {
      std::lock_guard lock(st.mutex);
      if (st.in_flight.empty()) return;  // retired by another thread, which is dropping it
      oldest = st.in_flight.front().done;
    }
    KILN_CUDA_CHECK("graph", cudaEventSynchronize(raw(oldest)));
    st.retire(false);
  }
}

// Why the most recently used variant of a batch could not replay; said
// (KILN_VERBOSE) only when no variant could and the batch is recorded.
struct ReplayMiss {
  const char* why = nullptr;
  size_t node = 0;
  const char* prim = "";
  int slot = -1;
};

// Launches the cached executable of a batch recorded before, when its plan
// says that recording it again would give the same graph (graph_plan.h).
// Returns false, with nothing launched and the outputs left without
// buffers, otherwise. When the plan's index slots are still in flight it
// waits for them if `may_wait`, else sets `*busy` and returns false.
bool replay(StreamState& st, Plan& plan, uint64_t key, size_t variant, std::vector<array>& nodes, size_t begin,
            size_t end, const Stream& stream, bool may_wait, bool* busy, ReplayMiss& miss) {
  const size_t n = end - begin;
  auto prim = [&](size_t i) { return i < n ? nodes[begin + i].desc()->primitive->name() : ""; };
  auto missed = [&](const char* why, size_t node, const char* p, int slot = -1) {
    if (!miss.why) miss = {why, node, p, slot};
    return false;
  };
  if (!plan.replayable) return missed(plan.why_not, plan.why_node, plan.why_prim);
  if (plan.prims.size() != n) return missed("another number of nodes", 0, prim(0));
  if (plan.tf32 != tf32_matmul() || plan.block_x_int8 != cpu::block_x_int8()) {
    return missed("another tf32 or block-format x setting", 0, prim(0));
  }
  for (size_t i = 0; i < n; ++i) {
    const Primitive& p = *nodes[begin + i].desc()->primitive;
    if (&p != plan.prims[i].get() && !p.is_equivalent(*plan.prims[i])) {
      return missed("a primitive with other parameters", i, prim(i));
    }
  }
  const auto t_begin = Clock::now();
  st.retire(false);  // the last run's records may be all that still hold its buffers
  std::vector<std::vector<array>> outs(n);
  bool same = true;
  const char* why = nullptr;
  size_t where = 0;
  int where_slot = -1;
  size_t at = 0;  // position in plan.log
  try {
    for (size_t i = 0; i < n && same; ++i) {
      ArrayDesc& d = *nodes[begin + i].desc();
      outs[i] = node_outputs(nodes[begin + i]);
      where = i;
      bool kept_busy = false;
      for (size_t o = 0; o < outs[i].size(); ++o) {
        const PlanOutput& po = plan.outputs[i][o];
        ArrayDesc& od = *outs[i][o].desc();
        where_slot = static_cast<int>(o);
        if (po.alias >= 0) {
          const auto& in = d.inputs[po.alias].desc();
          // Donation, as allocate_or_donate decides it: nobody else holds the input.
          if (po.donated && !can_donate(in, stream.index)) {
            why = "an input to write over that is held elsewhere";
          }
          od.buffer = in->buffer;
        } else if (po.kept && only_stream_holds(po.kept, stream.index, 1)) {
          od.buffer = po.kept;
        } else {
          kept_busy = kept_busy || po.kept;
          try {
            od.buffer = allocator::malloc_device(po.bytes, d.primitive->name());
          } catch (const Error&) {
            why = "an output could not be allocated";  // recording it reports the failure on the right node
          }
        }
        if (!od.buffer && !why) why = "an input without a buffer";
        same = !why;
        od.strides = po.strides;
        od.offset = po.alias >= 0 ? d.inputs[po.alias].desc()->offset + po.offset : po.offset;
      }
      for (; same && at < plan.log.size() && plan.log[at].node == i; ++at) {
        const PlanAccess& a = plan.log[at];
        where_slot = static_cast<int>(a.slot);
        switch (a.kind) {
          case PlanAccess::kIn:
            same = in_ptr(d.inputs[a.slot]) == a.ptr;
            if (!same) why = "an input at another address";
            break;
          case PlanAccess::kOut:
            same = out_ptr(outs[i][a.slot]) == a.ptr;
            if (!same) {
              why = kept_busy ? "last time's buffer still held (by the caller or unfinished work)"
                              : "an output at another address";
            }
            break;
          case PlanAccess::kScalar: {
            alignas(8) unsigned char v[8] = {};
            const bool found = host_scalar(d.inputs[a.slot], v);
            uint64_t u = 0;
            if (found) std::memcpy(&u, v, size_of(d.inputs[a.slot].dtype()));
            same = found == a.found && u == a.value;
            if (!same) why = "another host scalar";
            break;
          }
          case PlanAccess::kScratch:
            tl_scratch.push_back(plan.scratch[a.slot]);
            break;
        }
      }
    }
    // A slot is cleared for this run only after the last run's check.
    for (size_t k = 0; same && k < plan.checks.size(); ++k) {
      if (plan.checks[k].slot.use_count() == 1) continue;
      if (!may_wait) {
        same = false;
        why = "its index checks are still in flight";
        if (busy) *busy = true;
      } else {
        wait_for_check(st, plan.checks[k]);
      }
    }
  } catch (const std::exception&) {
    same = false;  // an upload that failed, say: recording the batch reports it on its node
    why = "an error while checking the inputs";
  }
  if (!same) {
    missed(why, where, prim(where), where_slot);
    for (auto& node_outs : outs) {
      for (auto& o : node_outs) o.desc()->buffer.reset();
    }
    forget_written();
    tl_scratch.clear();
    return false;
  }
  for (size_t i = 0; i < n; ++i) {
    for (size_t o = 0; o < outs[i].size(); ++o) {
      PlanOutput& po = plan.outputs[i][o];
      if (po.alias < 0 && po.kept) po.kept = outs[i][o].desc()->buffer;
    }
  }
  for (IndexCheck& c : plan.checks) {
    c.slot->flag = 0;
    tl_checks.push_back(c);
  }
  const auto t_prepared = Clock::now();
  std::string error;
  std::vector<array> held;
  try {
    KILN_CUDA_CHECK("graph", cudaGraphLaunch(st.graphs.use(key, variant), st.stream));
    count_graph_replay(n, ns_between(t_begin, t_prepared), ns_between(t_prepared, Clock::now()));
    for (size_t i = 0; i < n; ++i) {
      if (nodes[begin + i].desc()->siblings) held.insert(held.end(), outs[i].begin(), outs[i].end());
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  complete_batch(st, nodes, begin, end, stream, std::move(held), error);
  return true;
}

// Records nodes [begin, end) into one CUDA graph and launches it. Returns
// false, with nothing run and nothing published, when the batch could not
// be captured (the caller then evaluates it eagerly).
bool launch_as_graph(std::vector<array>& nodes, size_t begin, size_t end, const Stream& stream) {
  // The batch's nodes, with every output of a multi-output node (a later
  // node of the batch may read any of them: waiting for one here would
  // wait for this very batch).
  // (A sorted vector: one allocation, where a hash set made one per node.)
  std::vector<const ArrayDesc*> batch;
  batch.reserve(end - begin);
  for (size_t i = begin; i < end; ++i) {
    batch.push_back(nodes[i].desc().get());
    if (const auto& sib = nodes[i].desc()->siblings) {
      for (const auto& w : sib->descs) {
        if (auto d = w.lock()) batch.push_back(d.get());
      }
    }
  }
  std::sort(batch.begin(), batch.end());
  // Inputs from other streams or earlier evals must be computed (enqueued)
  // before the capture; a failed one is left to the eager path to report.
  for (size_t i = begin; i < end; ++i) {
    if (!wait_for_inputs(*nodes[i].desc(), &batch)) return false;
  }
  gpu_begin_node(stream);
  StreamState& st = *tl_state;
  const uint64_t key = batch_signature(nodes, begin, end);
  const bool replays = graph_settings().replay;
  // A replayable variant whose buffers were busy or elsewhere: record this
  // one as another variant rather than over it.
  // One whose index checks are still in flight (the last step, running)
  // is waited for only when there is no room for another variant.
  bool add_variant = false;
  ReplayMiss miss;
  if (auto* variants = replays ? st.graphs.variants(key) : nullptr) {
    size_t busy_variant = variants->size();
    for (size_t v = 0; v < variants->size(); ++v) {
      Plan* plan = (*variants)[v].plan.get();
      if (!plan) continue;
      bool busy = false;
      if (replay(st, *plan, key, v, nodes, begin, end, stream, false, &busy, miss)) return true;
      if (busy && busy_variant == variants->size()) busy_variant = v;
      add_variant = add_variant || (plan->replayable && plan->keep);
    }
    if (busy_variant < variants->size() && variants->size() >= GraphExecCache::kMaxVariants &&
        replay(st, *(*variants)[busy_variant].plan, key, busy_variant, nodes, begin, end, stream, true, nullptr,
               miss)) {
      return true;
    }
  }
  if (miss.why) explain_recording(miss.why, miss.node, miss.prim, miss.slot);
  auto plan = std::make_unique<Plan>();
  plan->tf32 = tf32_matmul();
  plan->block_x_int8 = cpu::block_x_int8();
  plan->keep = replays && st.graphs.recordings(key) >= 1;
  if (cudaStreamBeginCapture(st.stream, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  const auto t_begin = Clock::now();
  tl_capturing = true;
  ++captures_underway;
  bool ok = true;
  // The outputs of multi-output nodes: a sibling nobody holds was given a
  // scratch output, kept until the graph ran.
  std::vector<array> sibling_outputs;
  {
    std::optional<PlanRecorder> recorder;
    if (replays) recorder.emplace(*plan);
    for (size_t i = begin; i < end && ok; ++i) {
      ArrayDesc& d = *nodes[i].desc();
      try {
        std::vector<array> outputs = node_outputs(nodes[i]);
        if (recorder) recorder->begin_node(static_cast<uint32_t>(i - begin), d, outputs);
        d.primitive->eval_gpu(d.inputs, outputs);
        if (recorder) recorder->end_node();
        if (d.siblings) sibling_outputs.insert(sibling_outputs.end(), outputs.begin(), outputs.end());
      } catch (const std::exception&) {
        ok = false;
      }
    }
  }
  tl_capturing = false;
  const auto t_captured = Clock::now();
  cudaGraph_t graph = nullptr;
  cudaError_t ended = cudaStreamEndCapture(st.stream, &graph);
  --captures_underway;
  flush_deferred_frees();
  cudaGraphExec_t exec = nullptr;
  if (ok && ended == cudaSuccess && graph) {
    try {
      if (replays) finish_plan(*plan);
      exec = st.graphs.get(key, graph, st.stream, end - begin, replays && add_variant && plan->replayable);
      // The executable now holds this recording's arguments: a plan from an
      // earlier one must go.
      st.graphs.set_plan(key, replays ? std::move(plan) : nullptr);
    } catch (const std::exception&) {
      exec = nullptr;
    }
  }
  if (graph) cudaGraphDestroy(graph);
  if (!exec) {
    cudaGetLastError();
    // Nothing ran: forget the outputs and what was registered for them.
    for (size_t i = begin; i < end; ++i) nodes[i].desc()->buffer.reset();
    forget_written();
    tl_scratch.clear();
    drop_index_checks();
    count_graph_fallback();
    return false;
  }
  std::string error;
  const auto t_prepared = Clock::now();
  try {
    KILN_CUDA_CHECK("graph", cudaGraphLaunch(exec, st.stream));
    count_graph_time(ns_between(t_begin, t_captured), ns_between(t_captured, t_prepared),
                     ns_between(t_prepared, Clock::now()));
  } catch (const std::exception& e) {
    error = e.what();
  }
  complete_batch(st, nodes, begin, end, stream, std::move(sibling_outputs), error);
  return true;
}

}  // namespace

void gpu_end_node(const Stream& stream, std::vector<array>&& inputs) {
  std::vector<array> held = std::move(inputs);
  inputs.clear();
  record_completion(*tl_state, stream.index, std::move(held));
}

void gpu_evaluate_batch(std::vector<array>& nodes, const Stream& stream) {
  GraphSettings& gs = graph_settings();
  size_t i = 0;
  while (i < nodes.size()) {
    // A graph keeps its outputs alive until it completes: cut long or
    // large batches into several graphs.
    size_t j = i, bytes = 0;
    while (j < nodes.size() && j - i < gs.max_nodes) {
      size_t b = nodes[j].nbytes();
      if (j > i && bytes + b > gs.max_bytes) break;
      bytes += b;
      ++j;
    }
    if (!gs.enabled || j - i < gs.min_nodes || !launch_as_graph(nodes, i, j, stream)) {
      for (size_t k = i; k < j; ++k) {
        evaluate_node(nodes[k], stream);
        detail::release(nodes[k]);
      }
    }
    i = j;
  }
}

void gpu_wait_ready(const array& a) {
  const auto& b = a.desc()->buffer;
  if (!b || !(b->valid() & Buffer::kDevice)) return;
  std::shared_ptr<void> event;
  {
    std::lock_guard lock(b->migrate_mutex());
    event = b->event;
  }
  if (!event) return;
  KILN_CUDA_CHECK("eval", cudaEventSynchronize(raw(event)));
  // The work up to that event is done: report an index error it met.
  if (StreamState* st = find_stream_state(b->event_stream)) {
    st->retire(false);
    st->throw_deferred_error();
  }
}

void gpu_synchronize(const Stream& s) {
  StreamState& st = stream_state(s);
  KILN_CUDA_CHECK("synchronize", cudaStreamSynchronize(st.stream));
  st.retire(true);
  st.throw_deferred_error();
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
void raw_device_free(void* p) {
  {
    std::lock_guard lock(deferred_mutex);
    if (captures_underway.load() != 0) {
      deferred_frees.push_back(p);
      return;
    }
  }
  cudaFree(p);
}
// Called with b's migrate mutex held (Buffer::migrate_to_host). The wait
// for the kernels that wrote b runs with the mutex released: meanwhile a GPU
// stream recording later work may read b (in_ptr takes the mutex), and must
// not wait for the device along with this host reader. A decode loop reads
// step t's token while step t + 1, which reads it too, is being recorded.
void copy_device_to_host(Buffer& b, void* host) {
  for (std::shared_ptr<void> waited; b.event && b.event != waited;) {
    waited = b.event;
    b.migrate_mutex().unlock();
    const cudaError_t e = cudaEventSynchronize(raw(waited));
    b.migrate_mutex().lock();
    KILN_CUDA_CHECK("to_host", e);
  }
  // Another reader copied it over while this one waited.
  if (b.valid() & Buffer::kHost) return;
  KILN_CUDA_CHECK("to_host", cudaMemcpy(host, b.device_raw(), b.size(), cudaMemcpyDeviceToHost));
}
void synchronize_all() {
  // A capture forbids device-wide synchronization; the allocation that
  // asked then fails, and its batch runs again eagerly.
  if (tl_capturing) return;
  if (gpu_available()) cudaDeviceSynchronize();
}
}  // namespace gpu

}  // namespace kiln
