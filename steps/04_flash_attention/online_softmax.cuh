// online_softmax.cuh — the running max / sum / rescale / finalize of FlashAttention's online
// softmax, for the rows one thread owns, with the row's partial results spread over a few
// lanes of one warp.
//
// The math is reference/streaming.h, line for line, with two changes of form:
//
// 1. Base 2. Scores are compared raw (s = q·k) and exponentiated as
//        p = exp2(s · scale·log2(e) − m),        m = running max of s · scale·log2(e)
//    so `s · scale_log2 − m` is ONE fused multiply-add and exp2 is ONE hardware instruction
//    (MUFU.EX2). With expf(scale·s − max) it would be a multiply, a subtract, and a multiply
//    by log2(e) hidden inside expf. L is turned back into natural log once, at the end.
//
// 2. The row sum ℓ stays split. A row of the S tile is spread over kRowLanes threads (each
//    holds a few of its columns). The max must be agreed on every tile (all lanes need the
//    same m to exponentiate), but the sum never has to be: each lane keeps its own partial
//    ℓ, rescales it by the same α as everyone else, and the partials are added once, in
//    finalize(). That saves two shuffles per row per tile.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace fa::step04 {

constexpr float kLog2e = 1.4426950408889634f;  // log2(e): exp(x) = exp2(x · log2(e))
constexpr float kLn2 = 0.6931471805599453f;    // ln(2):   log(x) = log2(x) · ln(2)

/// \brief 2^x in one instruction. ex2.approx has a relative error of about 2^-22 — far below
/// the fp32 rounding of the sums it feeds. ftz flushes results below 2^-126 to zero: such a
/// p is < 1e-38 of the row's largest term and cannot change O. exp2(-inf) = +0.
// TUTORIAL: exp2f() without --use_fast_math guards denormal inputs with extra instructions;
// the PTX instruction says exactly what we want and does not depend on compiler flags.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/// \brief max over the kRowLanes consecutive lanes that share a row (a power of two ≤ 32,
/// aligned in the warp). xor-shuffles give every lane the same result, in the same order,
/// on every run — the reduction is deterministic.
template <int kRowLanes>
__device__ __forceinline__ float row_lanes_max(float v) {
#pragma unroll
  for (int offset = kRowLanes / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// \brief Sum over the kRowLanes lanes that share a row; see row_lanes_max.
template <int kRowLanes>
__device__ __forceinline__ float row_lanes_sum(float v) {
#pragma unroll
  for (int offset = kRowLanes / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

/// \brief Running softmax state for the kRows query rows one thread owns. Each of those rows is
/// shared with kRowLanes − 1 neighbouring lanes that own other columns of it.
template <int kRows, int kRowLanes>
struct OnlineSoftmax {
  float m[kRows];  // running max of s·scale·log2(e) over the keys seen; -inf before any
  float l[kRows];  // THIS lane's part of Σ exp2(s·scale·log2(e) − m); lanes are summed at the end

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      m[r] = -INFINITY;
      l[r] = 0.f;
    }
  }

  /// \brief Folds one S tile into the state. On entry s holds raw scores q·k of this thread's
  /// kRows × kCols piece of the tile (masked entries -inf); on exit it holds the unnormalised
  /// probabilities p = exp2(s·scale_log2 − m_new). The O accumulator (kRows × kDims, same rows)
  /// is rescaled by α = exp2(m_old − m_new) so that it is expressed against the new max.
  template <int kCols, int kDims>
  __device__ __forceinline__ void update(float (&s)[kRows][kCols], float (&o)[kRows][kDims],
                                         float scale_log2) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float tile_max = s[r][0];
#pragma unroll
      for (int c = 1; c < kCols; ++c) tile_max = fmaxf(tile_max, s[r][c]);
      tile_max = row_lanes_max<kRowLanes>(tile_max);  // the whole row's max over this tile
      // scale > 0, so max(s)·scale_log2 = max(s·scale_log2): compare raw, scale once.
      const float m_new = fmaxf(m[r], tile_max * scale_log2);
      // A row that has seen only masked keys has m_new = -inf. Exponentiating against it would
      // compute exp2(-inf − (-inf)) = exp2(NaN). Use 0 instead: every p of such a row is then
      // exp2(-inf) = 0 and its ℓ stays 0, which finalize() turns into O = 0, L = -inf.
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      // α = exp2(m_old − m_new): exactly 1 when the max did not move, 0 for the first visible
      // tile (m_old = -inf, where ℓ and O are still 0 anyway).
      const float alpha = fast_exp2(m[r] - m_use);
      m[r] = m_new;
      l[r] *= alpha;
#pragma unroll
      for (int c = 0; c < kDims; ++c) o[r][c] *= alpha;
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        // One FFMA and one MUFU.EX2 per score: the scale is folded into the exponent.
        s[r][c] = fast_exp2(fmaf(s[r][c], scale_log2, -m_use));
        l[r] += s[r][c];
      }
    }
  }

  /// \brief After the last tile: adds the lanes' partial sums, divides O by ℓ and returns
  /// L = log Σ exp(s·scale) (natural log) per row. A row that saw no key (ℓ = 0) gets O = 0
  /// and L = -inf rather than 0/0.
  template <int kDims>
  __device__ __forceinline__ void finalize(float (&o)[kRows][kDims], float (&lse)[kRows]) const {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float row_sum = row_lanes_sum<kRowLanes>(l[r]);
      const bool any_key = row_sum != 0.f;  // NaN counts as a key: it must propagate
      const float inv = any_key ? 1.f / row_sum : 0.f;
#pragma unroll
      for (int c = 0; c < kDims; ++c) o[r][c] *= inv;
      // m is in log2 units of the scaled score: m·ln2 = max(s)·scale.
      lse[r] = any_key ? m[r] * kLn2 + logf(row_sum) : -INFINITY;
    }
  }
};

}  // namespace fa::step04
