#pragma once
// Splitting one kernel's work across the cores. Every CPU kernel goes
// through parallel_for so that `set_cpu_threads` and the grain rule apply
// everywhere.
#include <algorithm>
#include <atomic>
#include <cstdint>

#include <omp.h>

#include "kiln/device.h"

namespace kiln::cpu {

// Runs fn(begin, end) over [0, n) in at most cpu_threads() contiguous
// chunks; work smaller than `grain` items per thread stays on one thread
// (starting threads costs a few microseconds).
// `max_threads` (0: cpu_threads()) lets a caller that sized per-thread
// scratch space pin the count it read.
template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& fn, int max_threads = 0) {
  if (n <= 0) return;
  int limit = max_threads > 0 ? max_threads : cpu_threads();
  int threads = static_cast<int>(std::min<int64_t>(limit, std::max<int64_t>(1, n / std::max<int64_t>(grain, 1))));
  if (threads <= 1) {
    fn(int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    int t = omp_get_thread_num();
    int nt = omp_get_num_threads();
    int64_t chunk = (n + nt - 1) / nt;
    int64_t begin = std::min<int64_t>(n, t * chunk);
    int64_t end = std::min<int64_t>(n, begin + chunk);
    if (begin < end) fn(begin, end);
  }
}

// parallel_for for work whose threads may run at different speeds (two
// vCPUs of a VM, DRAM streams that do not split evenly): [0, n) in
// threads * kPieces contiguous pieces taken in order from a shared counter,
// so a thread that finishes early takes the next piece instead of waiting
// at the barrier. Each piece is still a long contiguous range (a
// sequential stream for the prefetchers). Used by the decode QMVs, where
// the static halves left one core idle ~10% of a token (perf, session 19).
template <typename F>
void parallel_for_balanced(int64_t n, int64_t grain, F&& fn) {
  constexpr int kPieces = 4;
  if (n <= 0) return;
  const int64_t g = std::max<int64_t>(grain, 1);
  int threads = static_cast<int>(std::min<int64_t>(cpu_threads(), std::max<int64_t>(1, n / g)));
  if (threads <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t pieces = std::min<int64_t>(int64_t{threads} * kPieces, std::max<int64_t>(threads, n / g));
  const int64_t size = (n + pieces - 1) / pieces;
  std::atomic<int64_t> next{0};
#pragma omp parallel num_threads(threads)
  {
    for (int64_t p = next.fetch_add(1, std::memory_order_relaxed); p < pieces;
         p = next.fetch_add(1, std::memory_order_relaxed)) {
      const int64_t begin = std::min<int64_t>(n, p * size), end = std::min<int64_t>(n, begin + size);
      if (begin < end) fn(begin, end);
    }
  }
}

}  // namespace kiln::cpu
