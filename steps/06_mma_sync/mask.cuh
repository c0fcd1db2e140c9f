// mask.cuh — which K/V tiles a query block must visit, which of those need a per-element
// mask, and the mask itself on the mma accumulator layout.
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
// Tiles entirely below first_limit are computed without any mask; tiles at or above
// last_limit are never loaded (the loop bound); only the tiles in between pay for the
// per-element comparisons. Without causal the "crossing" tile is just the ragged last tile
// when kBlockN does not divide N_kv. The kernel visits tiles from the last to the first, so
// the masked ones come first.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace fa::step06 {

/// \brief Keys [0, kv_limit) are visible from query row i.
template <bool IsCausal>
__device__ __forceinline__ int kv_limit(int i, int n_q, int n_kv) {
  if (!IsCausal) return n_kv;
  // i < N_q + kBlockM and N_q, N_kv < 2^31 / 64 (validate()'s index limit, d ≥ 64): no overflow.
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
  const int last_row = min(m0 + block_m, n_q) - 1;
  const int first_limit = kv_limit<IsCausal>(m0, n_q, n_kv);
  const int last_limit = kv_limit<IsCausal>(last_row, n_q, n_kv);
  // last_limit = 0 (every row of the block sees nothing) gives no tiles at all: the block
  // writes O = 0 and L = -inf straight away. first_limit ≤ last_limit ≤ N_kv, so the
  // unmasked tiles lie inside N_kv and num_unmasked ≤ num_tiles.
  return {(last_limit + block_n - 1) / block_n, first_limit / block_n};
}

/// \brief Sets S to -inf where the key is hidden from the query row — by the causal mask or
/// by lying past N_kv (the ragged last tile). Called only for the tiles that kv_tiles() says
/// cross the diagonal or the end; the others skip it entirely.
///
/// s is a warp's S tile in mma accumulator layout (mma.cuh): s[mi][nt][2h + e] is row
/// 16·mi + 8·h + g of the warp's rows, key 8·nt + 2t + e of the tile.
/// \param row0  global query row of this lane's first row (m0 + warp rows + g)
/// \param col0  global key of this lane's first column (n0 + 2t)
template <bool IsCausal, int kMmaM, int kNTiles>
__device__ __forceinline__ void apply_mask(float (&s)[kMmaM][kNTiles][4], int row0, int col0,
                                           int n_q, int n_kv) {
#pragma unroll
  for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int limit = kv_limit<IsCausal>(row0 + 16 * mi + 8 * h, n_q, n_kv);
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (col0 + 8 * nt + e >= limit) s[mi][nt][2 * h + e] = -INFINITY;
      }
    }
  }
}

}  // namespace fa::step06
