// decode_kernel_mma.cuh — step 12's candidate kernel with its two products on tensor cores
// (mma.sync m16n8k16, step 07's instructions): the same split, stages, warps and in-block
// merge as decode_kernel_v2.cuh, but S = Q Kᵀ and O += P V are matrix products of one 16-row
// tile. Why: the scalar candidate is bound by instruction issue (docs/12-decode.md, "The next
// kernel, measured"): ≈ 980 instructions per warp and 64-key tile at MHA, ≈ 1 720 at GQA 32/8.
// Here a warp's 16 keys of a tile cost 2 · d/16 ldmatrix and 2 · d/8 mma whatever the rows
// (≤ 16; d/8 more mma for the two-part P, below): counted ≈ 190 instructions with the softmax
// and the copies at d = 128 (variants/variants.cu), measured ≈ 740 (Nsight Compute,
// docs/results/h200-ncu-decode-mma.txt; docs/12-decode.md, "The count, measured"), the same
// whatever the rows, so GQA costs what MHA costs.
//
//   attention, grid (num_splits, H_kv · row chunks of 16, B), block kWarps · 32 threads:
//     the group's rows (≤ 16, Element, zero-padded to 16) ──▶ sQ ──▶ A fragments, once
//     the split's tiles of kBlockN keys through kStages cp.async stages
//     each warp: its own 16 keys of every tile, its own running (m, ℓ, O) for every row
//       S = Q Kᵀ        16 rows × 16 keys: d/16 k-steps × 2 mma (K by ldmatrix)
//       scale, mask, online softmax (rows g and g + 8 of the accumulator layout; the max over
//       a row's 16 keys is the max over a quad of lanes: 2 shuffles)
//       O += P V        P's accumulators are the A fragment of one k16 step: d/8 mma
//                       (V by ldmatrix.trans)
//     end of split: each warp's (O_w / ℓ_w, L_w) ──▶ shared memory, merged by combine_row()
//     as in the scalar candidate, O_s and L_s ──▶ the workspace, or, with one split, O and L
//     straight to the output
//   combine (more than one split), decode_combine_wide_kernel below: a block of 4 warps per
//   row, launched as the attention's programmatic dependent
//
// The rows are the M dimension of the products, padded to 16 with zeros: at one row (MHA) 15
// of 16 rows are wasted, which costs nothing that matters: at 4.5 TB/s, d = 128, the two
// products are 16 × 4.5e12 / 512 · 2 · 128 · 2 ≈ 72 TFLOP/s of mma, a tenth of what
// mma.sync can issue. P enters P V as two Elements, hi + lo (twice the P V products), so the
// result does not depend on the split count beyond the order of fp32 sums; ℓ sums P in fp32.
#pragma once

#include <cuda.h>  // CUtensorMap (a type only: the driver is reached through the runtime)

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "split_tiles.cuh"  // the split's tiles and their copies; the chapter's helpers

namespace fa::step12 {

using step07::ldmatrix_x4;
using step07::ldmatrix_x4_trans;
using step07::mma_m16n8k16;
using step07::pack_pair;

/// \brief The tensor-core candidate's configuration: kStages_ shared-memory stages, kWarps_
/// warps, tiles of kBlockN_ keys (16 per warp: one k16 step of P V); kSplitP_: P V with P as
/// the sum of two Elements (16 bits of P at bf16, 22 at fp16), or P rounded once as in step 07.
template <int kHeadDim_, int kStages_ = 3, int kWarps_ = 4, int kBlockN_ = 64, bool kSplitP_ = true,
          bool kBulk_ = false, int kPrefetch_ = 0, bool kEarlyTrigger_ = false,
          bool kSwizzle_ = false, bool kTileTable_ = false, int kL2Bytes_ = 0,
          bool kTileBase_ = false, bool kLazyRescale_ = false, int kClusterHeads_ = 1,
          int kHeads_ = 1, bool kFixedRows_ = false, bool kTma_ = false, int kSpread_ = 0,
          bool kEarlyIssue_ = false>
struct DecodeTraitsMma {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kSplitP = kSplitP_;  // P V with P in two Elements (hi + lo)
  // The tiles' rows copied by the Hopper bulk-copy engine (cp.async.bulk, one instruction per
  // row of K or V, completion counted on an mbarrier per stage) instead of cp.async's 16
  // bytes per thread; sm_90 and newer, cp.async below.
  static constexpr bool kBulk = kBulk_;
  // The rows of the tile kPrefetch_ tiles past the last one in flight asked of L2 ahead of
  // time (cp.async.bulk.prefetch.L2, a row per thread; sm_90), 0: none. More bytes on their
  // way from HBM than the stages hold, at no cost in shared memory.
  static constexpr int kPrefetch = kPrefetch_;
  // The attention kernel lets its programmatic dependent (the combine) be scheduled at once
  // (griddepcontrol.launch_dependents at its start; sm_90): the combine's small blocks wait on
  // the SMs beside the attention's, at griddepcontrol.wait, instead of being launched after the
  // attention's last block has exited.
  static constexpr bool kEarlyTrigger = kEarlyTrigger_;
  // Shared-memory rows of Q, K and V unpadded, 16-byte chunk c of row r stored at chunk
  // c ^ (r % 8) (step 07's swizzle), instead of padded by 16 bytes: either way the 8 rows an
  // ldmatrix phase reads fall in 8 different groups of four banks, but only unpadded rows keep
  // each 128-byte line of the cache in one 128-byte line of shared memory, which is what the
  // copies' requests to L2 follow (see variants/variants.cu, m3w4s).
  static constexpr bool kSwizzle = kSwizzle_;
  // Pages smaller than a tile (16 or 32 rows at 64-key tiles): the tile's block-table entries
  // read once per tile by the first lanes of each warp and shuffled to the lanes that copy,
  // instead of a lookup per 16-byte chunk (load_tile_async, split_tiles.cuh; cp.async only).
  static constexpr bool kTileTable = kTileTable_;
  // The cp.async copies ask L2 for kL2Bytes_ (128 or 256) aligned bytes from HBM at once
  // (load_tile_async, split_tiles.cuh), 0: no prefetch-size qualifier.
  static constexpr int kL2Bytes = kL2Bytes_;
  // A tile of attended keys in one page (or the contiguous cache) copied from one base address
  // per thread plus a fixed stride (load_tile_async, split_tiles.cuh; cp.async only).
  static constexpr bool kTileBase = kTileBase_;
  // O's accumulators rescaled by exp(m_old − m_new) only when some row of the warp has a new
  // maximum (a vote per tile), instead of at every tile: a factor of exactly 1 skipped, so the
  // result is bit for bit the same.
  static constexpr bool kLazyRescale = kLazyRescale_;
  // The blocks of kClusterHeads_ neighbours along grid y (K/V heads; with more than one row
  // chunk per head, q_len · group > 16, chunks of one head) launched as one thread-block
  // cluster (sm_90) whose blocks pass one cluster barrier per tile instead of each its own
  // __syncthreads: they then ask for the same positions at the same moment, and in the cache's
  // [B, N, H_kv, d] layout neighbouring heads' rows lie side by side (kClusterHeads_ · 2 · d
  // bytes), not one head's 2 · d bytes alone. 1: no cluster. Launched without a cluster where
  // grid y is not a multiple (the barrier is then the block's own).
  static constexpr int kClusterHeads = kClusterHeads_;
  static_assert(kClusterHeads == 1 || kClusterHeads == 2 || kClusterHeads == 4 ||
                    kClusterHeads == 8,
                "a portable cluster: 1, 2, 4 or 8 blocks");
  static_assert(kClusterHeads == 1 || !kBulk_, "the cluster barrier: the cp.async copies only");
  // kHeads_ neighbouring K/V heads per block: a tile is kBlockN_ / kHeads_ positions of
  // kHeads_ heads each (kBlockN_ rows of d in shared memory, head-major: head h's rows of the
  // tile are rows h · kTileKeys …), and the warps are shared out among the heads, kWarps_ /
  // kHeads_ each, a warp's 16 rows one head's 16 positions. In the cache's [B, N, H_kv, d]
  // layout a tile's position then asks for kHeads_ · 2 · d contiguous bytes instead of one
  // head's 2 · d. 1: one head per block.
  static constexpr int kHeads = kHeads_;
  // With kHeads_ > 1: each thread's copies at offsets known at compile time, one swizzled
  // chunk for all of them (load_tile_heads_async's kFixedRows). With kHeads_ > 1 the copies
  // are load_tile_heads_async's, which has a whole-tile path of its own; kTileTable_,
  // kTileBase_ and kL2Bytes_ then do not apply.
  static constexpr bool kFixedRows = kFixedRows_;
  static_assert(!kFixedRows || kHeads > 1, "the fixed rows are those of several heads");
  // A whole tile of K and one of V copied by the Tensor Memory Accelerator (sm_90's
  // cp.async.bulk.tensor) instead of each thread's cp.async: thread 0 asks for kHeadDim / 64
  // boxes of kBlockN positions × 64 dims of each, by the cache's tensor maps (KvTensorMaps
  // below), the bytes counted on the stage's mbarrier. The 128-byte swizzle takes boxes at
  // most 128 bytes wide, so a tile lies in shared memory as kHeadDim / 64 panels of kBlockN
  // rows of 128 bytes, chunk c of row r at panel c / 8, chunk (c % 8) ^ (r % 8) (kv_offset);
  // at d = 64 that is kSwizzle's layout. Only a tile whose keys are all attended to and lie in
  // one page (or the contiguous cache), or in pages that divide it (a box per page, from as
  // many lanes), goes by the TMA; any other (the last of a sequence, pages of other sizes) by
  // the cp.async copies, into the same layout. A block-table entry outside the pool is a box
  // outside the map: the TMA writes zeros and reads nothing.
  static constexpr bool kTma = kTma_;
  static_assert(!kTma || (kSwizzle_ && kHeads_ == 1 && !kBulk_ && kClusterHeads_ == 1 &&
                          kPrefetch_ == 0 && kHeadDim_ % 64 == 0),
                "the TMA's tiles: swizzled rows, one head per block, no other bulk copy, no "
                "cluster, no L2 prefetch, d in boxes of 64");
  /// \brief Whether whole tiles of kBlockN_ rows can go by the TMA in this cache: contiguous,
  /// or pages that hold whole tiles, or pages that divide one (a box per page). The one rule
  /// behind make_kv_tensor_maps (no maps otherwise) and the kernel's choice per tile.
  __host__ __device__ static constexpr bool tma_pages(bool paged, int page_size) {
    return !paged || page_size % kBlockN_ == 0 ||
           (page_size < kBlockN_ && kBlockN_ % page_size == 0);
  }
  // 1 or 2: each block walks its split's n tiles from one of its own on, round to the first,
  // so that the blocks that run at the same time ask for positions spread over the cache
  // instead of the same positions in step. 1: block (y, z) of the grid's grid_y · grid_z (the
  // splits of a head alike) starts at tile (y + grid_y · z) · n / (grid_y · grid_z), every
  // block at a place of its own (with more than one row chunk per head, q_len · group > 16, the
  // chunks of one head then read its tiles at different times instead of together); 2: at
  // tile z · n / grid_z, the blocks of a sequence together, the sequences spread. 0: from the
  // first. The online softmax takes the keys in any order: only the order of fp32 sums changes.
  static constexpr int kSpread = kSpread_;
  static_assert(kSpread >= 0 && kSpread <= 2, "spread starts: 0, 1 or 2");
  static_assert(!kSpread || kPrefetch_ == 0, "the L2 prefetch follows the tiles in order");
  // The copies of tile t + kStages − 1 asked for as soon as every warp is done with tile t − 1
  // (a barrier), before waiting for tile t (then a second barrier, for the other threads'
  // cp.async bytes; with the TMA's tiles the mbarrier alone), instead of after tile t has
  // landed: while a block waits, kStages tiles are on their way instead of kStages − 1.
  static constexpr bool kEarlyIssue = kEarlyIssue_;
  static_assert(!kEarlyIssue || (!kBulk_ && kClusterHeads_ == 1 && kPrefetch_ == 0),
                "the early issue: cp.async or the TMA's tiles, no cluster, no L2 prefetch");
  static_assert(!(kTileBase && kBulk), "the tile's base address: the cp.async copies only");
  static_assert(!(kL2Bytes && kBulk), "the prefetch size qualifies the cp.async copies only");
  static constexpr int kWarps = kWarps_;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMaxRows = 16;  // one m16 tile of the products
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kKeysPerWarp = kBlockN / kWarps;
  static constexpr int kTileKeys = kBlockN / kHeads;     // positions per tile
  static constexpr int kWarpsPerHead = kWarps / kHeads;  // warps sharing one head's keys
  static_assert(kWarps % kHeads == 0 && kBlockN % kHeads == 0, "the warps shared among heads");
  static_assert(kHeads == 1 || (!kBulk_ && kClusterHeads_ == 1 && kPrefetch_ == 0),
                "several heads per block: the cp.async copies, no cluster, no L2 prefetch");
  static constexpr int kStages = kStages_;
  // Without kSwizzle, 16 bytes of padding per row: the 8 rows an ldmatrix phase reads start
  // 16 bytes apart modulo 128, in 8 different groups of four banks.
  static constexpr int kStride = kSwizzle ? kHeadDim : kHeadDim + 8;  // elements
  static constexpr int kRowBytes = kStride * 2;
  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks
  /// \brief Byte offset of 16-byte chunk `chunk` of row `row` of Q, K or V in shared memory.
  __device__ static constexpr uint32_t chunk_offset(int row, int chunk) {
    return static_cast<uint32_t>(row * kRowBytes + (kSwizzle ? chunk ^ (row % 8) : chunk) * 16);
  }
  // K and V tiles: bytes from a row to the next in shared memory (a panel's 128 with kTma),
  // and rows per panel (0: one panel, rows of kRowBytes).
  static constexpr int kTileRowBytes = kTma ? 128 : kRowBytes;
  static constexpr int kPanelRows = kTma ? kBlockN : 0;
  /// \brief Byte offset of 16-byte chunk `chunk` of row `row` of a K or V tile in shared memory.
  __device__ static constexpr uint32_t kv_offset(int row, int chunk) {
    if constexpr (kTma) {
      return static_cast<uint32_t>((chunk / 8) * kBlockN * 128 + row * 128 +
                                   ((chunk % 8) ^ (row % 8)) * 16);
    } else {
      return chunk_offset(row, chunk);
    }
  }
  /// \brief A lane's ldmatrix address for k16 step `step` (chunks 2·step, 2·step + 1) from its
  /// address `lane_offset` for step 0 (a chunk below 2): the swizzle XORs the step into the
  /// chunk (step 07's), and with kTma steps 4 … 7 lie one panel further.
  __device__ static constexpr uint32_t kv_step(uint32_t lane_offset, int step) {
    if constexpr (kTma) {
      return (lane_offset ^ ((step % 4) * 32)) + (step / 4) * kBlockN * 128;
    } else if constexpr (kSwizzle) {
      return lane_offset ^ (step * 32);
    } else {
      return lane_offset + step * 32;
    }
  }
  static constexpr std::size_t kQBytes = std::size_t{kHeads} * kMaxRows * kRowBytes;
  static constexpr std::size_t kTileBytes = std::size_t{kBlockN} * kRowBytes;
  static constexpr std::size_t kBarOffset = kQBytes + 2 * kStages * kTileBytes;  // 16-aligned
  // With kTma the 128-byte swizzle's panels start at multiples of 1024 bytes: the kernel
  // rounds its shared memory's start up to one, hence 1 KiB more.
  static constexpr std::size_t kAlign = kTma ? 1024 : 16;
  static_assert(!kTma || (kQBytes % 1024 == 0 && kTileBytes % 1024 == 0),
                "every panel on a 1024-byte boundary");
  static constexpr std::size_t kSmemBytes =
      kBarOffset + (kBulk || kTma ? 8 * kStages : 0) + (kTma ? 1024 : 0);
  // The warps' partials (O and L per warp and row) reuse the stages after the last tile.
  static constexpr std::size_t kMergeBytes = std::size_t{kWarps} * kMaxRows * (kHeadDim + 1) * 4;
  static_assert(kStages >= 2, "one tile in flight while one is computed, at the least");
  static_assert(kBlockN % kWarps == 0 && kKeysPerWarp == 16, "a warp's keys: one k16 step");
  static_assert(kHeadDim % 16 == 0, "d in k16 steps");
  static_assert(!(kSwizzle && kBulk), "a bulk copy writes a row as it is: padded rows only");
  static_assert(!(kTileTable && kBulk), "the tile's table entries: the cp.async copies only");
  static_assert(!kSwizzle || kChunksPerRow % 8 == 0, "the swizzle permutes groups of 8 chunks");
  static_assert(!kSwizzle || (kRowBytes & (kRowBytes - 1)) == 0,
                "the ldmatrix addresses XOR the step: rows of a power-of-two size only");
  static_assert(kMergeBytes <= 2 * kStages * kTileBytes, "the merge fits in the stages");
};

// The bulk copies and their mbarrier (sm_90): one contiguous row of K or V at a time
// (Traits::kBulk), whatever the cache's layout or pages, or a box of a tensor map
// (Traits::kTma), as step 08's hopper.cuh and step 11's mma.cuh do.
// FA_DECODE_SM90: compiled for sm_90 or newer, where these instructions, the cluster barrier
// and griddepcontrol exist; below it each helper is empty (or a __syncthreads).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FA_DECODE_SM90 1
#else
#define FA_DECODE_SM90 0
#endif
__device__ __forceinline__ void bulk_mbar_init(uint32_t bar, int count) {
#if FA_DECODE_SM90
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#endif
}
__device__ __forceinline__ void bulk_fence_init() {
#if FA_DECODE_SM90
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
/// \brief Orders this thread's generic-proxy writes to shared memory before later bulk copies.
__device__ __forceinline__ void bulk_fence_proxy() {
#if FA_DECODE_SM90
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void bulk_arrive(uint32_t bar, uint32_t bytes) {
#if FA_DECODE_SM90
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
#endif
}
/// \brief `bytes` (a multiple of 16; both addresses 16-byte aligned) global → shared, the
/// bytes completed on the mbarrier `bar`. One thread issues it.
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes,
                                          uint32_t bar) {
#if FA_DECODE_SM90
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
#endif
}
/// \brief Asks L2 to fetch `bytes` (a multiple of 16) at `src` (16-byte aligned), no waiting.
__device__ __forceinline__ void bulk_prefetch_l2(const void* src, uint32_t bytes) {
#if FA_DECODE_SM90
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
#endif
}
/// \brief The box at coordinates (c0, c1, c2, c3) of the 4-D tensor map `map` (the address of a
/// __grid_constant__ parameter's map) → shared memory at `dst`, the bytes completed on the
/// mbarrier `bar`; coordinates outside the map read nothing and write zeros. One thread issues
/// it.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const void* map, uint32_t bar, int c0,
                                            int c1, int c2, int c3) {
#if FA_DECODE_SM90
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
#endif
}

/// \brief The K and V caches' tensor maps (Traits::kTma; unused, zeros, otherwise): 4-D,
/// (d, H_kv, N_max, B) for the contiguous cache, (d, H_kv, page_size, pages) for the pool,
/// boxes of 64 dims × one head × kBlockN positions (a page's rows, if fewer) × one sequence or
/// page (make_kv_tensor_maps).
struct KvTensorMaps {
  CUtensorMap k;
  CUtensorMap v;
};

/// \brief Every thread of every block of the thread-block cluster arrives, then waits for all
/// (release and acquire, so it orders shared memory as __syncthreads does); a launch without
/// a cluster is a cluster of one block. Called by whole warps.
__device__ __forceinline__ void cluster_sync() {
#if FA_DECODE_SM90
  asm volatile("barrier.cluster.arrive.aligned;\nbarrier.cluster.wait.aligned;\n" ::: "memory");
#else
  __syncthreads();
#endif
}
__device__ __forceinline__ void bulk_wait(uint32_t bar, uint32_t parity) {
#if FA_DECODE_SM90
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.b32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
#endif
}

/// \brief Lane `lane`'s kD / 32 columns of output row `row` = (b·H_q + h)·q_len + i: O (as
/// Element, [B, q_len, H_q, d]) and, from lane 0, L ([B, H_q, q_len]). Called by a whole warp.
template <int kD, class Element>
__device__ __forceinline__ void store_output_row(const DecodeParams& p, int64_t row, int lane,
                                                 const float (&acc)[kD / 32], float lse) {
  constexpr int kCols = kD / 32;
  const int i = static_cast<int>(row % p.q_len);
  const int64_t bh = row / p.q_len;  // b·H_q + h
  const int h = static_cast<int>(bh % p.heads_q), b = static_cast<int>(bh / p.heads_q);
  Element* o =
      static_cast<Element*>(p.o) + ((int64_t{b} * p.q_len + i) * p.heads_q + h) * kD + lane * kCols;
  store_cols<Element, kCols>(o, acc);
  if (lane == 0) p.lse[row] = lse;
}

/// \brief A split's result for one row, by a whole warp: with more than one split, its partial
/// (O_s, L_s) at workspace row `part_row` (= split · B·H_q·q_len + the output row); with one
/// split, O and L themselves at output row `part_row`.
template <int kD, class Element>
__device__ __forceinline__ void store_split_row(const DecodeParams& p, int64_t part_row, int lane,
                                                const float (&acc)[kD / 32], float lse) {
  if (p.num_splits == 1) {
    store_output_row<kD, Element>(p, part_row, lane, acc, lse);
    return;
  }
  float* dst = p.o_part + part_row * kD + lane * (kD / 32);
  if constexpr (kD / 32 == 2) {
    *reinterpret_cast<float2*>(dst) = make_float2(acc[0], acc[1]);
  } else {
    *reinterpret_cast<float4*>(dst) = make_float4(acc[0], acc[1], acc[2], acc[3]);
  }
  if (lane == 0) p.lse_part[part_row] = lse;
}

template <class Traits, class Element>
__global__ void __launch_bounds__(Traits::kThreads)
    decode_attention_mma_kernel(const __grid_constant__ DecodeParams p,
                                const __grid_constant__ KvTensorMaps maps) {
  constexpr int kD = Traits::kHeadDim, kN = Traits::kBlockN, kW = Traits::kWarps;
  constexpr int kR = Traits::kMaxRows, kStride = Traits::kStride, kS = Traits::kStages;
  constexpr int kRowBytes = Traits::kRowBytes, kChunks = Traits::kChunksPerRow;
  constexpr int kKeys = Traits::kKeysPerWarp;
  constexpr int kKSteps = kD / 16;  // k16 steps of S = Q Kᵀ
  constexpr int kNTiles = kD / 8;   // n8 tiles of O
  constexpr int kOutCols = kD / 32;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  // The dynamic shared memory's start rounded up to Traits::kAlign (kSmemBytes has the room).
  unsigned char* smem = smem_raw;
  if constexpr (Traits::kAlign > 16)
    smem += (Traits::kAlign - smem_u32(smem_raw) % Traits::kAlign) % Traits::kAlign;
  Element* sQ = reinterpret_cast<Element*>(smem);                     // [kR][kStride]
  Element* sKV = reinterpret_cast<Element*>(smem + Traits::kQBytes);  // [stage][K, V][kN][kStride]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g8 = lane / 4, t4 = lane % 4;  // the accumulator layout: rows g8, g8 + 8; cols 2·t4
  const int split = blockIdx.x;
  // Traits::kHeads > 1: the block's heads g … g + kHeads − 1, this warp's head g + head.
  constexpr int kG = Traits::kHeads, kTileKeys = Traits::kTileKeys;
  const int g = blockIdx.y / p.row_chunks * kG, chunk = blockIdx.y % p.row_chunks;
  const int head = warp / Traits::kWarpsPerHead;
  const int b = blockIdx.z;
  const int row0 = chunk * kR;
  const int rows = min(kR, p.group * p.q_len - row0);

#if FA_DECODE_SM90
  if constexpr (Traits::kEarlyTrigger)
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
  const SplitTiles st = split_tiles<kTileKeys>(p, b, split);  // as in the CUDA-core candidate
  const int cache_len = st.cache_len, t_begin = st.t_begin, t_end = st.t_end;
  const int key_end = st.key_end;
  // The loop's t-th tile (t_begin … t_end − 1) is tile tile_at(t): t itself, or with
  // Traits::kSpread the block's own rotation of the split's tiles.
  int rot = 0;
  if constexpr (Traits::kSpread == 1)
    rot = static_cast<int>((int64_t{blockIdx.y} + int64_t{gridDim.y} * blockIdx.z) *
                           (t_end - t_begin) / (int64_t{gridDim.y} * gridDim.z));
  if constexpr (Traits::kSpread == 2)
    rot = static_cast<int>(int64_t{blockIdx.z} * (t_end - t_begin) / gridDim.z);
  auto tile_at = [&](int t) {
    if constexpr (Traits::kSpread != 0)
      return t + rot < t_end ? t + rot : t + rot - (t_end - t_begin);
    return t;
  };

  const int64_t rows_all = int64_t{p.batch} * p.heads_q * p.q_len;
  // Head g + h's first row of the block in the workspace (or the output).
  auto part_row_of = [&](int h) {
    return split * rows_all + (int64_t{b} * p.heads_q + int64_t{g + h} * p.group) * p.q_len + row0;
  };

  if (t_begin >= t_end) {  // an empty split: O_s = 0, L_s = −inf (with one split: O and L)
    const float zero[kOutCols] = {};
    for (int x = warp; x < kG * rows; x += kW)
      if (g + x / rows < p.heads_kv)
        store_split_row<kD, Element>(p, part_row_of(x / rows) + x % rows, lane, zero, -INFINITY);
    return;
  }

  const Element* k_cache = static_cast<const Element*>(p.k_cache);
  const Element* v_cache = static_cast<const Element*>(p.v_cache);
  const int64_t row_elems = int64_t{p.heads_kv} * kD;
  const bool tile_in_page = !p.paged || p.page_size % kN == 0;
  constexpr bool kBulk = Traits::kBulk && FA_DECODE_SM90;
  constexpr bool kTma = Traits::kTma && FA_DECODE_SM90;
  const uint32_t bars = smem_u32(smem + Traits::kBarOffset);  // kS mbarriers, 8 bytes each
  if constexpr (kBulk || kTma) {  // each stage's barrier: one arrival per row of K and of V,
                                  // or (kTma) thread 0's one
    if (tid == 0) {
      for (int s = 0; s < kS; ++s) bulk_mbar_init(bars + 8 * s, kTma ? 1 : 2 * kN);
      bulk_fence_init();
    }
    __syncthreads();
  }
  // With Traits::kTma: whether tile `tile` goes by the TMA (its keys all attended to, in one
  // page or the contiguous cache, or in pages that divide it), the same in every thread.
  auto tma_tile = [&](int tile) {
    return (tile + 1) * kN <= key_end && Traits::tma_pages(p.paged, p.page_size);
  };
  // Tile `tile` into stage `stage`: cp.async as the CUDA-core candidate (split_tiles.cuh); with
  // Traits::kBulk a bulk copy per row; with Traits::kTma the TMA's boxes where the tile allows;
  // with Traits::kHeads > 1 the positions of several heads (load_tile_heads_async).
  auto load_tile = [&](int tile, int stage) {
    Element* sK = sKV + (2 * stage) * kN * kStride;
    Element* sV = sK + kN * kStride;
    if constexpr (kBulk) {  // a thread per row of K or V: one bulk copy, or zeros past the end
      const int pos0 = tile * kN;
      const int64_t first = tile_in_page ? cache_row(p, b, pos0) : -1;
      for (int x = tid; x < 2 * kN; x += Traits::kThreads) {
        const int key = x % kN, pos = pos0 + key;
        int64_t row = -1;
        if (pos < key_end)
          row = tile_in_page ? (first < 0 ? -1 : first + key * row_elems) : cache_row(p, b, pos);
        Element* dst = (x < kN ? sK : sV) + key * kStride;
        const uint32_t bar = bars + 8 * stage;
        if (row >= 0) {
          bulk_arrive(bar, kD * 2);
          bulk_copy(smem_u32(dst), (x < kN ? k_cache : v_cache) + row + int64_t{g} * kD, kD * 2,
                    bar);
        } else {
#pragma unroll
          for (int c = 0; c < kChunks; ++c)
            *reinterpret_cast<uint4*>(dst + c * 8) = make_uint4(0, 0, 0, 0);
          bulk_fence_proxy();  // before a later bulk copy writes this row again
          bulk_arrive(bar, 0);
        }
      }
    } else if constexpr (kG > 1) {
      load_tile_heads_async<kD, kN, kStride, Traits::kThreads, Traits::kSwizzle, kG,
                            Traits::kFixedRows>(p, b, g, tile, key_end, sK, sV);
    } else {
      // With Traits::kTma, a whole tile in one page (or the contiguous cache): one box per
      // panel of K and of V; pages that divide the tile (16 or 32 rows at kN = 64): a box per
      // page and panel, lane j of warp 0 asking for page j's. The same for every thread of the
      // block. Any other tile falls through to every thread's cp.async below.
      if constexpr (kTma) {
        if (tma_tile(tile)) {
          const int pos0 = tile * kN;
          const int box_rows = tile_in_page ? kN : p.page_size;  // a box's positions
          if (tid < kN / box_rows) {
            // The box's place: (dims, head g, position, sequence) in the contiguous cache, (dims,
            // head g, row of the page, page) in the pool; an entry outside the pool, or a column
            // outside the table (−1), lies outside the map: zeros, nothing read.
            int slot = pos0 + tid * box_rows, unit = b;
            if (p.paged) {
              unit = table_entry(p, b, slot / p.page_size);
              slot %= p.page_size;
            }
            const uint32_t bar = bars + 8 * stage;
            // The loop-top __syncthreads ordered every thread's reads of this stage (ldmatrix)
            // and writes to it (a cp.async tile's) before this point; the fence orders them, as
            // this thread sees them, before its TMA writes (the async proxy).
            bulk_fence_proxy();
            // The whole tile's bytes, expected once. A box that lands before this arrival takes
            // the barrier's transaction count below zero for a while (PTX allows down to
            // −(2^20 − 1)); the phase cannot complete without this arrival all the same.
            if (tid == 0) bulk_arrive(bar, static_cast<uint32_t>(2 * Traits::kTileBytes));
            const uint32_t dst = tid * box_rows * 128;
#pragma unroll
            for (int c = 0; c < kD / 64; ++c) {
              tma_load_4d(smem_u32(sK) + c * kN * 128 + dst, &maps.k, bar, c * 64, g, slot, unit);
              tma_load_4d(smem_u32(sV) + c * kN * 128 + dst, &maps.v, bar, c * 64, g, slot, unit);
            }
          }
          return;
        }
      }
      // Every thread's cp.async (Traits::kPanelRows: into the TMA's panels, also where the TMA
      // is compiled out, below sm_90); with the TMA, the stage's barrier phase by thread 0.
      load_tile_async<kD, kN, kStride, Traits::kThreads, Traits::kSwizzle, Traits::kTileTable,
                      Traits::kL2Bytes, Traits::kTileBase, Traits::kPanelRows>(p, b, g, tile,
                                                                               key_end, sK, sV);
      if constexpr (kTma)
        if (tid == 0) bulk_arrive(bars + 8 * stage, 0);
    }
  };
  // The rows of tile `tile` into L2 (Traits::kPrefetch), a thread per row of K or V.
  auto prefetch_tile = [&](int tile) {
    if constexpr (Traits::kPrefetch > 0 && FA_DECODE_SM90) {
      if (tile >= t_end) return;
      const int pos0 = tile * kN;
      const int64_t first = tile_in_page ? cache_row(p, b, pos0) : -1;
      for (int x = tid; x < 2 * kN; x += Traits::kThreads) {
        const int key = x % kN, pos = pos0 + key;
        if (pos >= key_end) continue;
        const int64_t row =
            tile_in_page ? (first < 0 ? -1 : first + key * row_elems) : cache_row(p, b, pos);
        if (row >= 0)
          bulk_prefetch_l2((x < kN ? k_cache : v_cache) + row + int64_t{g} * kD, kD * 2);
      }
    }
  };
#pragma unroll
  for (int s = 0; s < kS - 1; ++s) {
    if (t_begin + s < t_end) load_tile(tile_at(t_begin + s), s);
    cp_async_commit();
  }
  for (int s = 0; s < Traits::kPrefetch; ++s) prefetch_tile(t_begin + kS - 1 + s);

  // The group's rows row0 … row0 + rows − 1 (row r: query head g · group + r / q_len, new
  // token r % q_len) as Elements, rows past `rows` zero; with Traits::kHeads > 1, K/V head
  // g + hh's rows at rows hh · kR … of sQ (none for a head at or past heads_kv).
  const Element* q = static_cast<const Element*>(p.q);
  for (int x = tid; x < kG * kR * kChunks; x += Traits::kThreads) {
    const int hh = x / (kR * kChunks), r = (x / kChunks) % kR, c = x % kChunks;
    uint4 u = make_uint4(0, 0, 0, 0);
    if (r < rows && g + hh < p.heads_kv) {
      const int hg = (row0 + r) / p.q_len, i = (row0 + r) % p.q_len;
      const int h = (g + hh) * p.group + hg;
      u = *reinterpret_cast<const uint4*>(q + ((int64_t{b} * p.q_len + i) * p.heads_q + h) * kD +
                                          c * 8);
    }
    *reinterpret_cast<uint4*>(reinterpret_cast<unsigned char*>(sQ) + hh * kR * kRowBytes +
                              Traits::chunk_offset(r, c)) = u;
  }
  __syncthreads();
  // Q's A fragments for every k step, held for the whole split (lane: row lane % 16, chunk
  // lane / 16 of each step; step 07's layout).
  uint32_t qa[kKSteps][4];
  {
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks)
      ldmatrix_x4(qa[ks], smem_u32(sQ) + head * kR * kRowBytes +
                              Traits::chunk_offset(lane % 16, 2 * ks + lane / 16));
  }

  // Rows g8 and g8 + 8 of this lane: the last key each may see (causal among the new tokens,
  // bottom-right: new token i sees the cache and new tokens 0 … i).
  int limit[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int i = (row0 + g8 + 8 * j) % p.q_len;
    limit[j] = min(key_end, cache_len + i + 1);
  }
  const bool upper = rows > 8;  // rows 8 … 15 hold a row of the group (the same in the block)

  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // ℓ: this lane's keys' share
  float acc[kNTiles][4];
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.f;

  // ldmatrix lanes (step 07): K as the B of S, two n8 tiles of keys per x4: key lane % 8 +
  // 8 · (lane / 16), chunk (lane / 8) % 2; V transposed as the B of P V, two n8 tiles of
  // dims per x4: key lane % 16, chunk lane / 16.
  // (With kSwizzle the chunk is XORed with the row's low 3 bits, lane % 8 for both; the chunk
  // of step j is 2j + c0 = 2j ^ c0 with c0 < 2, so chunk_offset(r, 2j + c0) is
  // chunk_offset(r, c0) ^ 32·j while 32·j stays below the row's power-of-two size.)
  // (With kTma, the tiles' panels: kv_offset and kv_step.)
  const uint32_t k_lane = Traits::kv_offset(lane % 8 + 8 * (lane / 16), (lane / 8) % 2);
  const uint32_t v_lane = Traits::kv_offset(lane % 16, lane / 16);
  const uint32_t kv_base = smem_u32(sKV) + warp * kKeys * Traits::kTileRowBytes;

  for (int t = t_begin; t < t_end; ++t) {
    const int stage = (t - t_begin) % kS;
    if constexpr (Traits::kEarlyIssue) {
      __syncthreads();  // every warp is done with tile t − 1: its stage takes tile t + kS − 1
      const int next = t + kS - 1;
      if (next < t_end) load_tile(tile_at(next), (stage + kS - 1) % kS);
      cp_async_commit();
      if constexpr (kTma) bulk_wait(bars + 8 * stage, ((t - t_begin) / kS) % 2);
      cp_async_wait<kS - 1>();  // tile t's group: kS − 1 were committed after it
      // The other threads' cp.async bytes of tile t (the TMA's are seen through the mbarrier).
      if constexpr (!kTma) {
        __syncthreads();
      } else if (!tma_tile(tile_at(t))) {
        __syncthreads();
      }
    } else {
      if constexpr (kBulk || kTma)
        bulk_wait(bars + 8 * stage, ((t - t_begin) / kS) % 2);  // the stage's use number, mod 2
      if constexpr (!kBulk) cp_async_wait<kS - 2>();
      if constexpr (Traits::kClusterHeads > 1) {
        cluster_sync();  // this block's threads and the cluster's other blocks alike
      } else {
        __syncthreads();
      }
      const int next = t + kS - 1;
      if (next < t_end) load_tile(tile_at(next), (stage + kS - 1) % kS);
      cp_async_commit();
      prefetch_tile(next + Traits::kPrefetch);
    }
    const uint32_t sK = kv_base + (2 * stage) * Traits::kTileBytes;
    const uint32_t sV = sK + Traits::kTileBytes;
    const int key0 = tile_at(t) * kTileKeys + (warp % Traits::kWarpsPerHead) * kKeys;

    // S = Q Kᵀ: 16 rows × the warp's 16 keys (two n8 tiles), fp32.
    float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      uint32_t bk[4];
      ldmatrix_x4(bk, sK + Traits::kv_step(k_lane, ks));
      mma_m16n8k16<Element>(s[0], qa[ks], bk[0], bk[1]);
      mma_m16n8k16<Element>(s[1], qa[ks], bk[2], bk[3]);
    }

    // Scale to log2 units, mask, online softmax for rows g8 (j = 0) and g8 + 8 (j = 1):
    // s[nt][2j], s[nt][2j + 1] are keys key0 + 8 nt + 2 t4, + 1.
    float alpha[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      alpha[j] = 1.f;
      if (j == 1 && !upper) {  // a padding row: P = 0, O stays 0
        s[0][2] = s[0][3] = s[1][2] = s[1][3] = 0.f;
        break;
      }
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = key0 + 8 * nt + 2 * t4 + e;
          float& x = s[nt][2 * j + e];
          x = key < limit[j] ? x * p.scale_log2 : -INFINITY;
          mx = fmaxf(mx, x);
        }
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[j], mx);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;  // no NaN from −inf − (−inf)
      alpha[j] = exp2f(m[j] - m_use);
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[nt][2 * j + e];
          x = exp2f(x - m_use);
          sum += x;
        }
      }
      l[j] = l[j] * alpha[j] + sum;
      m[j] = m_new;
    }
    // alpha is exp2(0) = 1 exactly wherever the row's maximum held (and for padding rows); a
    // row whose maximum is still −inf has alpha = 0 and is rescaled (its O is 0 anyway).
    if (!Traits::kLazyRescale || __any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        acc[nt][0] *= alpha[0], acc[nt][1] *= alpha[0];
        acc[nt][2] *= alpha[1], acc[nt][3] *= alpha[1];
      }
    }

    // P as the A fragment of one k16 step (keys 2 t4, + 1 and 8 + 2 t4, + 1; rows g8, g8 + 8),
    // in two Elements when Traits::kSplitP: P = hi + lo, hi = P rounded, lo = P − hi rounded,
    // so that P V carries P to 2⁻¹⁶ (bf16) instead of 2⁻⁸: one split then gives what many give
    // up to the order of fp32 sums, as in the chapter's kernel (each split rounds P against its
    // own max, so one P rounded once would differ between split counts by a rounding of P).
    uint32_t pa[4], pl[4];
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      float(&v)[4] = s[x / 2];
      const int e = 2 * (x % 2);
      pa[x] = pack_pair<Element>(v[e], v[e + 1]);
      if constexpr (Traits::kSplitP) {
        const float2 hi = unpack_pair<Element>(pa[x]);
        pl[x] = pack_pair<Element>(v[e] - hi.x, v[e + 1] - hi.y);
      }
    }

    // O += P V: 16 rows × d, two n8 tiles of dims per ldmatrix.trans.
#pragma unroll
    for (int dp = 0; dp < kNTiles / 2; ++dp) {
      uint32_t bv[4];
      ldmatrix_x4_trans(bv, sV + Traits::kv_step(v_lane, dp));
      mma_m16n8k16<Element>(acc[2 * dp], pa, bv[0], bv[1]);
      mma_m16n8k16<Element>(acc[2 * dp + 1], pa, bv[2], bv[3]);
      if constexpr (Traits::kSplitP) {
        mma_m16n8k16<Element>(acc[2 * dp], pl, bv[0], bv[1]);
        mma_m16n8k16<Element>(acc[2 * dp + 1], pl, bv[2], bv[3]);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the stages: they now hold the warps' partials

  // Each warp's partial per row: O_w = O / ℓ_w and L_w, or L_w = −inf when the warp saw no key
  // of the row. [warp][row][kD] and [warp][row] over the stages, as in the scalar candidate.
  float* sO = reinterpret_cast<float*>(sKV);
  float* sL = sO + kW * kR * kD;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int r = g8 + 8 * j;
    float lsum = l[j];
    lsum += __shfl_xor_sync(0xffffffffu, lsum, 1);
    lsum += __shfl_xor_sync(0xffffffffu, lsum, 2);
    if (r >= rows) continue;
    const bool empty = lsum == 0.f;
    const float inv = empty ? 0.f : 1.f / lsum;
    float* dst = sO + (warp * kR + r) * kD + 2 * t4;
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
      *reinterpret_cast<float2*>(dst + 8 * nt) =
          make_float2(acc[nt][2 * j] * inv, acc[nt][2 * j + 1] * inv);
    if (t4 == 0) sL[warp * kR + r] = empty ? -INFINITY : (m[j] + log2f(lsum)) * kLn2;
  }
  __syncthreads();

  // The in-block merge of the kW warps' partials (combine_row), warp w merging rows w, w + kW, …
  // With one split the block holds the row's whole answer: O (Element) and L go straight to
  // the output and no combine kernel runs (launch_attend_combine_mma).
  // With Traits::kHeads > 1, head hh's partials are those of its kWarpsPerHead warps.
  constexpr int kWH = Traits::kWarpsPerHead;
  for (int x = warp; x < kG * rows; x += kW) {
    const int hh = x / rows, r = x % rows;
    if (g + hh >= p.heads_kv) continue;
    float out[kOutCols];
    const int first = hh * kWH * kR + r;  // warp hh · kWH's row r
    const float lse =
        combine_row<kD, float>(kWH, sL + first, kR, sO + first * kD, int64_t{kR} * kD, out);
    store_split_row<kD, Element>(p, part_row_of(hh) + r, lane, out, lse);
  }
}

// ---------------------------------------------------------------------------------------------
// The candidate's combine kernel: one block of kCombineWarps warps per row, the warps sharing
// the row's splits. The chapter's combine kernel gives each row one warp that walks the splits
// one after the other, a load from L2 and its wait per split: at batch 1 (32 rows) its 32
// warps took 8 µs over 8 splits (MHA) and 20 … 27 µs over 32 … 43 (GQA 32/8) under Nsight
// Compute (docs/results/h200-ncu-decode-combine.txt), at GQA as long as the attention itself.
// Here the splits' L go to shared memory first, each warp merges every kCombineWarps-th
// split with its loads independent of each other, and the warps' sums are added in shared
// memory. The same merge as combine_row (combine.cuh), written for many splits. It waits for
// the attention kernel with griddepcontrol.wait: launched as its programmatic dependent, its
// launch is prepared while the attention runs (unless Traits::kEarlyTrigger, the attention
// does not signal early, so its blocks start once the attention's last block has exited).
// ---------------------------------------------------------------------------------------------
constexpr int kCombineWarps = 4;

template <int kHeadDim, class Element>
__global__ void __launch_bounds__(32 * kCombineWarps)
    decode_combine_wide_kernel(const __grid_constant__ DecodeParams p) {
  constexpr int kCols = kHeadDim / 32;
  __shared__ float sL[kMaxSplits];
  __shared__ __align__(16) float sO[kCombineWarps][kHeadDim];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t rows_all = int64_t{p.batch} * p.heads_q * p.q_len;
  const int64_t row = blockIdx.x;  // (b·H_q + h)·q_len + i
  const int num = p.num_splits;
#if FA_DECODE_SM90  // sm_90: wait for the attention's partials (before sm_90 the stream's order
                    // does)
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif

  for (int s = threadIdx.x; s < num; s += 32 * kCombineWarps)
    sL[s] = p.lse_part[s * rows_all + row];
  __syncthreads();
  // L = log Σ_s exp(L_s), every warp alike (NaN in any L_s: O and L NaN; all empty: O = 0).
  float big = -INFINITY;
  bool nan = false;
  for (int s = lane; s < num; s += 32) big = fmaxf(big, sL[s]), nan = nan || isnan(sL[s]);
  big = warp_max(big);
  nan = __any_sync(0xffffffffu, nan);
  float sum = 0.f;
  if (big != -INFINITY)
    for (int s = lane; s < num; s += 32) sum += expf(sL[s] - big);
  sum = warp_sum(sum);
  const float lse = nan ? NAN : big == -INFINITY ? -INFINITY : big + logf(sum);

  float acc[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) acc[c] = 0.f;
  if (lse != -INFINITY) {
#pragma unroll 4
    for (int s = warp; s < num; s += kCombineWarps) {
      const float w = nan ? NAN : expf(sL[s] - lse);
      float x[kCols];  // read even for an empty split (w = 0, inside the workspace), not used
      load_cols<float, kCols>(p.o_part + (s * rows_all + row) * kHeadDim + lane * kCols, x);
#pragma unroll
      for (int c = 0; c < kCols; ++c) acc[c] += w == 0.f ? 0.f : w * x[c];
    }
  }
#pragma unroll
  for (int c = 0; c < kCols; ++c) sO[warp][lane * kCols + c] = acc[c];
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    acc[c] = 0.f;
#pragma unroll
    for (int w = 0; w < kCombineWarps; ++w) acc[c] += sO[w][lane * kCols + c];
  }
  store_output_row<kHeadDim, Element>(p, row, lane, acc, lse);
}

/// \brief The driver's cuTensorMapEncodeTiled, reached through the runtime (no libcuda), looked
/// up once: step 11's lookup, repeated here as steps repeat what they need.
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
inline EncodeTiled tensor_map_encoder() {
  static const EncodeTiled encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                cudaEnableDefault, &found));
#else
    CUDA_CHECK(cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &found));
#endif
    if (found != cudaDriverEntryPointSuccess || fn == nullptr)
      throw CudaError(cudaErrorSymbolNotFound,
                      "the CUDA driver does not provide cuTensorMapEncodeTiled (step 12's tensor "
                      "copies of K and V)");
    return reinterpret_cast<EncodeTiled>(fn);
  }();
  return encode;
}

/// \brief The K and V caches' tensor maps for Traits::kTma: 4-D, innermost first, (d, H_kv,
/// N_max, B) over the contiguous cache or (d, H_kv, page_size, pages) over the pool, boxes of
/// 64 dims × 1 head × Traits::kBlockN positions (or a page's, if fewer) × 1, the 128-byte
/// swizzle, L2 promotion of 128 bytes. A pool whose pages neither hold whole tiles nor divide
/// one gets no maps (zeros): its tiles go by cp.async.
template <class Traits, class Element>
KvTensorMaps make_kv_tensor_maps(const DecodeParams& p) {
  KvTensorMaps maps{};
  constexpr int kN = Traits::kBlockN;
  if (!Traits::tma_pages(p.paged, p.page_size)) return maps;
  const EncodeTiled encode = tensor_map_encoder();
  const cuuint64_t d = static_cast<cuuint64_t>(p.head_dim);
  const cuuint64_t rows = static_cast<cuuint64_t>(p.paged ? p.page_size : p.n_max);
  const cuuint64_t units = static_cast<cuuint64_t>(p.paged ? p.num_pages : p.batch);
  const cuuint64_t dims[4] = {d, static_cast<cuuint64_t>(p.heads_kv), rows, units};
  constexpr cuuint64_t kBytes = sizeof(Element);
  const cuuint64_t row_bytes = kBytes * d * static_cast<cuuint64_t>(p.heads_kv);
  const cuuint64_t strides[3] = {kBytes * d, row_bytes, row_bytes * rows};
  const cuuint32_t box[4] = {64, 1,
                             static_cast<cuuint32_t>(p.paged ? std::min(kN, p.page_size) : kN), 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  static_assert(std::is_same_v<Element, __half> || std::is_same_v<Element, __nv_bfloat16>,
                "fp16 or bf16 caches");
  constexpr CUtensorMapDataType kType = std::is_same_v<Element, __half>
                                            ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                            : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  for (int kv = 0; kv < 2; ++kv) {
    void* data = kv == 0 ? p.k_cache : p.v_cache;
    const CUresult r =
        encode(kv == 0 ? &maps.k : &maps.v, kType, 4, data, dims, strides, box, elem_strides,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
      throw CudaError(
          cudaErrorInvalidValue,
          "cuTensorMapEncodeTiled failed (CUresult " + std::to_string(static_cast<int>(r)) +
              ") for the " + (kv == 0 ? "K" : "V") + " cache in step 12: dims " +
              std::to_string(d) + " x " + std::to_string(dims[1]) + " x " + std::to_string(rows) +
              " x " + std::to_string(units) + " (each at most 2^32), address mod 16 = " +
              std::to_string(reinterpret_cast<std::uintptr_t>(data) % 16) + " (must be 0)");
  }
  return maps;
}

/// \brief Launches the tensor-core candidate's attention kernel `attend` (Traits' block and
/// shared memory), then, with more than one split, the wide combine kernel as its programmatic
/// dependent (cudaLaunchAttributeProgrammaticStreamSerialization).
/// \param attend the kernel \param p the parameters \param stream the stream
template <class Traits, class Element>
void launch_attend_combine_mma(void (*attend)(DecodeParams, KvTensorMaps), const DecodeParams& p,
                               cudaStream_t stream) {
  CUDA_CHECK(cudaFuncSetAttribute(attend, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(Traits::kSmemBytes)));
  const int head_groups = (p.heads_kv + Traits::kHeads - 1) / Traits::kHeads;
  const dim3 grid(p.num_splits, head_groups * p.row_chunks, p.batch);
  // The device's compute capability, asked only when a cluster, the TMA or the combine's
  // programmatic launch needs it (all sm_90).
  int major = 0;
  if (Traits::kClusterHeads > 1 || Traits::kTma || p.num_splits > 1) {
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  }
  // The maps, read only by a kernel with Traits::kTma compiled for sm_90 or newer; below
  // compute capability 9.0 the kernel (compiled for it) copies every tile by cp.async.
  KvTensorMaps maps{};
  if constexpr (Traits::kTma) {
    if (major >= 9) maps = make_kv_tensor_maps<Traits, Element>(p);
  }
  if (Traits::kClusterHeads > 1 && major >= 9 && grid.y % Traits::kClusterHeads == 0) {
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = dim3(Traits::kThreads);
    config.dynamicSmemBytes = Traits::kSmemBytes;
    config.stream = stream;
    cudaLaunchAttribute cluster[1];
    cluster[0].id = cudaLaunchAttributeClusterDimension;
    cluster[0].val.clusterDim.x = 1;
    cluster[0].val.clusterDim.y = Traits::kClusterHeads;
    cluster[0].val.clusterDim.z = 1;
    config.attrs = cluster;
    config.numAttrs = 1;
    CUDA_CHECK(cudaLaunchKernelEx(&config, attend, p, maps));
  } else {
    attend<<<grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(p, maps);
    CUDA_CHECK_LAUNCH();
  }
  if (p.num_splits == 1) return;  // the attention wrote O and L

  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(int64_t{p.batch} * p.heads_q * p.q_len));
  config.blockDim = dim3(32 * kCombineWarps);
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  // Programmatic dependent launch needs compute capability 9.0; before it, plain stream order.
  config.numAttrs = major >= 9 ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&config, decode_combine_wide_kernel<Traits::kHeadDim, Element>, p));
}

}  // namespace fa::step12
