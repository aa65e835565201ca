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
// The rotation itself runs in float, rounded once to the output type.
#include <cmath>
#include <vector>

#include "backend/cpu/fast_rows.h"
#include "backend/cpu/threading.h"
#include "core/primitives_fast_norm.h"

namespace kiln {
namespace {

constexpr int64_t kRopeGrain = 1 << 15;  // elements per task

template <typename T>
void rope_rows(const T* x, T* y, int64_t row_begin, int64_t row_end, int64_t per_batch, int64_t T_len, int64_t d,
               int dims, bool traditional, bool forward, const int32_t* offsets, bool per_batch_offset,
               const std::vector<double>& delta, const std::vector<double>& cos_delta,
               const std::vector<double>& sin_delta) {
  const int half = dims / 2;
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
      const float sign = forward ? 1.0f : -1.0f;
      for (int i = 0; i < half; ++i) {
        cf[i] = static_cast<float>(c[i]);
        sf[i] = sign * static_cast<float>(s[i]);
      }
      have = true;
      cur_pos = pos;
    }
    const T* xr = x + r * d;
    T* yr = y + r * d;
    const int64_t stride = traditional ? 1 : half;
    const int64_t step = traditional ? 2 : 1;
    for (int i = 0; i < half; ++i) {
      const int64_t i1 = i * step, i2 = i1 + stride;
      const float x1 = cpu::Cvt<T>::load(xr, i1), x2 = cpu::Cvt<T>::load(xr, i2);
      yr[i1] = cpu::Cvt<T>::make(x1 * cf[i] - x2 * sf[i]);
      yr[i2] = cpu::Cvt<T>::make(x1 * sf[i] + x2 * cf[i]);
    }
    if (yr != xr) {
      for (int64_t k = dims; k < d; ++k) yr[k] = xr[k];
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
  std::vector<double> delta(half), cos_delta(half), sin_delta(half);
  const float* freqs = inputs.size() == 3 ? reinterpret_cast<const float*>(detail::data_ptr(inputs[2])) : nullptr;
  for (int i = 0; i < half; ++i) {
    const double inv = freqs ? 1.0 / static_cast<double>(freqs[i])
                             : std::exp(-static_cast<double>(i) * std::log(static_cast<double>(base_)) / half);
    delta[i] = static_cast<double>(scale_) * inv;
    cos_delta[i] = std::cos(delta[i]);
    sin_delta[i] = std::sin(delta[i]);
  }
  auto go = [&](auto tag) {
    using T = decltype(tag);
    const T* px = reinterpret_cast<const T*>(src.data);
    T* py = reinterpret_cast<T*>(detail::data_ptr(out));
    cpu::parallel_for(rows, std::max<int64_t>(1, kRopeGrain / d), [&](int64_t b, int64_t e) {
      rope_rows<T>(px, py, b, e, per_batch, T_len, d, dims_, traditional_, forward_, offsets, per_batch_offset, delta,
                   cos_delta, sin_delta);
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
