// Binary elementwise kernels (inputs already promoted to one dtype and
// broadcast to the output shape by the op layer) and `where`.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "backend/cpu/elementwise.h"
#include "backend/cpu/op_functors.h"
#include "core/ops_util.h"
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

// Integers to negative integer powers are an error (as in numpy); the op
// layer checks exponents that are already evaluated, this the others. The
// broadcast (zero-stride) dims are skipped: each element is read once.
template <typename T>
void check_exponents(const array& base, const array& exponent) {
  if (exponent.size() == 0) return;
  Shape shape;
  Strides strides;
  const auto& d = *exponent.desc();
  for (size_t k = 0; k < d.shape.size(); ++k) {
    if (d.strides[k] != 0) {
      shape.push_back(d.shape[k]);
      strides.push_back(d.strides[k]);
    }
  }
  layout::Layout<1> l = layout::collapse<1>(shape, {&strides});
  const T* p = reinterpret_cast<const T*>(detail::data_ptr(exponent));
  std::atomic<int64_t> bad{0};
  cpu::parallel_for(layout::num_rows(l), std::max<int64_t>(1, cpu::kElementwiseGrain / l.shape.back()),
                    [&](int64_t s, int64_t e) {
    layout::for_each_row<1>(l, s, e, [&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& st) {
      T lowest = 0;
      for (int64_t k = 0; k < n; ++k) lowest = std::min(lowest, p[off[0] + k * st[0]]);
      if (lowest < 0) bad.store(lowest, std::memory_order_relaxed);
    });
  });
  if (int64_t v = bad.load(); v < 0) {
    throw Error("[power] integers to negative integer powers are not allowed (exponent " + std::to_string(v) +
                "); inputs: " + format_shape(base.shape()) + " " + dtype_name(base.dtype()) + ", " +
                format_shape(exponent.shape()) + " " + dtype_name(exponent.dtype()));
  }
}

}  // namespace

void Binary::eval_cpu(const std::vector<array>& inputs, array& out) {
  if (op_ == BinaryOp::power) {
    switch (inputs[1].dtype()) {
      case int8: check_exponents<int8_t>(inputs[0], inputs[1]); break;
      case int16: check_exponents<int16_t>(inputs[0], inputs[1]); break;
      case int32: check_exponents<int32_t>(inputs[0], inputs[1]); break;
      case int64: check_exponents<int64_t>(inputs[0], inputs[1]); break;
      default: break;
    }
  }
  allocate_binary_output(inputs, out, binary_op_name(op_));
  cpu::dispatch_with_complex(inputs[0].dtype(),
                    [&](auto tag) { run_binary<typename decltype(tag)::type>(op_, inputs[0], inputs[1], out); });
}

void Select::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& cond = inputs[0];
  const array& x = inputs[1];
  const array& y = inputs[2];
  detail::allocate(out, name());
  if (out.size() == 0) return;
  cpu::dispatch_with_complex(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool* pc = reinterpret_cast<const bool*>(detail::data_ptr(cond));
    const T* px = reinterpret_cast<const T*>(detail::data_ptr(x));
    const T* py = reinterpret_cast<const T*>(detail::data_ptr(y));
    T* po = reinterpret_cast<T*>(detail::data_ptr(out));
    layout::Layout<4> l = layout::collapse<4>(
        out.shape(), {&out.desc()->strides, &cond.desc()->strides, &x.desc()->strides, &y.desc()->strides});
    int64_t inner = l.shape.back();
    cpu::parallel_for(layout::num_rows(l), std::max<int64_t>(1, cpu::kElementwiseGrain / inner), [&](int64_t s, int64_t e) {
      layout::for_each_row<4>(l, s, e, [&](const std::array<int64_t, 4>& off, int64_t n, const std::array<int64_t, 4>& st) {
        for (int64_t k = 0; k < n; ++k) {
          po[off[0] + k * st[0]] = pc[off[1] + k * st[1]] ? px[off[2] + k * st[2]] : py[off[3] + k * st[3]];
        }
      });
    });
  });
}

}  // namespace kiln
