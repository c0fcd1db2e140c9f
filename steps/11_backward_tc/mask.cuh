// mask.cuh — which query rows see which keys, for the backward (step 07's kv_limit, copied:
// a step is self-contained), and the one question the backward adds: does a Q tile hide any
// key of the CTA's K/V tile from any of its rows?
//
// Causal masks are bottom-right aligned (problem.h): query row i sees keys [0, kv_limit(i)),
//     kv_limit(i) = clamp(i + (N_kv − N_q) + 1, 0, N_kv).
// Without causal, every row sees [0, N_kv). kv_limit grows with i, so the rows that see key j
// are a suffix [j − (N_kv − N_q), N_q) of the rows, and the keys row i sees are a prefix.
#pragma once

#include <cuda_runtime.h>

namespace fa::step11 {

/// \brief Keys [0, kv_limit) are visible from query row i (any i: callers check i < N_q).
template <bool IsCausal>
__device__ __forceinline__ int kv_limit(int i, int n_q, int n_kv) {
  if (!IsCausal) return n_kv;
  // i < N_q + kBlockM and N_q, N_kv < 2^31 / 64 (validate()'s index limit, d ≥ 64): no overflow.
  return min(max(i + (n_kv - n_q) + 1, 0), n_kv);
}

/// \brief Is key j visible from query row i? Rows past N_q and keys past N_kv (the zero-filled
/// tails of the tiles) are not.
template <bool IsCausal>
__device__ __forceinline__ bool visible(int i, int j, int n_q, int n_kv) {
  return i < n_q && j < kv_limit<IsCausal>(i, n_q, n_kv);
}

/// \brief The first query row that sees some key of the tile starting at key j0 (N_q if none).
template <bool IsCausal>
__host__ __device__ __forceinline__ int first_row_seeing(int j0, int n_q, int n_kv) {
  if (!IsCausal) return 0;
  const int first = j0 - (n_kv - n_q);  // row i sees key j0 when j0 <= i + (N_kv − N_q)
  return first < 0 ? 0 : (first > n_q ? n_q : first);
}

/// \brief Does some real row of the Q tile starting at row i0 miss some real key of the K/V
/// tile [j0, j0 + block_n)? Only then can a masked (row, key) pair meet in a tile's matrix
/// products; without causal masking never (the tails past N_q and N_kv are zeros).
template <bool IsCausal>
__device__ __forceinline__ bool tile_hides_a_pair(int i0, int j0, int block_n, int n_q, int n_kv) {
  if (!IsCausal) return false;
  // Row i0 sees the fewest keys; the tile's last real key is min(j0 + block_n, N_kv) − 1.
  return kv_limit<true>(i0, n_q, n_kv) < min(j0 + block_n, n_kv);
}

}  // namespace fa::step11
