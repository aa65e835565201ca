#pragma once
// The descriptor behind a kiln::array handle: shape, dtype, the primitive
// and inputs that produce it and, once evaluated, a (shared) buffer with
// strides and an offset.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/allocator.h"
#include "kiln/array.h"

namespace kiln {

enum class Status : int {
  unscheduled = 0,  // a graph node nobody has asked for yet
  scheduled = 1,    // handed to a stream worker
  available = 2,    // computed; data is valid
  failed = 3,       // its eval (or an input's) threw; error_ says why
};

struct ArrayDesc {
  Shape shape;
  Dtype dtype;
  size_t size = 1;  // number of elements

  // Valid once status is available.
  Strides strides;
  std::shared_ptr<Buffer> buffer;
  int64_t offset = 0;  // in elements from buffer->ptr()

  std::shared_ptr<Primitive> primitive;
  std::vector<array> inputs;
  // The outputs of a multi-output primitive, this one included, in output
  // order (null for one output). Weak: siblings share their inputs but do
  // not keep each other alive; a sibling that died before its node ran is
  // given a scratch output.
  struct Siblings {
    std::vector<std::weak_ptr<ArrayDesc>> descs;
    std::vector<Shape> shapes;
    std::vector<Dtype> dtypes;
  };
  std::shared_ptr<const Siblings> siblings;
  int position = 0;  // index among the siblings
  // Set when the node is scheduled under a transformation (vjp, jvp,
  // vmap, checkpoint): its primitive and inputs are kept after it runs so
  // that the transformation can still walk the graph.
  bool keep_graph = false;
  // The last of schedule's graph walks that reached this node (a walk's
  // "seen" mark without a set; read and written under schedule's mutex).
  uint64_t walk_mark = 0;

  std::atomic<int> status{static_cast<int>(Status::unscheduled)};
  std::string error;

  // Orders readers of primitive and inputs on other threads (array's
  // accessors, the destructor harvesting inputs) with a stream worker that
  // detaches the node. Held only for a few pointer moves: see NodeLock.
  mutable std::atomic_flag node_lock;

  ArrayDesc(Shape s, Dtype t);
  ~ArrayDesc();

  Status get_status() const { return static_cast<Status>(status.load(std::memory_order_acquire)); }
  void set_status(Status s) {
    status.store(static_cast<int>(s), std::memory_order_release);
    status.notify_all();
  }
  // Blocks until the node is available or failed.
  void wait() const {
    int s = status.load(std::memory_order_acquire);
    while (s < static_cast<int>(Status::available)) {
      status.wait(s, std::memory_order_acquire);
      s = status.load(std::memory_order_acquire);
    }
  }
};

// Scoped hold of a node's lock: a spinlock, as the holder never blocks and
// the sections are a few pointer moves (never a kernel or a destructor).
class NodeLock {
 public:
  explicit NodeLock(const ArrayDesc& d) : flag_(d.node_lock) {
    while (flag_.test_and_set(std::memory_order_acquire)) {
      while (flag_.test(std::memory_order_relaxed)) std::this_thread::yield();
    }
  }
  ~NodeLock() { flag_.clear(std::memory_order_release); }
  NodeLock(const NodeLock&) = delete;
  NodeLock& operator=(const NodeLock&) = delete;

 private:
  std::atomic_flag& flag_;
};

// Row-major strides for a shape.
Strides row_major_strides(const Shape& shape);

// Helpers used by every backend to set an output's data.
namespace detail {
// Lets go of a handle (a worker done with a node).
inline void release(array& a) { array gone = std::move(a); }
inline char* data_ptr(const array& a) {
  const auto& d = *a.desc();
  return static_cast<char*>(d.buffer->ptr()) + d.offset * static_cast<int64_t>(size_of(d.dtype));
}
// Gives `out` a fresh row-major buffer.
void allocate(array& out, const char* op);
// An allocator error for `out`'s buffer with out's shape, dtype and inputs
// added: the allocator knows only a byte count and the primitive.
std::string allocation_failure(const Error& e, const array& out);
// Gives `out` the buffer of `in` when `in` is row-contiguous, the same size
// in bytes, and referenced only by `out`'s producer (its memory can be
// overwritten in place); else a fresh buffer.
void allocate_or_donate(array& out, const array& in, const char* op);
// Makes `out` a view of `in`'s buffer.
void share_buffer(array& out, const array& in, Strides strides, int64_t offset);
bool is_row_contiguous(const Shape& shape, const Strides& strides);
}  // namespace detail

}  // namespace kiln
