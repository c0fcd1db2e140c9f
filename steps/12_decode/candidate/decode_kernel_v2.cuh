// decode_kernel_v2.cuh — the first design of the candidate next version of step 12's split-KV
// attention kernel, on the CUDA cores. It was registered as the decoding step "12_decode_v2"
// until its measurement (docs/12-decode.md, "The next kernel, measured") called for the
// tensor-core kernel that the name runs now (decode_kernel_mma.cuh); bin/variants_12 still
// times it in several configurations (variants/variants.cu). The combine kernel and the append
// are the chapter's own; what changes is the attention kernel. Why, and what it should reach,
// is in decode_params.cuh ("The candidate next version").
//
//   attention, grid (num_splits, H_kv · row chunks of 8, B), block 32 · kWarps threads
//   (the configuration once registered, DecodeTraitsV2<d>: 4 warps, tiles of 64 keys, 3 stages):
//     Q rows of the group (≤ 8 per block, scaled, fp32) ──▶ sQ
//     the split's tiles of kBlockN keys through kStages cp.async stages (kStages − 1 tiles in
//     flight while one is computed; one block-table lookup per tile when page_size is a
//     multiple of kBlockN, one per key otherwise)
//     each warp: its own 16 keys of every tile, its own running (m, ℓ, O) for every row
//       S = Q Kᵀ        lanes j and j + 16 own key j, half of d each: 1 shuffle per key
//       mask, online softmax over the warp's 16 keys (4 shuffles per row)
//       O += P V        lane: 8 columns (16-byte loads) of 16 / G of the warp's keys,
//                       G = 32 / (d / 8) lanes share a column group
//     end of split: each warp's (O_w / ℓ_w, L_w) ──▶ shared memory; the block merges its
//     kWarps warps with combine_row(), the combine kernel's merge: O_s, L_s ──▶ workspace
//
// CUDA 13.0, sm_90, nvcc -Xptxas -v (fp16 and bf16 alike), the registered configuration:
// d = 64, 146 registers, 56 KB of shared memory; d = 128, 144 registers, 106 KB (two blocks
// per SM); no spills. The other configurations' counts: bin/variants_12's table.
#pragma once

#include "split_tiles.cuh"  // the split's tiles and their copies; the chapter's helpers

namespace fa::step12 {

/// \brief 8 consecutive 16-bit values at `src` (16 bytes, aligned, shared memory) → floats.
template <class Element>
__device__ __forceinline__ void load_8(const Element* src, float (&f)[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(src);
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 x = unpack_pair<Element>(w[j]);
    f[2 * j] = x.x, f[2 * j + 1] = x.y;
  }
}

// ---------------------------------------------------------------------------------------------
// The candidate's split-KV attention kernel
// ---------------------------------------------------------------------------------------------
template <class Traits, class Element>
__global__ void __launch_bounds__(Traits::kThreads)
    decode_attention_v2_kernel(const __grid_constant__ DecodeParams p) {
  constexpr int kD = Traits::kHeadDim, kN = Traits::kBlockN, kW = Traits::kWarps;
  constexpr int kR = Traits::kMaxRows, kStride = Traits::kStride, kS = Traits::kStages;
  constexpr int kChunks = Traits::kChunksPerRow, kKeys = Traits::kKeysPerWarp;
  constexpr int kHalfChunks = kChunks / 2;        // the QK dot product: half a key per lane
  constexpr int kColGroups = Traits::kColGroups;  // PV: 8 columns (16 bytes) per lane
  constexpr int kG = 32 / kColGroups;             // lanes sharing one column group
  constexpr int kOutCols = kD / 32;               // columns per lane in combine_row

  extern __shared__ __align__(16) unsigned char smem[];
  float* sQ = reinterpret_cast<float*>(smem);                         // [kR][kD]
  Element* sKV = reinterpret_cast<Element*>(smem + Traits::kQBytes);  // [stage][K, V][kN][kStride]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int split = blockIdx.x;
  const int g = blockIdx.y / p.row_chunks, chunk = blockIdx.y % p.row_chunks;
  const int b = blockIdx.z;
  const int row0 = chunk * kR;
  const int rows = min(kR, p.group * p.q_len - row0);

  // The split's tiles: the same rule as the chapter's kernel (⌈tiles / num_splits⌉ each).
  const SplitTiles st = split_tiles<kN>(p, b, split);
  const int cache_len = st.cache_len, t_begin = st.t_begin, t_end = st.t_end;
  const int key_end = st.key_end;

  const int64_t rows_all = int64_t{p.batch} * p.heads_q * p.q_len;
  const int64_t part_row0 =
      split * rows_all + (int64_t{b} * p.heads_q + int64_t{g} * p.group) * p.q_len + row0;

  if (t_begin >= t_end) {  // an empty split: O_s = 0, L_s = −inf
    for (int x = tid; x < rows * kD; x += Traits::kThreads) p.o_part[part_row0 * kD + x] = 0.f;
    for (int r = tid; r < rows; r += Traits::kThreads) p.lse_part[part_row0 + r] = -INFINITY;
    return;
  }

  // Tile `tile` into stage `stage` (split_tiles.cuh).
  auto load_tile = [&](int tile, int stage) {
    Element* sK = sKV + (2 * stage) * kN * kStride;
    load_tile_async<kD, kN, kStride, Traits::kThreads>(p, b, g, tile, key_end, sK,
                                                       sK + kN * kStride);
  };
  // The prologue: tiles t_begin … t_begin + kS − 2 in flight (one group each, maybe empty).
#pragma unroll
  for (int s = 0; s < kS - 1; ++s) {
    if (t_begin + s < t_end) load_tile(t_begin + s, s);
    cp_async_commit();
  }

  load_q<kD, Traits::kThreads, Element>(p, b, g, row0, rows, sQ);

  // The lane's roles. QK: key qk_key of the warp's kKeys, dims [half · kD/2, (half + 1) · kD/2).
  // PV: columns cg · 8 … cg · 8 + 7, keys kg, kg + kG, … of the warp's kKeys.
  const int qk_key = lane % kKeys, half = lane / kKeys;
  const int cg = lane % kColGroups, kg = lane / kColGroups;
  // Per row r: the running max m (log2 units, the same in every lane), ℓ's share of key
  // qk_key (lanes j and j + 16 hold the same), and this lane's 8 columns of O over its keys.
  float m[kR], l[kR], o[kR][8];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.f;
#pragma unroll
    for (int c = 0; c < 8; ++c) o[r][c] = 0.f;
  }

  for (int t = t_begin; t < t_end; ++t) {
    const int stage = (t - t_begin) % kS;
    cp_async_wait<kS - 2>();  // tile t has landed (this thread's copies) …
    __syncthreads();          // … everyone's, and every warp is done with tile t − 1's stage
    {                         // refill the stage tile t − 1 used with tile t + kS − 1
      const int next = t + kS - 1;
      if (next < t_end) load_tile(next, (stage + kS - 1) % kS);
      cp_async_commit();
    }
    const Element* sK = sKV + (2 * stage) * kN * kStride + warp * kKeys * kStride;
    const Element* sV = sK + kN * kStride;
    const int key0 = t * kN + warp * kKeys;  // the warp's first key

    // S = Q Kᵀ: lane reads its half of key qk_key once, 16 bytes at a time, for every row.
    float s[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) s[r] = 0.f;
#pragma unroll
    for (int c = 0; c < kHalfChunks; ++c) {
      const int col = (half * kHalfChunks + c) * 8;
      float k[8];
      load_8<Element>(sK + qk_key * kStride + col, k);
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        if (r >= rows) break;  // the same for the whole block
        const float4 qa = *reinterpret_cast<const float4*>(sQ + r * kD + col);
        const float4 qb = *reinterpret_cast<const float4*>(sQ + r * kD + col + 4);
        s[r] += qa.x * k[0] + qa.y * k[1] + qa.z * k[2] + qa.w * k[3] + qb.x * k[4] + qb.y * k[5] +
                qb.z * k[6] + qb.w * k[7];
      }
    }

    // Mask and online softmax over the warp's kKeys keys, row by row; p[r] is key qk_key's.
    float pr[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      pr[r] = 0.f;
      if (r >= rows) break;
      const float full = s[r] + __shfl_xor_sync(0xffffffffu, s[r], kKeys);  // the two halves
      const int i = (row0 + r) % p.q_len;
      const int limit = min(key_end, cache_len + i + 1);
      const float sk = key0 + qk_key < limit ? full : -INFINITY;
      float mx = sk;
#pragma unroll
      for (int off = kKeys / 2; off > 0; off /= 2)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float m_new = fmaxf(m[r], mx);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;  // no NaN from −inf − (−inf)
      const float alpha = exp2f(m[r] - m_use);
      pr[r] = exp2f(sk - m_use);
      l[r] = l[r] * alpha + pr[r];
      m[r] = m_new;
#pragma unroll
      for (int c = 0; c < 8; ++c) o[r][c] *= alpha;
    }

    // O += P V: 16-byte loads of V, P from the lane that owns the key (a shuffle per key and
    // row). Zero-filled keys past the end have P = 0 and V = 0.
#pragma unroll
    for (int j = 0; j < kKeys / kG; ++j) {
      const int key = kg + kG * j;
      float v[8];
      load_8<Element>(sV + key * kStride + cg * 8, v);
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        if (r >= rows) break;
        const float pj = __shfl_sync(0xffffffffu, pr[r], key);
#pragma unroll
        for (int c = 0; c < 8; ++c) o[r][c] += pj * v[c];
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the stages: they now hold the warps' partials

  // Each warp's partial per row: O_w = O / ℓ_w and L_w (natural log), or L_w = −inf when the
  // warp saw no key of the row. Stored [warp][row][kD] and [warp][row] over the stages.
  float* sO = reinterpret_cast<float*>(sKV);
  float* sL = sO + kW * kR * kD;
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    if (r >= rows) break;
    float lsum = l[r];
#pragma unroll
    for (int off = kKeys / 2; off > 0; off /= 2) lsum += __shfl_xor_sync(0xffffffffu, lsum, off);
#pragma unroll
    for (int off = kColGroups; off < 32; off *= 2) {  // the kG lanes of a column group
#pragma unroll
      for (int c = 0; c < 8; ++c) o[r][c] += __shfl_xor_sync(0xffffffffu, o[r][c], off);
    }
    const bool empty = lsum == 0.f;
    const float inv = empty ? 0.f : 1.f / lsum;
    if (kg == 0) {
      float* dst = sO + (warp * kR + r) * kD + cg * 8;
      *reinterpret_cast<float4*>(dst) =
          make_float4(o[r][0] * inv, o[r][1] * inv, o[r][2] * inv, o[r][3] * inv);
      *reinterpret_cast<float4*>(dst + 4) =
          make_float4(o[r][4] * inv, o[r][5] * inv, o[r][6] * inv, o[r][7] * inv);
    }
    if (lane == 0) sL[warp * kR + r] = empty ? -INFINITY : (m[r] + log2f(lsum)) * kLn2;
  }
  __syncthreads();

  // The in-block merge: the combine kernel's combine_row over the kW warps' partials, warp w
  // merging rows w, w + kW, …; an empty warp weighs 0, a row empty in every warp gives
  // O_s = 0, L_s = −inf, as in the chapter's kernel.
  for (int r = warp; r < rows; r += kW) {
    float acc[kOutCols];
    const float lse = combine_row<kD, float>(kW, sL + r, kR, sO + r * kD, int64_t{kR} * kD, acc);
    float* dst = p.o_part + (part_row0 + r) * kD + lane * kOutCols;
    if constexpr (kOutCols == 2) {
      *reinterpret_cast<float2*>(dst) = make_float2(acc[0], acc[1]);
    } else {
      *reinterpret_cast<float4*>(dst) = make_float4(acc[0], acc[1], acc[2], acc[3]);
    }
    if (lane == 0) p.lse_part[part_row0 + r] = lse;
  }
}

}  // namespace fa::step12
