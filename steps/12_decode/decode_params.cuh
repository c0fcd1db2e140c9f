// decode_params.cuh — step 12's tiles, the kernels' parameters, the split rule and the
// launchers each instantiation file provides.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/decode.h"
#include "common/decode_registry.h"

namespace fa::step12 {

// ---------------------------------------------------------------------------------------------
// Tiles
//
// A block of kWarps = 4 warps attends for one (split, K/V head, sequence): it holds the rows
// of every query head of that K/V head's GROUP, for every new token, together:
//
//     rows r = hg · q_len + i      hg = 0 .. group − 1 (query head g·group + hg), i = 0 .. q_len −
//     1
//
// so a K/V tile is read from global memory once per K/V head, not once per query head (the
// GQA packing). Up to kMaxRows = 32 rows per block; a group with more rows (group · q_len > 32,
// e.g. MQA over 8 heads with 5 new tokens) is cut into ⌈rows / 32⌉ row chunks, blocks of their
// own that read the same K/V tiles again (from L2). Warp w owns rows w, w + 4, w + 8, …
// (kRowsPerWarp = 8 of them at most).
//
// Keys stream past in tiles of kBlockN = 64 through kStages = 2 shared-memory buffers filled
// by cp.async (16 bytes per copy), like step 07's pipeline. Each K/V row of a tile is padded
// by 16 bytes: the score loop has lane j read 16 bytes of key j (and j + 32), and 8 lanes of
// a quarter-warp then fall into 8 different groups of four banks (the row stride is 36 or 68
// words, 4 banks apart): no conflicts, the fix step 06 used.
//
// The arithmetic runs on the CUDA cores in fp32: decoding reads every key and value once for
// a few query rows (rows FLOPs per byte of K/V at 16 bits: 4d FLOPs per row and key, 4d
// bytes), so the cache's bytes, not the tensor cores, bound it. With 32 rows the tensor cores would
// start to matter; that is left for a later step.
// ---------------------------------------------------------------------------------------------
template <int kHeadDim_>
struct DecodeTraits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRowsPerWarp = 8;
  static constexpr int kMaxRows = kWarps * kRowsPerWarp;  // 32 query rows per block
  static constexpr int kBlockN = 64;                      // keys per tile: 2 per lane
  static constexpr int kStages = 2;
  static constexpr int kPad = 8;                      // elements (16 bytes) per K/V row
  static constexpr int kStride = kHeadDim + kPad;     // elements between K/V rows in smem
  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks of a row
  static constexpr int kColsPerLane = kHeadDim / 32;  // columns of O a lane accumulates
  // Shared memory: Q (fp32, scaled), K and V stages (16-bit), P (fp32, per warp and row).
  static constexpr std::size_t kQBytes = std::size_t{kMaxRows} * kHeadDim * 4;
  static constexpr std::size_t kTileBytes = std::size_t{kBlockN} * kStride * 2;
  static constexpr std::size_t kPBytes = std::size_t{kWarps} * kRowsPerWarp * kBlockN * 4;
  static constexpr std::size_t kSmemBytes = kQBytes + 2 * kStages * kTileBytes + kPBytes;
  static_assert(kHeadDim % 32 == 0, "a lane owns whole columns of O");
  static_assert(kBlockN == 64, "the score loop gives each lane keys lane and lane + 32");
};

// ---------------------------------------------------------------------------------------------
// The candidate next version, first design (candidate/decode_kernel_v2.cuh), registered as
// "12_decode_v2" until measured; the name now runs the second design on the tensor cores
// (candidate/decode_kernel_mma.cuh, with its own prediction there and in variants.cu). Neither
// is the chapter's lesson until the measurements say so.
//
// The prediction, written before it runs. On the H200 (132 SMs, HBM read 4.53 TB/s measured)
// 4.5 TB/s is 4.5e12 / 132 = 34 bytes per ns per SM. Little's law: bytes in flight per SM =
// rate × latency; with a loaded HBM latency of 0.7 … 1 µs that is 24 … 34 KB in flight on
// every SM, all the time. This kernel keeps one 32 KiB tile (d = 128, K+V, bf16) in flight per
// block while it computes the other, and nothing while it waits. But the measured ~7 µs per
// tile is far above 1 µs: the block is bound by its instructions, not by the latency. At
// q_len = 1 and one query head per K/V head (MHA) the block has one row, so warp 0 alone
// computes (rows w, w + 4, … belong to warp w) while three warps wait at the barrier; per
// tile it issues ≈ 250 (the tile's copies, a page lookup per row) + 16 × 40 (QK: two keys per
// lane, 16-byte chunks, bf16 unpacks) + 64 × 14 (PV: one key after the other, a dependent
// LDS per key) ≈ 1 800 instructions, mostly waiting on shared-memory latency: 7 µs at
// ~0.15 IPC. More splits only add blocks doing the same, hence "the split count changes
// nothing" at batch >= 8.
//
// The candidate, and the figure each change should give (d = 128, bf16, q_len = 1):
//   1. every warp streams its own 16 keys of each 64-key tile with its own (m, ℓ, O) for every
//      row, merged in the block at the end of the split by combine_row(), the combine
//      kernel's merge: four warps compute instead of one, whatever the rows;
//   2. each lane owns half a key in the QK dot product (lanes j and j + 16 hold key j):
//      1 shuffle per key and row instead of a 5-shuffle reduction per row; the max over the
//      warp's 16 keys takes 4;
//   3. 16-byte loads of V (8 columns per lane), P fetched by a shuffle from the key's lane;
//   4. kStages = 3: two tiles (64 KiB) in flight per block while one is computed; at 106 KiB
//      of shared memory 2 blocks fit an SM: 128 KiB in flight per SM, ≈ 4× Little's 34 KB,
//      so half the blocks of an SM may stall and the HBM still sees enough requests;
//   5. one block-table lookup per tile when page_size is a multiple of 64 (a tile then lies
//      in one page), one per key otherwise (page 16: 4 per tile, not 1 024 per tile).
// Rows per block drop to kMaxRows = 8 (a warp holds every row: 8 × 8 accumulators), so a
// group with more rows than 8 (MQA over 8 heads with 2 new tokens) is cut into more row
// chunks that read the same tiles again from L2; the measured shapes have 1 or 4 rows.
// Per tile and warp (16 keys, R rows): copies 16 × 2 cp.async + ~40 addressing ≈ 80;
// QK 8 × (1 LDS.128 + 8 unpacks + R · (2 LDS.128 + 8 FFMA)) = 72 + 80 R; softmax ≈ 25 R;
// PV 8 × (1 LDS.128 + 8 unpacks + R · (1 SHFL + 8 FFMA)) = 72 + 72 R; loop and barrier ≈ 30:
// ≈ 260 + 180 R, so ≈ 440 at R = 1 (MHA), ≈ 980 at R = 4 (GQA 32/8). Two blocks of 4 warps
// per SM on 4 schedulers issue one 64 KiB pair of tiles in ≈ 2 · 4 · 440 / 4 = 880 cycles
// (0.5 µs at 1.75 GHz: 130 GB/s per SM) at R = 1, ≈ 1 960 cycles (58 GB/s per SM) at R = 4,
// both above the 34 GB/s per SM the HBM can give: the kernel should be bound by the bytes.
// Predicted: >= 4.3 TB/s at batch >= 8 (MHA and GQA; within 5% paged at page 64 and 256,
// page 16 a few % lower: 4 lookups per tile). The candidate's split rule rounds the split
// count down, so that its blocks fit one wave of 2 per SM (this step's rule rounds up: at
// batch 8, MHA, it launches 512 blocks for 264 places, a second wave of 248). Batch 1 with
// 16 384 keys: MHA 32 heads × 8 splits = 256 blocks of 32 tiles, ≥ 3.0 TB/s (the two-tile
// prologue and the combine are a few % of a split); GQA 32/8: 8 heads × 32 splits = 256
// blocks of 8 tiles, ≥ 2.5 TB/s (the prologue is a quarter of a split). What to
// check if it falls short: the split rule (kMinTilesPerSplit = 2 leaves a 2-stage prologue
// uncovered), registers (the o[8][8] accumulators: -Xptxas -v, no spills), and ncu's
// "long scoreboard" vs "barrier" stall split.
//
// Its configuration is the template's: kStages_ shared-memory stages, kWarps_ warps, tiles of
// kBlockN_ keys (every warp streams kBlockN_ / kWarps_ = 16 keys of each). The configuration
// once registered is DecodeTraitsV2<d> (3 stages, 4 warps, 64 keys); it and the others are
// timed by bin/variants_12 (12_decode/variants/variants.cu, with their predictions).
// ---------------------------------------------------------------------------------------------
template <int kHeadDim_, int kStages_ = 3, int kWarps_ = 4, int kBlockN_ = 64>
struct DecodeTraitsV2 {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMaxRows = 8;                     // every warp holds every row
  static constexpr int kBlockN = kBlockN_;               // keys per tile
  static constexpr int kKeysPerWarp = kBlockN / kWarps;  // 16: lanes j and j + 16 own key j
  static constexpr int kStages = kStages_;  // 3: two tiles in flight while one is computed
  static constexpr int kPad = 8;
  static constexpr int kStride = kHeadDim + kPad;
  static constexpr int kChunksPerRow = kHeadDim / 8;
  static constexpr int kColGroups = kHeadDim / 8;  // PV: 8 columns (16 bytes) per lane
  static constexpr std::size_t kQBytes = std::size_t{kMaxRows} * kHeadDim * 4;
  static constexpr std::size_t kTileBytes = std::size_t{kBlockN} * kStride * 2;
  static constexpr std::size_t kSmemBytes = kQBytes + 2 * kStages * kTileBytes;
  // The warps' partials (O and L per warp and row) reuse the stages after the last tile.
  static constexpr std::size_t kMergeBytes = std::size_t{kWarps} * kMaxRows * (kHeadDim + 1) * 4;
  static_assert(kStages >= 2, "one tile in flight while one is computed, at the least");
  static_assert(kBlockN % kWarps == 0 && kKeysPerWarp == 16, "QK: two lanes per key, 32 lanes");
  static_assert(kHeadDim % 16 == 0 && 32 % kColGroups == 0, "PV: column groups tile a warp");
  static_assert(kMergeBytes <= 2 * kStages * kTileBytes, "the merge fits in the stages");
};

/// \brief The combine kernel: one warp per output row, this many rows per block.
constexpr int kCombineRowsPerBlock = 4;
/// \brief The most splits a launch may use (DecodeStepInfo::max_splits).
constexpr int kMaxSplits = 128;
/// \brief The split rule's target: blocks in flight per SM (see num_splits()).
constexpr int kTargetBlocksPerSm = 2;
/// \brief The split rule gives every split of the longest sequence at least this many tiles.
constexpr int kMinTilesPerSplit = 2;

/// \brief Row chunks of one K/V head's rows (group · q_len, kMaxRows per block).
/// \param p the problem \return ⌈group · q_len / kMaxRows⌉
/// \param per rows per block (the candidate's kMaxRows = 8)
inline int row_chunks(const DecodeProblem& p, int per = DecodeTraits<64>::kMaxRows) {
  const int rows = p.group_size() * p.q_len;
  return (rows + per - 1) / per;
}

/// \brief The split rule (documented in api.cu). \param p the problem
/// \param sm_count the device's SMs \return 1 .. kMaxSplits
int num_splits(const DecodeProblem& p, int sm_count);

/// \brief The split rule for blocks of `rows_per_block` rows, the split count rounded up
/// (num_splits(): 32 rows, up) or down (the candidate's: 8 rows, down, one wave).
/// \param p the problem \param sm_count the device's SMs \param rows_per_block rows per
/// block \param round_down round kTargetBlocksPerSm · SMs / blocks down \return 1 .. kMaxSplits
int num_splits_for(const DecodeProblem& p, int sm_count, int rows_per_block, bool round_down);

/// \brief What the kernels need, by value (a __grid_constant__ argument).
struct DecodeParams {
  const void* q;           // [B, q_len, H_q, d], Element
  const void* k_new;       // [B, q_len, H_kv, d]
  const void* v_new;       // [B, q_len, H_kv, d]
  void* k_cache;           // contiguous [B, N_max, H_kv, d] or pool [pages, page_size, H_kv, d]
  void* v_cache;           // same
  const int* cache_lens;   // [B]
  const int* block_table;  // [B, max_pages] (paged only)
  void* o;                 // [B, q_len, H_q, d], Element
  float* lse;              // [B, H_q, q_len]
  float* o_part;           // workspace: [num_splits, B·H_q·q_len, d] fp32, O of each split
  float* lse_part;         // workspace: [num_splits, B·H_q·q_len] fp32, L of each split
  int batch, heads_q, heads_kv, group, head_dim, q_len;
  int paged;                            // 0: contiguous, 1: paged
  int n_max;                            // contiguous: rows per sequence
  int page_size, num_pages, max_pages;  // paged
  int capacity;  // rows a sequence can hold (n_max or max_pages · page_size)
  int num_splits, row_chunks;
  float scale_log2;  // softmax scale · log2(e): the kernel exponentiates with exp2
};

/// \brief The parameters for problem `p`, tensors `t`, `splits` splits and a workspace
/// (api.cu). \param p the problem \param t the tensors \param splits the split count
/// \param workspace workspace_bytes(p, splits) bytes \return the parameters
DecodeParams make_params(const DecodeProblem& p, const DecodeTensors& t, int splits,
                         void* workspace);

/// \brief Bytes of the partial O and L for `splits` splits. \param p the problem
/// \param splits the split count \return splits · B·H_q·q_len · (d + 1) · 4
std::size_t workspace_bytes(const DecodeProblem& p, int splits);

/// \brief Launches the append kernel (append.cu): the new K/V rows into the cache.
/// \param p the parameters \param stream the stream
void run_append(const DecodeParams& p, cudaStream_t stream);

/// \brief Launches the split-KV attention kernel, then the combine kernel, for head dim
/// kHeadDim and Element (decode_kernel.cuh; one instantiation per decode_d*_*.cu).
/// \param p the parameters \param stream the stream
template <int kHeadDim, class Element>
void run_attend_combine(const DecodeParams& p, cudaStream_t stream);

}  // namespace fa::step12
