// combine.cuh — merging partial results (O_s, L_s) of one query row, by one warp: step 12's
// combine kernel (decode_kernel.cuh) and step 13's merge of the ring's partials
// (steps/13_ring_attention/merge.cu) both call combine_row(), so the rescale is written once.
//
// Partials s = 0 … S−1 of one row hold (O_s, L_s) over disjoint key sets, O_s normalised by
// its own sum ℓ_s = exp(L_s). Merging them is the online-softmax rescale between two K/V
// tiles, done once over all partials instead of tile after tile:
//
//   tiles:    m' = max(m, m_t),  ℓ' = e^(m − m') ℓ + e^(m_t − m') ℓ_t,  O' = e^(m − m') O + …
//   partials: L = log Σ_s e^(L_s) = M + log Σ_s e^(L_s − M)   (M = max_s L_s, so no overflow)
//             O = Σ_s (ℓ_s / ℓ) O_s = Σ_s e^(L_s − L) O_s
//
// An empty partial (L_s = −inf: the row saw no key there) weighs e^(−inf) = 0 and its O_s is
// never read, so it may hold anything. A NaN in any L_s makes O and L NaN. A row whose every
// partial is empty gets O = 0, L = −inf. The sums are fp32 whatever the partials' type.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../07_flash_attention_2/mma.cuh"  // pack_pair

namespace fa::step12 {

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

/// \brief Two 16-bit values in one 32-bit word → two floats (the lower half first).
template <class Element>
__device__ __forceinline__ float2 unpack_pair(uint32_t w) {
  if constexpr (std::is_same_v<Element, __nv_bfloat16>) {
    __nv_bfloat162 v;
    memcpy(&v, &w, 4);
    return __bfloat1622float2(v);
  } else {
    __half2 v;
    memcpy(&v, &w, 4);
    return __half22float2(v);
  }
}

/// \brief kCols (2 or 4) consecutive values at `src` → floats: fp32 (8 or 16 bytes, aligned),
/// or fp16/bf16 (4 or 8 bytes, aligned).
template <class Element, int kCols>
__device__ __forceinline__ void load_cols(const Element* src, float (&f)[kCols]) {
  static_assert(kCols == 2 || kCols == 4, "d = 64 or 128");
  if constexpr (std::is_same_v<Element, float>) {
    if constexpr (kCols == 2) {
      const float2 a = *reinterpret_cast<const float2*>(src);
      f[0] = a.x, f[1] = a.y;
    } else {
      const float4 a = *reinterpret_cast<const float4*>(src);
      f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w;
    }
  } else if constexpr (kCols == 2) {
    const float2 a = unpack_pair<Element>(*reinterpret_cast<const uint32_t*>(src));
    f[0] = a.x, f[1] = a.y;
  } else {
    const uint2 u = *reinterpret_cast<const uint2*>(src);
    const float2 a = unpack_pair<Element>(u.x), b = unpack_pair<Element>(u.y);
    f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
  }
}

/// \brief kCols (2 or 4) floats → consecutive Elements (fp16 or bf16) at `dst`, rounded to
/// nearest.
template <class Element, int kCols>
__device__ __forceinline__ void store_cols(Element* dst, const float (&f)[kCols]) {
  static_assert(kCols == 2 || kCols == 4, "d = 64 or 128");
  if constexpr (kCols == 2) {
    *reinterpret_cast<uint32_t*>(dst) = step07::pack_pair<Element>(f[0], f[1]);
  } else {
    *reinterpret_cast<uint2*>(dst) =
        make_uint2(step07::pack_pair<Element>(f[0], f[1]), step07::pack_pair<Element>(f[2], f[3]));
  }
}

/// \brief Merges the `num_parts` partials of one row (file comment), called by all 32 lanes of
/// a warp. Partial s has its L at lse[s · lse_stride] and its O at o + s · o_stride (the row's
/// kHeadDim values; Part is float, __half or __nv_bfloat16). Lane j gets columns
/// j·kHeadDim/32 … of the merged O in `acc` (fp32). \return the merged L, the same in every lane
template <int kHeadDim, class Part>
__device__ __forceinline__ float combine_row(int num_parts, const float* lse, int64_t lse_stride,
                                             const Part* o, int64_t o_stride,
                                             float (&acc)[kHeadDim / 32]) {
  constexpr int kCols = kHeadDim / 32;
  const int lane = threadIdx.x % 32;
  float big = -INFINITY;
  bool nan = false;
  for (int s = lane; s < num_parts; s += 32) {
    const float x = lse[s * lse_stride];
    big = fmaxf(big, x);  // fmaxf skips a NaN: remember it apart
    nan = nan || isnan(x);
  }
  big = warp_max(big);
  nan = __any_sync(0xffffffffu, nan);
  float sum = 0.f;
  if (big != -INFINITY)
    for (int s = lane; s < num_parts; s += 32) {
      // TODO(exercise): add partial s's term of Σ_s e^(L_s − M) to this lane's sum (L_s is
      // lse[s * lse_stride], M is big, the largest L_s of the row). The warp_sum below adds
      // the lanes' sums, and L = M + log(sum). As given, nothing is added: sum = 0, L = −inf
      // and O = 0 for every row.
    }
  sum = warp_sum(sum);
  const float out = nan ? NAN : big == -INFINITY ? -INFINITY : big + logf(sum);

#pragma unroll
  for (int c = 0; c < kCols; ++c) acc[c] = 0.f;
  if (out != -INFINITY) {
    for (int s = 0; s < num_parts; ++s) {
      // TODO(exercise): partial s's weight in O = Σ_s w_s · O_s, from L_s (lse[s * lse_stride])
      // and the row's L (out): the rescale of the online softmax, for a partial already
      // normalised by its own sum. As given, every weight is 0 and O = 0.
      const float w = nan ? NAN : 0.f;
      if (w == 0.f) continue;  // an empty partial: its O_s is never read
      float x[kCols];
      load_cols<Part, kCols>(o + s * o_stride + lane * kCols, x);
#pragma unroll
      for (int c = 0; c < kCols; ++c) acc[c] += w * x[c];
    }
  }
  return out;
}

}  // namespace fa::step12
