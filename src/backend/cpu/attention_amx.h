#pragma once
// AMX tile products of the CPU attention's bf16 prefill tiles
// (attention_amx.cpp; used by attention_kernel.inc's blocked_amx on CPUs
// whose cpu_target() is amx_bf16). A tile is kTileRows query rows against a
// block of kTileKeys keys.
#include <cstdint>

namespace kiln::cpu::attention_amx {

constexpr int kTileRows = 64;
constexpr int kTileKeys = 64;

// Loads this thread's tile configuration (all eight tiles 16 rows x 64
// bytes) / releases the tile state. Every other product helper assumes it.
void begin();
void end();

// st[j][r] (row stride kTileRows) = sum_d K[j][d] Q[r][d] for keys j < nk
// rounded up to 16 and rows r < nr rounded up to 16 (zeros past nk).
// k: key 0's row, `k_stride` elements between keys, D (a multiple of 32)
// contiguous bf16 each; qp: Q's bf16 pairs, qp[i][r] = (Q[r][2i],
// Q[r][2i + 1]) with kTileRows columns; kpad: 16 x D bf16 of scratch.
void scores(const uint16_t* k, int64_t k_stride, int nk, const uint32_t* qp, int D, int nr, float* st, uint16_t* kpad);

// o[r][c] += sum_j P[r][j] V[j][c] for rows r < nr rounded up to 16, keys
// j < nk rounded up to 32, columns c < dvp (a multiple of 16). pt: P's rows
// as bf16 key pairs, pt[r][i] = (P[r][2i], P[r][2i + 1]), kTileKeys / 2
// pairs a row; vp: V's key pairs, vp[i][c] = (V[2i][c], V[2i + 1][c]), dvp
// columns; both zero past nk. o: row stride dvp.
void pv(const uint32_t* pt, const uint32_t* vp, int dvp, int nk, int nr, float* o);

}  // namespace kiln::cpu::attention_amx
