#include <atomic>
#include <cstring>

#include "core/array_desc.h"
#include "core/host_cast.h"
#include "core/object_pool.h"
#include "core/ops_util.h"
#include "core/primitive.h"

namespace kiln {

Strides row_major_strides(const Shape& shape) {
  Strides st(shape.size());
  int64_t s = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    st[i] = s;
    s *= shape[i];
  }
  return st;
}

ArrayDesc::ArrayDesc(Shape s, Dtype t) : shape(std::move(s)), dtype(t) {
  size = 1;
  size_t bytes = 0;
  for (int d : shape) {
    if (d < 0 || __builtin_mul_overflow(size, static_cast<size_t>(d), &size)) size = ~size_t{0};
  }
  if (size == ~size_t{0} || __builtin_mul_overflow(size, size_of(t), &bytes) || bytes > (size_t{1} << 62)) {
    throw Error("[array] shape " + format_shape(shape) + " of " + dtype_name(t) + " is too large or invalid");
  }
}

// Destroying the last handle of a long lazy chain would recurse once per
// node through shared_ptr destructors and overflow the stack; instead the
// inputs of every node about to die are moved onto an explicit stack.
ArrayDesc::~ArrayDesc() {
  if (inputs.empty()) return;
  std::vector<array> pending = std::move(inputs);
  inputs.clear();
  while (!pending.empty()) {
    array a = std::move(pending.back());
    pending.pop_back();
    const auto& d = a.desc();
    if (d && d.use_count() == 1) {
      // use_count() is a relaxed load; a stream worker may have detached
      // this node (cleared its inputs) just before letting go of it. The
      // node's lock orders that write before this read.
      NodeLock lock(*d);
      for (auto& in : d->inputs) pending.push_back(std::move(in));
      d->inputs.clear();
    }
  }
}

array::array(Shape shape, Dtype dtype, std::shared_ptr<Primitive> primitive, std::vector<array> inputs)
    : desc_(detail::make_pooled<ArrayDesc>(std::move(shape), dtype)) {
  // The fp8 dtypes are storage types: only the primitives that move or cast
  // bytes (and scaled_matmul) take them (Primitive::accepts_fp8).
  if (primitive && !primitive->accepts_fp8()) {
    bool fp8 = is_fp8(dtype);
    for (const auto& in : inputs) fp8 = fp8 || is_fp8(in.dtype());
    if (fp8) {
      fail(primitive->name(),
           std::string("is not supported for the fp8 dtypes (storage types: astype to bfloat16 or float32 "
                       "first; for matmul use scaled_matmul); output ") +
               dtype_name(dtype) + " " + format_shape(desc_->shape),
           inputs);
    }
  }
  desc_->primitive = std::move(primitive);
  desc_->inputs = std::move(inputs);
}

array::array(const void* data, Dtype src_dtype, Shape shape, Dtype dtype)
    : desc_(detail::make_pooled<ArrayDesc>(std::move(shape), dtype)) {
  for (int d : desc_->shape) {
    if (d < 0) throw Error("[array] negative dimension in shape " + format_shape(desc_->shape));
  }
  array self(desc_, detail::DescTag{});
  detail::allocate(self, "array");
  detail::host_cast(data, src_dtype, detail::data_ptr(self), dtype, desc_->size);
  desc_->set_status(Status::available);
}

namespace {
std::shared_ptr<ArrayDesc> wrap_external(void* data, Shape shape, Dtype dtype, std::function<void(void*)> deleter,
                                         bool read_only) {
  auto d = detail::make_pooled<ArrayDesc>(std::move(shape), dtype);
  for (int n : d->shape) {
    if (n < 0) throw Error("[array] negative dimension in shape " + format_shape(d->shape));
  }
  if (!data && d->size > 0) throw Error("[array] cannot wrap a null pointer as shape " + format_shape(d->shape));
  d->buffer = std::make_shared<Buffer>(Buffer::ExternalTag{}, data, d->size * size_of(dtype), std::move(deleter),
                                       read_only);
  d->strides = row_major_strides(d->shape);
  d->offset = 0;
  d->set_status(Status::available);
  return d;
}
}  // namespace

array::array(void* data, Shape shape, Dtype dtype, std::function<void(void*)> deleter)
    : desc_(wrap_external(data, std::move(shape), dtype, std::move(deleter), false)) {}

array array::external_read_only(const void* data, Shape shape, Dtype dtype, std::function<void(void*)> deleter) {
  return array(wrap_external(const_cast<void*>(data), std::move(shape), dtype, std::move(deleter), true), detail::DescTag{});
}

array::array(const std::vector<bool>& values, Shape shape, Dtype dtype)
    : array(std::vector<uint8_t>(values.begin(), values.end()), std::move(shape), dtype) {}

array::array(std::initializer_list<float> values)
    : array(static_cast<const void*>(values.begin()), float32, Shape{static_cast<int>(values.size())}, float32) {}

const ArrayDesc& array::checked() const {
  if (!desc_) {
    throw Error("[array] this array handle is empty (it was moved from); assign it an array before using it");
  }
  return *desc_;
}

void array::check_data_size(size_t n, const Shape& shape) {
  size_t want = 1;
  for (int d : shape) {
    if (d < 0) throw Error("[array] negative dimension in shape " + format_shape(shape));
    want *= static_cast<size_t>(d);
  }
  if (n != want) {
    throw Error("[array] " + std::to_string(n) + " values cannot fill shape " + format_shape(shape) + " (" +
                std::to_string(want) + " elements)");
  }
}

const Shape& array::shape() const { return checked().shape; }
int array::shape(int dim) const {
  int nd = ndim();
  int d = dim < 0 ? dim + nd : dim;
  if (d < 0 || d >= nd) {
    throw Error("[shape] dimension " + std::to_string(dim) + " is out of range for shape " +
                format_shape(desc_->shape));
  }
  return desc_->shape[d];
}
const Strides& array::strides() const {
  eval();
  return desc_->strides;
}
Dtype array::dtype() const { return checked().dtype; }
size_t array::size() const { return checked().size; }
int array::ndim() const { return static_cast<int>(checked().shape.size()); }
size_t array::itemsize() const { return size_of(checked().dtype); }
size_t array::nbytes() const { return checked().size * itemsize(); }

std::vector<array> array::make_arrays(std::vector<Shape> shapes, const std::vector<Dtype>& dtypes,
                                     const std::shared_ptr<Primitive>& primitive, const std::vector<array>& inputs) {
  std::vector<array> outs;
  outs.reserve(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) outs.push_back(array(shapes[i], dtypes[i], primitive, inputs));
  if (outs.size() > 1) {
    auto sib = std::make_shared<ArrayDesc::Siblings>();
    for (const auto& o : outs) sib->descs.push_back(o.desc_);
    sib->shapes = std::move(shapes);
    sib->dtypes = dtypes;
    for (size_t i = 0; i < outs.size(); ++i) {
      outs[i].desc_->siblings = sib;
      outs[i].desc_->position = static_cast<int>(i);
    }
  }
  return outs;
}

std::vector<array> array::siblings() const {
  std::vector<array> out;
  if (!checked().siblings) return out;
  for (const auto& w : desc_->siblings->descs) {
    auto d = w.lock();
    if (d && d != desc_) out.push_back(array(std::move(d), detail::DescTag{}));
  }
  return out;
}

std::vector<array> array::outputs() const {
  const auto& sib = checked().siblings;
  if (!sib) return {*this};
  std::vector<array> out;
  std::vector<array> rebuilt;  // the whole node again, made once if an output died
  for (size_t i = 0; i < sib->descs.size(); ++i) {
    if (auto d = sib->descs[i].lock()) {
      out.push_back(array(std::move(d), detail::DescTag{}));
      continue;
    }
    if (rebuilt.empty()) {
      std::shared_ptr<Primitive> p = primitive();  // under the node lock: a worker may detach it
      if (!p) {
        throw Error("[outputs] an output of this evaluated multi-output node was released; rebuild the op");
      }
      rebuilt = make_arrays(sib->shapes, sib->dtypes, p, inputs());
    }
    out.push_back(rebuilt[i]);
  }
  return out;
}

std::vector<array> array::inputs() const {
  NodeLock lock(checked());
  return desc_->inputs;
}
std::shared_ptr<Primitive> array::primitive() const {
  NodeLock lock(checked());
  return desc_->primitive;
}
bool array::has_primitive() const {
  NodeLock lock(checked());
  return desc_->primitive != nullptr;
}
bool array::is_evaluated() const { return checked().get_status() >= Status::available; }

void array::eval() const {
  Status s = checked().get_status();
  if (s == Status::available) return;
  kiln::eval(std::vector<array>{*this});
}

bool array::is_row_contiguous() const {
  eval();
  return detail::is_row_contiguous(desc_->shape, desc_->strides);
}

void array::item_into(void* out, Dtype dtype) const {
  if (size() != 1) {
    throw Error("[item] needs an array of one element, got shape " + format_shape(shape()) + " " +
                dtype_name(this->dtype()));
  }
  eval();
  detail::host_cast(detail::data_ptr(*this), desc_->dtype, out, dtype, 1);
}

const void* array::raw_data(Dtype expected) const {
  if (expected != dtype()) {
    throw Error(std::string("[data] requested ") + dtype_name(expected) + " data from an array of dtype " +
                dtype_name(dtype()) + " and shape " + format_shape(shape()));
  }
  eval();
  return detail::data_ptr(*this);
}

namespace detail {

bool is_row_contiguous(const Shape& shape, const Strides& strides) {
  // An empty array has no element out of place (MLX flags it contiguous).
  for (int d : shape) {
    if (d == 0) return true;
  }
  int64_t expected = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    if (shape[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

std::string allocation_failure(const Error& e, const array& out) {
  const ArrayDesc& d = *out.desc();
  std::string m = std::string(e.what()) + " for an array of shape " + format_shape(d.shape) + " " + dtype_name(d.dtype);
  if (!d.inputs.empty()) m += " (inputs: " + describe(d.inputs) + ")";
  return m;
}

void allocate(array& out, const char* op) {
  auto& d = *out.desc();
  try {
    d.buffer = allocator::malloc(d.size * size_of(d.dtype), op);
  } catch (const Error& e) {
    throw Error(allocation_failure(e, out));
  }
  d.strides = row_major_strides(d.shape);
  d.offset = 0;
}

void allocate_or_donate(array& out, const array& in, const char* op) {
  const auto& id = in.desc();
  // The only owner of `in`'s descriptor must be out's input list (backends
  // get that list by reference): any other owner could still read it.
  // Only a buffer whose host copy is valid can be donated to a CPU kernel,
  // which then owns the only valid copy (the device copy goes stale).
  if (id->buffer && id->buffer.use_count() == 1 && id.use_count() == 1 && id->offset == 0 && id->buffer->donatable() &&
      (id->buffer->valid() & Buffer::kHost) &&
      id->size == out.size() && size_of(id->dtype) == size_of(out.dtype()) &&
      is_row_contiguous(id->shape, id->strides) && id->buffer->size() >= out.nbytes()) {
    // use_count() is a relaxed load: pair with the release of the last
    // other owner's reference so its reads happen before our writes.
#if defined(__SANITIZE_THREAD__)
    // ThreadSanitizer ignores fences: acquire read-modify-writes of the same
    // counts (a copy of each pointer) give the same order in a form it sees.
    { std::shared_ptr<ArrayDesc> desc_ref = id; std::shared_ptr<Buffer> buffer_ref = id->buffer; }
#else
    std::atomic_thread_fence(std::memory_order_acquire);
#endif
    auto& d = *out.desc();
    d.buffer = id->buffer;
    d.buffer->set_valid(Buffer::kHost);
    d.strides = row_major_strides(d.shape);
    d.offset = 0;
    return;
  }
  allocate(out, op);
}

void share_buffer(array& out, const array& in, Strides strides, int64_t offset) {
  auto& d = *out.desc();
  d.buffer = in.desc()->buffer;
  d.strides = std::move(strides);
  d.offset = offset;
}

}  // namespace detail
}  // namespace kiln
