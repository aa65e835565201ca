// The FFT primitive on the CPU, with KissFFT (BSD-3; FFTW is GPL and
// excluded by DESIGN.md). A transform over several axes is one pass per
// axis; a pass runs the batch of 1-D transforms along its axis across the
// threads, each row gathered through the strides into a contiguous buffer,
// transformed out of place (KissFFT is re-entrant then) and scattered to the
// output, so no layout needs a copy first.
//
// Real transforms use the complex transform of the full row: KissFFT's real
// transform only takes even sizes, and numpy's irfft rule (the imaginary
// parts of the DC and Nyquist bins are ignored) is explicit when the full
// Hermitian spectrum is built here. Twice the work of a real transform; the
// floor of an FFT is its n log n flops, not bandwidth, for these sizes.
// Plans are cached per (size, direction) for the process.
#include <kiss_fft.h>

#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "backend/cpu/threading.h"
#include "core/array_desc.h"
#include "core/ops_util.h"
#include "core/primitives.h"

namespace kiln {
namespace {

static_assert(sizeof(kiss_fft_cpx) == sizeof(complex64_t), "KissFFT's complex type is two floats");

kiss_fft_cfg plan(int n, bool inverse) {
  static std::mutex mu;
  static std::map<std::pair<int, bool>, std::unique_ptr<void, void (*)(void*)>> plans;
  std::lock_guard<std::mutex> lock(mu);
  auto& p = plans.try_emplace({n, inverse}, nullptr, kiss_fft_free).first->second;
  if (!p) p.reset(kiss_fft_alloc(n, inverse ? 1 : 0, nullptr, nullptr));
  if (!p) throw Error("[fft] KissFFT could not allocate a plan of " + std::to_string(n) + " points");
  return static_cast<kiss_fft_cfg>(p.get());
}

enum class Pass { c2c, r2c, c2r };

// A strided view of one operand of a pass.
struct View {
  char* data;
  Dtype dtype;  // float32 or complex64
  Shape shape;
  Strides strides;
};

// One pass along `axis`: dst's rows are the transforms of src's rows.
// src and dst may be the same buffer (rows are disjoint, each gathered first).
void run_pass(const View& src, const View& dst, int axis, Pass kind, bool inverse) {
  const int n_in = src.shape[axis], n_out = dst.shape[axis];
  const int n = kind == Pass::c2r ? n_out : n_in;  // the transform's length
  kiss_fft_cfg cfg = n > 1 ? plan(n, inverse || kind == Pass::c2r) : nullptr;
  const float scale = inverse || kind == Pass::c2r ? 1.0f / static_cast<float>(n) : 1.0f;
  Shape other;
  Strides src_other, dst_other;
  for (int d = 0; d < static_cast<int>(src.shape.size()); ++d) {
    if (d == axis) continue;
    other.push_back(src.shape[d]);
    src_other.push_back(src.strides[d]);
    dst_other.push_back(dst.strides[d]);
  }
  const int64_t rows = shape_size(other);
  const int64_t s_step = src.strides[axis], d_step = dst.strides[axis];
  const bool src_complex = src.dtype == complex64, dst_complex = dst.dtype == complex64;
  cpu::parallel_for(rows, std::max<int64_t>(1, 4096 / std::max(n, 1)), [&](int64_t b, int64_t e) {
    std::vector<complex64_t> in(n), out(n);
    for (int64_t r = b; r < e; ++r) {
      int64_t so = 0, dof = 0, rem = r;
      for (int k = static_cast<int>(other.size()) - 1; k >= 0; --k) {
        int64_t i = rem % other[k];
        rem /= other[k];
        so += i * src_other[k];
        dof += i * dst_other[k];
      }
      if (src_complex) {
        const complex64_t* p = reinterpret_cast<const complex64_t*>(src.data) + so;
        for (int k = 0; k < n_in; ++k) in[k] = p[k * s_step];
      } else {
        const float* p = reinterpret_cast<const float*>(src.data) + so;
        for (int k = 0; k < n_in; ++k) in[k] = complex64_t(p[k * s_step], 0.0f);
      }
      if (kind == Pass::c2r) {
        // The full Hermitian spectrum of the n_in given bins (numpy's rule).
        in[0].im = 0.0f;
        if (n % 2 == 0) in[n / 2].im = 0.0f;
        for (int k = n_in; k < n; ++k) in[k] = complex64_t(in[n - k].re, -in[n - k].im);
      }
      if (cfg) {
        kiss_fft(cfg, reinterpret_cast<const kiss_fft_cpx*>(in.data()), reinterpret_cast<kiss_fft_cpx*>(out.data()));
      } else {
        out[0] = in[0];
      }
      if (dst_complex) {
        complex64_t* q = reinterpret_cast<complex64_t*>(dst.data) + dof;
        for (int k = 0; k < n_out; ++k) q[k * d_step] = complex64_t(out[k].re * scale, out[k].im * scale);
      } else {
        float* q = reinterpret_cast<float*>(dst.data) + dof;
        for (int k = 0; k < n_out; ++k) q[k * d_step] = out[k].re * scale;
      }
    }
  });
}

View view_of(const array& a) {
  return {detail::data_ptr(a), a.dtype(), a.shape(), a.desc()->strides};
}

}  // namespace

void FFT::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& in = inputs[0];
  detail::allocate(out, "fft");
  if (out.size() == 0) return;
  View src = view_of(in), dst = view_of(out);
  if (!real_) {
    for (size_t i = 0; i < axes_.size(); ++i) run_pass(i == 0 ? src : dst, dst, axes_[i], Pass::c2c, inverse_);
    return;
  }
  const int last = axes_.back();
  if (!inverse_) {
    run_pass(src, dst, last, Pass::r2c, false);
    for (size_t i = 0; i + 1 < axes_.size(); ++i) run_pass(dst, dst, axes_[i], Pass::c2c, false);
    return;
  }
  // irfftn: the complex axes first, into a row-major copy of the input's
  // shape, then the real axis into the output.
  if (axes_.size() > 1) {
    std::vector<complex64_t> tmp(in.size());
    View t{reinterpret_cast<char*>(tmp.data()), complex64, in.shape(), row_major_strides(in.shape())};
    for (size_t i = 0; i + 1 < axes_.size(); ++i) run_pass(i == 0 ? src : t, t, axes_[i], Pass::c2c, true);
    run_pass(t, dst, last, Pass::c2r, true);
    return;
  }
  run_pass(src, dst, last, Pass::c2r, true);
}

}  // namespace kiln
