// AVX-512 float reductions (see reduce_avx512.h). Built for x86-64-v3 like
// the rest of the library; every function here carries the AVX-512 target
// attribute and is reached only through cpu_target() checks in reduce.cpp.
//
// Rows: each row is folded into one 16-lane vector (four accumulators, so
// the loads are not serialised behind one add chain), and 16 row vectors
// are then reduced together by a transpose-like tree of shuffles. Short
// rows (64 floats) thus cost 4 loads and a sixteenth of a tree each instead
// of a full horizontal reduction per row.
// Columns: four input rows are combined in registers before they touch the
// accumulator row, which stays in L1/L2.
// Sums are blocked for precision: a lane (or a column) adds at most a few
// dozen values into a fresh accumulator, then the block's result joins a
// Kahan-compensated total. A single chain per lane across a 10^7-element
// row was off by 1.7e-4 (relative); blocked, the error is a few ulps. The
// compensation costs a few vector ops per block of 1024 elements (per 128
// rows for columns), so the loops stay bound by memory bandwidth.
#include "backend/cpu/reduce_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <limits>

#include "backend/cpu/avx512_target.h"

namespace kiln::cpu {
namespace {

// 16 values widened to float. The masked forms leave missing lanes
// unspecified (the callers blend in the identity); masked loads never
// touch memory of the missing lanes, so tails read nothing out of bounds.
KILN_AVX512 inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
KILN_AVX512 inline __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
KILN_AVX512 inline __m512 bf16_bits_to_float(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
KILN_AVX512 inline __m512 load16(const bfloat16_t* p) {
  return bf16_bits_to_float(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
KILN_AVX512 inline __m512 load16(const bfloat16_t* p, __mmask16 m) {
  return bf16_bits_to_float(_mm256_maskz_loadu_epi16(m, p));
}
KILN_AVX512 inline __m512 load16(const float16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
KILN_AVX512 inline __m512 load16(const float16_t* p, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

KILN_AVX512 inline __mmask16 first_lanes(int64_t n) { return static_cast<__mmask16>((1u << n) - 1); }

struct SumV {
  KILN_AVX512 static __m512 identity() { return _mm512_setzero_ps(); }
  KILN_AVX512 static __m512 op(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
};
// vmaxps returns its second operand when either is NaN; re-selecting b
// where b is NaN makes a NaN in either operand win, as MaxOp does.
struct MaxV {
  KILN_AVX512 static __m512 identity() { return _mm512_set1_ps(-std::numeric_limits<float>::infinity()); }
  KILN_AVX512 static __m512 op(__m512 a, __m512 b) {
    return _mm512_mask_mov_ps(_mm512_max_ps(b, a), _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q), b);
  }
};
struct MinV {
  KILN_AVX512 static __m512 identity() { return _mm512_set1_ps(std::numeric_limits<float>::infinity()); }
  KILN_AVX512 static __m512 op(__m512 a, __m512 b) {
    return _mm512_mask_mov_ps(_mm512_min_ps(b, a), _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q), b);
  }
};

template <typename Op, typename T>
KILN_AVX512 inline __m512 load_or_identity(const T* p, __mmask16 m) {
  return _mm512_mask_mov_ps(Op::identity(), m, load16(p, m));
}

// Elements per block of a row sum: 16 adds per lane in row_vector, 32 in
// four_row_vectors. A multiple of 64, so only a row's last block has a tail.
constexpr int64_t kSumBlock = 1024;
// Rows per block of a column sum: 32 adds per column (rows go in fours).
constexpr int64_t kColumnSumBlock = 128;

// sum += x with Kahan's compensation (the total is sum - comp). Where the
// sum is infinite the correction would be NaN; it is dropped instead, so an
// inf in the data still gives inf.
KILN_AVX512 inline void kahan_add(__m512& sum, __m512& comp, __m512 x) {
  __m512 y = _mm512_sub_ps(x, comp);
  __m512 t = _mm512_add_ps(sum, y);
  __mmask16 finite = _mm512_cmp_ps_mask(_mm512_abs_ps(t), _mm512_set1_ps(std::numeric_limits<float>::infinity()),
                                        _CMP_LT_OQ);
  comp = _mm512_maskz_mov_ps(finite, _mm512_sub_ps(_mm512_sub_ps(t, sum), y));
  sum = t;
}

// One row folded to 16 lanes.
template <typename Op, typename T>
KILN_AVX512 inline __m512 row_vector_block(const T* p, int64_t len) {
  __m512 a0 = Op::identity(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 64 <= len; i += 64) {
    a0 = Op::op(a0, load16(p + i));
    a1 = Op::op(a1, load16(p + i + 16));
    a2 = Op::op(a2, load16(p + i + 32));
    a3 = Op::op(a3, load16(p + i + 48));
  }
  for (; i + 16 <= len; i += 16) a0 = Op::op(a0, load16(p + i));
  if (i < len) a1 = Op::op(a1, load_or_identity<Op>(p + i, first_lanes(len - i)));
  return Op::op(Op::op(a0, a1), Op::op(a2, a3));
}

template <typename Op, typename T>
KILN_AVX512 inline __m512 row_vector(const T* p, int64_t len) {
  if constexpr (std::is_same_v<Op, SumV>) {
    if (len > kSumBlock) {
      __m512 sum = _mm512_setzero_ps(), comp = sum;
      for (int64_t b = 0; b < len; b += kSumBlock) {
        kahan_add(sum, comp, row_vector_block<Op>(p + b, std::min(kSumBlock, len - b)));
      }
      return _mm512_sub_ps(sum, comp);
    }
  }
  return row_vector_block<Op>(p, len);
}

// Reduces each of v[0..15] to one value; lane 4k + m of the result holds
// row k + 4m. Each level halves the lanes per row: 256-bit halves, then
// 128-bit quarters, then pairs, then single lanes.
template <typename Op>
KILN_AVX512 inline __m512 reduce_16_rows(__m512* v) {
  __m512 t[8], u[4], w[2];
  for (int i = 0; i < 8; ++i) {  // lanes 0-7: row 2i, 8-15: row 2i+1
    t[i] = Op::op(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                  _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
  }
  for (int i = 0; i < 4; ++i) {  // 128-bit chunk k: row 4i + k
    u[i] = Op::op(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0x88),
                  _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0xDD));
  }
  for (int i = 0; i < 2; ++i) {  // chunk k: two lanes of row 8i + k, two of row 8i + 4 + k
    __m512d a = _mm512_castps_pd(u[2 * i]), b = _mm512_castps_pd(u[2 * i + 1]);
    w[i] = Op::op(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  return Op::op(_mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                _mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// Four rows folded at once, their loads interleaved: four streams in
// flight instead of one. A single thread reading one stream gets ~7 GB/s
// here, four streams ~11 GB/s (the prefetchers run per stream).
template <typename Op, typename T>
KILN_AVX512 inline void four_row_vectors_block(const T* p, int64_t ld, int64_t len, __m512* v) {
  const T* q[4] = {p, p + ld, p + 2 * ld, p + 3 * ld};
  __m512 a[4][2];
  for (int k = 0; k < 4; ++k) a[k][0] = a[k][1] = Op::identity();
  int64_t i = 0;
  for (; i + 32 <= len; i += 32) {
    for (int k = 0; k < 4; ++k) {
      a[k][0] = Op::op(a[k][0], load16(q[k] + i));
      a[k][1] = Op::op(a[k][1], load16(q[k] + i + 16));
    }
  }
  for (int k = 0; k < 4; ++k) {
    if (i + 16 <= len) a[k][0] = Op::op(a[k][0], load16(q[k] + i));
    if (i + 16 < len) a[k][1] = Op::op(a[k][1], load_or_identity<Op>(q[k] + i + 16, first_lanes(len - i - 16)));
    else if (i + 16 > len && i < len) a[k][1] = Op::op(a[k][1], load_or_identity<Op>(q[k] + i, first_lanes(len - i)));
    v[k] = Op::op(a[k][0], a[k][1]);
  }
}

template <typename Op, typename T>
KILN_AVX512 inline void four_row_vectors(const T* p, int64_t ld, int64_t len, __m512* v) {
  if constexpr (std::is_same_v<Op, SumV>) {
    if (len > kSumBlock) {
      __m512 sum[4], comp[4], part[4];
      for (int k = 0; k < 4; ++k) sum[k] = comp[k] = _mm512_setzero_ps();
      for (int64_t b = 0; b < len; b += kSumBlock) {
        four_row_vectors_block<Op>(p + b, ld, std::min(kSumBlock, len - b), part);
        for (int k = 0; k < 4; ++k) kahan_add(sum[k], comp[k], part[k]);
      }
      for (int k = 0; k < 4; ++k) v[k] = _mm512_sub_ps(sum[k], comp[k]);
      return;
    }
  }
  four_row_vectors_block<Op>(p, ld, len, v);
}

// Rows of at least this many bytes are read four at a time.
constexpr int64_t kLongRowBytes = 2048;

// Reduces rows [r0, r0 + n), n <= 16, into out[r0..].
template <typename Op, typename T>
KILN_AVX512 inline void group_of_rows(const T* in, int64_t r0, int64_t n, int64_t len, int64_t ld, float* out) {
  // Row r sits in lane 4 (r % 4) + r / 4 of reduce_16_rows' result.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  __m512 v[16];
  int k = 0;
  if (len * static_cast<int64_t>(sizeof(T)) >= kLongRowBytes) {
    for (; k + 4 <= n; k += 4) four_row_vectors<Op>(in + (r0 + k) * ld, ld, len, v + k);
  }
  for (; k < 16; ++k) v[k] = k < n ? row_vector<Op>(in + (r0 + k) * ld, len) : Op::identity();
  _mm512_mask_storeu_ps(out + r0, first_lanes(n), _mm512_permutexvar_ps(order, reduce_16_rows<Op>(v)));
}

// Lane 0 = v's lanes reduced in reduce_16_rows' order and operand order
// (lane i with i + 8, then i + 4, i + 2, i + 1, the lower lane first): the
// same bits as that path, NaN and signed zeros included.
template <typename Op>
KILN_AVX512 inline float lane_reduce(__m512 v) {
  v = Op::op(v, _mm512_shuffle_f32x4(v, v, 0x4E));
  v = Op::op(v, _mm512_shuffle_f32x4(v, v, 0xB1));
  v = Op::op(v, _mm512_shuffle_ps(v, v, 0x4E));
  v = Op::op(v, _mm512_shuffle_ps(v, v, 0xB1));
  return _mm512_cvtss_f32(v);
}

// Short rows are one stream: cut the rows into 8 ranges and read them row
// by row in turn, so several streams advance together here too. On
// [2^20, 64] floats (2 threads, a quiet run): 22.5 ms with 4 ranges visited
// a 4 KiB group at a time (each visit starts a page cold), 16.8 ms with 4
// ranges row by row, 15 ms with 8. Each row is reduced to its value at once
// (lane_reduce): gathering 16 rows of each range for reduce_16_rows kept
// 128 vectors live, spilled to the stack every group (row sum [2^20, 64]:
// 0.70-0.84x a plain OpenMP loop in the same runs, now 0.87-1.14x).
constexpr int kRanges = 8;

template <typename Op, typename T>
KILN_AVX512 void short_rows_in_ranges(const T* in, int64_t rows, int64_t len, int64_t ld, float* out) {
  const int64_t per_range = (rows + kRanges - 1) / kRanges;
  for (int64_t k = 0; k < per_range; ++k) {
    for (int s = 0; s < kRanges; ++s) {
      const int64_t r = s * per_range + k;
      if (r < rows) out[r] = lane_reduce<Op>(row_vector<Op>(in + r * ld, len));
    }
  }
}

template <typename Op, typename T>
KILN_AVX512 void rows_typed(const T* in, int64_t rows, int64_t len, int64_t ld, float* out) {
  if (len * static_cast<int64_t>(sizeof(T)) < kLongRowBytes && rows >= 256) {
    return short_rows_in_ranges<Op>(in, rows, len, ld, out);
  }
  for (int64_t r0 = 0; r0 < rows; r0 += 16) group_of_rows<Op>(in, r0, std::min<int64_t>(16, rows - r0), len, ld, out);
}

template <typename Op, typename T>
KILN_AVX512 void columns_block(const T* in, int64_t rows, int64_t width, int64_t ld, float* acc) {
  int64_t i = 0;
  for (; i + 4 <= rows; i += 4) {
    const T* r0 = in + i * ld;
    const T* r1 = r0 + ld;
    const T* r2 = r1 + ld;
    const T* r3 = r2 + ld;
    int64_t j = 0;
    for (; j + 16 <= width; j += 16) {
      __m512 s = Op::op(Op::op(load16(r0 + j), load16(r1 + j)), Op::op(load16(r2 + j), load16(r3 + j)));
      _mm512_storeu_ps(acc + j, Op::op(_mm512_loadu_ps(acc + j), s));
    }
    if (j < width) {
      __mmask16 m = first_lanes(width - j);
      __m512 s = Op::op(Op::op(load_or_identity<Op>(r0 + j, m), load_or_identity<Op>(r1 + j, m)),
                        Op::op(load_or_identity<Op>(r2 + j, m), load_or_identity<Op>(r3 + j, m)));
      _mm512_mask_storeu_ps(acc + j, m, Op::op(_mm512_maskz_loadu_ps(m, acc + j), s));
    }
  }
  for (; i < rows; ++i) {
    const T* r = in + i * ld;
    int64_t j = 0;
    for (; j + 16 <= width; j += 16) _mm512_storeu_ps(acc + j, Op::op(_mm512_loadu_ps(acc + j), load16(r + j)));
    if (j < width) {
      __mmask16 m = first_lanes(width - j);
      _mm512_mask_storeu_ps(acc + j, m, Op::op(_mm512_maskz_loadu_ps(m, acc + j), load_or_identity<Op>(r + j, m)));
    }
  }
}

// Sums go through blocks of rows: each adds into `block` (zeroed here), which
// is then merged into acc with the compensation in comp.
template <typename Op, typename T>
KILN_AVX512 void columns_typed(const T* in, int64_t rows, int64_t width, int64_t ld, float* acc, float* comp,
                               float* block) {
  if constexpr (!std::is_same_v<Op, SumV>) {
    return columns_block<Op>(in, rows, width, ld, acc);
  } else {
    for (int64_t i0 = 0; i0 < rows; i0 += kColumnSumBlock) {
      std::fill(block, block + width, 0.0f);
      columns_block<Op>(in + i0 * ld, std::min(kColumnSumBlock, rows - i0), width, ld, block);
      int64_t j = 0;
      for (; j + 16 <= width; j += 16) {
        __m512 s = _mm512_loadu_ps(acc + j), c = _mm512_loadu_ps(comp + j);
        kahan_add(s, c, _mm512_loadu_ps(block + j));
        _mm512_storeu_ps(acc + j, s);
        _mm512_storeu_ps(comp + j, c);
      }
      if (j < width) {
        __mmask16 m = first_lanes(width - j);
        __m512 s = _mm512_maskz_loadu_ps(m, acc + j), c = _mm512_maskz_loadu_ps(m, comp + j);
        kahan_add(s, c, _mm512_maskz_loadu_ps(m, block + j));
        _mm512_mask_storeu_ps(acc + j, m, s);
        _mm512_mask_storeu_ps(comp + j, m, c);
      }
    }
  }
}

// Calls fn(Op{}, const T*) for the runtime op and dtype.
template <typename F>
void with_op_and_type(VecReduce op, Dtype dt, const void* in, F&& fn) {
  auto by_type = [&](auto o) {
    if (dt == float32) fn(o, static_cast<const float*>(in));
    else if (dt == bfloat16) fn(o, static_cast<const bfloat16_t*>(in));
    else fn(o, static_cast<const float16_t*>(in));
  };
  switch (op) {
    case VecReduce::sum: return by_type(SumV{});
    case VecReduce::max: return by_type(MaxV{});
    case VecReduce::min: return by_type(MinV{});
  }
}

}  // namespace

bool vec_reduce_supports(Dtype dt) { return dt == float32 || dt == bfloat16 || dt == float16; }

void reduce_rows_avx512(Dtype dt, const void* in, int64_t rows, int64_t len, int64_t ld, VecReduce op, float* out) {
  with_op_and_type(op, dt, in, [&](auto o, auto p) { rows_typed<decltype(o)>(p, rows, len, ld, out); });
}

void accumulate_columns_avx512(Dtype dt, const void* in, int64_t rows, int64_t width, int64_t ld, VecReduce op,
                               float* acc, float* comp, float* block) {
  with_op_and_type(op, dt, in,
                   [&](auto o, auto p) { columns_typed<decltype(o)>(p, rows, width, ld, acc, comp, block); });
}

}  // namespace kiln::cpu
