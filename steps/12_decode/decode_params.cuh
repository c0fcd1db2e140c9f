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
inline int row_chunks(const DecodeProblem& p) {
  const int rows = p.group_size() * p.q_len, per = DecodeTraits<64>::kMaxRows;
  return (rows + per - 1) / per;
}

/// \brief The split rule (documented in api.cu). \param p the problem
/// \param sm_count the device's SMs \return 1 .. kMaxSplits
int num_splits(const DecodeProblem& p, int sm_count);

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
