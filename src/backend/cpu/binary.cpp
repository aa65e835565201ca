// Binary elementwise kernels (inputs already promoted to one dtype and
// broadcast to the output shape by the op layer) and `where`.
#include <cmath>
#include <limits>

#include "backend/cpu/elementwise.h"
#include "backend/cpu/op_functors.h"
#include "core/primitives.h"

namespace kiln {
namespace {

template <typename T>
void run_binary(BinaryOp op, const array& a, const array& b, array& out) {
  using C = cpu::compute_t<T>;
  auto same = [&](auto fn) { cpu::binary_loop<T, T>(a, b, out, fn); };
  auto to_bool = [&](auto fn) { cpu::binary_loop<T, bool>(a, b, out, fn); };
  if (cpu::with_binary_op<C>(op, same, to_bool)) return;
  throw Error(std::string("[") + binary_op_name(op) + "] unsupported dtype " + dtype_name(a.dtype()));
}

// A full-size contiguous input of the output's type can take the output.
void allocate_binary_output(const std::vector<array>& inputs, array& out, const char* op) {
  for (const auto& in : inputs) {
    if (in.dtype() == out.dtype() && in.size() == out.size() && in.desc()->offset == 0) {
      const auto& d = *in.desc();
      if (d.buffer.use_count() == 1 && in.desc().use_count() == 1 && d.buffer->donatable() &&
          detail::is_row_contiguous(d.shape, d.strides)) {
        detail::allocate_or_donate(out, in, op);
        return;
      }
    }
  }
  detail::allocate(out, op);
}

}  // namespace

void Binary::eval_cpu(const std::vector<array>& inputs, array& out) {
  allocate_binary_output(inputs, out, binary_op_name(op_));
  cpu::dispatch_all(inputs[0].dtype(),
                    [&](auto tag) { run_binary<typename decltype(tag)::type>(op_, inputs[0], inputs[1], out); });
}

void Select::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& cond = inputs[0];
  const array& x = inputs[1];
  const array& y = inputs[2];
  detail::allocate(out, name());
  if (out.size() == 0) return;
  cpu::dispatch_all(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool* pc = reinterpret_cast<const bool*>(detail::data_ptr(cond));
    const T* px = reinterpret_cast<const T*>(detail::data_ptr(x));
    const T* py = reinterpret_cast<const T*>(detail::data_ptr(y));
    T* po = reinterpret_cast<T*>(detail::data_ptr(out));
    cpu::Layout<4> l = cpu::collapse<4>(
        out.shape(), {&out.desc()->strides, &cond.desc()->strides, &x.desc()->strides, &y.desc()->strides});
    int64_t inner = l.shape.back();
    cpu::parallel_for(cpu::num_rows(l), std::max<int64_t>(1, cpu::kElementwiseGrain / inner), [&](int64_t s, int64_t e) {
      cpu::for_each_row<4>(l, s, e, [&](const std::array<int64_t, 4>& off, int64_t n, const std::array<int64_t, 4>& st) {
        for (int64_t k = 0; k < n; ++k) {
          po[off[0] + k * st[0]] = pc[off[1] + k * st[1]] ? px[off[2] + k * st[2]] : py[off[3] + k * st[3]];
        }
      });
    });
  });
}

}  // namespace kiln
