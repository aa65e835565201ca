// CPU kernels of fast::rms_norm and fast::layer_norm (kiln bench rows D2
// rms_norm, layer_norm).
//
// Both are bound by memory: a [4096, 4096] row block is read once from DRAM
// and written once. Each row is reduced in one pass (sum of squares; for
// layer_norm the sums of x - x[0] and of its square, shifted by the row's
// first element so that the variance does not cancel for rows whose mean
// is far from zero) and then normalized in a second pass that re-reads the
// row from L1/L2 (a 4096-wide fp32 row is 16 KiB); four rows are reduced
// together, their loads interleaved. Sixteen independent
// float accumulators let the compiler vectorize the reduction without
// reassociating a single sum. The row functions are inlined into two
// wrappers, one compiled for AVX-512 (KILN_AVX512) and one for the
// library's AVX2 baseline, picked by cpu_target() at run time. 16-bit rows
// are converted to float on load and accumulated in float.
//
// Rounding follows the fallback: the normalized value is rounded to the
// output type before the weight multiplies it (and the bias is added).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/avx512_target.h"  // GCC 12 warnings of the AVX-512 headers
#include "backend/cpu/copy.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/fast_rows.h"
#include "backend/cpu/stream_store.h"
#include "backend/cpu/threading.h"
#include "backend/cpu/vec_math_avx512.h"
#include "core/primitives_fast_norm.h"

namespace kiln {
namespace {


constexpr int kLanes = 16;
// Rows per task: enough work per thread start for narrow rows.
constexpr int64_t kNormGrain = 1 << 15;

template <typename T>
__attribute__((always_inline)) inline float load_f(const T* p, int64_t i) {
  return cpu::Cvt<T>::load(p, i);
}
// v rounded to T and back (the fallback's rounding of an intermediate).
template <typename T>
__attribute__((always_inline)) inline float round_to(float v) {
  const T t = cpu::Cvt<T>::make(v);
  return load_f(&t, 0);
}

// Per-row sums of R rows read together: the reduction pass is the one
// that reads DRAM, and a thread reading four streams at once gets far more
// bandwidth than reading one (reduce_avx512.cpp measured ~1.5x here).
// kLayer: sums of x - shift and of its square (shift: the row's first
// element); else the sum of squares alone (in s2).
template <bool kLayer, int R, typename T>
__attribute__((always_inline)) inline void row_sums(const T* x, int64_t d, float* s1, float* s2) {
  float a1[R][kLanes] = {}, a2[R][kLanes] = {};
  float shift[R];
  for (int r = 0; r < R; ++r) shift[r] = kLayer ? load_f(x + r * d, 0) : 0.0f;
  int64_t k = 0;
  for (; k + kLanes <= d; k += kLanes) {
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < kLanes; ++j) {
        const float v = load_f(x + r * d, k + j) - shift[r];
        if (kLayer) a1[r][j] += v;
        a2[r][j] += v * v;
      }
    }
  }
  for (int j = 0; k < d; ++k, ++j) {
    for (int r = 0; r < R; ++r) {
      const float v = load_f(x + r * d, k) - shift[r];
      if (kLayer) a1[r][j] += v;
      a2[r][j] += v * v;
    }
  }
  for (int r = 0; r < R; ++r) {
    float t1 = 0, t2 = 0;
    for (int j = 0; j < kLanes; ++j) {
      t1 += a1[r][j];
      t2 += a2[r][j];
    }
    s1[r] = t1;
    s2[r] = t2;
  }
}

template <typename T>
__attribute__((always_inline)) inline void rms_write(const T* xr, const T* w, T* yr, int64_t d, float ss, float eps) {
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
  if (w) {
    for (int64_t k = 0; k < d; ++k) {
      yr[k] = cpu::Cvt<T>::make(round_to<T>(load_f(xr, k) * inv) * load_f(w, k));
    }
  } else {
    for (int64_t k = 0; k < d; ++k) yr[k] = cpu::Cvt<T>::make(load_f(xr, k) * inv);
  }
}

template <typename T>
__attribute__((always_inline)) inline void layer_write(const T* xr, const T* w, const T* b, T* yr, int64_t d,
                                                       float s1, float s2, float eps) {
  const float n = static_cast<float>(d);
  const float mean_shifted = s1 / n;
  const float var = std::max(0.0f, s2 / n - mean_shifted * mean_shifted);
  const float mean = mean_shifted + load_f(xr, 0);
  const float inv = 1.0f / std::sqrt(var + eps);
  for (int64_t k = 0; k < d; ++k) {
    float v = round_to<T>((load_f(xr, k) - mean) * inv);
    // Each step rounds to T as the fallback's ops do.
    if (w) v = round_to<T>(v * load_f(w, k));
    if (b) v = v + load_f(b, k);
    yr[k] = cpu::Cvt<T>::make(v);
  }
}

constexpr int kGroup = 4;

template <typename T>
__attribute__((always_inline)) inline void rms_rows(const T* x, const T* w, T* y, int64_t rows, int64_t d,
                                                    float eps) {
  float s1[kGroup], s2[kGroup];
  int64_t r = 0;
  for (; r + kGroup <= rows; r += kGroup) {
    row_sums<false, kGroup>(x + r * d, d, s1, s2);
    for (int i = 0; i < kGroup; ++i) rms_write(x + (r + i) * d, w, y + (r + i) * d, d, s2[i], eps);
  }
  for (; r < rows; ++r) {
    row_sums<false, 1>(x + r * d, d, s1, s2);
    rms_write(x + r * d, w, y + r * d, d, s2[0], eps);
  }
}

template <typename T>
__attribute__((always_inline)) inline void layer_rows(const T* x, const T* w, const T* b, T* y, int64_t rows,
                                                      int64_t d, float eps) {
  float s1[kGroup], s2[kGroup];
  int64_t r = 0;
  for (; r + kGroup <= rows; r += kGroup) {
    row_sums<true, kGroup>(x + r * d, d, s1, s2);
    for (int i = 0; i < kGroup; ++i) layer_write(x + (r + i) * d, w, b, y + (r + i) * d, d, s1[i], s2[i], eps);
  }
  for (; r < rows; ++r) {
    row_sums<true, 1>(x + r * d, d, s1, s2);
    layer_write(x + r * d, w, b, y + r * d, d, s1[0], s2[0], eps);
  }
}

// ---- AVX-512, written out ----
// The auto-vectorized loops above measured 0.48 (fp32) and 0.18 (bf16) of
// STREAM for rms_norm [4096, 4096] on the Zen 5 machine (GCC assembled the
// 16-bit conversions lane by lane and kept the four-row reduction at 256
// bits). The same arithmetic in the same order, with 512-bit loads,
// conversions and stores spelled out: one accumulator vector per row holds
// exactly the sixteen lane sums above, summed in the same order, so the
// results are bit for bit those of the portable path.
#define KILN_V512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
namespace v512 {

KILN_V512 inline __mmask16 tail_mask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }
// The lanes of the vector at k of a d-long row: all 16, or the tail's.
KILN_V512 inline __mmask16 lanes_at(int64_t k, int64_t d) {
  return d - k >= kLanes ? static_cast<__mmask16>(0xffff) : tail_mask(d - k);
}

KILN_V512 inline __m512 load(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
KILN_V512 inline __m512 load(const bfloat16_t* p, __mmask16 m) {
  __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
KILN_V512 inline __m512 load(const float16_t* p, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

// x + 0x7fff + (bit 16 of x): round to nearest even in the high half. In the
// write passes every NaN is a quiet one with a zero low half (widened from
// 16 bits, or the default NaN of an operation on those), so the add neither
// carries out of the low half nor clears the quiet bit: the high half is
// then exactly Cvt<bfloat16_t>::make's result, NaN included, and no
// denormal check is needed (vcvtneps2bf16 reads denormals as zero). Used
// for the round trips to bf16 and back inside the passes (layer_norm bf16
// [4096, 4096] 3.83-3.87 -> 3.25-3.46 ms, rms_norm 2.44-2.54 -> 2.05-2.32
// ms, alternating in one process, outputs bit-identical; session 25). The
// final stores keep to_bf16_bits: this rounding and a vpmovdw there measured
// 4-8% slower than vcvtneps2bf16 with its denormal test.
KILN_V512 inline __m512i bf16_rounding_add(__m512 v) {
  const __m512i x = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  return _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb);
}
// Cvt<T>::make on sixteen floats: round to nearest even, NaN kept quiet.
// kNe: AVX512-BF16's vcvtneps2bf16, its denormal lanes redone with the
// integer rounding, so the bits are the same either way (vec_math_avx512.inc).
template <bool kNe>
KILN_V512 inline __m256i to_bf16_bits(__m512 v) {
  if constexpr (kNe)
    return cpu::vec::to_bf16_native(v);
  else
    return cpu::vec::to_bf16(v);
}
template <bool kNe>
KILN_V512 inline void store(float* p, __m512 v, __mmask16 m) { _mm512_mask_storeu_ps(p, m, v); }
template <bool kNe>
KILN_V512 inline void store(bfloat16_t* p, __m512 v, __mmask16 m) { _mm256_mask_storeu_epi16(p, m, to_bf16_bits<kNe>(v)); }
template <bool kNe>
KILN_V512 inline void store(float16_t* p, __m512 v, __mmask16 m) {
  _mm256_mask_storeu_epi16(p, m, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
// The write passes ask L2 for the next group's rows (pf, nullptr for none)
// one 64-byte line at a time as they go: the next reduction pass then
// finds them there instead of waiting on DRAM while the core has nothing
// else to do (the write passes themselves read L1/L2 only).
template <typename T>
KILN_V512 inline void prefetch_next(const T* pf, int64_t k) {
  if (pf && (k * static_cast<int64_t>(sizeof(T))) % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(pf + k), _MM_HINT_T1);
}

// The write passes' store: kNt (float32 outputs larger than the caches)
// streams whole aligned vectors past the caches. A normal store first reads
// the line it writes (a third of the traffic of a norm); the measured gain
// on [4096, 4096] float32 was 20-23 -> 28-34 GB/s. A 16-bit vector is half
// a line (measured slower streamed): bf16 streams whole lines in write_row,
// and this store keeps the normal one for 16-bit types.
template <bool kNe, bool kNt, typename T>
KILN_V512 inline void store_out(T* p, __m512 v, __mmask16 m) {
  if constexpr (kNt && std::is_same_v<T, float>) {
    if (m == 0xffff && (reinterpret_cast<uintptr_t>(p) & 63) == 0) return _mm512_stream_ps(p, v);
  }
  store<kNe>(p, v, m);
}

// v rounded to T and back.
template <typename T, bool kNe>
KILN_V512 inline __m512 round_to(__m512 v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, bfloat16_t>) {
    return _mm512_castsi512_ps(_mm512_and_si512(bf16_rounding_add(v), _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  } else {
    return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
}

// The lanes of acc summed as row_sums sums them: lane 0 first.
KILN_V512 inline float lane_sum(__m512 acc) {
  alignas(64) float a[kLanes];
  _mm512_store_ps(a, acc);
  float t = 0;
  for (int j = 0; j < kLanes; ++j) t += a[j];
  return t;
}

template <bool kLayer, int R, typename T>
KILN_V512 inline void row_sums(const T* x, int64_t d, float* s1, float* s2) {
  __m512 a1[R], a2[R], shift[R];
  for (int r = 0; r < R; ++r) {
    a1[r] = a2[r] = _mm512_setzero_ps();
    shift[r] = _mm512_set1_ps(kLayer ? load_f(x + r * d, 0) : 0.0f);
  }
  int64_t k = 0;
  for (; k + kLanes <= d; k += kLanes) {
    for (int r = 0; r < R; ++r) {
      __m512 v = load(x + r * d + k, 0xffff);
      if (kLayer) {
        v = _mm512_sub_ps(v, shift[r]);
        a1[r] = _mm512_add_ps(a1[r], v);
      }
      a2[r] = _mm512_fmadd_ps(v, v, a2[r]);
    }
  }
  if (k < d) {
    const __mmask16 m = tail_mask(d - k);
    for (int r = 0; r < R; ++r) {
      __m512 v = load(x + r * d + k, m);
      if (kLayer) {
        v = _mm512_maskz_sub_ps(m, v, shift[r]);
        a1[r] = _mm512_add_ps(a1[r], v);
      }
      a2[r] = _mm512_fmadd_ps(v, v, a2[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    s1[r] = kLayer ? lane_sum(a1[r]) : 0.0f;
    s2[r] = lane_sum(a2[r]);
  }
}

// Thirty-two bf16 values of two write-pass vectors as one 64-byte line
// (vcvtne2ps2bf16; the integer rounding where either holds a denormal).
template <bool kNe>
KILN_V512 inline __m512i to_bf16_line(__m512 lo, __m512 hi) {
  if constexpr (kNe) {
    if (!(_mm512_fpclass_ps_mask(lo, 0x20) | _mm512_fpclass_ps_mask(hi, 0x20)))
      return _mm512_castps_si512(reinterpret_cast<__m512>(_mm512_cvtne2ps_pbh(hi, lo)));
  }
  return _mm512_inserti64x4(_mm512_castsi256_si512(cpu::vec::to_bf16(lo)), cpu::vec::to_bf16(hi), 1);
}

// One write pass over a row: y[k] = value(k, lanes) for every vector of
// the row, asking L2 for the next group's row (pf) as it goes. kNt streams
// whole lines past the caches: float32 a vector at a time; bf16 two vectors
// at a time, converted into one line (a bf16 vector is half a line, and
// half lines streamed measured slower than normal stores; a normal store
// first reads the line it writes, a third of a norm's traffic).
// (Functor structs, not lambdas: a lambda would not inherit the target
// attribute.)
template <bool kNe, bool kNt, typename T, typename V>
KILN_V512 inline void write_row(T* yr, int64_t d, const T* pf, const V& value) {
  int64_t k = 0;
  if constexpr (kNt && std::is_same_v<T, bfloat16_t>) {
    if ((reinterpret_cast<uintptr_t>(yr) & 63) == 0) {
      for (; k + 2 * kLanes <= d; k += 2 * kLanes) {
        prefetch_next(pf, k);
        prefetch_next(pf, k + kLanes);
        const __m512 lo = value(k, 0xffff), hi = value(k + kLanes, 0xffff);
        _mm512_stream_si512(reinterpret_cast<__m512i*>(yr + k), to_bf16_line<kNe>(lo, hi));
      }
    }
  }
  for (; k < d; k += kLanes) {
    prefetch_next(pf, k);
    const __mmask16 m = lanes_at(k, d);
    store_out<kNe, kNt>(yr + k, value(k, m), m);
  }
}

template <typename T, bool kNe>
struct RmsValue {
  const T* xr;
  const float* w;
  __m512 inv;
  KILN_V512 __m512 operator()(int64_t k, __mmask16 m) const {
    __m512 v = _mm512_mul_ps(load(xr + k, m), inv);
    if (w) v = _mm512_mul_ps(round_to<T, kNe>(v), load(w + k, m));
    return v;
  }
};

template <typename T, bool kNe, bool kNt>
KILN_V512 inline void rms_write(const T* xr, const float* w, T* yr, int64_t d, float ss, float eps, const T* pf) {
  const __m512 inv = _mm512_set1_ps(1.0f / std::sqrt(ss / static_cast<float>(d) + eps));
  write_row<kNe, kNt>(yr, d, pf, RmsValue<T, kNe>{xr, w, inv});
}

template <typename T, bool kNe>
struct LayerValue {
  const T* xr;
  const float *w, *b;
  __m512 mean, inv;
  KILN_V512 __m512 operator()(int64_t k, __mmask16 m) const {
    __m512 v = round_to<T, kNe>(_mm512_mul_ps(_mm512_sub_ps(load(xr + k, m), mean), inv));
    if (w) v = round_to<T, kNe>(_mm512_mul_ps(v, load(w + k, m)));
    if (b) v = _mm512_add_ps(v, load(b + k, m));
    return v;
  }
};

template <typename T, bool kNe, bool kNt>
KILN_V512 inline void layer_write(const T* xr, const float* w, const float* b, T* yr, int64_t d, float t1, float t2,
                                    float eps, const T* pf) {
  const float n = static_cast<float>(d);
  const float mean_shifted = t1 / n;
  const float var = std::max(0.0f, t2 / n - mean_shifted * mean_shifted);
  const __m512 mean = _mm512_set1_ps(mean_shifted + load_f(xr, 0));
  const __m512 inv = _mm512_set1_ps(1.0f / std::sqrt(var + eps));
  write_row<kNe, kNt>(yr, d, pf, LayerValue<T, kNe>{xr, w, b, mean, inv});
}

// The weight (or bias) as float32, once per call: the write passes then
// multiply by it straight from memory instead of widening 16-bit values
// every row (two instructions per vector). The same values, so the same bits.
template <typename T>
KILN_V512 inline const float* as_float(const T* v, int64_t d, std::vector<float>& buf) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    if (!v) return nullptr;
    buf.resize(static_cast<size_t>(d));
    for (int64_t k = 0; k < d; k += kLanes) {
      const __mmask16 m = lanes_at(k, d);
      _mm512_mask_storeu_ps(buf.data() + k, m, load(v + k, m));
    }
    return buf.data();
  }
}

template <typename T, bool kNe, bool kNt>
KILN_V512 void rms_rows(const T* x, const T* wt, T* y, int64_t rows, int64_t d, float eps) {
  std::vector<float> wbuf;
  const float* w = as_float(wt, d, wbuf);
  float s1[kGroup], s2[kGroup];
  int64_t r = 0;
  for (; r + kGroup <= rows; r += kGroup) {
    row_sums<false, kGroup>(x + r * d, d, s1, s2);
    const bool more = r + 2 * kGroup <= rows;
    for (int i = 0; i < kGroup; ++i)
      rms_write<T, kNe, kNt>(x + (r + i) * d, w, y + (r + i) * d, d, s2[i], eps, more ? x + (r + kGroup + i) * d : nullptr);
  }
  for (; r < rows; ++r) {
    row_sums<false, 1>(x + r * d, d, s1, s2);
    rms_write<T, kNe, kNt>(x + r * d, w, y + r * d, d, s2[0], eps, nullptr);
  }
  if constexpr (kNt) cpu::stream_fence();
}

template <typename T, bool kNe, bool kNt>
KILN_V512 void layer_rows(const T* x, const T* wt, const T* bt, T* y, int64_t rows, int64_t d, float eps) {
  std::vector<float> wbuf, bbuf;
  const float *w = as_float(wt, d, wbuf), *b = as_float(bt, d, bbuf);
  float s1[kGroup], s2[kGroup];
  int64_t r = 0;
  for (; r + kGroup <= rows; r += kGroup) {
    row_sums<true, kGroup>(x + r * d, d, s1, s2);
    const bool more = r + 2 * kGroup <= rows;
    for (int i = 0; i < kGroup; ++i)
      layer_write<T, kNe, kNt>(x + (r + i) * d, w, b, y + (r + i) * d, d, s1[i], s2[i], eps,
                               more ? x + (r + kGroup + i) * d : nullptr);
  }
  for (; r < rows; ++r) {
    row_sums<true, 1>(x + r * d, d, s1, s2);
    layer_write<T, kNe, kNt>(x + r * d, w, b, y + r * d, d, s1[0], s2[0], eps, nullptr);
  }
  if constexpr (kNt) cpu::stream_fence();
}

}  // namespace v512

template <typename T>
void rms_rows_avx2(const T* x, const T* w, T* y, int64_t rows, int64_t d, float eps) {
  rms_rows(x, w, y, rows, d, eps);
}
template <typename T>
void layer_rows_avx2(const T* x, const T* w, const T* b, T* y, int64_t rows, int64_t d, float eps) {
  layer_rows(x, w, b, y, rows, d, eps);
}

// The weight or bias input, or nullptr for the 0-d "absent" placeholder.
// The op made them contiguous.
template <typename T>
const T* affine_ptr(const array& a) {
  return a.ndim() == 0 ? nullptr : reinterpret_cast<const T*>(detail::data_ptr(a));
}

// Calls f(kNe, kNt) with the write passes' two flags (vcvtneps2bf16 where
// the CPU has it; streaming stores) as compile-time constants.
template <typename F>
void with_write_flags(bool ne, bool nt, F&& f) {
  if (ne) nt ? f(std::true_type{}, std::true_type{}) : f(std::true_type{}, std::false_type{});
  else nt ? f(std::false_type{}, std::true_type{}) : f(std::false_type{}, std::false_type{});
}

// Allocates out (in place over x where x may be overwritten) and runs
// fn(x, y, rows, d) over row blocks on all cores for each float type.
template <typename F>
void run_norm(const array& x, array& out, const char* op, F&& fn) {
  cpu::RowMajorInput src = cpu::row_major_input_of(x, op);
  if (!src.owned && x.desc()->offset == 0) detail::allocate_or_donate(out, x, op);
  else detail::allocate(out, op);
  const int64_t d = x.shape().back();
  const int64_t rows = static_cast<int64_t>(x.size()) / d;
  const bool avx512 = cpu::cpu_target() >= cpu::CpuTarget::avx512;
  const bool bf16 = cpu::cpu_target() >= cpu::CpuTarget::avx512_bf16;
  // Outputs past the last-level cache: streaming stores (v512 write_row),
  // float32 and, with vcvtne2ps2bf16 to fill whole lines, bfloat16.
  const bool stream = (out.dtype() == float32 || (out.dtype() == bfloat16 && bf16)) &&
                      cpu::streaming_pays(x.nbytes() + out.nbytes());
  auto go = [&](auto tag) {
    using T = decltype(tag);
    const T* px = reinterpret_cast<const T*>(src.data);
    T* py = reinterpret_cast<T*>(detail::data_ptr(out));
    cpu::parallel_for(rows, std::max<int64_t>(1, kNormGrain / d), [&](int64_t b, int64_t e) {
      fn(tag, avx512, bf16, stream, px + b * d, py + b * d, e - b, d);
    });
  };
  switch (x.dtype()) {
    case float32: go(float{}); break;
    case float16: go(float16_t{}); break;
    case bfloat16: go(bfloat16_t{}); break;
    default: throw Error(std::string("[") + op + "] no CPU kernel for " + dtype_name(x.dtype()));
  }
}

}  // namespace

void RMSNorm::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& w = inputs[1];
  run_norm(inputs[0], out, "rms_norm", [&](auto tag, bool avx512, bool bf16, bool stream, const auto* x, auto* y,
                                           int64_t rows, int64_t d) {
    using T = decltype(tag);
    const T* pw = affine_ptr<T>(w);
    if (!avx512) return rms_rows_avx2<T>(x, pw, y, rows, d, eps_);
    with_write_flags(bf16, stream, [&](auto ne, auto nt) { v512::rms_rows<T, ne, nt>(x, pw, y, rows, d, eps_); });
  });
}

void AddRMSNorm::eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  const char* op = "add_rms_norm";
  const cpu::RowMajorInput x = cpu::row_major_input_of(inputs[0], op);
  const cpu::RowMajorInput r = cpu::row_major_input_of(inputs[1], op);
  array& h = outputs[0];
  detail::allocate(h, op);
  const int64_t n = static_cast<int64_t>(h.size());
  auto go = [&](auto tag) {
    using T = decltype(tag);
    const T* px = reinterpret_cast<const T*>(x.data);
    const T* pr = reinterpret_cast<const T*>(r.data);
    T* ph = reinterpret_cast<T*>(detail::data_ptr(h));
    // h = x + r rounded to T, as the add; then h's rows are normalized.
    cpu::parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) ph[k] = cpu::Cvt<T>::make(load_f(px, k) + load_f(pr, k));
    });
  };
  switch (h.dtype()) {
    case float32: go(float{}); break;
    case float16: go(float16_t{}); break;
    case bfloat16: go(bfloat16_t{}); break;
    default: throw Error(std::string("[") + op + "] no CPU kernel for " + dtype_name(h.dtype()));
  }
  RMSNorm norm(stream(), fallback_, eps_);
  norm.eval_cpu({h, inputs[2]}, outputs[1]);
}

void LayerNorm::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& w = inputs[1];
  const array& b = inputs[2];
  run_norm(inputs[0], out, "layer_norm", [&](auto tag, bool avx512, bool bf16, bool stream, const auto* x, auto* y,
                                             int64_t rows, int64_t d) {
    using T = decltype(tag);
    const T* pw = affine_ptr<T>(w);
    const T* pb = affine_ptr<T>(b);
    if (!avx512) return layer_rows_avx2<T>(x, pw, pb, y, rows, d, eps_);
    with_write_flags(bf16, stream, [&](auto ne, auto nt) { v512::layer_rows<T, ne, nt>(x, pw, pb, y, rows, d, eps_); });
  });
}

}  // namespace kiln
