#pragma once
// Shared loops of the elementwise kernels: a contiguous fast path the
// compiler vectorizes, and a strided path for any layout.
#include <algorithm>
#include <array>

#include "backend/common/layout.h"
#include "backend/cpu/cast.h"
#include "backend/cpu/copy.h"
#include "backend/cpu/stream_store.h"
#include "backend/cpu/threading.h"
#include "core/array_desc.h"

namespace kiln::cpu {

inline constexpr int64_t kElementwiseGrain = 1 << 14;

// f(b, e) over [0, n) in blocks of 1 KB of src, each block's read started
// (prefetched into L1) 2 KB ahead. For loops bound by their arithmetic (the
// math ops): with tens of cycles between two cache lines of src, this VM's
// hardware prefetchers fell behind and the loads waited on memory. On the
// 2-vCPU Xeon (AVX-512), gelu_approx over 2^26 elements, the scalar loop in a
// standalone program: bf16 33 -> 22 ms, float32 21.5 -> 19.3 (a distance of
// 4 KB: 20.8).
template <typename T, typename F>
inline void prefetched_blocks(const T* src, int64_t n, F&& f) {
  constexpr int64_t kBlock = 1024 / sizeof(T), kAhead = 2048 / sizeof(T), kLine = 64 / sizeof(T);
  for (int64_t b = 0; b < n; b += kBlock) {
    // Prefetches past the end are harmless (they never fault), but stay
    // inside the allocation's span for the sanitizers' peace of mind.
    const int64_t e = std::min(n, b + kBlock);
    for (int64_t l = b + kAhead; l < std::min(n, e + kAhead); l += kLine) __builtin_prefetch(src + l, 0, 3);
    f(b, e);
  }
}

// dst[i] = f(i) for i < n over the threads; with streaming stores
// (stream_store.h) when `stream`.
template <typename O, typename F>
void fill_contiguous(O* dst, int64_t n, bool stream, F&& f) {
  parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
    if (!stream) {
      for (int64_t i = b; i < e; ++i) dst[i] = f(i);
      return;
    }
    stream_fill(dst + b, e - b, [&](int64_t k0, int64_t m, O* buf) {
      for (int64_t k = 0; k < m; ++k) buf[k] = f(b + k0 + k);
    });
    stream_fence();
  });
}

// out[i] = op(in[i]) with T the input type and O the output type; op works
// on compute_t<T>.
template <typename T, typename O, typename Op>
void unary_loop(const array& in, array& out, Op op) {
  const T* src = reinterpret_cast<const T*>(detail::data_ptr(in));
  if (out.size() == 0) return;
  O* dst = reinterpret_cast<O*>(detail::data_ptr(out));
  const auto& id = *in.desc();
  int64_t n = static_cast<int64_t>(out.size());
  if (detail::is_row_contiguous(id.shape, id.strides)) {
    // Not streamed (stream_store.h): most unary ops are bound by their
    // arithmetic, where the extra pass through the buffer cost more than the
    // saved reads (exp f32 on 2^26 elements: 26 -> 22.5 GB/s).
    fill_contiguous(dst, n, false, [&](int64_t i) { return static_cast<O>(op(static_cast<compute_t<T>>(src[i]))); });
    return;
  }
  layout::Layout<2> l = layout::collapse<2>(out.shape(), {&out.desc()->strides, &id.strides});
  int64_t inner = l.shape.back();
  parallel_for(layout::num_rows(l), std::max<int64_t>(1, kElementwiseGrain / inner), [&](int64_t b, int64_t e) {
    for_each_row<2>(l, b, e, [&](const std::array<int64_t, 2>& off, int64_t cnt, const std::array<int64_t, 2>& st) {
      O* o = dst + off[0];
      const T* a = src + off[1];
      for (int64_t k = 0; k < cnt; ++k) o[k * st[0]] = static_cast<O>(op(static_cast<compute_t<T>>(a[k * st[1]])));
    });
  });
}

// out = op(a, b); a and b are broadcast to out's shape already.
template <typename T, typename O, typename Op>
void binary_loop(const array& a, const array& b, array& out, Op op) {
  if (out.size() == 0) return;
  const T* pa = reinterpret_cast<const T*>(detail::data_ptr(a));
  const T* pb = reinterpret_cast<const T*>(detail::data_ptr(b));
  O* dst = reinterpret_cast<O*>(detail::data_ptr(out));
  const auto& da = *a.desc();
  const auto& db = *b.desc();
  int64_t n = static_cast<int64_t>(out.size());
  bool ca = detail::is_row_contiguous(da.shape, da.strides);
  bool cb = detail::is_row_contiguous(db.shape, db.strides);
  bool sa = da.size == 1, sb = db.size == 1;
  using C = compute_t<T>;
  const bool stream = streaming_pays(a.nbytes() + b.nbytes() + out.nbytes());
  if ((ca || sa) && (cb || sb) && da.shape.size() == out.shape().size() && !(sa && sb)) {
    // Both inputs full-size and contiguous, or one a broadcast scalar.
    if (ca && cb && !sa && !sb) {
      fill_contiguous(dst, n, stream,
                      [&](int64_t i) { return static_cast<O>(op(static_cast<C>(pa[i]), static_cast<C>(pb[i]))); });
      return;
    }
    if (sa && cb && db.size == out.size()) {
      C va = static_cast<C>(pa[0]);
      fill_contiguous(dst, n, stream, [&](int64_t i) { return static_cast<O>(op(va, static_cast<C>(pb[i]))); });
      return;
    }
    if (sb && ca && da.size == out.size()) {
      C vb = static_cast<C>(pb[0]);
      fill_contiguous(dst, n, stream, [&](int64_t i) { return static_cast<O>(op(static_cast<C>(pa[i]), vb)); });
      return;
    }
  }
  layout::Layout<3> l = layout::collapse<3>(out.shape(), {&out.desc()->strides, &da.strides, &db.strides});
  int64_t inner = l.shape.back();
  parallel_for(layout::num_rows(l), std::max<int64_t>(1, kElementwiseGrain / inner), [&](int64_t s, int64_t e) {
    for_each_row<3>(l, s, e, [&](const std::array<int64_t, 3>& off, int64_t cnt, const std::array<int64_t, 3>& st) {
      O* o = dst + off[0];
      const T* x = pa + off[1];
      const T* y = pb + off[2];
      if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
        if (stream) {
          stream_fill(o, cnt, [&](int64_t k0, int64_t m, O* buf) {
            for (int64_t k = 0; k < m; ++k) buf[k] = static_cast<O>(op(static_cast<C>(x[k0 + k]), static_cast<C>(y[k0 + k])));
          });
        } else {
          for (int64_t k = 0; k < cnt; ++k) o[k] = static_cast<O>(op(static_cast<C>(x[k]), static_cast<C>(y[k])));
        }
      } else if (st[0] == 1 && st[1] == 1 && st[2] == 0) {
        C vy = static_cast<C>(y[0]);
        for (int64_t k = 0; k < cnt; ++k) o[k] = static_cast<O>(op(static_cast<C>(x[k]), vy));
      } else if (st[0] == 1 && st[1] == 0 && st[2] == 1) {
        C vx = static_cast<C>(x[0]);
        for (int64_t k = 0; k < cnt; ++k) o[k] = static_cast<O>(op(vx, static_cast<C>(y[k])));
      } else {
        for (int64_t k = 0; k < cnt; ++k) {
          o[k * st[0]] = static_cast<O>(op(static_cast<C>(x[k * st[1]]), static_cast<C>(y[k * st[2]])));
        }
      }
    });
    if (stream) stream_fence();
  });
}

}  // namespace kiln::cpu
