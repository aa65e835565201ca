// Binary elementwise kernels (inputs already promoted to one dtype and
// broadcast to the output shape by the op layer) and `where`.
#include <cmath>
#include <limits>

#include "backend/cpu/elementwise.h"
#include "core/primitives.h"

namespace kiln {
namespace {

template <typename C>
C int_power(C base, C exp) {
  if constexpr (std::is_signed_v<C>) {
    if (exp < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exp % 2 == 0) ? 1 : -1;
      return 0;
    }
  }
  // Unsigned arithmetic: overflow wraps instead of being undefined.
  using U = std::make_unsigned_t<C>;
  U result = 1, b = static_cast<U>(base);
  auto e = static_cast<std::make_unsigned_t<C>>(exp);
  while (e) {
    if (e & 1) result *= b;
    b *= b;
    e >>= 1;
  }
  return static_cast<C>(result);
}

template <typename C>
C python_remainder(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    C r = std::fmod(a, b);
    if (r != C(0) && ((r < C(0)) != (b < C(0)))) r += b;
    return r;
  } else if constexpr (std::is_unsigned_v<C>) {
    return b == 0 ? C(0) : static_cast<C>(a % b);
  } else {
    if (b == 0 || b == -1) return C(0);  // x % 0 is undefined; min % -1 overflows
    C r = static_cast<C>(a % b);
    if (r != 0 && ((r < 0) != (b < 0))) r = static_cast<C>(r + b);
    return r;
  }
}

// Integer add/sub/mul through unsigned types: wraps like the hardware
// instead of being undefined behaviour on overflow.
template <typename C, typename F>
C wrapping(C a, C b, F f) {
  if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(f(static_cast<U>(a), static_cast<U>(b)));
  } else {
    return static_cast<C>(f(a, b));
  }
}

template <typename T>
void run_binary(BinaryOp op, const array& a, const array& b, array& out) {
  using C = cpu::compute_t<T>;
  constexpr bool fp = std::is_floating_point_v<C>;
  auto same = [&](auto fn) { cpu::binary_loop<T, T>(a, b, out, fn); };
  auto to_bool = [&](auto fn) { cpu::binary_loop<T, bool>(a, b, out, fn); };
  switch (op) {
    case BinaryOp::add: return same([](C x, C y) { return wrapping(x, y, [](auto p, auto q) { return p + q; }); });
    case BinaryOp::subtract:
      return same([](C x, C y) { return wrapping(x, y, [](auto p, auto q) { return p - q; }); });
    case BinaryOp::multiply:
      return same([](C x, C y) { return wrapping(x, y, [](auto p, auto q) { return p * q; }); });
    case BinaryOp::divide:
      if constexpr (fp) return same([](C x, C y) { return x / y; });
      break;
    case BinaryOp::power:
      if constexpr (fp) return same([](C x, C y) { return std::pow(x, y); });
      else if constexpr (!std::is_same_v<C, bool>) return same([](C x, C y) { return int_power(x, y); });
      break;
    case BinaryOp::maximum:
      return same([](C x, C y) { return (x > y || x != x) ? x : y; });
    case BinaryOp::minimum:
      return same([](C x, C y) { return (x < y || x != x) ? x : y; });
    case BinaryOp::remainder:
      if constexpr (!std::is_same_v<C, bool>) return same([](C x, C y) { return python_remainder(x, y); });
      break;
    case BinaryOp::equal: return to_bool([](C x, C y) { return x == y; });
    case BinaryOp::not_equal: return to_bool([](C x, C y) { return x != y; });
    case BinaryOp::less: return to_bool([](C x, C y) { return x < y; });
    case BinaryOp::less_equal: return to_bool([](C x, C y) { return x <= y; });
    case BinaryOp::greater: return to_bool([](C x, C y) { return x > y; });
    case BinaryOp::greater_equal: return to_bool([](C x, C y) { return x >= y; });
    case BinaryOp::logical_and: return to_bool([](C x, C y) { return x != C(0) && y != C(0); });
    case BinaryOp::logical_or: return to_bool([](C x, C y) { return x != C(0) || y != C(0); });
  }
  throw Error(std::string("[") + binary_op_name(op) + "] unsupported dtype " + dtype_name(a.dtype()));
}

// A full-size contiguous input of the output's type can take the output.
void allocate_binary_output(const std::vector<array>& inputs, array& out, const char* op) {
  for (const auto& in : inputs) {
    if (in.dtype() == out.dtype() && in.size() == out.size() && in.desc()->offset == 0) {
      const auto& d = *in.desc();
      if (d.buffer.use_count() == 1 && in.desc().use_count() == 1 &&
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
