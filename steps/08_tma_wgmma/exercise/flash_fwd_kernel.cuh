// flash_fwd_kernel.cuh — step 08's kernel: the FlashAttention forward pass on TMA and wgmma.
//
// One CTA of kNumWarpgroups warpgroups owns kBlockM = 64 · kNumWarpgroups query rows of one
// (batch, head); warpgroup w owns rows [64w, 64w + 64). Thread 0 is also the producer: it
// issues every TMA copy. The K/V tiles go through a ring of kStages stages, each with three
// mbarriers (hopper.cuh says what they count):
//
//   full_k[s], full_v[s]  the stage's K (V) tile has landed    TMA completes, consumers wait
//   empty[s]              every thread has finished the stage  consumers arrive, thread 0 waits
//
//   prologue (thread 0):  Q → sQ (full_q);  tiles 0 … kStages−1 → stages 0 … kStages−1
//   for each visit it (tiles last to first, as in step 07), stage s = it % kStages:
//     wait full_k[s]                              TODO(exercise): with which parity?
//     S = Q Kᵀ: d/16 wgmma, committed as one group — the tensor cores start
//     thread 0, meanwhile: TODO(exercise): the refill — which stage, after which wait (on
//                          which barrier, with which parity), with which visit's tile?
//     wait for S; mask; online softmax (O rescaled); P = S in 16 bits, in registers
//     wait full_v[s]
//     O += P V: kBlockN/16 · d/64 wgmma (P from registers), committed, waited for
//     arrive on empty[s]
//   O = O / ℓ → 16 bits → this warp's rows of sQ → 16-byte coalesced stores; L = m + log ℓ
//
// The stages, for kStages = 2 (the visit a stage holds, and when it is refilled):
//
//                 it = 0          it = 1               it = 2               it = 3
//   stage 0:   compute 0   │ ← TMA 2 (after empty) │   compute 2        │ ← TMA 4 …
//   stage 1:   landing 1   │   compute 1           │ ← TMA 3            │   compute 3
//
// so a tile has the compute of one tile (kStages − 1 in general) to land, as in step 07; the
// difference is that one thread issues a whole tile with d/64 instructions, the bytes are
// counted by the barrier instead of by cp.async groups, and nobody else waits for the copy
// to be issued. What is NOT done yet (the next step): a producer warp of its own, and
// overlapping one tile's softmax with another's wgmmas — here a warpgroup's tensor-core work
// and its softmax alternate.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda_check.h"
#include "hopper.cuh"
#include "kernel_traits.cuh"
#include "mask.cuh"
#include "online_softmax.cuh"

namespace fa::step08 {

/// \brief Issues the TMA copies of one [kRows][d] tile (d/64 boxes of 64 elements × kRows
/// rows) starting at sequence row `row` of head `head`, batch `b`, into the tile at `dst`
/// ([kDBlocks][kRows][64]); their bytes complete on `bar`. Thread 0 only.
template <class Traits, int kRows>
__device__ __forceinline__ void load_tile(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                          int row, int head, int b, bool heads_inner) {
#pragma unroll
  for (int db = 0; db < Traits::kDBlocks; ++db) {
    const uint32_t to = dst + db * kRows * 128;
    if (heads_inner)  // [B, N, H, d]: dimensions (d, H, N, B)
      tma_load_4d(to, map, bar, 64 * db, head, row, b);
    else  // [B, H, N, d]: dimensions (d, N, H, B)
      tma_load_4d(to, map, bar, 64 * db, row, head, b);
  }
}

// ---------------------------------------------------------------------------------------------
// The kernel. grid: (⌈N_q / kBlockM⌉, H_q, B), block: kNumThreads, dynamic smem: kSmemBytes.
// ---------------------------------------------------------------------------------------------
template <class Traits, bool IsCausal>
__global__ void __launch_bounds__(Traits::kNumThreads, 1)
    flash_fwd_kernel(const __grid_constant__ FwdParams p, const __grid_constant__ CUtensorMap tma_q,
                     const __grid_constant__ CUtensorMap tma_k,
                     const __grid_constant__ CUtensorMap tma_v) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
  constexpr int kHeadDim = Traits::kHeadDim, kDBlocks = Traits::kDBlocks;
  constexpr int kStages = Traits::kStages, kSRegs = Traits::kSRegs;
  constexpr int kKStepsS = Traits::kKStepsS, kKStepsO = Traits::kKStepsO;
  constexpr int kKVTileBytes = Traits::kKVTileBytes;

  // The 128-byte swizzle needs 1024-byte aligned tiles: round the base up (kSmemBytes has
  // the slack).
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t sQ = base + Traits::kQOffset;  // [kDBlocks][kBlockM][64]
  const uint32_t sK = base + Traits::kKOffset;  // [kStages][kDBlocks][kBlockN][64]
  const uint32_t sV = base + Traits::kVOffset;  // [kStages][kDBlocks][kBlockN][64]
  const uint32_t bar_q = base + Traits::kBarOffset;
  const auto bar_full_k = [&](int s) { return bar_q + 8 * (1 + s); };
  const auto bar_full_v = [&](int s) { return bar_q + 8 * (1 + kStages + s); };
  const auto bar_empty = [&](int s) { return bar_q + 8 * (1 + 2 * kStages + s); };

  const int tid = threadIdx.x;
  const int wg = tid / 128;         // warpgroup: query rows [64·wg, 64·wg + 64) of the block
  const int warp = (tid / 32) % 4;  // warp within the warpgroup: 16 of those rows
  const int lane = tid % 32;
  const int g = lane / 4, t = lane % 4;  // rows g, g + 8 of the warp's 16; columns 2t, 2t + 1

  // Longest causal blocks first (step 07: the short ones then fill the gaps at the end).
  const int m_block = IsCausal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int m0 = m_block * kBlockM;
  const int h = blockIdx.y, b = blockIdx.z;
  const int h_kv = h / p.group;  // GQA: the K/V head of this query head

  const KvTiles tiles = kv_tiles<IsCausal>(m0, kBlockM, kBlockN, p.n_q, p.n_kv);
  const int num_masked = tiles.num_tiles - tiles.num_unmasked;  // visited first

  if (tid == 0) {
    prefetch_tensor_map(&tma_q);
    prefetch_tensor_map(&tma_k);
    prefetch_tensor_map(&tma_v);
    mbarrier_init(bar_q, 1);
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(bar_full_k(s), 1);  // the producer's expect_tx arrival
      mbarrier_init(bar_full_v(s), 1);
      mbarrier_init(bar_empty(s), Traits::kNumThreads);  // every consumer thread
    }
    fence_barrier_init();
  }
  __syncthreads();

  // The K/V tile of visit `it` is tile num_tiles − 1 − it (last to first: masked ones first).
  const auto load_kv = [&](int it, int stage) {
    const int n0 = (tiles.num_tiles - 1 - it) * kBlockN;
    mbarrier_arrive_expect_tx(bar_full_k(stage), kKVTileBytes);
    load_tile<Traits, kBlockN>(sK + stage * kKVTileBytes, &tma_k, bar_full_k(stage), n0, h_kv, b,
                               p.heads_inner);
    mbarrier_arrive_expect_tx(bar_full_v(stage), kKVTileBytes);
    load_tile<Traits, kBlockN>(sV + stage * kKVTileBytes, &tma_v, bar_full_v(stage), n0, h_kv, b,
                               p.heads_inner);
  };

  // Prologue. Rows past N_q (Q) and keys past N_kv (K, V) are zero-filled by the TMA unit:
  // their scores are 0 (masked for keys, never stored for rows) and 0 · V adds nothing.
  // A block with nothing to see loads nothing and writes O = 0, L = -inf.
  if (tid == 0 && tiles.num_tiles > 0) {
    mbarrier_arrive_expect_tx(bar_q, Traits::kQBytes);
    load_tile<Traits, kBlockM>(sQ, &tma_q, bar_q, m0, h, b, p.heads_inner);
    for (int s = 0; s < kStages && s < tiles.num_tiles; ++s) load_kv(s, s);
  }

  float acc_o[kDBlocks][32];  // O: this thread's part of 64 rows × 64 columns per block
#pragma unroll
  for (int db = 0; db < kDBlocks; ++db)
#pragma unroll
    for (int i = 0; i < 32; ++i) acc_o[db][i] = 0.f;
  OnlineSoftmax softmax;
  softmax.init();

  if (tiles.num_tiles > 0) mbarrier_wait(bar_q, 0);
  // This warpgroup's 64 rows of Q, column block db: sQ + db·kBlockM·128 + wg·64·128.
  const uint32_t q_rows = sQ + wg * 64 * 128;

  for (int it = 0; it < tiles.num_tiles; ++it) {
    const int stage = it % kStages;
    // TODO(exercise): the parity to wait for on this stage's full barriers (full_k, full_v):
    // the barrier completes one phase per tile landed in the stage, and visit `it` is the
    // stage's use number it / kStages (the TUTORIAL above mbarrier_init in hopper.cuh). As
    // given, 0 for every visit: right for the first kStages visits; after them the wait
    // returns at once (phase 0 completed long ago), without waiting for anything.
    const uint32_t phase = 0;
    const int n0 = (tiles.num_tiles - 1 - it) * kBlockN;
    const uint32_t k_tile = sK + stage * kKVTileBytes;
    const uint32_t v_tile = sV + stage * kKVTileBytes;

    // ---- S = Q Kᵀ (unscaled): 64 rows × kBlockN keys per warpgroup, one group of wgmma ----
    mbarrier_wait(bar_full_k(stage), phase);
    float s[kSRegs];
    fence_operands(s);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kKStepsS; ++ks) {  // 16 of d per wgmma: column block ks / 4
      // TODO(exercise): the start of k step ks (16 elements of d) inside the column block
      // ks / 4 of 64 elements, whose rows are 128 bytes, swizzled (the descriptor TUTORIAL in
      // hopper.cuh). As given, the column block's first 16 elements for every ks: S is wrong.
      const uint64_t desc_q = desc_k_major(q_rows + (ks / 4) * kBlockM * 128);
      const uint64_t desc_k = desc_k_major(k_tile + (ks / 4) * kBlockN * 128);
      wgmma_ss<Element, kBlockN>(s, desc_q, desc_k, ks > 0 ? 1 : 0);  // ks = 0: S = Q·K
    }
    wgmma_commit_group();
    fence_operands(s);

    // While the tensor cores work: the producer refills the stage visit it − 1 used. Every
    // thread arrived on its empty barrier after its last wgmma on it (below), so once the
    // wait returns nobody reads that stage any more.
    // TODO(exercise): thread 0 refills the stage of visit it − 1 (if there was one) with the
    // tile kStages visits after it (if there is one, load_kv above) — once every thread has
    // arrived on that stage's empty barrier: the wait's parity is the use number of that
    // stage, mod 2. As given, nothing is loaded after the prologue: from visit kStages on,
    // every tile is computed on the stale K and V of an earlier visit.
    __syncwarp();  // warp 0 reconverges before the .sync.aligned wait

    wgmma_wait_group<0>();
    fence_operands(s);

    // ---- mask, online softmax: S → P (fp32, unnormalised), O rescaled ---------------------
    if (it < num_masked)
      apply_mask<IsCausal>(s, m0 + 64 * wg + 16 * warp + g, n0 + 2 * t, p.n_q, p.n_kv);
    softmax.update(s, acc_o, p.scale_log2);

    // ---- P → A fragments: n8 blocks 2kk and 2kk + 1 of S are k16 step kk of P --------------
    uint32_t pa[kKStepsO][4];
#pragma unroll
    for (int kk = 0; kk < kKStepsO; ++kk) {
      pa[kk][0] = pack_pair<Element>(s[8 * kk + 0], s[8 * kk + 1]);  // row g,     keys 2t
      pa[kk][1] = pack_pair<Element>(s[8 * kk + 2], s[8 * kk + 3]);  // row g + 8, keys 2t
      pa[kk][2] = pack_pair<Element>(s[8 * kk + 4], s[8 * kk + 5]);  // row g,     keys 2t + 8
      pa[kk][3] = pack_pair<Element>(s[8 * kk + 6], s[8 * kk + 7]);  // row g + 8, keys 2t + 8
    }

    // ---- O += P V: kBlockN/16 k steps × d/64 column blocks of wgmma m64n64k16 --------------
    mbarrier_wait(bar_full_v(stage), phase);
#pragma unroll
    for (int db = 0; db < kDBlocks; ++db) fence_operands(acc_o[db]);
#pragma unroll
    for (int kk = 0; kk < kKStepsO; ++kk) fence_operands(pa[kk]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKStepsO; ++kk) {
#pragma unroll
      for (int db = 0; db < kDBlocks; ++db) {  // column block db of V
        // TODO(exercise): the start of keys 16kk … 16kk + 15 (k step kk) in column block db:
        // V is MN-major, one key per 128-byte row. As given, keys 0-15 for every kk: O is
        // wrong.
        const uint64_t desc_v = desc_mn_major(v_tile + db * kBlockN * 128);
        wgmma_rs_n64_trans_b<Element>(acc_o[db], pa[kk], desc_v);
      }
    }
    wgmma_commit_group();
#pragma unroll
    for (int kk = 0; kk < kKStepsO; ++kk) fence_operands(pa[kk]);  // live until the wait
    wgmma_wait_group<0>();
#pragma unroll
    for (int db = 0; db < kDBlocks; ++db) fence_operands(acc_o[db]);

    mbarrier_arrive(bar_empty(stage));  // this thread is done with the stage's K and V
  }

  // ---- Epilogue: O = O / ℓ, L = m + log ℓ; the only writes to device memory ---------------
  float lse[2];
  softmax.finalize(acc_o, lse);

  // O goes out through this warp's own 16 rows of sQ (same swizzled layout as the Q tile),
  // so that every global store is 16 contiguous bytes. The warpgroup barrier: every wgmma of
  // the warpgroup, the readers of these rows, is complete before any warp overwrites them.
  warpgroup_barrier(wg);
  const int row_base = 64 * wg + 16 * warp;  // this warp's first row in the block
#pragma unroll
  for (int db = 0; db < kDBlocks; ++db)
#pragma unroll
    for (int j = 0; j < 8; ++j)  // columns 64db + 8j + 2t, +1: chunk j of the row, bytes 4t…
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int row = row_base + 8 * hh + g;
        st_shared_u32(sQ + db * kBlockM * 128 + row * 128 + ((j ^ (row % 8)) * 16) + 4 * t,
                      pack_pair<Element>(acc_o[db][4 * j + 2 * hh], acc_o[db][4 * j + 2 * hh + 1]));
      }
  __syncwarp();
  Element* o_head = static_cast<Element*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride;
  constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks of a row of O
#pragma unroll
  for (int pass = 0; pass < 16 * kChunksPerRow / 32; ++pass) {
    const int i = 32 * pass + lane;  // consecutive lanes, consecutive chunks of a row
    const int row = row_base + i / kChunksPerRow, chunk = i % kChunksPerRow;
    const uint4 v = ld_shared_v4(sQ + (chunk / 8) * kBlockM * 128 + row * 128 +
                                 (((chunk % 8) ^ (row % 8)) * 16));
    if (m0 + row < p.n_q)  // the block's rows past N_q are never stored
      st_global_v4(o_head + (m0 + row) * p.o_row_stride + chunk * 8, v);
  }
  if (t == 0) {  // the 4 lanes of a quad agree on their rows' L; one stores it
    float* lse_head = p.lse + (b * p.heads_q + h) * p.n_q;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int i = m0 + row_base + 8 * hh + g;
      if (i < p.n_q) lse_head[i] = lse[hh];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Host side: one launch per call.
// ---------------------------------------------------------------------------------------------
template <class Traits, bool IsCausal>
void launch_flash_fwd(const FwdParams& p, const TensorMaps& maps, cudaStream_t stream) {
  const auto kernel = flash_fwd_kernel<Traits, IsCausal>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  Traits::kSmemBytes));
  const dim3 grid((p.n_q + Traits::kBlockM - 1) / Traits::kBlockM, p.heads_q, p.batch);
  kernel<<<grid, Traits::kNumThreads, Traits::kSmemBytes, stream>>>(p, maps.q, maps.k, maps.v);
  CUDA_CHECK_LAUNCH();
}

template <int kHeadDim, class Element>
void run_flash_fwd(const FwdParams& p, const TensorMaps& maps, cudaStream_t stream) {
  using Traits = typename FwdConfig<kHeadDim, Element>::Traits;
  if (p.causal)
    launch_flash_fwd<Traits, true>(p, maps, stream);
  else
    launch_flash_fwd<Traits, false>(p, maps, stream);
}

}  // namespace fa::step08
