// flash_fwd_kernel.cuh — step 07's kernel: FlashAttention-2's forward pass on mma.sync.
//
// One CTA of 4 warps owns kBlockM = 128 query rows of one (batch, head); warp w owns rows
// [32w, 32w + 32) (kernel_traits.cuh says why). Everything a warp computes stays in its
// registers, in the accumulator layout of mma.sync (mma.cuh):
//
//   prologue:  Q, K/V of visits 0 … kStages−2 ──cp.async──▶ sQ, stages 0 … kStages−2
//   for each visit it = 0, 1, … (the K/V tiles the block can see, from the last to the first):
//     wait for visit it's copies; __syncthreads()         (the only barrier per tile)
//     cp.async K/V of visit it + kStages − 1 ──▶ the stage visit it − 1 used
//     S  = Q Kᵀ         32 × kBlockN per warp, fp32 in registers   (ldmatrix + mma)
//     mask S            only tiles crossing the causal diagonal or the end of K
//     online softmax    row max over the quad, S → P in place, O rescaled by α
//     P  → 16 bits      the S accumulators become A fragments (no shared memory)
//     O += P V          32 × kHeadDim per warp, fp32 in registers  (ldmatrix.trans + mma)
//   O = O / ℓ → 16 bits → this warp's rows of sQ → 16-byte coalesced stores; L = m + log ℓ
//
// The kStages buffers ("stages") of K and V, visit by visit, drawn for kStages = 3 (FwdConfig
// in kernel_traits.cuh picks the number for each head dim and mask):
//
//                 it = 0        it = 1        it = 2        it = 3
//   stage 0:   compute 0  │  ← load 3   │   in flight │ compute 3  │ …
//   stage 1:   in flight  │  compute 1  │  ← load 4   │  in flight │ …
//   stage 2:   ← load 2   │  in flight  │  compute 2  │  ← load 5  │ …
//
// Every copy has kStages − 1 tiles of compute to land. A stage is refilled right after the barrier
// at the top of an iteration, which no warp passes before every warp has finished computing
// the previous tile — the last reader of that stage.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda_check.h"
#include "kernel_traits.cuh"
#include "mask.cuh"
#include "mma.cuh"
#include "online_softmax.cuh"

namespace fa::step07 {

/// \brief Starts copying rows [0, kRows) of a tile in global memory into a swizzled
/// [kRows][kHeadDim] tile in shared memory; rows at and past `valid_rows` become zeros.
/// Asynchronous: cp_async_commit(), cp_async_wait<>() and a barrier before use.
///
/// Thread `tid` copies chunk tid % kChunksPerRow of rows tid / kChunksPerRow + i·kRowsPerPass:
/// consecutive lanes read consecutive 16 bytes of a row (coalesced), and since kRowsPerPass is
/// a multiple of 8 every row a thread copies has the same row % 8, so its swizzled column
/// is the same for all of them.
/// \param g_tile      the tile's first row (must be a valid row: it is the dummy source of
///                    the zero-filled copies)
/// \param row_stride  elements between rows
template <class Traits, int kRows>
__device__ __forceinline__ void load_tile_async(uint32_t s_tile,
                                                const typename Traits::Element* g_tile,
                                                int row_stride, int valid_rows) {
  constexpr int kChunksPerRow = Traits::kChunksPerRow;
  constexpr int kRowsPerPass = Traits::kNumThreads / kChunksPerRow;
  static_assert(kRowsPerPass % 8 == 0 && kRows % kRowsPerPass == 0, "whole passes");
  const int row = threadIdx.x / kChunksPerRow, chunk = threadIdx.x % kChunksPerRow;
  const uint32_t dst = s_tile + Traits::swizzle(row, chunk);
  const int src = row * row_stride + chunk * 8;  // elements from g_tile, first pass
#pragma unroll
  for (int i = 0; i < kRows / kRowsPerPass; ++i) {
    const bool valid = row + i * kRowsPerPass < valid_rows;
    // A row past the end reads nothing (src-size 0) but still names an in-bounds address:
    // the tile's first row.
    const int offset = valid ? src + i * kRowsPerPass * row_stride : 0;
    cp_async_16(dst + i * kRowsPerPass * Traits::kRowBytes, g_tile + offset, valid);
  }
}

// ---------------------------------------------------------------------------------------------
// The kernel. grid: (⌈N_q / kBlockM⌉, H_q, B), block: kNumThreads, dynamic smem: kSmemBytes.
// ---------------------------------------------------------------------------------------------
template <class Traits, bool IsCausal>
__global__ void __launch_bounds__(Traits::kNumThreads, Traits::kMinBlocksPerSm)
    flash_fwd_kernel(const __grid_constant__ FwdParams p) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
  constexpr int kWarpRows = Traits::kWarpRows, kMmaM = Traits::kMmaM;
  constexpr int kNTilesS = Traits::kNTilesS, kNTilesO = Traits::kNTilesO;
  constexpr int kKStepsS = Traits::kKStepsS, kKStepsO = Traits::kKStepsO;
  constexpr int kRowBytes = Traits::kRowBytes, kChunksPerRow = Traits::kChunksPerRow;
  constexpr int kStages = Traits::kStages;

  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sQ = smem_u32(smem);                               // [kBlockM][kHeadDim]
  const uint32_t sK = sQ + Traits::kQBytes;                         // [kStages][kBlockN][kHeadDim]
  const uint32_t sV = sK + Traits::kStages * Traits::kKVTileBytes;  // [kStages][kBlockN][kHeadDim]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;  // mma.cuh: lane (g, t) holds rows g, g+8, cols 2t, 2t+1

  // TUTORIAL: with a causal mask, late query blocks visit many K/V tiles and early ones few.
  // Blocks are launched roughly in blockIdx order, so hand out the longest first: the short
  // ones then fill the gaps at the end instead of a long one running alone.
  const int m_block = IsCausal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int m0 = m_block * kBlockM;  // first query row of this block
  const int h = blockIdx.y, b = blockIdx.z;
  const int h_kv = h / p.group;  // the K/V head this query head reads (GQA)
  const int q_off = b * p.q_batch_stride + h * p.q_head_stride;
  const int kv_off = b * p.kv_batch_stride + h_kv * p.kv_head_stride;
  const Element* q_head = static_cast<const Element*>(p.q) + q_off;
  const Element* k_head = static_cast<const Element*>(p.k) + kv_off;
  const Element* v_head = static_cast<const Element*>(p.v) + kv_off;

  const KvTiles tiles = kv_tiles<IsCausal>(m0, kBlockM, kBlockN, p.n_q, p.n_kv);
  const int num_masked = tiles.num_tiles - tiles.num_unmasked;  // visited first

  // Per-lane ldmatrix rows (mma.cuh: lanes 8i … 8i+7 point at the 8 rows of matrix i):
  //   Q (A of S = Q Kᵀ):    matrices (rows 0-7, k 0-7) (rows 8-15, k 0-7) (rows 0-7, k 8-15)
  //                         (rows 8-15, k 8-15) = a0 a1 a2 a3: row lane % 16, chunk lane / 16.
  //   K (B of S, 2 n8 tiles): (keys 0-7, k 0-7) (keys 0-7, k 8-15) (keys 8-15, k 0-7)
  //                         (keys 8-15, k 8-15) = b0 b1 of n8 tile 0, b0 b1 of n8 tile 1:
  //                         key lane % 8 + 8·(lane / 16), chunk (lane / 8) % 2.
  //   V (B of O += P V, transposed, 2 n8 tiles of dims): (keys 0-7, dims 0-7) (keys 8-15,
  //                         dims 0-7) (keys 0-7, dims 8-15) (keys 8-15, dims 8-15):
  //                         key lane % 16, chunk lane / 16.
  // Each is the byte offset of the lane's row and chunk (0 or 1) for k step 0. Step j reads
  // chunk c + 2j = c ^ 2j instead, and since the swizzle is itself an XOR,
  //     swizzle(row, c ^ 2j) = swizzle(row, c) ^ 32·j     (kernel_traits.cuh)
  // — one XOR with a constant per k step, no per-step swizzle arithmetic. (Step 06's
  // `+ 32·j` on its padded tiles is the same number there; on a swizzled tile only the XOR is.)
  const uint32_t q_lane = Traits::swizzle(warp * kWarpRows + lane % 16, lane / 16);
  const uint32_t k_lane = Traits::swizzle(lane % 8 + 8 * (lane / 16), (lane / 8) % 2);
  const uint32_t v_lane = Traits::swizzle(lane % 16, lane / 16);

  // The K/V tile visited at iteration `it` is tile num_tiles − 1 − it: last to first, so that
  // the tiles that need a mask come first (mask.cuh).
  auto load_kv_async = [&](int it, int stage) {
    const int n0 = (tiles.num_tiles - 1 - it) * kBlockN;
    const uint32_t offset = stage * Traits::kKVTileBytes;
    load_tile_async<Traits, kBlockN>(sK + offset, k_head + n0 * p.kv_row_stride, p.kv_row_stride,
                                     p.n_kv - n0);
    load_tile_async<Traits, kBlockN>(sV + offset, v_head + n0 * p.kv_row_stride, p.kv_row_stride,
                                     p.n_kv - n0);  // zeros past N_kv: 0·V
  };

  // Prologue: Q and the first K/V tile in one cp.async group, then the next kStages − 2 tiles
  // in one group each. A block with nothing to see loads nothing and falls through to the
  // epilogue with O = 0, ℓ = 0.
  if (tiles.num_tiles > 0)
    load_tile_async<Traits, kBlockM>(sQ, q_head + m0 * p.q_row_stride, p.q_row_stride,
                                     p.n_q - m0);  // rows past N_q: zeros, never stored
#pragma unroll
  for (int it = 0; it < kStages - 1; ++it) {
    if (it < tiles.num_tiles) load_kv_async(it, it);
    cp_async_commit();  // possibly empty: keeps "group i = tile visited at iteration i"
  }

  float acc_o[kMmaM][kNTilesO][4];  // O accumulator: warp's 32 rows × kHeadDim, fp32 registers
#pragma unroll
  for (int mi = 0; mi < kMmaM; ++mi)
#pragma unroll
    for (int nt = 0; nt < kNTilesO; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[mi][nt][e] = 0.f;
  OnlineSoftmax<kMmaM> softmax;
  softmax.init();

  for (int it = 0; it < tiles.num_tiles; ++it) {
    const int n0 = (tiles.num_tiles - 1 - it) * kBlockN;  // first key of this tile
    const int stage = it % kStages;
    const uint32_t k_lane_t = stage * Traits::kKVTileBytes + k_lane;  // in this tile's stage
    const uint32_t v_lane_t = stage * Traits::kKVTileBytes + v_lane;

    // Group `it` (this tile) has landed once at most kStages − 2 newer groups are in flight.
    // After the barrier every thread's copies are visible, and every warp has finished the
    // previous tile, whose stage is now refilled with the tile kStages − 1 iterations ahead.
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const int it_load = it + kStages - 1;
    if (it_load < tiles.num_tiles) load_kv_async(it_load, it_load % kStages);
    cp_async_commit();  // possibly empty, as above

    // ---- S = Q Kᵀ (unscaled): the warp's 32 rows × kBlockN keys ---------------------------
    float s[kMmaM][kNTilesS][4];  // S tile, registers, mma accumulator layout
#pragma unroll
    for (int mi = 0; mi < kMmaM; ++mi)
#pragma unroll
      for (int nt = 0; nt < kNTilesS; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mi][nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kKStepsS; ++ks) {  // 16 dims of d per step
      uint32_t a[kMmaM][4];                  // Q fragments: 16 rows × 16 dims each
#pragma unroll
      for (int mi = 0; mi < kMmaM; ++mi)
        ldmatrix_x4(a[mi], sQ + mi * 16 * kRowBytes + (q_lane ^ (32 * ks)));
#pragma unroll
      for (int np = 0; np < kNTilesS / 2; ++np) {  // 16 keys (two n8 tiles) per ldmatrix
        uint32_t bk[4];                            // K fragments: b0 b1 of tiles 2np, 2np+1
        ldmatrix_x4(bk, sK + np * 16 * kRowBytes + (k_lane_t ^ (32 * ks)));
#pragma unroll
        for (int mi = 0; mi < kMmaM; ++mi) {
          mma_m16n8k16<Element>(s[mi][2 * np], a[mi], bk[0], bk[1]);
          mma_m16n8k16<Element>(s[mi][2 * np + 1], a[mi], bk[2], bk[3]);
        }
      }
    }

    // ---- mask, online softmax: S → P (fp32, unnormalised), O rescaled ----------------------
    if (it < num_masked)  // only tiles crossing the causal diagonal or the end of K
      apply_mask<IsCausal>(s, m0 + warp * kWarpRows + g, n0 + 2 * t, p.n_q, p.n_kv);
    softmax.update<Traits::kSkipRescale>(s, acc_o, p.scale_log2);

    // ---- P → A fragments: two neighbouring n8 accumulator tiles make one k16 A tile --------
    uint32_t pa[kMmaM][kKStepsO][4];  // P, 16 bits, registers: [m16 tile][16 keys][a0..a3]
#pragma unroll
    for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
      for (int kk = 0; kk < kKStepsO; ++kk) {
        const float(&left)[4] = s[mi][2 * kk];                 // keys 16kk + 2t, +1   (rows g, g+8)
        const float(&right)[4] = s[mi][2 * kk + 1];            // keys 16kk + 8 + 2t, +1
        pa[mi][kk][0] = pack_pair<Element>(left[0], left[1]);  // a0: row g,   k 2t
        pa[mi][kk][1] = pack_pair<Element>(left[2], left[3]);  // a1: row g+8, k 2t
        pa[mi][kk][2] = pack_pair<Element>(right[0], right[1]);  // a2: row g,   k 2t+8
        pa[mi][kk][3] = pack_pair<Element>(right[2], right[3]);  // a3: row g+8, k 2t+8
      }
    }

    // ---- O += P V: the warp's 32 rows × kHeadDim ------------------------------------------
    // Dims outermost: one XOR per 16 dims, then the keys are plain offsets from it.
#pragma unroll
    for (int dp = 0; dp < kNTilesO / 2; ++dp) {  // 16 dims (two n8 tiles) per ldmatrix
#pragma unroll
      for (int kk = 0; kk < kKStepsO; ++kk) {  // 16 keys per step
        uint32_t bv[4];  // V fragments, transposed: b0 b1 of dim tiles 2dp, 2dp+1
        ldmatrix_x4_trans(bv, sV + kk * 16 * kRowBytes + (v_lane_t ^ (32 * dp)));
#pragma unroll
        for (int mi = 0; mi < kMmaM; ++mi) {
          mma_m16n8k16<Element>(acc_o[mi][2 * dp], pa[mi][kk], bv[0], bv[1]);
          mma_m16n8k16<Element>(acc_o[mi][2 * dp + 1], pa[mi][kk], bv[2], bv[3]);
        }
      }
    }
  }

  // ---- Epilogue: O = O / ℓ, L = m + log ℓ; the only writes to device memory ---------------
  float lse[2 * kMmaM];
  softmax.finalize(acc_o, lse);

  // O goes out through shared memory so that every store to global memory is 16 contiguous
  // bytes (a lane's accumulators are 4-byte pairs scattered over 2·kMmaM rows). The staging
  // area is this warp's own rows of sQ: no other warp ever reads them, so no block barrier
  // is needed. Within the warp, lanes overwrite rows that other lanes read with ldmatrix:
  // the data dependency through the mmas orders them in practice, but the memory model (and
  // compute-sanitizer's racecheck) wants a __syncwarp between those reads and these writes,
  // and another between the writes and the reads of other lanes' pairs.
  __syncwarp();
#pragma unroll
  for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      const int row = warp * kWarpRows + 16 * mi + 8 * h2 + g;  // row of the CTA's tile
#pragma unroll
      for (int nt = 0; nt < kNTilesO; ++nt)  // dims 8nt + 2t, +1: chunk nt, bytes 4t … 4t+3
        st_shared_u32(sQ + Traits::swizzle(row, nt) + 4 * t,
                      pack_pair<Element>(acc_o[mi][nt][2 * h2], acc_o[mi][nt][2 * h2 + 1]));
    }
  }
  __syncwarp();
  Element* o_head = static_cast<Element*>(p.o) + q_off;
  constexpr int kRowsPerPass = 32 / kChunksPerRow;  // rows one warp instruction stores
#pragma unroll
  for (int i = 0; i < kWarpRows / kRowsPerPass; ++i) {
    const int row = warp * kWarpRows + i * kRowsPerPass + lane / kChunksPerRow;
    const int chunk = lane % kChunksPerRow;
    const uint4 v = ld_shared_v4(sQ + Traits::swizzle(row, chunk));
    if (m0 + row < p.n_q)  // the block's tail rows past N_q are never stored
      st_global_v4(o_head + (m0 + row) * p.q_row_stride + chunk * 8, v);
  }
  if (t == 0) {  // the 4 lanes of a quad agree on their rows' L; one of them stores it
    float* lse_head = p.lse + (b * p.heads_q + h) * p.n_q;
#pragma unroll
    for (int mi = 0; mi < kMmaM; ++mi)
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) {
        const int i = m0 + warp * kWarpRows + 16 * mi + 8 * h2 + g;
        if (i < p.n_q) lse_head[i] = lse[2 * mi + h2];
      }
  }
}

// ---------------------------------------------------------------------------------------------
// Host side: one launch per call.
// ---------------------------------------------------------------------------------------------
template <class Traits, bool IsCausal>
void launch_flash_fwd(const FwdParams& p, cudaStream_t stream) {
  const auto kernel = flash_fwd_kernel<Traits, IsCausal>;
  // Above 48 KB of dynamic shared memory a kernel must opt in; preferring the largest
  // shared-memory carveout lets two CTAs share an SM (what the tiles are sized for).
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  Traits::kSmemBytes));
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  cudaSharedmemCarveoutMaxShared));
  const dim3 grid((p.n_q + Traits::kBlockM - 1) / Traits::kBlockM, p.heads_q, p.batch);
  kernel<<<grid, Traits::kNumThreads, Traits::kSmemBytes, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

template <int kHeadDim, class Element>
void run_flash_fwd(const FwdParams& p, cudaStream_t stream) {
  if (p.causal)
    launch_flash_fwd<typename FwdConfig<kHeadDim, Element, true>::Traits, true>(p, stream);
  else
    launch_flash_fwd<typename FwdConfig<kHeadDim, Element, false>::Traits, false>(p, stream);
}

}  // namespace fa::step07
