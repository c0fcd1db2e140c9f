/// \file streaming.h
/// \brief FlashAttention's online softmax, on the CPU, one tile at a time.
///
/// FlashAttention's kernels never hold a full row of S. They stream K and V through
/// in tiles and keep, per query row, three running quantities:
///
/// ```text
///   m   the largest score seen so far
///   ℓ   Σ exp(s_j − m) over the keys seen so far            (the softmax denominator)
///   a   Σ exp(s_j − m) · v_j over the keys seen so far       (O before normalisation, [d])
/// ```
///
/// When a new tile raises the max from m_old to m_new, everything summed so far was
/// exponentiated against the wrong max; multiplying by α = exp(m_old − m_new) fixes it:
///
/// ```text
///   m_new = max(m_old, rowmax(S_tile))
///   ℓ     = ℓ·α + Σ_j exp(s_j − m_new)
///   a     = a·α + Σ_j exp(s_j − m_new) · v_j
/// ```
///
/// and after the last tile O = a / ℓ, L = m + log ℓ. Memory per row: m, ℓ and d values of a —
/// O(N) in total instead of the N×N of S and P.
///
/// This model accumulates in float, like the kernels, and is checked against the double
/// reference (attention.h) for many tile sizes. Chapter 00 walks through it; the fused GPU
/// steps implement exactly these lines, one tile per thread block.
#pragma once

#include "common/problem.h"

namespace fa::ref {

/// \brief Tile sizes of the streaming model (the kernels' kBlockM and kBlockN).
struct StreamingOptions {
  int block_q = 64;   ///< query rows per tile, >= 1
  int block_kv = 64;  ///< key/value rows per tile, >= 1
};

/// \brief Attention by streaming K/V tiles through an online softmax, accumulated in float.
/// \param p    the problem; must pass validate(p)
/// \param q    Q, fp32, in p.layout
/// \param k    K, fp32, in p.layout
/// \param v    V, fp32, in p.layout
/// \param o    receives O in Q's layout, p.q_elems() floats
/// \param lse  receives L, [B, H_q, N_q] contiguous
/// \param opt  tile sizes
/// \throws std::invalid_argument naming the parameter when a block size is below 1 or the
/// problem is invalid.
void streaming_attention(const Problem& p, const float* q, const float* k, const float* v, float* o,
                         float* lse, StreamingOptions opt = {});

}  // namespace fa::ref
