#pragma once
// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3"): a counter-based generator. Output block c of key k is a pure function
// of (k, c), so every backend and every thread count produce the same bits.
// Written for host and device compilers alike.
#include <cstdint>

#if defined(__CUDACC__)
#define KILN_HD __host__ __device__
#else
#define KILN_HD
#endif

namespace kiln::philox {

struct Block {
  uint32_t v[4];
};

KILN_HD inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

// Bits for counter (c0, c1) under key (k0, k1).
KILN_HD inline Block generate(uint32_t k0, uint32_t k1, uint32_t c0, uint32_t c1) {
  uint32_t x0 = c0, x1 = c1, x2 = 0, x3 = 0;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(0xD2511F53u, x0, hi0, lo0);
    mulhilo(0xCD9E8D57u, x2, hi1, lo1);
    uint32_t n0 = hi1 ^ x1 ^ k0;
    uint32_t n1 = lo1;
    uint32_t n2 = hi0 ^ x3 ^ k1;
    uint32_t n3 = lo0;
    x0 = n0; x1 = n1; x2 = n2; x3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{x0, x1, x2, x3}};
}

}  // namespace kiln::philox
