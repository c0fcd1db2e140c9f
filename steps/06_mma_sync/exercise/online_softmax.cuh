// online_softmax.cuh — the running max / sum / rescale / finalize of the online softmax, on
// the mma accumulator layout: a lane holds 2·kMmaM rows (g and g+8 of each m16 tile), and each
// of those rows is shared by the 4 lanes of its quad (mma.cuh).
//
// The math is reference/streaming.h and step 04's online_softmax.cuh, with the same two
// changes of form:
//
// 1. Base 2. Scores are compared raw (s = q·k) and exponentiated as
//        p = exp2(s · scale·log2(e) − m),        m = running max of s · scale·log2(e)
//    so `s · scale_log2 − m` is ONE fused multiply-add and exp2 is ONE MUFU.EX2 instruction.
//    L is turned back into natural log once, at the end.
//
// 2. The row sum ℓ stays split over the 4 lanes of a quad. The max must be agreed on every
//    tile (all lanes need the same m to exponentiate): two xor-shuffles. The sum never has to
//    be: each lane keeps its own partial ℓ, rescales it by the same α as the others, and the
//    partials are added once, in finalize().
//
// Not yet (step 07): skipping the rescale of O on tiles that move no row's max. Here O is
// rescaled by α after every tile, α = 1 or not.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace fa::step06 {

constexpr float kLog2e = 1.4426950408889634f;  // log2(e): exp(x) = exp2(x · log2(e))
constexpr float kLn2 = 0.6931471805599453f;    // ln(2):   log(x) = log2(x) · ln(2)

/// \brief 2^x in one instruction (MUFU.EX2). Relative error about 2^-22, far below the
/// 16-bit rounding of P; ftz flushes results below 2^-126 to zero (such a p is < 1e-38 of
/// the row's largest term). exp2(-inf) = +0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/// \brief max / sum over the 4 lanes of a quad (lanes 4g … 4g+3), which share a row of every
/// mma accumulator. xor-shuffles give all 4 the same result, in the same order on every
/// run: the reduction is deterministic.
// TODO(exercise): both reductions, each with two __shfl_xor_sync over the full warp mask.
// Which lane offsets keep a lane inside its quad and reach all 4 of its lanes? As given,
// each lane keeps its own value.
__device__ __forceinline__ float quad_max(float v) { return v; }
__device__ __forceinline__ float quad_sum(float v) { return v; }

/// \brief Running softmax state of the 2·kMmaM rows a lane holds: row r = 2·mi + h is row
/// 16·mi + 8·h + g of the warp's rows, stored in elements [2h], [2h+1] of every accumulator
/// s[mi][·] and o[mi][·].
template <int kMmaM>
struct OnlineSoftmax {
  static constexpr int kRows = 2 * kMmaM;
  float m[kRows];  // running max of s·scale·log2(e) over the keys seen; -inf before any
  float l[kRows];  // THIS lane's part of Σ exp2(s·scale·log2(e) − m); quads summed at the end

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      m[r] = -INFINITY;
      l[r] = 0.f;
    }
  }

  /// \brief Folds one S tile into the state. On entry s holds raw scores q·k of the warp's
  /// rows × the tile's keys (masked entries -inf); on exit the unnormalised probabilities
  /// p = exp2(s·scale_log2 − m_new), still fp32. The O accumulator is rescaled by
  /// α = exp2(m_old − m_new) so that it is expressed against the new max.
  template <int kNTilesS, int kNTilesO>
  __device__ __forceinline__ void update(float (&s)[kMmaM][kNTilesS][4],
                                         float (&o)[kMmaM][kNTilesO][4], float scale_log2) {
    float m_use[kRows];  // the max each row's p are taken against (never -inf)
    float alpha[kRows];  // exp2(m_old − m_new) per row
#pragma unroll
    for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = 2 * mi + h;
        float tile_max = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kNTilesS; ++nt)
          tile_max = fmaxf(tile_max, fmaxf(s[mi][nt][2 * h], s[mi][nt][2 * h + 1]));
        tile_max = quad_max(tile_max);  // the whole row's max over this tile
        // scale > 0, so max(s)·scale_log2 = max(s·scale_log2): compare raw, scale once.
        const float m_new = fmaxf(m[r], tile_max * scale_log2);
        // A row that has seen only masked keys has m_new = -inf. Exponentiating against it
        // would compute exp2(-inf − (-inf)) = exp2(NaN). Use 0 instead: every p of such a row
        // is then exp2(-inf) = 0 and its ℓ stays 0, which finalize() turns into O = 0,
        // L = -inf. (With the tiles visited last to first, a causal row may see nothing in
        // the first, diagonal tile and its keys only in later ones.)
        m_use[r] = m_new == -INFINITY ? 0.f : m_new;
        // α = exp2(m_old − m_new): exactly 1 when the max did not move, 0 for the first
        // visible tile (m_old = -inf, where ℓ and O are still 0 anyway).
        alpha[r] = fast_exp2(m[r] - m_use[r]);
        m[r] = m_new;
      }
    }

#pragma unroll
    for (int mi = 0; mi < kMmaM; ++mi)
#pragma unroll
      for (int nt = 0; nt < kNTilesO; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[mi][nt][e] *= alpha[2 * mi + e / 2];

#pragma unroll
    for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = 2 * mi + h;
        float row_sum = 0.f;  // this lane's part of the row's Σ p over this tile
#pragma unroll
        for (int nt = 0; nt < kNTilesS; ++nt) {
          // One FFMA and one MUFU.EX2 per score: the scale is folded into the exponent.
          float& x0 = s[mi][nt][2 * h];
          float& x1 = s[mi][nt][2 * h + 1];
          x0 = fast_exp2(fmaf(x0, scale_log2, -m_use[r]));
          x1 = fast_exp2(fmaf(x1, scale_log2, -m_use[r]));
          row_sum += x0 + x1;
        }
        l[r] = l[r] * alpha[r] + row_sum;
      }
    }
  }

  /// \brief After the last tile: adds the quad's partial sums, divides O by ℓ and returns
  /// L = log Σ exp(s·scale) (natural log) per row. A row that saw no key (ℓ = 0) gets O = 0
  /// and L = -inf rather than 0/0.
  template <int kNTilesO>
  __device__ __forceinline__ void finalize(float (&o)[kMmaM][kNTilesO][4],
                                           float (&lse)[kRows]) const {
#pragma unroll
    for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = 2 * mi + h;
        const float row_sum = quad_sum(l[r]);
        const bool any_key = row_sum != 0.f;  // NaN counts as a key: it must propagate
        const float inv = any_key ? 1.f / row_sum : 0.f;
#pragma unroll
        for (int nt = 0; nt < kNTilesO; ++nt) {
          o[mi][nt][2 * h] *= inv;
          o[mi][nt][2 * h + 1] *= inv;
        }
        // m is in log2 units of the scaled score: m·ln2 = max(s)·scale.
        lse[r] = any_key ? m[r] * kLn2 + logf(row_sum) : -INFINITY;
      }
    }
  }
};

}  // namespace fa::step06
