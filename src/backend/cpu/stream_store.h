#pragma once
// Non-temporal (streaming) stores for outputs larger than the last-level
// cache (copy.h streaming_pays): a normal store first reads the line it
// writes, a third of the traffic of a copy or a binary op; a streaming
// store writes the line without reading it. The elementwise loops compute a
// block into an L1-resident buffer with their usual (vectorized) loop and
// stream the buffer out (stream_fill), so every op and dtype takes it.
// Measured on this project's 2-core AMD EPYC VM: see docs/performance.md.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace kiln::cpu {

// dst[0 .. bytes) = src[0 .. bytes), the 32-byte aligned body with
// streaming stores (AVX, the library's baseline ISA). The caller ends its
// task with stream_fence().
inline void stream_bytes(void* dst, const void* src, size_t bytes) {
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  const size_t head = std::min(bytes, (32 - reinterpret_cast<uintptr_t>(d) % 32) % 32);
  std::memcpy(d, s, head);
  d += head, s += head, bytes -= head;
  for (; bytes >= 128; d += 128, s += 128, bytes -= 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 64));
    const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 96), e);
  }
  for (; bytes >= 32; d += 32, s += 32, bytes -= 32)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
  std::memcpy(d, s, bytes);
}

// Orders the task's streaming stores before whatever synchronizes with it.
inline void stream_fence() { _mm_sfence(); }

// o[0 .. n) through a buffer: fill(k0, m, buf) writes outputs k0 .. k0 + m
// into buf, which is then streamed to o + k0.
template <typename O, typename Fill>
inline void stream_fill(O* o, int64_t n, Fill&& fill) {
  constexpr int64_t kBlock = std::max<int64_t>(1, 4096 / static_cast<int64_t>(sizeof(O)));
  alignas(64) O buf[kBlock];
  for (int64_t k0 = 0; k0 < n; k0 += kBlock) {
    const int64_t m = std::min(kBlock, n - k0);
    fill(k0, m, buf);
    stream_bytes(o + k0, buf, static_cast<size_t>(m) * sizeof(O));
  }
}

}  // namespace kiln::cpu
