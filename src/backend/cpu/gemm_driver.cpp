// The blocked GEMM driver shared by every kernel family (GotoBLAS/BLIS
// loop nest):
//
//   for jc in N step NC          B panel  KC x NC  -> shared, lives in L3
//     for pc in K step KC        (packed once by all threads together)
//       for ic in M step MC      A block  MC x KC  -> per thread, lives in L2
//         for jr in NC step NR   B micro-panel KC x NR stays in L1 ...
//           for ir in MC step MR ... while A micro-panels stream from L2
//             micro-kernel: MR x NR tile of C in registers
//
// Threads form a tm x tn grid: tm splits the rows of C (each thread packs
// its own A block into its own core's L2), tn splits the NR column panels
// of the B panel (threads that share a column range pack the same A rows,
// which is cheap because M is then small); see choose_grid.
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "backend/cpu/gemm_internal.h"

namespace kiln::cpu::gemm_detail {
namespace {

using Buffer = std::unique_ptr<char, FreeDeleter>;

Buffer aligned_buffer(size_t bytes) {
  bytes = (bytes + 63) / 64 * 64;
  return Buffer(static_cast<char*>(std::aligned_alloc(64, bytes == 0 ? 64 : bytes)));
}

// Picks the tm x tn thread grid: the most ways of splitting N whose padded
// work per thread is within ~6% of the least. Split over N, each thread
// packs exactly the B micro-panels it multiplies; split over M, every thread
// reads the whole B panel that all of them packed. That shared panel is
// what a VM whose two vCPUs sat on different last-level caches punished:
// M = 16 and 128 against 4096 x 4096 ran 17.3 / 39 ms split over M and
// 5.6-6.3 / 24.7-25.0 ms split over N, which costs ~1-5% when both vCPUs
// share a cache (each thread then packs the A rows again: few, for the
// small M where the split differs).
void choose_grid(int nt, int64_t M, int64_t N, const KernelSpec& s, int* tm, int* tn) {
  int64_t mpanels = ceil_div(M, s.mr), npanels = ceil_div(std::min(N, s.nc), s.nr);
  auto cost = [&](int m) { return ceil_div(mpanels, m) * s.mr * ceil_div(npanels, nt / m) * s.nr; };
  int64_t best = -1;
  for (int m = 1; m <= nt; ++m) {
    if (nt % m == 0 && (best < 0 || cost(m) < best)) best = cost(m);
  }
  for (int m = 1; m <= nt; ++m) {
    if (nt % m == 0 && cost(m) * 100 <= best * 106) {
      *tm = m;
      *tn = nt / m;
      return;
    }
  }
}

void blocked(const GemmArgs& g, const KernelSpec& s, bool out_bf16) {
  const int64_t M = g.M, N = g.N, K = g.K;
  const int64_t kc_max = std::min(s.kc, round_up(K, s.k_align));
  const int64_t nc_max = std::min(s.nc, round_up(N, s.nr));
  const int64_t mc_max = std::min(s.mc, round_up(M, s.mr));
  const int nt = useful_threads(g.threads, 2.0 * M * N * K);

  Buffer b_pack = aligned_buffer(kc_max * nc_max * s.packed_bytes);
  Buffer a_pack = aligned_buffer(nt * mc_max * kc_max * s.packed_bytes);
  const char* A = static_cast<const char*>(g.A);
  const char* B = static_cast<const char*>(g.B);
  char* C = static_cast<char*>(g.C);
  const int64_t cbytes = out_bf16 ? 2 : 4;

#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const int threads = omp_get_num_threads(), tid = omp_get_thread_num();
    int tm = 1, tn = 1;
    choose_grid(threads, M, N, s, &tm, &tn);
    const int tm_id = tid / tn, tn_id = tid % tn;
    int64_t mp0, mp1;
    split_range(ceil_div(M, s.mr), tm, tm_id, &mp0, &mp1);
    const int64_t m_begin = mp0 * s.mr, m_end = std::min(M, mp1 * s.mr);
    char* my_a = a_pack.get() + tid * mc_max * kc_max * s.packed_bytes;

    for (int64_t jc = 0; jc < N; jc += nc_max) {
      const int64_t nc = std::min(nc_max, N - jc);
      const int64_t npanels = ceil_div(nc, s.nr);
      int64_t jp0, jp1;
      split_range(npanels, tn, tn_id, &jp0, &jp1);
      for (int64_t pc = 0; pc < K; pc += kc_max) {
        const int64_t kc = std::min(kc_max, K - pc);
        const int64_t kcp = round_up(kc, s.k_align);
        const int64_t b_panel_bytes = kcp * s.nr * s.packed_bytes;
        const int64_t a_panel_bytes = kcp * s.mr * s.packed_bytes;

        // Every thread packs a share of the B panel.
        int64_t bq0, bq1;
        split_range(npanels, threads, tid, &bq0, &bq1);
        for (int64_t q = bq0; q < bq1; ++q) {
          int64_t n0 = jc + q * s.nr;
          s.pack_b(B + (n0 * g.b_col_stride + pc * g.b_row_stride) * s.src_bytes, g.b_col_stride, g.b_row_stride,
                   std::min<int64_t>(s.nr, N - n0), kc, b_pack.get() + q * b_panel_bytes);
        }
#pragma omp barrier
        const int mode = pc > 0 ? kAccumulateF32 : (out_bf16 ? kStoreBf16 : kStoreF32);
        for (int64_t ic = m_begin; ic < m_end; ic += mc_max) {
          const int64_t mc = std::min(mc_max, m_end - ic);
          const int64_t mpanels = ceil_div(mc, s.mr);
          for (int64_t p = 0; p < mpanels; ++p) {
            int64_t m0 = ic + p * s.mr;
            s.pack_a(A + (m0 * g.a_row_stride + pc * g.a_col_stride) * s.src_bytes, g.a_row_stride, g.a_col_stride,
                     std::min<int64_t>(s.mr, M - m0), kc, my_a + p * a_panel_bytes);
          }
          for (int64_t q = jp0; q < jp1; ++q) {
            const int64_t n0 = jc + q * s.nr;
            const int nr = static_cast<int>(std::min<int64_t>(s.nr, N - n0));
            const char* bp = b_pack.get() + q * b_panel_bytes;
            for (int64_t p = 0; p < mpanels; ++p) {
              const int64_t m0 = ic + p * s.mr;
              const int mr = static_cast<int>(std::min<int64_t>(s.mr, M - m0));
              s.kernel(kcp, my_a + p * a_panel_bytes, bp, C + (m0 * g.ldc + n0) * cbytes, g.ldc, mr, nr, mode);
            }
          }
        }
#pragma omp barrier
      }
    }
  }
}

}  // namespace

int useful_threads(int requested, double flops) {
  if (requested <= 1) return 1;
  // ~2 MFLOP per thread keeps fork/join and barrier costs under a few %.
  int64_t by_work = static_cast<int64_t>(flops / 2e6);
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(requested, by_work)));
}

void run_blocked_gemm(const GemmArgs& g, const KernelSpec& s, bool out_bf16) {
  if (g.M <= 0 || g.N <= 0) return;
  if (g.K <= 0) {
    zero_c(g, out_bf16);
    return;
  }
  if (!out_bf16 || round_up(g.K, s.k_align) <= s.kc) {
    blocked(g, s, out_bf16);
    return;
  }
  // bf16 output over several K blocks: accumulate in fp32, round once.
  Buffer ws = aligned_buffer(g.M * g.N * sizeof(float));
  GemmArgs f = g;
  f.C = ws.get();
  f.ldc = g.N;
  blocked(f, s, false);
  const float* src = reinterpret_cast<const float*>(ws.get());
  auto* dst = static_cast<bfloat16_t*>(g.C);
  const int nt = useful_threads(g.threads, 50.0 * g.M * g.N);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t i = 0; i < g.M; ++i)
    for (int64_t j = 0; j < g.N; ++j) dst[i * g.ldc + j] = bfloat16_t(src[i * g.N + j]);
}

}  // namespace kiln::cpu::gemm_detail
