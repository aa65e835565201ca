// The ceilings of the roofline, measured on the machine the bench runs on:
// STREAM-style copy and triad for memory bandwidth, and FMA / BF16 dot-product
// (and AMX tile) loops that never touch memory for the compute peaks.
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <memory>

#include "bench.h"

namespace kiln::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct FreeDeleter {
  void operator()(double* p) const { std::free(p); }
};
using DoubleBuffer = std::unique_ptr<double, FreeDeleter>;

DoubleBuffer alloc_doubles(size_t n) {
  size_t bytes = (n * sizeof(double) + 63) / 64 * 64;
  return DoubleBuffer(static_cast<double*>(std::aligned_alloc(64, bytes)));
}

// Per-array size for STREAM: far past the last-level cache, as STREAM's rules
// ask (4x), so the numbers are DRAM's and not the cache's; bounded so that
// the three arrays fit comfortably in memory. --quick only checks that the
// machinery runs, so it uses arrays that stay in the L3 like its drills do.
size_t stream_elements(bool quick) {
  if (quick) return size_t{1} << 20;  // 8 MiB per array
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  size_t target = std::max<size_t>(l3 > 0 ? 4 * static_cast<size_t>(l3) : 0, size_t{256} << 20);
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) target = std::min(target, static_cast<size_t>(pages) * page / 12);
  target = std::min(target, size_t{1} << 30);
  return target / sizeof(double);
}

struct StreamResult {
  double copy_gbps, triad_gbps, array_bytes;
  double copy_nt_gbps = 0, triad_nt_gbps = 0;
  double read_gbps = 0;
};

// Best seconds of `trials` runs of fn, or more runs until `min_seconds` passed.
template <typename Fn>
double best_seconds(Fn&& fn, int trials, double min_seconds) {
  double best = 1e30;
  const auto start = Clock::now();
  for (int t = 0; t < trials || seconds_since(start) < min_seconds; ++t) {
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

StreamResult measure_stream(int threads, bool quick) {
  const size_t n = stream_elements(quick);
  auto a = alloc_doubles(n), b = alloc_doubles(n), c = alloc_doubles(n);
  double* pa = a.get();
  double* pb = b.get();
  double* pc = c.get();
  // First touch from the same static schedule as the kernels, so each
  // thread's pages sit where that thread reads them.
#pragma omp parallel for schedule(static) num_threads(threads)
  for (size_t i = 0; i < n; ++i) {
    pa[i] = 1.0;
    pb[i] = 2.0;
    pc[i] = 0.0;
  }
  const double scalar = 3.0;
  double copy_bytes_per_s = 0, triad_bytes_per_s = 0, copy_nt = 0, triad_nt = 0, read = 0;
  if (!quick) {
    // STREAM proper: all threads on one loop, timed together; the best trial
    // is the ceiling. DRAM bandwidth is shared, so it is only measured this way.
    const double copy_s = best_seconds([&] {
#pragma omp parallel for schedule(static) num_threads(threads)
      for (size_t i = 0; i < n; ++i) pc[i] = pa[i];
    }, 6, 0);
    const double triad_s = best_seconds([&] {
#pragma omp parallel for schedule(static) num_threads(threads)
      for (size_t i = 0; i < n; ++i) pa[i] = pb[i] + scalar * pc[i];
    }, 6, 0);
    copy_bytes_per_s = 2.0 * n * sizeof(double) / copy_s;
    triad_bytes_per_s = 3.0 * n * sizeof(double) / triad_s;
    // The same loops with streaming (non-temporal) stores, which write a
    // line without first reading it: Kiln's kernels use them for outputs
    // larger than the last-level cache, and then beat the loops above
    // (whose write-allocate reads STREAM does not count). The roofline
    // takes the better of both, so no row can pass 1.0 that way.
    const size_t n4 = n / 4;
    const double copy_nt_s = best_seconds([&] {
#pragma omp parallel num_threads(threads)
      {
#pragma omp for schedule(static)
        for (size_t i = 0; i < n4; ++i) _mm256_stream_pd(pc + 4 * i, _mm256_load_pd(pa + 4 * i));
        _mm_sfence();
      }
    }, 6, 0);
    const double triad_nt_s = best_seconds([&] {
      const __m256d vs = _mm256_set1_pd(scalar);
#pragma omp parallel num_threads(threads)
      {
#pragma omp for schedule(static)
        for (size_t i = 0; i < n4; ++i)
          _mm256_stream_pd(pa + 4 * i, _mm256_fmadd_pd(vs, _mm256_load_pd(pc + 4 * i), _mm256_load_pd(pb + 4 * i)));
        _mm_sfence();
      }
    }, 6, 0);
    copy_nt = 2.0 * n4 * 4 * sizeof(double) / copy_nt_s;
    triad_nt = 3.0 * n4 * 4 * sizeof(double) / triad_nt_s;
    // Reading alone (a sum over one array, each thread's share as four
    // sequential streams): the ceiling of kernels that read weights or a
    // KV cache and write little (QMV, GEMV, decode attention). It is not
    // the roofline's bandwidth: a core's reads are bounded by the misses it
    // can keep in flight, so on some machines reading alone runs well below
    // the copies above, whose stores drain separately (2-vCPU Zen 4 VM:
    // read 33-56 GB/s against streaming copy 77-80).
    double sums = 0, read_bytes = 0;
    const double read_s = best_seconds([&] {
      double total = 0, bytes = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total, bytes)
      {
        const size_t parts = omp_get_num_threads(), part = omp_get_thread_num();
        const size_t q = n4 * part / parts, len = (n4 * (part + 1) / parts - q) / 4;
        const double* p[4] = {pa + 4 * q, pa + 4 * (q + len), pa + 4 * (q + 2 * len), pa + 4 * (q + 3 * len)};
        __m256d s0 = _mm256_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
        for (size_t i = 0; i < 4 * len; i += 4) {
          s0 = _mm256_add_pd(s0, _mm256_load_pd(p[0] + i));
          s1 = _mm256_add_pd(s1, _mm256_load_pd(p[1] + i));
          s2 = _mm256_add_pd(s2, _mm256_load_pd(p[2] + i));
          s3 = _mm256_add_pd(s3, _mm256_load_pd(p[3] + i));
        }
        alignas(32) double l[4];
        _mm256_store_pd(l, _mm256_add_pd(_mm256_add_pd(s0, s1), _mm256_add_pd(s2, s3)));
        total += l[0] + l[1] + l[2] + l[3];
        bytes += 16.0 * len * sizeof(double);
      }
      sums += total;
      read_bytes = bytes;
    }, 6, 0);
    read = read_bytes / read_s;
    volatile double keep = sums;
    (void)keep;
  } else {
    // --quick arrays sit in the caches, whose bandwidth grows with the cores,
    // so each thread times its own share with no barrier in between and the
    // rates add up. Trials take a millisecond or less; timed together, one
    // thread losing its core to another process for a moment (tests running
    // in parallel) would stall the rest and read several times too low.
#pragma omp parallel num_threads(threads) reduction(+ : copy_bytes_per_s, triad_bytes_per_s)
    {
      const size_t parts = omp_get_num_threads(), part = omp_get_thread_num();
      const size_t begin = n * part / parts, end = n * (part + 1) / parts;
      const double copy_s = best_seconds([&] {
        for (size_t i = begin; i < end; ++i) pc[i] = pa[i];
      }, 20, 0.1);
      const double triad_s = best_seconds([&] {
        for (size_t i = begin; i < end; ++i) pa[i] = pb[i] + scalar * pc[i];
      }, 20, 0.1);
      copy_bytes_per_s += 2.0 * (end - begin) * sizeof(double) / copy_s;
      triad_bytes_per_s += 3.0 * (end - begin) * sizeof(double) / triad_s;
    }
  }
  // Keeps the loops from being optimised away.
  volatile double sink = pa[n / 2] + pc[n / 3];
  (void)sink;
  // STREAM's convention, also used for the drills: every array is counted
  // once, the write-allocate read of the destination is not.
  return {copy_bytes_per_s / 1e9, triad_bytes_per_s / 1e9, static_cast<double>(n) * sizeof(double), copy_nt / 1e9,
          triad_nt / 1e9, read / 1e9};
}

// Sixteen independent accumulators cover the FMA latency (4 cycles) times
// the two FMA ports with room to spare, and together with the two constants
// still fit the 32 zmm registers, so the loop never touches memory.
constexpr int kAccumulators = 16;

// The result only has to depend on every accumulator, so that no FMA is dead.
__attribute__((target("avx512f"))) float sum_lanes(const __m512 (&acc)[kAccumulators]) {
  __m512 sum = acc[0];
  for (int j = 1; j < kAccumulators; ++j) sum = _mm512_add_ps(sum, acc[j]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  float total = 0;
  for (float x : lanes) total += x;
  return total;
}

__attribute__((target("avx512f"))) float fma_loop_avx512(long iters) {
  __m512 acc[kAccumulators];
  for (int j = 0; j < kAccumulators; ++j) acc[j] = _mm512_set1_ps(0.001f * j);
  // acc = acc * 0.999 + 0.001 converges to 1: no overflow, no denormals.
  const __m512 mul = _mm512_set1_ps(0.999f), add = _mm512_set1_ps(0.001f);
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kAccumulators; ++j) acc[j] = _mm512_fmadd_ps(acc[j], mul, add);
  }
  return sum_lanes(acc);
}

__attribute__((target("avx2,fma"))) float fma_loop_avx2(long iters) {
  __m256 acc[kAccumulators];
  for (int j = 0; j < kAccumulators; ++j) acc[j] = _mm256_set1_ps(0.001f * j);
  const __m256 mul = _mm256_set1_ps(0.999f), add = _mm256_set1_ps(0.001f);
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kAccumulators; ++j) acc[j] = _mm256_fmadd_ps(acc[j], mul, add);
  }
  __m256 sum = acc[0];
  for (int j = 1; j < kAccumulators; ++j) sum = _mm256_add_ps(sum, acc[j]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0;
  for (float x : lanes) total += x;
  return total;
}

// vdpbf16ps: per fp32 lane, two bf16 products added to the accumulator,
// i.e. 16 lanes x 2 products x 2 flops = 64 flops per instruction.
__attribute__((target("avx512f,avx512bf16"))) float bf16_dot_loop_avx512(long iters) {
  __m512 acc[kAccumulators];
  for (int j = 0; j < kAccumulators; ++j) acc[j] = _mm512_setzero_ps();
  // bf16 0.03125 (0x3d00) squared, twice per lane: the sums stay small and exact enough.
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3d00);
  const __m512bh y = (__m512bh)_mm512_set1_epi16(0x3d00);
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kAccumulators; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], x, y);
  }
  return sum_lanes(acc);
}

// vpdpbusd: per int32 lane, four u8 x s8 products added to the
// accumulator, i.e. 16 lanes x 4 products x 2 ops = 128 ops per instruction.
__attribute__((target("avx512f,avx512vnni"))) float int8_dot_loop_avx512(long iters) {
  __m512i acc[kAccumulators];
  for (int j = 0; j < kAccumulators; ++j) acc[j] = _mm512_setzero_si512();
  const __m512i x = _mm512_set1_epi8(1), y = _mm512_set1_epi8(1);  // the sums grow by 4 per step: no overflow
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kAccumulators; ++j) acc[j] = _mm512_dpbusd_epi32(acc[j], x, y);
  }
  __m512i sum = acc[0];
  for (int j = 1; j < kAccumulators; ++j) sum = _mm512_add_epi32(sum, acc[j]);
  return static_cast<float>(_mm512_reduce_add_epi32(sum));
}

// AMX: eight tiles, four 16 x 16 fp32 accumulators fed by two A and two B
// tiles of 16 x 32 bf16, so each tdpbf16ps is 16 * 16 * 32 * 2 flops.
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};
constexpr double kAmxFlopsPerIter = 4 * 16 * 16 * 32 * 2.0;

__attribute__((target("amx-tile,amx-bf16"))) float amx_bf16_loop(long iters) {
  AmxTileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.bytes_per_row[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
  alignas(64) uint16_t inputs[16 * 32];
  std::fill(std::begin(inputs), std::end(inputs), uint16_t{0x3d00});  // bf16 0.03125
  alignas(64) float acc[16 * 16] = {};
  _tile_loadd(0, acc, 64);
  _tile_loadd(1, acc, 64);
  _tile_loadd(2, acc, 64);
  _tile_loadd(3, acc, 64);
  _tile_loadd(4, inputs, 64);
  _tile_loadd(5, inputs, 64);
  _tile_loadd(6, inputs, 64);
  _tile_loadd(7, inputs, 64);
  for (long i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, acc, 64);
  _tile_release();
  return acc[0];
}

// Linux hands out the AMX tile state only on request (arch_prctl).
bool amx_permitted() {
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return __builtin_cpu_supports("amx-bf16") && syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// Runs `loop` on every thread at once and returns the sum of the threads'
// rates. Arithmetic in registers does not share anything between cores, so
// each thread keeps its own best trial (the one least disturbed by the rest
// of the system) and no thread waits for another between trials.
double measure_peak(float (*loop)(long), double flops_per_iter, int threads, long iters, int trials) {
  double gflops = 0;
  float sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : gflops, sink)
  {
    sink += loop(iters / 10);  // wakes the vector units and the frequency governor
    const double best = best_seconds([&] { sink += loop(iters); }, trials, 0);
    gflops += flops_per_iter * static_cast<double>(iters) / best / 1e9;
  }
  volatile float keep = sink;
  (void)keep;
  return gflops;
}

}  // namespace

Ceilings measure_ceilings(int threads, bool quick) {
  Ceilings c;
  c.threads = threads;
  StreamResult s = measure_stream(threads, quick);
  c.copy_gbps = s.copy_gbps;
  c.triad_gbps = s.triad_gbps;
  c.copy_nt_gbps = s.copy_nt_gbps;
  c.triad_nt_gbps = s.triad_nt_gbps;
  c.read_gbps = s.read_gbps;
  c.stream_array_bytes = s.array_bytes;

  __builtin_cpu_init();
  // About 0.1 s per trial on a 3 GHz core; with --quick under a millisecond,
  // with many trials so that some run undisturbed.
  const long iters = quick ? 200'000 : 40'000'000;
  const int trials = quick ? 20 : 3;
  if (__builtin_cpu_supports("avx512f")) {
    c.fp32_isa = "avx512f";
    c.fp32_gflops = measure_peak(fma_loop_avx512, kAccumulators * 16 * 2.0, threads, iters, trials);
  } else {
    c.fp32_isa = "avx2";
    c.fp32_gflops = measure_peak(fma_loop_avx2, kAccumulators * 8 * 2.0, threads, iters, trials);
  }
  if (__builtin_cpu_supports("avx512bf16")) {
    c.bf16_isa = "avx512bf16";
    c.bf16_gflops = measure_peak(bf16_dot_loop_avx512, kAccumulators * 64.0, threads, iters, trials);
  }
  if (__builtin_cpu_supports("avx512vnni"))
    c.int8_gops = measure_peak(int8_dot_loop_avx512, kAccumulators * 128.0, threads, iters, trials);
  // A tile instruction is 16 cycles of work: fewer iterations for the same time.
  if (amx_permitted())
    c.amx_bf16_gflops = measure_peak(amx_bf16_loop, kAmxFlopsPerIter, threads, iters / 16, trials);
  return c;
}

}  // namespace kiln::bench
