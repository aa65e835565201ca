#pragma once
// Hopper's copy engine feeding shared memory (cp.async.bulk completing on an
// mbarrier), and launches with programmatic dependent launch: the helpers of
// the streaming kernels that read weights once (the block QMV of
// quant_blocks_qmv_i8.cu; a bf16 GEMV built on them measured slower than
// gemv.cu's and was removed, docs/performance.md session 37).
#include <cuda_runtime.h>

#include <cstdint>

namespace kiln::cuda::bulk {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The barrier's current phase completes once `bytes` more have arrived
// (and this, its one expected arrival, has).
__device__ __forceinline__ void expect_bytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global
// memory to shared memory, counted on `bar` as they land.
__device__ __forceinline__ void copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

// One copy that is the whole of the barrier's phase.
__device__ __forceinline__ void fetch(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  expect_bytes(bar, bytes);
  copy(dst, src, bytes, bar);
}

__device__ __forceinline__ void init_barrier(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)) : "memory");
}

// After the barriers' mbarrier.init, before any other thread or the copy
// engine uses them (a __syncthreads must still publish them to the CTA).
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Before a stage that threads have read is refilled by the copy engine.
__device__ __forceinline__ void fence_before_refill() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

__device__ __forceinline__ void wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(smem_addr(bar)), "r"(parity)
                 : "memory");
  }
}

// A streaming kernel's start: thread 0 initializes the `stages` barriers
// and requests the first min(stages, chunks) chunks (fetch(c) for chunk c)
// before griddepcontrol.wait when w_early (no kernel ahead writes the
// weights), after it otherwise. Every thread returns past the wait; a
// __syncthreads must come before any thread waits on a barrier.
template <typename Fetch>
__device__ __forceinline__ void start_ring(uint64_t* full, int stages, int chunks, bool w_early, Fetch&& fetch) {
  if (threadIdx.x == 0) {
    for (int i = 0; i < stages; ++i) init_barrier(&full[i]);
    fence_barrier_init();
    if (w_early) {
      for (int c = 0; c < min(stages, chunks); ++c) fetch(c);
    }
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (threadIdx.x == 0 && !w_early) {
    for (int c = 0; c < min(stages, chunks); ++c) fetch(c);
  }
}

// Launches with programmatic dependent launch (the kernel's CTAs may start
// while the one ahead in the stream finishes; they griddepcontrol.wait
// before reading its outputs); false, the error cleared, when it fails.
template <typename... Params, typename... Args>
bool launch_early(void (*kernel)(Params...), int ctas, int threads, size_t smem, cudaStream_t st, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(ctas));
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  if (cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...) == cudaSuccess) return true;
  cudaGetLastError();
  return false;
}

}  // namespace kiln::cuda::bulk
