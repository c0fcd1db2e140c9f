// mask.cuh — which K/V tiles a query block visits, which of them need a per-element mask,
// and the mask itself on the wgmma accumulator layout.
//
// The rule is step 07's (its mask.cuh draws it): causal masks are bottom-right aligned, row i
// sees keys [0, kv_limit(i)), kv_limit(i) = clamp(i + (N_kv − N_q) + 1, 0, N_kv); a block
// visits the tiles below its last row's limit, and only those at or above its first row's
// limit (or the ragged last tile past N_kv) need the per-element comparisons. What changes
// here is the register layout the mask is applied to: a warpgroup's 64 rows, 16 per warp,
// each row in one quad (hopper.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace fa::step09 {

/// \brief Keys [0, kv_limit) are visible from query row i.
template <bool IsCausal>
__device__ __forceinline__ int kv_limit(int i, int n_q, int n_kv) {
  if (!IsCausal) return n_kv;
  // i < N_q + kBlockM and N_q, N_kv < 2^31 / 64 (validate()'s index limit, d ≥ 64): no overflow.
  return min(max(i + (n_kv - n_q) + 1, 0), n_kv);
}

/// \brief The K/V tiles a query block visits: tiles [0, num_tiles), of which the first
/// num_unmasked need no per-element mask.
struct KvTiles {
  int num_tiles;
  int num_unmasked;
};

/// \brief KvTiles of the query block [m0, m0 + block_m) (rows past N_q do not count).
template <bool IsCausal>
__device__ __forceinline__ KvTiles kv_tiles(int m0, int block_m, int block_n, int n_q, int n_kv) {
  const int last_row = min(m0 + block_m, n_q) - 1;
  const int first_limit = kv_limit<IsCausal>(m0, n_q, n_kv);
  const int last_limit = kv_limit<IsCausal>(last_row, n_q, n_kv);
  return {(last_limit + block_n - 1) / block_n, first_limit / block_n};
}

/// \brief Sets S to -inf where the key is hidden from the query row (causal, or past N_kv).
/// s is this thread's part of a warpgroup's S tile: s[4j + 2h + e] is row row0 + 8h, key
/// col0 + 8j + e (hopper.cuh: the accumulator layout).
/// \param row0 global query row of this lane's first row (m0 + 64·warpgroup + 16·warp + g)
/// \param col0 global key of this lane's first column (n0 + 2t)
template <bool IsCausal, int kRegs>
__device__ __forceinline__ void apply_mask(float (&s)[kRegs], int row0, int col0, int n_q,
                                           int n_kv) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int limit = kv_limit<IsCausal>(row0 + 8 * h, n_q, n_kv);
#pragma unroll
    for (int j = 0; j < kRegs / 4; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e)
        if (col0 + 8 * j + e >= limit) s[4 * j + 2 * h + e] = -INFINITY;
    }
  }
}

}  // namespace fa::step09
