// online_softmax.cuh — the running max / sum / rescale / finalize of FlashAttention's online
// softmax, for the one query row a lane owns, with the row's columns split over kRowLanes
// neighbouring lanes of one warp.
//
// The math is step 04's (and reference/streaming.h's), in base 2:
//        p = exp2(s · scale·log2(e) − m),        m = running max of s · scale·log2(e)
// so `s · scale_log2 − m` is ONE fused multiply-add and exp2 is ONE instruction (MUFU.EX2).
// The lanes of a row agree on m every tile (one shuffle) but keep separate partial sums ℓ,
// added once in finalize().
//
// What changed since step 04:
//   * update() no longer rescales O itself. O now lives in tensor-core accumulator fragments,
//     whose rows a lane cannot name (mma.cuh's TUTORIAL on the row map); update() returns
//     the factor α and the kernel applies it with scale_rows (below).
//   * P leaves update() rounded to 16 bits, the input type of the P V product. ℓ sums the
//     fp32 values before that rounding (as FlashAttention does), so L = m + log ℓ is as
//     accurate as in fp32, and rounding P is just one more rounded input of P V, like V.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "mma.cuh"

namespace fa::step05 {

constexpr float kLog2e = 1.4426950408889634f;  // log2(e): exp(x) = exp2(x · log2(e))
constexpr float kLn2 = 0.6931471805599453f;    // ln(2):   log(x) = log2(x) · ln(2)

/// \brief 2^x in one instruction (ex2.approx, relative error ~2^-22, far below bf16/fp16
/// rounding of P). ftz: results below 2^-126 become 0. exp2(-inf) = +0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/// \brief max / sum over the kRowLanes consecutive lanes that share a row (a power of two,
/// aligned in the warp). xor-shuffles give every lane the same result, in the same order, on
/// every run — the reduction is deterministic.
template <int kRowLanes>
__device__ __forceinline__ float row_lanes_max(float v) {
#pragma unroll
  for (int offset = kRowLanes / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
template <int kRowLanes>
__device__ __forceinline__ float row_lanes_sum(float v) {
#pragma unroll
  for (int offset = kRowLanes / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

/// \brief Running softmax state of ONE query row, held by each of the kRowLanes lanes that
/// share it (m identical in all of them, ℓ split).
template <int kRowLanes>
struct OnlineSoftmax {
  float m;  // running max of s·scale·log2(e) over the keys seen; -inf before any
  float l;  // THIS lane's part of Σ p (fp32); lanes are summed at the end

  __device__ __forceinline__ void init() {
    m = -INFINITY;
    l = 0.f;
  }

  /// \brief Folds this lane's kCols scores of one S tile into the state.
  /// \param s   raw scores q·k of the row (masked entries -inf)
  /// \param p   out: p = exp2(s·scale_log2 − m_new) rounded to T, two per word (pack_pair),
  ///            in the order of s
  /// \return    α = exp2(m_old − m_new), the factor the row of O must be multiplied by
  template <class T, int kCols>
  __device__ __forceinline__ float update(const float (&s)[kCols], unsigned (&p)[kCols / 2],
                                          float scale_log2) {
    float tile_max = s[0];
#pragma unroll
    for (int c = 1; c < kCols; ++c) tile_max = fmaxf(tile_max, s[c]);
    tile_max = row_lanes_max<kRowLanes>(tile_max);  // the whole row's max over this tile
    // scale > 0, so max(s)·scale_log2 = max(s·scale_log2): compare raw, scale once.
    const float m_new = fmaxf(m, tile_max * scale_log2);
    // A row that has seen only masked keys has m_new = -inf; exponentiating against it would
    // compute exp2(-inf − (-inf)) = NaN. Use 0 instead: every p of such a row is then
    // exp2(-inf) = 0 and ℓ stays 0, which finalize() turns into O = 0, L = -inf.
    const float m_use = m_new == -INFINITY ? 0.f : m_new;
    // α = 1 when the max did not move; 0 for the first visible tile (O and ℓ are 0 anyway).
    const float alpha = fast_exp2(m - m_use);
    m = m_new;
    l *= alpha;
#pragma unroll
    for (int c = 0; c < kCols; c += 2) {
      // One FFMA and one MUFU.EX2 per score: the scale is folded into the exponent.
      const float p0 = fast_exp2(fmaf(s[c], scale_log2, -m_use));
      const float p1 = fast_exp2(fmaf(s[c + 1], scale_log2, -m_use));
      p[c / 2] = pack_pair<T>(p0, p1);  // two floats → two 16-bit values, one instruction
      l += p0 + p1;
    }
    return alpha;
  }

  /// \brief After the last tile: adds the lanes' partial sums; returns 1/ℓ (0 for a row that
  /// saw no key, so that O = 0 rather than 0/0) and sets lse = log Σ exp(s·scale), natural
  /// log, -inf for such a row.
  __device__ __forceinline__ float finalize(float* lse) const {
    const float row_sum = row_lanes_sum<kRowLanes>(l);
    const bool any_key = row_sum != 0.f;  // NaN counts as a key: it must propagate
    // m is in log2 units of the scaled score: m·ln2 = max(s)·scale.
    *lse = any_key ? m * kLn2 + logf(row_sum) : -INFINITY;
    return any_key ? 1.f / row_sum : 0.f;
  }
};

/// \brief o[f].x[i] *= scale[row[i]] for all of a warp's accumulator fragments: row r of the
/// warp's O (16 × d) is multiplied by scale[r]. `scale` is in shared memory (16 floats);
/// `row` is the row map of accumulator_rows (mma.cuh).
template <int kFrags>
__device__ __forceinline__ void scale_rows(FragAcc (&o)[kFrags], const float* scale,
                                           const int (&row)[kAccElems]) {
  float factor[kAccElems];
#pragma unroll
  for (int i = 0; i < kAccElems; ++i) factor[i] = scale[row[i]];
#pragma unroll
  for (int f = 0; f < kFrags; ++f)
#pragma unroll
    for (int i = 0; i < kAccElems; ++i) o[f].x[i] *= factor[i];
}

}  // namespace fa::step05
