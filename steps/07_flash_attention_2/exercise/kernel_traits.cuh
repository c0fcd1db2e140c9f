// kernel_traits.cuh — step 07's tile configuration, its shared-memory layout (the swizzle),
// the kernel's parameters, and the one function each instantiation file provides.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/problem.h"
#include "common/registry.h"

namespace fa::step07 {

/// \brief What the kernel needs, by value (a __grid_constant__ kernel argument). Offsets are
/// int: validate() keeps every index into Q, K, V, O and L below 2^31 (problem.h, Limits).
struct FwdParams {
  const void* q;              // [B, N_q, H_q, d] or [B, H_q, N_q, d], Element
  const void* k;              // [B, N_kv, H_kv, d] or [B, H_kv, N_kv, d], Element
  const void* v;              // same as k
  void* o;                    // same as q
  float* lse;                 // [B, H_q, N_q] fp32, natural log
  int batch, heads_q, group;  // group = H_q / H_kv query heads per K/V head (GQA)
  int n_q, n_kv;
  int q_batch_stride, q_head_stride, q_row_stride;     // elements, for Q and O
  int kv_batch_stride, kv_head_stride, kv_row_stride;  // elements, for K and V
  float scale_log2;  // softmax scale · log2(e): scores are exponentiated with exp2
  bool causal;
};

// ---------------------------------------------------------------------------------------------
// Tiles and warps
//
// A thread block (CTA) owns kBlockM = 128 query rows of one head for the whole kernel and
// streams K/V tiles of kBlockN keys past them. Its 4 warps split the ROWS: warp w owns rows
// [32w, 32w + 32), i.e. two m16 tiles of the mma (kMmaM = 2), and all kBlockN columns of S
// and all kHeadDim columns of O for those rows:
//
//                   S tile  kBlockM × kBlockN          O accumulator  kBlockM × kHeadDim
//                 +------------------------+          +--------------------------------+
//   rows   0- 31  |  warp 0 (registers)    |          |  warp 0 (registers)            |
//   rows  32- 63  |  warp 1                |          |  warp 1                        |
//   rows  64- 95  |  warp 2                |          |  warp 2                        |
//   rows  96-127  |  warp 3                |          |  warp 3                        |
//                 +------------------------+          +--------------------------------+
//
// Why split rows (FlashAttention-2, §3.3 "work partitioning between warps"): a warp that
// owns whole rows of S owns whole rows of the softmax. Row max and row sum never leave the
// warp (two shuffles, mma.cuh), and P goes from the S accumulators straight into the P V
// product as A fragments. FlashAttention-1 split K/V across warps instead ("split-K"), so
// every warp held a partial row and the partial results met in shared memory each tile.
//
// Why 32 rows per warp and not 16: every warp reads ALL of K and V from shared memory per
// tile, whatever its number of rows, so rows per warp are the reuse factor of a K/V fragment
// loaded with ldmatrix. With 16 rows a 256-byte B fragment feeds one m16n8k16 mma (4096
// FLOPs); with 32 rows it feeds two. Shared memory delivers 128 bytes per clock per SM. At 16
// rows (and Q held in registers) that is 256 B per mma: at most 0.5 mma per clock per SM,
// ~530 TFLOP/s on 132 SMs at ~1.98 GHz — below what mma.sync itself can do (~650). At 32
// rows, counting the Q fragments re-read from shared memory (below), a warp reads
// 8 · (1 KB of Q + 1 KB of K) + 2 · 4 KB of V = 24 KB per tile of 128 mma at d = 128, 192 B per
// mma, and 160 B at d = 64: a cap of 0.67–0.8 mma per clock, at or above mma.sync's own.
//
// kBlockN, the keys per tile: registers first. A lane holds 32·kBlockN/32 = kBlockN fp32
// scores of S and 32·kHeadDim/32 = kHeadDim fp32 of O, and on top of those the fragments
// ldmatrix has in flight, the softmax state and the addresses. FlashAttention-2's own tiles
// (128 × 64 at d = 128, 128 × 128 at d = 64) make kBlockN + kHeadDim = 192; ptxas then hits
// the 255-register ceiling and spills (at d = 128 into a 16-byte stack frame per thread; CUDA
// 13.0, docs/results/h200-kernels.md). Whether that costs
// anything is a measurement, not an argument: bin/variants_07 times every candidate, and the
// configurations below are the fastest it found on the H200 (docs/results/h200-variants.md).
// At d = 128 the causal kernel runs 128 × 64 — spills and all, 4–6% faster there than
// 128 × 32 — and the non-causal one 128 × 32, 1–4% faster at N ≥ 4096.
//
// Q stays in shared memory and its fragments are re-read with ldmatrix for every tile: held
// in registers it would cost another 32·kHeadDim·2/(32·4) = kHeadDim/2 registers per lane,
// which d = 128 does not have. The price is the Q share of the shared-memory traffic above.
//
// Pipeline depth: kStages buffers of K and V, so a tile's copies are issued kStages − 1 tiles
// before it is needed. One tile (128–256 mma per warp, two warps sharing a tensor core) lasts
// roughly 1,000–3,000 clocks, about what a load that misses L2 takes on a busy GPU, so one
// tile of slack (kStages = 2) looked marginal and three stages the safe choice. Measured, two
// stages are faster: 4–6% at d = 64 and 1–2% at d = 128 (variants v2 → v3). The K/V re-reads
// hit L2 (a head's K and V are read by all its query blocks at about the same time), whose
// latency one tile covers, and the third stage costs a modulo-3 stage index and 16–32 KB of
// shared memory that the L1 cache would otherwise use.
//
// Occupancy: 2 CTAs (8 warps) per SM. Registers: 2 · 128 threads · 255 ≤ 64 K; shared memory
// at most 2 · (96 + 1) ≤ 228 KB. While one CTA's warps wait on a barrier or on the softmax's
// MUFU.EX2, the other's issue mmas.
// ---------------------------------------------------------------------------------------------
//
// The last three parameters exist for the measured table of versions (variants.cu, chapter
// 07): kSwizzle_ = false stores tiles plainly (8-way ldmatrix bank conflicts), kSkipRescale_ =
// false rescales O after every tile, kMinBlocksPerSm_ is __launch_bounds__'s occupancy
// promise (2 → at most 255 registers for 4 warps; 1 for configurations of 8 warps).
// ---------------------------------------------------------------------------------------------
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kNumWarps_, int kStages_, class Element_,
          bool kSwizzle_ = true, bool kSkipRescale_ = true, int kMinBlocksPerSm_ = 2>
struct KernelTraits {
  using Element = Element_;                   // __nv_bfloat16 or __half: Q, K, V, O and P
  static constexpr int kHeadDim = kHeadDim_;  // d
  static constexpr int kBlockM = kBlockM_;    // query rows per CTA
  static constexpr int kBlockN = kBlockN_;    // keys per K/V tile
  static constexpr int kNumWarps = kNumWarps_;
  static constexpr int kNumThreads = 32 * kNumWarps;
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;  // __launch_bounds__ (2: 255 regs)
  static constexpr bool kSwizzle = kSwizzle_;               // XOR-swizzled tiles (below)
  static constexpr bool kSkipRescale = kSkipRescale_;       // skip O *= α when no max moved
  static constexpr int kStages = kStages_;  // K/V buffers: tile j computed, j+1 … in flight

  static constexpr int kWarpRows = kBlockM / kNumWarps;  // query rows per warp (32)
  static constexpr int kMmaM = kWarpRows / 16;           // m16 tiles per warp (2)
  static constexpr int kNTilesS = kBlockN / 8;           // n8 tiles of a warp's S (keys)
  static constexpr int kNTilesO = kHeadDim / 8;          // n8 tiles of a warp's O (dims)
  static constexpr int kKStepsS = kHeadDim / 16;         // k16 steps of S = Q Kᵀ (over d)
  static constexpr int kKStepsO = kBlockN / 16;          // k16 steps of O += P V (over keys)

  // Shared memory. Every tile is [rows][kHeadDim] Elements, row-major, in 16-byte chunks.
  static constexpr int kChunksPerRow = kHeadDim * 2 / 16;  // 16-byte chunks per row
  static constexpr int kRowBytes = kHeadDim * 2;
  static constexpr int kQBytes = kBlockM * kRowBytes;                      // sQ [kBlockM][kHeadDim]
  static constexpr int kKVTileBytes = kBlockN * kRowBytes;                 // one K or V tile
  static constexpr int kSmemBytes = kQBytes + 2 * kStages * kKVTileBytes;  // Q, K[], V[]

  static_assert(sizeof(Element) == 2, "16-bit elements only");
  static_assert(kStages >= 2, "at least one tile in flight while one is computed");
  static_assert(kWarpRows % 16 == 0, "a warp owns whole m16 tiles");
  static_assert(kBlockN % 16 == 0 && kHeadDim % 16 == 0, "whole k16 steps and n8 pairs");
  static_assert(kChunksPerRow % 8 == 0, "the swizzle permutes groups of 8 chunks (d >= 64)");
  static_assert(kNumThreads % kChunksPerRow == 0, "a thread copies the same chunk of each row");
  static_assert(32 % kChunksPerRow == 0, "epilogue: a lane copies the same chunk of each row");

  // -------------------------------------------------------------------------------------------
  // The swizzle
  //
  // A row of a tile is kChunksPerRow 16-byte chunks: 8 at d = 64 (128 bytes, exactly the 32
  // banks), 16 at d = 128. Stored plainly, chunk c of every row starts at the same bank, and
  // an ldmatrix phase (8 lanes reading the SAME chunk column of 8 consecutive rows, see
  // mma.cuh) hits one group of four banks 8 times: an 8-way conflict, 8 wavefronts instead of 1.
  // Step 06 padded every row by one chunk. That costs a chunk in 9 or 17 of the shared memory,
  // which two K/V stages feel, and it breaks the tiles' power-of-two sizes.
  //
  // Instead chunk c of row r is stored at chunk position  c ^ (r % 8)  of its row: XOR with
  // the row's low 3 bits permutes each group of 8 chunks differently for each of 8 rows.
  //
  //   logical chunk c:     0  1  2  3  4  5  6  7    (d = 128: and again for 8 … 15, whose
  //   stored at, row 0:    0  1  2  3  4  5  6  7     group is kept: only the low 3 bits flip)
  //              row 1:    1  0  3  2  5  4  7  6
  //              row 2:    2  3  0  1  6  7  4  5
  //              row 3:    3  2  1  0  7  6  5  4
  //              row 4:    4  5  6  7  0  1  2  3
  //              row 5:    5  4  7  6  1  0  3  2
  //              row 6:    6  7  4  5  2  3  0  1
  //              row 7:    7  6  5  4  3  2  1  0
  //
  // A column of this table (one logical chunk, 8 consecutive rows) visits all 8 positions, so
  // every ldmatrix phase is conflict-free; a row is still a permutation of itself, so the
  // cp.async writes (8 lanes = 8 chunks of one row) and the epilogue's 16-byte reads are
  // conflict-free too. No padding: the tiles stay 2^k bytes.
  // -------------------------------------------------------------------------------------------
  /// \brief Byte offset of chunk `chunk` (16 bytes, logical) of row `row` inside a tile.
  /// (With kSwizzle = false, the plain row-major offset. The kernel's "one XOR per k step"
  /// still holds there: a row is 128 or 256 bytes, so adding 32·j to a chunk-0/1 offset
  /// never carries out of the row's low bits, and adding is XOR.)
  __device__ static constexpr uint32_t swizzle(int row, int chunk) {
    // TODO(exercise): the byte offset of logical chunk `chunk` of row `row`: stored at chunk
    // position chunk ^ (row % 8) of its row when kSwizzle, at `chunk` otherwise (the table
    // above). As given, every chunk of a row lands on the row's first chunk: wrong values
    // everywhere.
    static_cast<void>(chunk);
    return static_cast<uint32_t>(row * kChunksPerRow * 16);
  }
};

// The tiles per head dim and mask (see above): the one place to change when tuning, and
// the fastest rows of bin/variants_07 on the H200 (docs/results/h200-variants.md). Skipping
// the rescale of O when no max moved (kSkipRescale) pays only at d = 128 with 32-key tiles;
// elsewhere the warp vote and branch cost more than the multiplies they save.
template <int kHeadDim, class Element, bool IsCausal>
struct FwdConfig;
template <class Element, bool IsCausal>
struct FwdConfig<64, Element, IsCausal> {  // 128 × 64, 2 stages, always rescale: 48 KB smem
  using Traits = KernelTraits<64, 128, 64, 4, 2, Element, true, false>;
};
template <class Element>
struct FwdConfig<128, Element, false> {  // 128 × 32, 2 stages, skip α = 1: 64 KB smem
  using Traits = KernelTraits<128, 128, 32, 4, 2, Element, true, true>;
};
template <class Element>
struct FwdConfig<128, Element, true> {  // 128 × 64, 2 stages, always rescale: 96 KB smem
  using Traits = KernelTraits<128, 128, 64, 4, 2, Element, true, false>;
};

/// \brief The kernel's parameters for problem `prob` on tensors `t` (api.cu).
FwdParams make_fwd_params(const Problem& prob, const DeviceTensors& t);

/// \brief Launches the forward kernel for head dim kHeadDim and Element on `stream`. Defined
/// in flash_fwd_kernel.cuh and instantiated once per (d, dtype) in flash_fwd_d*_*.cu, so the
/// four kernels compile in parallel and api.cu does not compile any of them.
template <int kHeadDim, class Element>
void run_flash_fwd(const FwdParams& params, cudaStream_t stream);

}  // namespace fa::step07
