// CPU kernel of fast::rope (kiln bench row D2 rope).
//
// x is viewed as rows [B, N, T] of D features; a row at position
// p = offset[b] + t rotates its first `dims` features pairwise by
// p * scale * inv_freq_i. The work is one read and one write of x, so the
// cost to avoid is the 2 * dims/2 sin/cos per row: a thread keeps the
// cos/sin of its current position (in double) and steps to the next
// position by one complex multiplication by the cos/sin of the per-position
// increment (exact to ~1e-13 over 10^5 steps), recomputing them directly
// only where a row does not follow its predecessor (a new head or batch).
// Rows of one decode step (T = 1) share their position and reuse the table.
// Where the rows of several heads (or batches) run over the same T
// positions, the cos/sin of each position are computed once (the same
// stepping, a task per run of positions) into a float table [T][dims/2]
// that every row then reads: the stepping costs ~250 cycles of double
// arithmetic per row, the rotation far less. `kiln bench` rope [1, 32,
// 4096, 128], old and new binaries alternating on the Zen 4/5 VM (session
// 25): bfloat16 5.6-8.9 -> 2.7-2.9 ms, float32 4.9-6.1 -> 4.7-4.9 ms. The
// rotation is a template on the layout, so the half-split loop vectorizes
// with unit stride; on AVX-512 the table rows run in rope_avx512.cpp.
// Tasks over the table are position-major (see eval_cpu). Session 41, Xeon
// VM, bfloat16 [1, 32, 4096, 128]: 3.9-4.2 ms (AVX2 rotation, row-major)
// -> 2.5-2.7 (AVX-512) -> 1.74-2.2 (position-major, 0.88-1.07 of the
// roofline); float32 stayed at 4.1-4.8.
// The rotation itself runs in float, rounded once to the output type.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/copy.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/fast_rows.h"
#include "backend/cpu/rope_avx512.h"
#include "backend/cpu/stream_store.h"
#include "backend/cpu/threading.h"
#include "core/primitives_fast_norm.h"

namespace kiln {
namespace {

constexpr int64_t kRopeGrain = 1 << 15;  // elements per task
constexpr int64_t kPositionBlock = 32;   // positions of the table a task's heads pass over together

// The angles' per-position increments (double) and what the rows share.
struct RopeAngles {
  std::vector<double> delta, cos_delta, sin_delta;
  float sign;  // -1 for the inverse rotation
};

// The cos / sin (as floats, sin times the sign) of consecutive positions
// pos0, pos0 + 1, ..., through `count` rows of cf / sf (row stride half):
// direct at pos0, then one complex multiplication per position.
void angles_run(const RopeAngles& a, int half, int64_t pos0, int64_t count, float* cf, float* sf) {
  std::vector<double> c(half), s(half);
  for (int i = 0; i < half; ++i) {
    const double theta = static_cast<double>(pos0) * a.delta[i];
    c[i] = std::cos(theta);
    s[i] = std::sin(theta);
  }
  for (int64_t t = 0; t < count; ++t) {
    if (t > 0) {
      for (int i = 0; i < half; ++i) {
        const double nc = c[i] * a.cos_delta[i] - s[i] * a.sin_delta[i];
        const double ns = s[i] * a.cos_delta[i] + c[i] * a.sin_delta[i];
        c[i] = nc;
        s[i] = ns;
      }
    }
    for (int i = 0; i < half; ++i) {
      cf[t * half + i] = static_cast<float>(c[i]);
      sf[t * half + i] = a.sign * static_cast<float>(s[i]);
    }
  }
}

// One row: its first dims features rotated by (cf, sf), the rest copied.
// The layout is a template argument so that the half-split loop (unit
// stride) vectorizes as such.
template <bool kTraditional, typename T>
inline void rotate_row(const T* xr, T* yr, int64_t d, int dims, const float* __restrict cf,
                       const float* __restrict sf) {
  const int half = dims / 2;
  constexpr int64_t step = kTraditional ? 2 : 1;
  const int64_t stride = kTraditional ? 1 : half;
  for (int i = 0; i < half; ++i) {
    const int64_t i1 = i * step, i2 = i1 + stride;
    const float x1 = cpu::Cvt<T>::load(xr, i1), x2 = cpu::Cvt<T>::load(xr, i2);
    // The multiply-adds spelled out, as rope_avx512.cpp computes them.
    yr[i1] = cpu::Cvt<T>::make(std::fma(x1, cf[i], -(x2 * sf[i])));
    yr[i2] = cpu::Cvt<T>::make(std::fma(x2, cf[i], x1 * sf[i]));
  }
  if (yr != xr) {
    for (int64_t k = dims; k < d; ++k) yr[k] = xr[k];
  }
}

// Rows of positions offset + (r % T_len), reading the shared table; with
// `stream`, each row through an L1 buffer and out with streaming stores.
template <bool kTraditional, typename T>
void rope_rows_table(const T* x, T* y, int64_t row_begin, int64_t row_end, int64_t T_len, int64_t d, int dims,
                     const float* cf, const float* sf, bool stream) {
  const int half = dims / 2;
  if (stream && x != y && d * static_cast<int64_t>(sizeof(T)) <= 4096) {
    alignas(64) T buf[4096 / sizeof(T)];
    for (int64_t r = row_begin; r < row_end; ++r) {
      const int64_t t = r % T_len;
      rotate_row<kTraditional>(x + r * d, buf, d, dims, cf + t * half, sf + t * half);
      cpu::stream_bytes(y + r * d, buf, d * sizeof(T));
    }
    cpu::stream_fence();
    return;
  }
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t t = r % T_len;
    rotate_row<kTraditional>(x + r * d, y + r * d, d, dims, cf + t * half, sf + t * half);
  }
}

template <typename T>
void rope_rows(const T* x, T* y, int64_t row_begin, int64_t row_end, int64_t per_batch, int64_t T_len, int64_t d,
               int dims, bool traditional, const int32_t* offsets, bool per_batch_offset, const RopeAngles& a) {
  const int half = dims / 2;
  const std::vector<double>& cos_delta = a.cos_delta;
  const std::vector<double>& sin_delta = a.sin_delta;
  const std::vector<double>& delta = a.delta;
  std::vector<double> c(half), s(half);
  std::vector<float> cf(half), sf(half);
  bool have = false;
  int64_t cur_pos = 0;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t b = r / per_batch;
    const int64_t t = r % T_len;
    const int64_t pos = static_cast<int64_t>(offsets[per_batch_offset ? b : 0]) + t;
    if (!have || pos != cur_pos) {
      if (have && pos == cur_pos + 1) {
        for (int i = 0; i < half; ++i) {
          const double nc = c[i] * cos_delta[i] - s[i] * sin_delta[i];
          const double ns = s[i] * cos_delta[i] + c[i] * sin_delta[i];
          c[i] = nc;
          s[i] = ns;
        }
      } else {
        for (int i = 0; i < half; ++i) {
          const double theta = static_cast<double>(pos) * delta[i];
          c[i] = std::cos(theta);
          s[i] = std::sin(theta);
        }
      }
      for (int i = 0; i < half; ++i) {
        cf[i] = static_cast<float>(c[i]);
        sf[i] = a.sign * static_cast<float>(s[i]);
      }
      have = true;
      cur_pos = pos;
    }
    if (traditional) {
      rotate_row<true>(x + r * d, y + r * d, d, dims, cf.data(), sf.data());
    } else {
      rotate_row<false>(x + r * d, y + r * d, d, dims, cf.data(), sf.data());
    }
  }
}

}  // namespace

void RoPE::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& x = inputs[0];
  cpu::RowMajorInput src = cpu::row_major_input_of(x, "rope");
  if (!src.owned && x.desc()->offset == 0) detail::allocate_or_donate(out, x, "rope");
  else detail::allocate(out, "rope");
  const array& off = inputs[1];
  const int32_t* offsets = reinterpret_cast<const int32_t*>(detail::data_ptr(off));
  const bool per_batch_offset = off.size() > 1;
  const Shape& shape = x.shape();
  const int64_t d = shape.back();
  const int64_t T_len = shape[shape.size() - 2];
  const int64_t rows = static_cast<int64_t>(x.size()) / d;
  const int64_t per_batch = rows / shape[0];
  const int half = dims_ / 2;
  // The angle increment per position of each pair, in double.
  RopeAngles a{std::vector<double>(half), std::vector<double>(half), std::vector<double>(half),
               forward_ ? 1.0f : -1.0f};
  const float* freqs = inputs.size() == 3 ? reinterpret_cast<const float*>(detail::data_ptr(inputs[2])) : nullptr;
  for (int i = 0; i < half; ++i) {
    const double inv = freqs ? 1.0 / static_cast<double>(freqs[i])
                             : std::exp(-static_cast<double>(i) * std::log(static_cast<double>(base_)) / half);
    a.delta[i] = static_cast<double>(scale_) * inv;
    a.cos_delta[i] = std::cos(a.delta[i]);
    a.sin_delta[i] = std::sin(a.delta[i]);
  }
  // One table for every row when all rows share the offsets and several
  // rows (heads, batches) run over each position.
  const bool table = !per_batch_offset && T_len > 1 && rows / T_len > 1;
  std::vector<float> cf, sf;
  if (table) {
    cf.resize(T_len * half);
    sf.resize(T_len * half);
    cpu::parallel_for(T_len, std::max<int64_t>(1, 512 / std::max(half, 1)), [&](int64_t t0, int64_t t1) {
      angles_run(a, half, static_cast<int64_t>(offsets[0]) + t0, t1 - t0, cf.data() + t0 * half,
                 sf.data() + t0 * half);
    });
  }
  // Rows out through an L1 buffer with streaming stores (stream_store.h)
  // for 4-byte types: float32 [1, 32, 4096, 128] 7.5 -> 4.4 ms on the Xeon
  // VM (session 38), 4% faster on the Zen 4/5 VM (session 25); 16-bit types
  // were level on the Xeon and 35% slower on the Zen.
  const bool stream = size_of(x.dtype()) == 4 && cpu::streaming_pays(2 * x.nbytes());
  const cpu::CpuTarget target = cpu::cpu_target();
  auto go = [&](auto tag) {
    using T = decltype(tag);
    const T* px = reinterpret_cast<const T*>(src.data);
    T* py = reinterpret_cast<T*>(detail::data_ptr(out));
    // Rows [b, e) of one run of positions, over the table.
    auto table_rows = [&](int64_t b, int64_t e) {
      if (target >= cpu::CpuTarget::avx512 &&
          cpu::rope_table_rows_avx512(x.dtype(),
                                      {px, py, b, e, T_len, d, dims_, traditional_, cf.data(), sf.data(), stream},
                                      target >= cpu::CpuTarget::avx512_bf16)) {
        return;
      }
      if (traditional_)
        rope_rows_table<true>(px, py, b, e, T_len, d, dims_, cf.data(), sf.data(), stream);
      else
        rope_rows_table<false>(px, py, b, e, T_len, d, dims_, cf.data(), sf.data(), stream);
    };
    if (!table) {
      cpu::parallel_for(rows, std::max<int64_t>(1, kRopeGrain / d), [&](int64_t b, int64_t e) {
        rope_rows<T>(px, py, b, e, per_batch, T_len, d, dims_, traditional_, offsets, per_batch_offset, a);
      });
      return;
    }
    // Position-major: a task takes a range of positions for every head and
    // batch, kPositionBlock positions at a time, so the table rows it reads
    // stay in L1 while every head passes over them. Tasks of whole rows
    // swept the table once per head, and at T = 4096, dims = 128 its cos and
    // sin (2 MB) do not stay in L2.
    const int64_t outer = rows / T_len;
    cpu::parallel_for(T_len, std::max<int64_t>(1, kRopeGrain / (d * outer)), [&](int64_t t0, int64_t t1) {
      for (int64_t tb = t0; tb < t1; tb += kPositionBlock) {
        const int64_t te = std::min(t1, tb + kPositionBlock);
        for (int64_t o = 0; o < outer; ++o) table_rows(o * T_len + tb, o * T_len + te);
      }
    });
  };
  switch (x.dtype()) {
    case float32: go(float{}); break;
    case float16: go(float16_t{}); break;
    case bfloat16: go(bfloat16_t{}); break;
    default: throw Error(std::string("[rope] no CPU kernel for ") + dtype_name(x.dtype()));
  }
}

}  // namespace kiln
