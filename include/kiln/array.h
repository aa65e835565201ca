#pragma once
// kiln::array: a cheap handle to a lazily computed n-dimensional array.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "kiln/device.h"
#include "kiln/dtype.h"
#include "kiln/error.h"

namespace kiln {

using Shape = std::vector<int>;
using Strides = std::vector<int64_t>;

struct ArrayDesc;  // defined in src/core/array_desc.h
class Primitive;

namespace detail {
// Selects array's internal descriptor constructor, so that braces (`array a({})`)
// can never reach it.
struct DescTag {
  explicit DescTag() = default;
};
}  // namespace detail

class array {
 public:
  // A 0-d array holding one value (converted to dtype); complex64_t and
  // std::complex<float> values give complex64.
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T> ||
                                                    std::is_same_v<T, float16_t> ||
                                                    std::is_same_v<T, bfloat16_t> ||
                                                    is_fp8_v<T> ||
                                                    std::is_same_v<T, complex64_t> ||
                                                    std::is_same_v<T, std::complex<float>>>>
  array(T value, Dtype dtype = dtype_of<T>)  // NOLINT(implicit)
      : array(static_cast<const void*>(&value), dtype_of<T>, Shape{}, dtype) {}

  // A 1-d float32 array; `array({})` is an empty float32 array of shape (0),
  // as in MLX.
  array(std::initializer_list<float> values);  // NOLINT(implicit)
  // A 1-d array from a list of values.
  template <typename T, typename = decltype(DtypeOf<T>::value)>
  array(std::initializer_list<T> values, Dtype dtype = dtype_of<T>)
      : array(static_cast<const void*>(values.begin()), dtype_of<T>,
              Shape{static_cast<int>(values.size())}, dtype) {}

  // An array of the given shape from row-major data.
  template <typename T>
  array(const std::vector<T>& values, Shape shape, Dtype dtype = dtype_of<T>)
      : array(checked_data(values, shape), dtype_of<T>, shape, dtype) {}  // no move: argument order is unspecified
  template <typename T>
  array(std::initializer_list<T> values, Shape shape, Dtype dtype = dtype_of<T>)
      : array(std::vector<T>(values), std::move(shape), dtype) {}
  // std::vector<bool> is packed and has no data(): its values are unpacked.
  array(const std::vector<bool>& values, Shape shape, Dtype dtype = bool_);

  // Wraps memory Kiln does not own, with no copy (MLX's constructor):
  // row-major data of shape and dtype at `data`; `deleter(data)` runs when
  // the last array using the memory is gone. Kiln may write the memory
  // when an op donates it to its output; use external_read_only for
  // memory that must never be written.
  array(void* data, Shape shape, Dtype dtype, std::function<void(void*)> deleter);
  // Like the wrapping constructor, for memory that must never be written
  // (e.g. a read-only memory-mapped file): no op donates it to its output
  // or writes it in place. Kiln addition (MLX has no read-only arrays).
  static array external_read_only(const void* data, Shape shape, Dtype dtype,
                                  std::function<void(void*)> deleter = nullptr);

  // Internal: a node produced by a primitive (used by ops).
  array(Shape shape, Dtype dtype, std::shared_ptr<Primitive> primitive,
        std::vector<array> inputs);
  // Internal: wraps a descriptor.
  array(std::shared_ptr<ArrayDesc> desc, detail::DescTag) : desc_(std::move(desc)) {}
  // Internal: the outputs of one node of a multi-output primitive.
  static std::vector<array> make_arrays(std::vector<Shape> shapes, const std::vector<Dtype>& dtypes,
                                        const std::shared_ptr<Primitive>& primitive,
                                        const std::vector<array>& inputs);

  // A moved-from array is an empty handle: every method except assignment
  // and destruction throws kiln::Error.

  const Shape& shape() const;
  int shape(int dim) const;  // negative dims count from the end
  // Element strides of the evaluated data (evaluates first).
  const Strides& strides() const;
  Dtype dtype() const;
  size_t size() const;
  int ndim() const;
  size_t itemsize() const;
  size_t nbytes() const;

  // Evaluates and returns the single element converted to T.
  template <typename T>
  T item() const {
    T out;
    item_into(&out, dtype_of<T>);
    return out;
  }
  // Evaluates and returns a pointer to the first element; T must be the
  // array's dtype. Elements are laid out by strides() from there.
  template <typename T>
  const T* data() const {
    return static_cast<const T*>(raw_data(dtype_of<T>));
  }
  template <typename T>
  T* data() {
    return static_cast<T*>(const_cast<void*>(raw_data(dtype_of<T>)));
  }

  void eval() const;
  bool is_evaluated() const;   // computed (successfully or not)
  bool has_primitive() const;  // still attached to the graph
  // Row-major contiguous data (evaluates first).
  bool is_row_contiguous() const;
  // Identity of the node; equal ids are the same array.
  uintptr_t id() const { return reinterpret_cast<uintptr_t>(desc_.get()); }

  const std::shared_ptr<ArrayDesc>& desc() const { return desc_; }
  // Differences from MLX: inputs() and primitive() return copies, not
  // references, taken under the node's lock. A stream worker detaches a node
  // (drops its inputs and primitive) as soon as it is computed, possibly
  // while another thread inspects it; a reference would dangle.
  std::vector<array> inputs() const;
  std::shared_ptr<Primitive> primitive() const;
  // The other outputs of this array's node (MLX: siblings()), and all of
  // them in output order with this one included (MLX: outputs()). An output
  // nobody holds any more is absent from siblings() and comes back from
  // outputs() as a fresh array of the same node.
  std::vector<array> siblings() const;
  std::vector<array> outputs() const;

 private:
  array(const void* data, Dtype src_dtype, Shape shape, Dtype dtype);
  template <typename T>
  static const void* checked_data(const std::vector<T>& v, const Shape& shape) {
    check_data_size(v.size(), shape);
    return v.data();
  }
  static void check_data_size(size_t n, const Shape& shape);
  const ArrayDesc& checked() const;  // the descriptor; throws for an empty handle
  void item_into(void* out, Dtype dtype) const;
  const void* raw_data(Dtype expected) const;

  std::shared_ptr<ArrayDesc> desc_;
};

// Evaluation of lazy graphs. A failed evaluation throws kiln::Error and
// leaves the failed arrays re-runnable: evaluating them again retries (for
// example after raising the memory limit). A graph wholly on one CPU stream
// with nothing queued or running there is run on the calling thread (its
// kernels use that thread's OpenMP team); otherwise the streams' workers
// run it and eval waits.
void eval(std::vector<array> outputs);
// Returns once the graph is queued on its streams; it blocks while a stream
// already has many submissions queued and not started (back-pressure, so a
// loop of async_eval without waits cannot queue graphs without bound).
void async_eval(std::vector<array> outputs);
template <typename... Arrays, typename = std::enable_if_t<(std::is_same_v<std::decay_t<Arrays>, array> && ...)>>
void eval(Arrays&&... outputs) {
  eval(std::vector<array>{std::forward<Arrays>(outputs)...});
}
template <typename... Arrays, typename = std::enable_if_t<(std::is_same_v<std::decay_t<Arrays>, array> && ...)>>
void async_eval(Arrays&&... outputs) {
  async_eval(std::vector<array>{std::forward<Arrays>(outputs)...});
}

}  // namespace kiln
