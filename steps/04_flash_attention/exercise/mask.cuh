// mask.cuh — which keys a query row may see, which K/V tiles a query block must visit, and
// which of those need a per-element mask.
//
// Causal masks are bottom-right aligned (problem.h): query row i sees keys [0, kv_limit(i)),
//     kv_limit(i) = clamp(i + (N_kv − N_q) + 1, 0, N_kv).
// The diagonal offset N_kv − N_q may be negative (N_q > N_kv): then the first N_q − N_kv rows
// see no key at all. Without causal, every row sees [0, N_kv).
//
// For a block of query rows [m0, m0 + kBlockM) and K/V tiles of kBlockN keys, kv_limit grows
// with i, so (only rows < N_q count; the block's tail rows are never stored):
//
//   key j:    0        first_limit        last_limit            N_kv
//             |-----------|-------------------|------------------|
//   tiles:    [ unmasked ][ cross the diagonal ][  skipped: no row of the block sees them  ]
//
//   first_limit = kv_limit(m0)           every row of the block sees all keys below it
//   last_limit  = kv_limit(last row)     no row of the block sees a key at or above it
//
// Tiles entirely below first_limit are computed without any mask; tiles entirely at or above
// last_limit are never loaded (the loop bound); only the tiles in between pay for the
// per-element comparisons. Without causal the "crossing" tile is just the ragged last tile
// when kBlockN does not divide N_kv.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace fa::step04 {

/// \brief Keys [0, kv_limit) are visible from query row i.
template <bool IsCausal>
__device__ __forceinline__ int kv_limit(int i, int n_q, int n_kv) {
  if (!IsCausal) return n_kv;
  // i < N_q + kBlockM and N_q, N_kv < 2^31 / 16 (validate()'s index limit, d ≥ 16): no overflow.
  return min(max(i + (n_kv - n_q) + 1, 0), n_kv);
}

/// \brief The K/V tiles one query block visits: tiles [0, num_tiles), of which the first
/// num_unmasked need no per-element mask.
struct KvTiles {
  int num_tiles;
  int num_unmasked;
};

template <bool IsCausal>
__device__ __forceinline__ KvTiles kv_tiles(int m0, int block_m, int block_n, int n_q, int n_kv) {
  // TODO(exercise): which tiles to visit, and which of them need no mask, from the picture
  // at the top of this file. Only rows below N_q count. Never return more tiles than
  // ⌈N_kv / block_n⌉: the kernel would load K and V rows past the end of the tensors.
  // As given, every tile of K/V is visited and none is masked.
  const int all_tiles = (n_kv + block_n - 1) / block_n;
  return {all_tiles, all_tiles};
}

/// \brief Sets s[r][c] = -inf where key col_of(c) is hidden from query row row_of(r) — by the
/// causal mask or by lying past N_kv (the ragged last tile). Called only for tiles that
/// kv_tiles() says cross the diagonal or the end; the others skip it entirely.
/// \param row0, col0  global index of the tile's first query row and first key
template <bool IsCausal, class Cfg, int kRows, int kCols>
__device__ __forceinline__ void apply_mask(float (&s)[kRows][kCols], int row0, int col0,
                                           int row_group, int col_lane, int n_q, int n_kv) {
  // TODO(exercise): the per-element mask. This thread holds s[r][c] for query row
  // row0 + Cfg::row_of(row_group, r) and key col0 + Cfg::col_of(col_lane, c). As given,
  // nothing is masked.
}

}  // namespace fa::step04
