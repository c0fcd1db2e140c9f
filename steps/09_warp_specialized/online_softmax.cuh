// online_softmax.cuh — the running max / sum / rescale / finalize of the online softmax on
// the wgmma accumulator layout: a thread holds two rows of its warp's 16 (g and g + 8), each
// shared by the 4 lanes of its quad, columns 8j + 2t, 8j + 2t + 1 of every n8 block j
// (hopper.cuh).
//
// The math and its two changes of form are step 07's (its online_softmax.cuh explains them):
// base 2 with the scale folded into one FFMA before MUFU.EX2, and the row sum ℓ kept as four
// partial sums per row, added once at the end. Only the register layout differs: flat
// arrays of wgmma accumulators instead of [m16 tile][n8 tile][4] fragments. The rescale of O
// is done on every tile (step 07 measured skipping it to pay in one configuration only).
// What differs from step 08: update() no longer rescales O itself. The kernel runs the
// softmax of tile j while P V of tile j − 1 still accumulates into O, so the rescale is a
// separate rescale(), called after that wgmma is waited for.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace fa::step09 {

constexpr float kLog2e = 1.4426950408889634f;  // log2(e): exp(x) = exp2(x · log2(e))
constexpr float kLn2 = 0.6931471805599453f;    // ln(2):   log(x) = log2(x) · ln(2)

/// \brief 2^x in one instruction (MUFU.EX2); ftz flushes results below 2^-126 to zero.
/// exp2(-inf) = +0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/// \brief max / sum over the 4 lanes of a quad, which share a row: the same result, in the
/// same order, on all four and on every run.
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/// \brief Running softmax state of this thread's two rows: row h (0: g, 1: g + 8) is in
/// elements 4j + 2h and 4j + 2h + 1 of every accumulator array.
struct OnlineSoftmax {
  float m[2];  // running max of s·scale·log2(e) over the keys seen; -inf before any
  float l[2];  // THIS lane's part of Σ exp2(s·scale·log2(e) − m); the quad's summed at the end

  __device__ __forceinline__ void init() {
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.f;
  }

  /// \brief Folds one S tile into the state: on entry s holds raw scores q·k (masked ones
  /// -inf), on exit p = exp2(s·scale_log2 − m_new) in fp32. O is NOT touched: its rescale
  /// factor α = exp2(m_old − m_new) per row goes to `alpha`, for rescale() once the wgmmas
  /// still accumulating into O (P V of the previous tile, issued before this softmax) are
  /// done. ℓ is rescaled here: it has no wgmma in flight.
  template <int kSRegs>
  __device__ __forceinline__ void update(float (&s)[kSRegs], float scale_log2, float (&alpha)[2]) {
    float m_use[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < kSRegs / 4; ++j)
        tile_max = fmaxf(tile_max, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
      tile_max = quad_max(tile_max);
      const float m_new = fmaxf(m[h], tile_max * scale_log2);
      // A row that has seen only masked keys (m_new = -inf) exponentiates against 0: every p
      // is exp2(-inf) = 0, ℓ stays 0, and finalize() writes O = 0, L = -inf.
      m_use[h] = m_new == -INFINITY ? 0.f : m_new;
      alpha[h] = fast_exp2(m[h] - m_use[h]);  // 0 for the first visible tile, 1 if unmoved
      m[h] = m_new;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float row_sum = 0.f;
#pragma unroll
      for (int j = 0; j < kSRegs / 4; ++j) {
        float& x0 = s[4 * j + 2 * h];
        float& x1 = s[4 * j + 2 * h + 1];
        x0 = fast_exp2(fmaf(x0, scale_log2, -m_use[h]));
        x1 = fast_exp2(fmaf(x1, scale_log2, -m_use[h]));
        row_sum += x0 + x1;
      }
      l[h] = l[h] * alpha[h] + row_sum;
    }
  }

  /// \brief O *= α per row (α from update()); kDBlocks arrays of 32 registers hold O.
  template <int kDBlocks>
  __device__ __forceinline__ static void rescale(float (&o)[kDBlocks][32],
                                                 const float (&alpha)[2]) {
#pragma unroll
    for (int b = 0; b < kDBlocks; ++b)
#pragma unroll
      for (int i = 0; i < 32; ++i) o[b][i] *= alpha[(i % 4) / 2];
  }

  /// \brief After the last tile: O = O / ℓ and L = log Σ exp(s·scale) (natural log) per
  /// row; a row that saw no key (ℓ = 0) gets O = 0 and L = -inf. NaN counts as a key.
  template <int kDBlocks>
  __device__ __forceinline__ void finalize(float (&o)[kDBlocks][32], float (&lse)[2]) const {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float row_sum = quad_sum(l[h]);
      const bool any_key = row_sum != 0.f;
      const float inv = any_key ? 1.f / row_sum : 0.f;
#pragma unroll
      for (int b = 0; b < kDBlocks; ++b)
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          o[b][4 * j + 2 * h] *= inv;
          o[b][4 * j + 2 * h + 1] *= inv;
        }
      lse[h] = any_key ? m[h] * kLn2 + logf(row_sum) : -INFINITY;
    }
  }
};

}  // namespace fa::step09
