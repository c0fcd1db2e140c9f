// flash_fwd_kernel.cuh — step 05's kernel: step 04's flash kernel with both products on the
// tensor cores through WMMA.
//
// One block of 4 warps owns kBlockM = 64 query rows of one (batch, head); warp w owns rows
// [16w, 16w + 16), one row of 16 × 16 fragments (kernel_traits.cuh draws who owns what):
//
//   load Q tile → shared                                     (once)
//   for each K/V tile of kBlockN keys the block can see:
//     load K, V tiles → shared; __syncthreads()               (barrier 1: the tiles are in)
//     S  = Q Kᵀ             WMMA, fp32 fragments → smem       (16 × kBlockN per warp)
//     online softmax        per row in smem: m, ℓ in registers; P (16-bit) overwrites S
//     O  = α·O + P V        α applied to the accumulator fragments, then WMMA
//     __syncthreads()                                         (barrier 2: K, V free again)
//   O = O / ℓ → 16 bits, L = m + log ℓ → HBM                  (the only writes)
//
// The loads are plain: every thread reads its 16-byte chunks of a tile from global memory
// into registers, then writes them to shared memory (load_tile). So the block waits for each
// tile: the loads of tile t + 1 start only once every warp is done with tile t. Two barriers
// per tile, as in step 04:
//   barrier 1 (after the loads)   every thread's chunks of K(t) and V(t) (and at t = 0, Q) are
//                                 in shared memory before any warp reads them as fragments;
//   barrier 2 (end of the tile)   every warp has finished reading K(t) and V(t), so the next
//                                 tile's loads may overwrite them.
// Between the two, a warp touches only its own rows of S, P and the row scales, so it
// synchronises with itself (__syncwarp), never with the block.
//
// Not yet: overlapping loads with compute (step 07): while a tile is loaded the tensor
// cores wait, and while it is computed the memory system does.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda_check.h"
#include "kernel_traits.cuh"
#include "mask.cuh"
#include "mma.cuh"
#include "online_softmax.cuh"

namespace fa::step05 {

/// \brief tile [kRows][kTileStride] ← rows [0, kRows) of `src` (row stride in elements), zero
/// rows at and past `valid_rows`. Consecutive threads copy consecutive 16-byte chunks of a
/// row: coalesced reads, conflict-free shared writes. No transpose (step 04 needed one):
/// WMMA reads K as Kᵀ by declaring it col_major. A thread first reads all its chunks into
/// registers, so that their loads are in flight together, then stores them; a barrier must
/// come before any other thread reads the tile.
template <class Traits, int kRows, class T>
__device__ __forceinline__ void load_tile(T* tile, const T* __restrict__ src, int row_stride,
                                          int valid_rows) {
  constexpr int kChunksPerRow = Traits::kHeadDim * sizeof(T) / 16;  // 16-byte chunks in a row
  constexpr int kRowsPerPass = Traits::kNumThreads / kChunksPerRow;
  constexpr int kElemsPerChunk = 16 / sizeof(T);
  constexpr int kPasses = kRows / kRowsPerPass;
  static_assert(Traits::kNumThreads % kChunksPerRow == 0 && kRows % kRowsPerPass == 0, "");
  const int row = threadIdx.x / kChunksPerRow;
  const int col = (threadIdx.x % kChunksPerRow) * kElemsPerChunk;
  T* dst = tile + row * Traits::kTileStride + col;
  const T* src_row = src + row * row_stride + col;
  const int rows_left = valid_rows - row;
  uint4 chunk[kPasses];
#pragma unroll
  for (int i = 0; i < kPasses; ++i)  // a row past the end is not read: it becomes zeros
    chunk[i] = i * kRowsPerPass < rows_left
                   ? *reinterpret_cast<const uint4*>(src_row + i * kRowsPerPass * row_stride)
                   : make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int i = 0; i < kPasses; ++i)
    *reinterpret_cast<uint4*>(dst + i * kRowsPerPass * Traits::kTileStride) = chunk[i];
}

// ---------------------------------------------------------------------------------------------
// The kernel. grid: (⌈N_q / kBlockM⌉, B·H_q), block: kNumThreads, dynamic smem: kSmemBytes.
// ---------------------------------------------------------------------------------------------
template <class Traits, bool IsCausal>
__global__ void __launch_bounds__(Traits::kNumThreads, Traits::kMinBlocksPerSm)
    flash_fwd_kernel(const __grid_constant__ FwdParams p) {
  using T = typename Traits::Element;
  constexpr int kFrag = Traits::kFrag;

  extern __shared__ __align__(128) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem);  // Q [kBlockM][kTileStride], whole kernel
  T* sK = sQ + Traits::kQElems;        // K [kBlockN][kTileStride], one tile
  T* sV = sK + Traits::kKVElems;       // V [kBlockN][kTileStride], one tile
  float* sS = reinterpret_cast<float*>(sV + Traits::kKVElems);  // S [kBlockM][kSStride], one tile
  float* sRowScale = sS + Traits::kSFloats;                     // α or 1/ℓ [kBlockM]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // This warp's 16 rows of each tile. Only this warp touches them.
  const T* sQ_w = sQ + warp * Traits::kWarpRows * Traits::kTileStride;  // Q [16][kTileStride]
  float* sS_w = sS + warp * Traits::kWarpRows * Traits::kSStride;       // S [16][kSStride]
  // TUTORIAL: P overwrites S in place. A lane reads all its scores into registers first, the
  // warp synchronises, and only then is P written — into the same bytes, with its own row
  // stride, [16][kPStride] 16-bit values in the first half of the warp's S rows. Step 04 did
  // the same in registers (s became p); here it saves 9 KB of shared memory per block, which
  // is what lets three blocks share an SM at d = 128.
  T* sP_w = reinterpret_cast<T*>(sS_w);                    // P [16][kPStride]
  float* sScale_w = sRowScale + warp * Traits::kWarpRows;  // [16]

  // The softmax's view: lanes 2r, 2r + 1 hold row r of this warp's S.
  const int r = lane / Traits::kRowLanes;     // row within the warp's 16
  const int half = lane % Traits::kRowLanes;  // which of the row's lanes (its columns: col_of)

  // TUTORIAL: with a causal mask, late query blocks visit many K/V tiles and early ones few.
  // Blocks are launched roughly in blockIdx order, so hand out the longest first: the short
  // ones then fill the gaps at the end instead of a long one running alone.
  const int m_block = IsCausal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int m0 = m_block * Traits::kBlockM;             // first query row of this block
  const int row_i = m0 + warp * Traits::kWarpRows + r;  // the query row this lane's softmax holds
  const int bh = blockIdx.y, b = bh / p.heads_q, h = bh % p.heads_q;
  const int h_kv = h / p.group;  // the K/V head this query head reads (GQA)
  const int q_off = b * p.q_batch_stride + h * p.q_head_stride;
  const int kv_off = b * p.kv_batch_stride + h_kv * p.kv_head_stride;
  const T* q_head = static_cast<const T*>(p.q) + q_off;
  const T* k_head = static_cast<const T*>(p.k) + kv_off;
  const T* v_head = static_cast<const T*>(p.v) + kv_off;

  const KvTiles tiles = kv_tiles<IsCausal>(m0, Traits::kBlockM, Traits::kBlockN, p.n_q, p.n_kv);

  int acc_row[kAccElems];  // tile row (0-15) of each element of an accumulator fragment
  accumulator_rows(acc_row, sS_w, Traits::kSStride);  // uses this warp's S rows as scratch

  // Prologue: Q, made visible by the first tile's barrier 1. Query rows past N_q are zeros:
  // they compute finite garbage that is never stored. A block whose rows see no key at all
  // loads nothing and goes straight to the epilogue (O = 0, L = -inf).
  if (tiles.num_tiles > 0)
    load_tile<Traits, Traits::kBlockM>(sQ, q_head + m0 * p.q_row_stride, p.q_row_stride,
                                       p.n_q - m0);

  FragAcc acc_o[Traits::kOFrags];  // O accumulator, registers: this warp's 16 rows × d, fp32
#pragma unroll
  for (int f = 0; f < Traits::kOFrags; ++f) wmma::fill_fragment(acc_o[f], 0.f);
  OnlineSoftmax<Traits::kRowLanes> softmax;  // state of row row_i
  softmax.init();

  for (int t = 0; t < tiles.num_tiles; ++t) {
    const int n0 = t * Traits::kBlockN;  // first key of this tile
    load_tile<Traits, Traits::kBlockN>(sK, k_head + n0 * p.kv_row_stride, p.kv_row_stride,
                                       p.n_kv - n0);
    load_tile<Traits, Traits::kBlockN>(sV, v_head + n0 * p.kv_row_stride, p.kv_row_stride,
                                       p.n_kv - n0);  // zeros past N_kv: 0·V
    // Barrier 1: K(t) and V(t) (and at t = 0, Q) are complete in shared memory.
    __syncthreads();

    // ---- S = Q Kᵀ for this warp's 16 rows: 16 × kBlockN, fp32 (unscaled) ----
    FragAcc acc_s[Traits::kSFrags];  // S, registers: 16 rows × 16 keys each
#pragma unroll
    for (int j = 0; j < Traits::kSFrags; ++j) wmma::fill_fragment(acc_s[j], 0.f);
      // The k-loops of both products are not unrolled: unrolled, the compiler hoists every
      // fragment load of the tile (up to 32 K or V fragments) and runs out of registers. The
      // 12-16 warps on each SM hide the load latency instead.
#pragma unroll 1
    for (int kk = 0; kk < Traits::kDimSteps; ++kk) {
      // TODO(exercise): k-step kk (head dims 16kk … 16kk + 15) of S = Q Kᵀ for this warp's 16
      // rows. Load the warp's Q fragment (a FragA<T>, from its rows sQ_w) once; then, for each
      // of the kSFrags blocks of 16 keys, load the Kᵀ fragment (a FragKt<T>, from sK) and
      // accumulate a_q · b_k into acc_s[j] with wmma::mma_sync. Load with load_fragment
      // (mma.cuh), strides in elements. As given, nothing is loaded and S stays 0.
    }
    // TUTORIAL: the round trip. The softmax needs, for every row, the max over its 64 scores;
    // the scores are in acc_s, but WMMA does not say which lanes hold a given row (the row map
    // of mma.cuh tells us rows, yet a row's 64 values are spread over lanes we would have to
    // find and shuffle between). Storing S and reading it back by row is simple and correct; it
    // costs 2 × 4 KB of shared-memory traffic per warp and tile, plus 2 × 2 KB for P.
#pragma unroll
    for (int j = 0; j < Traits::kSFrags; ++j)
      wmma::store_matrix_sync(sS_w + j * kFrag, acc_s[j], Traits::kSStride, wmma::mem_row_major);
    __syncwarp();  // S rows visible to the lanes that own them

    // ---- Online softmax on row row_i: lanes 2r, 2r+1 each hold 32 of its 64 scores ----
    float s[Traits::kColsPerLane];  // this lane's scores of row r, raw q·k
    {
      const float* s_row = sS_w + r * Traits::kSStride;
#pragma unroll
      for (int c = 0; c < Traits::kColsPerLane; c += 4) {
        const float4 x = *reinterpret_cast<const float4*>(s_row + Traits::col_of(half, c));
        s[c] = x.x;
        s[c + 1] = x.y;
        s[c + 2] = x.z;
        s[c + 3] = x.w;
      }
    }
    __syncwarp();                 // every lane has its scores: P may now overwrite S
    if (t >= tiles.num_unmasked)  // only tiles crossing the diagonal or the end of K
      apply_mask<IsCausal, Traits>(s, row_i, n0, half, p.n_q, p.n_kv);
    unsigned prob[Traits::kColsPerLane / 2];  // P = exp2(s·scale·log2e − m) in T, 2 per word
    const float alpha = softmax.template update<T>(s, prob, p.scale_log2);
    {
      T* p_row = sP_w + r * Traits::kPStride;
#pragma unroll
      for (int c = 0; c < Traits::kColsPerLane; c += 4)  // 4 values (8 bytes) per store
        *reinterpret_cast<uint2*>(p_row + Traits::col_of(half, c)) =
            make_uint2(prob[c / 2], prob[c / 2 + 1]);
    }
    if (half == 0) sScale_w[r] = alpha;

    __syncwarp();  // P and α visible to the whole warp

    // ---- O = diag(α) · O + P V ----
    scale_rows(acc_o, sScale_w, acc_row);
#pragma unroll 1
    for (int kk = 0; kk < Traits::kKeySteps; ++kk) {
      // TODO(exercise): k-step kk (keys 16kk … 16kk + 15) of O += P V for this warp's 16 rows:
      // the warp's P fragment (a FragA<T>, from sP_w — mind its row stride), then, for each of
      // the kOFrags blocks of 16 head dims, the V fragment (a FragV<T>, from sV) and
      // wmma::mma_sync into acc_o[f]. As given, nothing is added and O stays 0.
    }
    // Barrier 2: every warp has finished reading K(t) and V(t), so the next tile's loads may
    // overwrite them (and this warp's S/P rows and row scales are free again).
    __syncthreads();
  }

  // ---- Epilogue: O = O / ℓ, L = m + log ℓ, the only writes to device memory ----
  float row_lse;
  const float inv_l = softmax.finalize(&row_lse);
  __syncwarp();  // every lane of the warp is done with sScale_w, sS_w and sP_w
  if (half == 0) sScale_w[r] = inv_l;
  __syncwarp();
  scale_rows(acc_o, sScale_w, acc_row);

  // O leaves through the warp's S rows, kOutCols columns at a time: fragments → fp32 smem →
  // 16-bit, 16-byte stores, consecutive lanes writing consecutive chunks of a row (coalesced).
  T* o_head = static_cast<T*>(p.o) + q_off;
  constexpr int kChunksPerRow = Traits::kOutCols / 8;  // 8 values = 16 bytes per chunk
  constexpr int kChunksPerLane = Traits::kWarpRows * kChunksPerRow / 32;
  static_assert(Traits::kWarpRows * kChunksPerRow % 32 == 0, "whole chunks per lane");
#pragma unroll
  for (int c0 = 0; c0 < Traits::kHeadDim; c0 += Traits::kOutCols) {
#pragma unroll
    for (int f = 0; f < Traits::kOutCols / kFrag; ++f)
      wmma::store_matrix_sync(sS_w + f * kFrag, acc_o[c0 / kFrag + f], Traits::kSStride,
                              wmma::mem_row_major);
    __syncwarp();
#pragma unroll
    for (int it = 0; it < kChunksPerLane; ++it) {
      const int e = it * 32 + lane;  // chunk e: row e / kChunksPerRow of the warp's 16
      const int rr = e / kChunksPerRow, col = (e % kChunksPerRow) * 8;
      const int i = m0 + warp * Traits::kWarpRows + rr;
      if (i >= p.n_q) continue;  // the block's tail rows past N_q
      const float* src = sS_w + rr * Traits::kSStride + col;
      const float4 x0 = *reinterpret_cast<const float4*>(src);
      const float4 x1 = *reinterpret_cast<const float4*>(src + 4);
      const uint4 packed = make_uint4(pack_pair<T>(x0.x, x0.y), pack_pair<T>(x0.z, x0.w),
                                      pack_pair<T>(x1.x, x1.y), pack_pair<T>(x1.z, x1.w));
      // __stwb is a plain store (write-back, the default cache policy) that is always ONE
      // 16-byte instruction; written as `*reinterpret_cast<uint4*>(dst) = packed`, nvcc 13.0
      // splits some of these into four 4-byte stores.
      __stwb(reinterpret_cast<uint4*>(o_head + i * p.q_row_stride + c0 + col), packed);
    }
    __syncwarp();  // before the next pass overwrites the staging rows
  }
  if (half == 0 && row_i < p.n_q) p.lse[bh * p.n_q + row_i] = row_lse;
}

// ---------------------------------------------------------------------------------------------
// Host side: one launch per call.
// ---------------------------------------------------------------------------------------------
template <class Traits, bool IsCausal>
void launch_flash_fwd(const FwdParams& p, cudaStream_t stream) {
  const auto kernel = flash_fwd_kernel<Traits, IsCausal>;
  // Above 48 KB of dynamic shared memory a kernel must opt in; preferring the largest
  // shared-memory carveout lets 3-4 blocks share an SM (what the tile sizes are chosen for).
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(Traits::kSmemBytes)));
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  cudaSharedmemCarveoutMaxShared));
  const dim3 grid((p.n_q + Traits::kBlockM - 1) / Traits::kBlockM, p.batch * p.heads_q);
  kernel<<<grid, Traits::kNumThreads, Traits::kSmemBytes, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

template <int kHeadDim, class Element>
void run_flash_fwd(const FwdParams& p, cudaStream_t stream) {
  using Traits = typename FwdConfig<kHeadDim, Element>::Traits;
  if (p.causal)
    launch_flash_fwd<Traits, true>(p, stream);
  else
    launch_flash_fwd<Traits, false>(p, stream);
}

}  // namespace fa::step05
