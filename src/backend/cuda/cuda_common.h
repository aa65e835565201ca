#pragma once
// Shared host-side pieces of the CUDA backend: status checks that name the
// op, the current kiln stream's cudaStream_t, and device pointers of arrays
// (migrating a host-only buffer to the device on first use).
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/array_desc.h"
#include "kiln/error.h"

namespace kiln::cuda {

[[noreturn]] void throw_cuda_error(const char* op, const char* what, cudaError_t e);

// Checks a CUDA runtime status; `op` names the kiln op for the message.
#define KILN_CUDA_CHECK(op, call)                                                       \
  do {                                                                                  \
    cudaError_t kiln_err_ = (call);                                                     \
    if (kiln_err_ != cudaSuccess) ::kiln::cuda::throw_cuda_error(op, #call, kiln_err_); \
  } while (0)
// Checks the launch that just happened.
#define KILN_CUDA_CHECK_LAUNCH(op) KILN_CUDA_CHECK(op, cudaGetLastError())

// The stream of the node being evaluated on this worker thread.
cudaStream_t current_stream();
int current_stream_index();
int device_sm_count();

// The grid of a grid-stride launch over n elements, `per_thread` at a time
// (at most 32 blocks per SM). A launch under one wave is bound by latency,
// not bandwidth: each pass of a thread's loop waits for memory after the last
// one, and a decode step's 4096-wide add or 14336-wide SwiGLU ran four
// dependent passes in one or two blocks. So below one block per SM the grid
// grows to one pass per thread (per_thread / 4 elements, the vector of the
// vectorized loops), up to one block per SM.
inline unsigned grid_for(int64_t n, int per_thread, int block) {
  const int64_t sms = device_sm_count() > 0 ? device_sm_count() : 132;
  const int64_t per_block = static_cast<int64_t>(block) * per_thread;
  int64_t blocks = (n + per_block - 1) / per_block;
  if (blocks < sms) {
    const int64_t one_pass = static_cast<int64_t>(block) * (per_thread / 4 > 1 ? per_thread / 4 : 1);
    const int64_t wide = (n + one_pass - 1) / one_pass;
    blocks = wide < sms ? wide : sms;
  }
  if (blocks > sms * 32) blocks = sms * 32;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

// Device pointer to a's first element, valid for reading on the current
// stream (copies host data over, and waits for a write on another stream).
const char* in_ptr(const array& a);
// A row-major device copy of a (or a itself when it already is; the copy is
// a scratch buffer of the node). Defined in quantized.cu.
const char* row_major(const array& a, const char* op);
// When `a` is one element (every dimension of size 1 or stride 0) whose
// only valid copy is on the host, copies that element into `value` (at
// most 8 bytes) and returns true: a kernel can take it by value instead of
// uploading it. False otherwise (then use in_ptr).
bool host_scalar(const array& a, void* value);
// Device pointer of out's buffer for writing; marks the device copy as the
// only valid one and registers the buffer for the node's completion event.
char* out_ptr(array& out);
// True while a batch is being captured into a CUDA graph and no node of it
// has written a's buffer: a's bytes were complete before the graph began,
// so a kernel of the graph may read them before the kernel ahead of it has
// finished (programmatic dependent launch).
bool complete_before_capture(const array& a);

// Whether float32 matmuls may use the tensor cores' tf32 mode (default: the
// environment variable KILN_CUDA_TF32=1). Global, read at each matmul.
void set_tf32_matmul(bool on);
bool tf32_matmul();

// Gives `out` a fresh row-major device buffer.
void allocate(array& out, const char* op);
// Like detail::allocate_or_donate, for a GPU kernel: donates only a buffer
// whose device copy is valid.
void allocate_or_donate(array& out, const array& in, const char* op);

// A scratch device buffer kept alive until the node's kernels finished
// (held by the node's in-flight record).
void* scratch(size_t bytes, const char* op);

// Enqueues a strided copy (with a cast) on the current stream:
// dst[i] = convert(src[i]) over `shape`, element strides for each side.
void copy_strided(const char* src, Dtype sd, const Shape& shape, const Strides& src_strides, char* dst, Dtype dd,
                  const Strides& dst_strides, const char* op);

// May a kernel on the current stream write its output over `in`'s buffer?
// Nobody holds the array but the node reading it, the buffer is writable,
// and its other references are in-flight records of this same stream
// (kernels queued before, which the stream runs first).
bool can_donate(const array& in);
bool can_donate(const std::shared_ptr<ArrayDesc>& in, int stream);
// The same for a buffer `owners` references of which are expected (a graph
// plan's kept buffer: 1).
bool only_stream_holds(const std::shared_ptr<Buffer>& b, int stream, long owners);

// Deferred index errors: a gather kernel cannot throw, so it clamps a bad
// index (no out-of-bounds read) and writes it into a slot of host-mapped
// memory. Once the node's kernels have finished the host reads the slot;
// the next eval or synchronize that waits on the stream's work then throws a
// kiln::Error built by `describe(bad_index)`. Returns nullptr (no check)
// when the slots run out.
struct IndexErrorSlot {
  int flag;
  int pad;
  long long value;
};
IndexErrorSlot* index_error_slot(std::function<std::string(int64_t)> describe);

// A slot and what its error says. Shared: a graph plan that replays the
// kernels writing the slot keeps it (graph_plan.h), each run's in-flight
// record holds it until the run has been checked.
struct IndexCheck {
  std::shared_ptr<IndexErrorSlot> slot;
  std::function<std::string(int64_t)> describe;
};

}  // namespace kiln::cuda
