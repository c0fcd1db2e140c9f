// mask.cuh — which keys a query row may see, which K/V tiles a query block must visit, and
// which of those need a per-element mask. (Step 04's file; only apply_mask changed, because
// a lane now owns one row of the S tile instead of a register block.)
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

namespace fa::step05 {

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
  const int last_row = min(m0 + block_m, n_q) - 1;
  const int first_limit = kv_limit<IsCausal>(m0, n_q, n_kv);
  const int last_limit = kv_limit<IsCausal>(last_row, n_q, n_kv);
  // last_limit = 0 (every row of the block sees nothing) gives no tiles at all: the block
  // writes O = 0 and L = -inf straight away.
  return {(last_limit + block_n - 1) / block_n, first_limit / block_n};
}

/// \brief Sets s[c] = -inf where key col0 + Traits::col_of(half, c) is hidden from query row
/// `row` — by the causal mask or by lying past N_kv (the ragged last tile). Called only for
/// tiles that kv_tiles() says cross the diagonal or the end; the others skip it entirely.
/// \param row   global index of the query row this lane holds
/// \param col0  global index of the tile's first key
/// \param half  which of the row's lanes this is (its columns, see KernelTraits::col_of)
template <bool IsCausal, class Traits, int kCols>
__device__ __forceinline__ void apply_mask(float (&s)[kCols], int row, int col0, int half, int n_q,
                                           int n_kv) {
  const int limit = kv_limit<IsCausal>(row, n_q, n_kv);
#pragma unroll
  for (int c = 0; c < kCols; ++c)
    if (col0 + Traits::col_of(half, c) >= limit) s[c] = -INFINITY;
}

}  // namespace fa::step05
