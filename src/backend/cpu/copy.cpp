// Copy (materialize any layout into row-major, casting on the way), the
// views (reshape, transpose, broadcast, slice) and slice_update.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>

#include "backend/common/layout.h"
#include "backend/cpu/cast.h"
#include "backend/cpu/copy.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/stream_store.h"
#include "backend/cpu/threading.h"
#include "backend/cpu/transpose_avx512.h"
#include "core/array_desc.h"
#include "core/host_cast.h"
#include "core/ops_util.h"
#include "core/primitives.h"

namespace kiln {
namespace cpu {

namespace {
constexpr int64_t kGrain = 1 << 15;
std::atomic<size_t> g_streaming_threshold{SIZE_MAX};

// The size of one last-level cache instance as sysfs gives it ("32768K"),
// else sysconf's, else 32 MiB; at most 32 MiB. sysfs first: on this
// project's VMs sysconf reports 320 MB (the host's total) where one L3
// instance is 32 MiB, and streaming then never started below 320 MB of
// traffic. The cap: the 2-vCPU Xeon VM's one L3 instance is 480 MB, shared
// with the host's other tenants, and its data still came from DRAM; with
// streaming from 32 MiB (session 38, `kiln bench`, ms) softmax [4096,
// 4096] fp32 5.0 -> 3.4, concatenate 19.8 -> 12.4, rms_norm 3.7 -> 2.7,
// layer_norm 4.8 -> 3.1 (bf16 2.7 -> 2.2), nothing slower.
size_t last_level_cache_bytes() {
  static const size_t bytes = [] {
    for (const char* f : {"/sys/devices/system/cpu/cpu0/cache/index3/size", "/sys/devices/system/cpu/cpu0/cache/index2/size"}) {
      if (std::FILE* fp = std::fopen(f, "r")) {
        unsigned long v = 0;
        char unit = 0;
        const int got = std::fscanf(fp, "%lu%c", &v, &unit);
        std::fclose(fp);
        if (got >= 1 && v > 0) return static_cast<size_t>(v) << (unit == 'K' ? 10 : unit == 'M' ? 20 : 0);
      }
    }
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return l3 > 0 ? static_cast<size_t>(l3) : size_t{32} << 20;
  }();
  return std::min(bytes, size_t{32} << 20);
}

template <typename To, typename From>
void cast_run(const From* src, To* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = convert<To>(src[i]);
}
}  // namespace

bool streaming_pays(size_t bytes) {
  size_t t = g_streaming_threshold.load(std::memory_order_relaxed);
  return bytes >= (t == SIZE_MAX ? last_level_cache_bytes() : t);
}

void set_streaming_threshold(size_t bytes) { g_streaming_threshold.store(bytes, std::memory_order_relaxed); }

void cast_contiguous(const void* src, Dtype s, void* dst, Dtype d, size_t n) {
  dispatch_copyable(s, [&](auto st) {
    using S = typename decltype(st)::type;
    dispatch_copyable(d, [&](auto dt) {
      using D = typename decltype(dt)::type;
      const S* in = static_cast<const S*>(src);
      D* out = static_cast<D*>(dst);
      if constexpr (std::is_same_v<S, D>) {
        // Streamed past the caches when large (stream_store.h): 29-30 ->
        // 46 GB/s for a 256 MB float32 copy on this project's 2-core VM
        // (rows into a wider output below: concatenate 28 -> 44-48).
        const bool stream = streaming_pays(2 * n * sizeof(S));
        parallel_for(static_cast<int64_t>(n), kGrain * 4, [&](int64_t b, int64_t e) {
          if (!stream) return (void)std::memcpy(out + b, in + b, (e - b) * sizeof(S));
          stream_bytes(out + b, in + b, (e - b) * sizeof(S));
          stream_fence();
        });
      } else {
        parallel_for(static_cast<int64_t>(n), kGrain,
                     [&](int64_t b, int64_t e) { cast_run(in + b, out + b, e - b); });
      }
    });
  });
}

namespace {

// Destination and source offsets of batch `o` of a [outer..., rows, cols]
// layout (every dimension but the last two).
template <typename L>
std::pair<int64_t, int64_t> outer_offsets(const L& l, int64_t o) {
  int64_t doff = 0, soff = 0, rem = o;
  for (int d = static_cast<int>(l.shape.size()) - 3; d >= 0; --d) {
    int64_t idx = rem % l.shape[d];
    rem /= l.shape[d];
    doff += idx * l.strides[0][d];
    soff += idx * l.strides[1][d];
  }
  return {doff, soff};
}

// Copies the last two dims of a layout whose source is contiguous along the
// second-to-last dim and the destination along the last (a transpose): in
// square tiles, so that both sides touch whole cache lines instead of one
// element per line on the strided side.
template <typename S, typename D>
void copy_transposed_tiles(const S* in, D* out, const layout::Layout<2>& l) {
  constexpr int64_t kTile = 64;
  int nd = static_cast<int>(l.shape.size());
  int64_t rows = l.shape[nd - 2], cols = l.shape[nd - 1];
  int64_t outer = 1;
  for (int d = 0; d < nd - 2; ++d) outer *= l.shape[d];
  int64_t row_tiles = (rows + kTile - 1) / kTile;
  int64_t ds_r = l.strides[0][nd - 2], ss_r = l.strides[1][nd - 2];
  int64_t ds_c = l.strides[0][nd - 1], ss_c = l.strides[1][nd - 1];
  parallel_for(outer * row_tiles, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t o = t / row_tiles, r0 = (t % row_tiles) * kTile;
      auto [doff, soff] = outer_offsets(l, o);
      int64_t r1 = std::min(rows, r0 + kTile);
      for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
        int64_t c1 = std::min(cols, c0 + kTile);
        for (int64_t r = r0; r < r1; ++r) {
          D* o_row = out + doff + r * ds_r;
          const S* i_row = in + soff + r * ss_r;
          if (ds_c == 1) {
            for (int64_t c = c0; c < c1; ++c) o_row[c] = convert<D>(i_row[c * ss_c]);
          } else {
            for (int64_t c = c0; c < c1; ++c) o_row[c * ds_c] = convert<D>(i_row[c * ss_c]);
          }
        }
      }
    }
  });
}

// The same transpose for 4-byte elements of one dtype with the AVX-512
// kernel (16x16 blocks in registers), with streaming stores when
// streaming_pays() and every 16-element run of the output is aligned.
void copy_transposed_32bit(const void* src, void* dst, const layout::Layout<2>& l) {
  int nd = static_cast<int>(l.shape.size());
  int64_t rows = l.shape[nd - 2], cols = l.shape[nd - 1];
  int64_t outer = 1;
  for (int d = 0; d < nd - 2; ++d) outer *= l.shape[d];
  // Bands of destination rows: long enough that source rows are read a
  // page at a time (1024 rows measured best on 8192^2: 1.3-1.5x memcpy's
  // time against 1.6-1.7x for 256 rows and 2.5x+ for 64), short enough
  // that every thread gets one, in whole 16-row blocks.
  int64_t per_thread = (outer == 1 ? (rows + cpu_threads() - 1) / cpu_threads() : rows);
  const int64_t band = std::clamp<int64_t>((per_thread + 15) / 16 * 16, 64, 1024);
  int64_t bands = (rows + band - 1) / band;
  bool aligned = reinterpret_cast<uintptr_t>(dst) % 64 == 0;
  for (int d = 0; d < nd - 1; ++d) aligned = aligned && l.strides[0][d] % 16 == 0;
  bool stream = aligned && streaming_pays(static_cast<size_t>(outer * rows * cols) * 8);
  const uint32_t* in = static_cast<const uint32_t*>(src);
  uint32_t* out = static_cast<uint32_t*>(dst);
  parallel_for(outer * bands, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t o = t / bands, r0 = (t % bands) * band;
      auto [doff, soff] = outer_offsets(l, o);
      transpose32_avx512(in + soff, l.strides[1][nd - 1], out + doff, l.strides[0][nd - 2], r0,
                         std::min(rows, r0 + band), cols, stream);
    }
  });
}

}  // namespace

void copy_strided(const void* src, Dtype s, const Shape& shape, const Strides& src_strides, void* dst, Dtype d,
                  const Strides& dst_strides) {
  if (shape_size(shape) == 0) return;
  layout::Layout<2> l = layout::collapse<2>(shape, {&dst_strides, &src_strides});
  int nd = static_cast<int>(l.shape.size());
  if (nd == 1 && l.strides[0][0] == 1 && l.strides[1][0] == 1) {
    // One contiguous run: split it across the threads.
    cast_contiguous(src, s, dst, d, static_cast<size_t>(l.shape[0]));
    return;
  }
  if (nd >= 2 && l.strides[0][nd - 1] == 1 && std::abs(l.strides[1][nd - 2]) == 1 &&
      std::abs(l.strides[1][nd - 1]) > 1 && l.shape[nd - 1] >= 16 && l.shape[nd - 2] >= 16) {
    if (s == d && size_of(s) == 4 && l.strides[1][nd - 2] == 1 && cpu_target() >= CpuTarget::avx512) {
      copy_transposed_32bit(src, dst, l);
      return;
    }
    dispatch_copyable(s, [&](auto st) {
      using S = typename decltype(st)::type;
      dispatch_copyable(d, [&](auto dt) {
        using D = typename decltype(dt)::type;
        copy_transposed_tiles(static_cast<const S*>(src), static_cast<D*>(dst), l);
      });
    });
    return;
  }
  dispatch_copyable(s, [&](auto st) {
    using S = typename decltype(st)::type;
    dispatch_copyable(d, [&](auto dt) {
      using D = typename decltype(dt)::type;
      const S* in = static_cast<const S*>(src);
      D* out = static_cast<D*>(dst);
      int64_t rows = layout::num_rows(l);
      int64_t inner = l.shape.back();
      const bool stream = streaming_pays(static_cast<size_t>(shape_size(shape)) * (sizeof(S) + sizeof(D)));
      parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(inner, 1)), [&](int64_t b, int64_t e) {
        for_each_row<2>(l, b, e, [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st2) {
          D* o = out + off[0];
          const S* i = in + off[1];
          if (st2[0] == 1 && st2[1] == 1) {
            if constexpr (std::is_same_v<S, D>) {
              if (stream) stream_bytes(o, i, n * sizeof(S));
              else std::memcpy(o, i, n * sizeof(S));
            } else {
              cast_run(i, o, n);
            }
          } else if (st2[0] == 1 && st2[1] == 0) {
            D v = convert<D>(i[0]);
            for (int64_t k = 0; k < n; ++k) o[k] = v;
          } else {
            for (int64_t k = 0; k < n; ++k) o[k * st2[0]] = convert<D>(i[k * st2[1]]);
          }
        });
        if (stream) stream_fence();
      });
    });
  });
}

void copy_to_row_major(const array& in, array& out) {
  const auto& id = *in.desc();
  copy_strided(detail::data_ptr(in), id.dtype, id.shape, id.strides, detail::data_ptr(out), out.dtype(),
               out.desc()->strides);
}

}  // namespace cpu

void Copy::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& in = inputs[0];
  const auto& id = *in.desc();
  if (view_if_contiguous_ && in.dtype() == out.dtype() && detail::is_row_contiguous(id.shape, id.strides)) {
    detail::share_buffer(out, in, row_major_strides(out.shape()), id.offset);
    return;
  }
  // Casting between types of one width works in place, element by element.
  if (size_of(id.dtype) == size_of(out.dtype()) && id.offset == 0 &&
      detail::is_row_contiguous(id.shape, id.strides)) {
    detail::allocate_or_donate(out, in, name());
  } else {
    detail::allocate(out, name());
  }
  if (out.desc()->buffer == id.buffer && id.dtype == out.dtype()) return;
  cpu::copy_to_row_major(in, out);
}

void Reshape::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& in = inputs[0];
  const auto& id = *in.desc();
  // A view when the input's strides can express the new shape; else a copy.
  if (out.size() == 0) {
    detail::share_buffer(out, in, row_major_strides(out.shape()), id.offset);
    return;
  }
  if (auto st = layout::reshape_strides(id.shape, id.strides, out.shape())) {
    detail::share_buffer(out, in, std::move(*st), id.offset);
    return;
  }
  detail::allocate(out, name());
  // Row-major order is the same in both shapes.
  cpu::copy_strided(detail::data_ptr(in), id.dtype, id.shape, id.strides, detail::data_ptr(out), out.dtype(),
                    row_major_strides(id.shape));
}

void Transpose::eval_cpu(const std::vector<array>& inputs, array& out) {
  const auto& id = *inputs[0].desc();
  Strides st(axes_.size());
  for (size_t i = 0; i < axes_.size(); ++i) st[i] = id.strides[axes_[i]];
  detail::share_buffer(out, inputs[0], std::move(st), id.offset);
}

void Broadcast::eval_cpu(const std::vector<array>& inputs, array& out) {
  const auto& id = *inputs[0].desc();
  int nd = out.ndim(), ni = static_cast<int>(id.shape.size());
  Strides st(nd, 0);
  for (int i = 0; i < ni; ++i) {
    int o = nd - ni + i;
    st[o] = id.shape[i] == 1 && out.shape()[o] != 1 ? 0 : id.strides[i];
  }
  detail::share_buffer(out, inputs[0], std::move(st), id.offset);
}

void Slice::eval_cpu(const std::vector<array>& inputs, array& out) {
  const auto& id = *inputs[0].desc();
  Strides st(id.strides.size());
  int64_t offset = id.offset;
  for (size_t i = 0; i < st.size(); ++i) {
    st[i] = id.strides[i] * step_[i];
    if (out.size() > 0) offset += static_cast<int64_t>(start_[i]) * id.strides[i];
  }
  detail::share_buffer(out, inputs[0], std::move(st), out.size() > 0 ? offset : id.offset);
}

void SliceUpdate::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& src = inputs[0];
  const array& upd = inputs[1];
  if (detail::is_row_contiguous(src.shape(), src.desc()->strides) && src.desc()->offset == 0) {
    detail::allocate_or_donate(out, src, name());
  } else {
    detail::allocate(out, name());
  }
  if (out.desc()->buffer != src.desc()->buffer) cpu::copy_to_row_major(src, out);
  // Write the update through a strided view of the output.
  const Strides& ost = out.desc()->strides;
  Strides view(ost.size());
  int64_t offset = 0;
  for (size_t i = 0; i < ost.size(); ++i) {
    view[i] = ost[i] * step_[i];
    offset += static_cast<int64_t>(start_[i]) * ost[i];
  }
  if (upd.size() == 0) return;
  char* base = detail::data_ptr(out) + offset * static_cast<int64_t>(out.itemsize());
  cpu::copy_strided(detail::data_ptr(upd), upd.dtype(), upd.shape(), upd.desc()->strides, base, out.dtype(), view);
}

}  // namespace kiln

namespace kiln::detail {
void host_cast(const void* src, Dtype s, void* dst, Dtype d, size_t n) { cpu::cast_contiguous(src, s, dst, d, n); }
}  // namespace kiln::detail
