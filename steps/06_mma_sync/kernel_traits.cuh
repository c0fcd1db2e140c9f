// kernel_traits.cuh — step 06's tile configuration, its shared-memory layout, the kernel's
// parameters, and the one function each instantiation file provides.
//
// Not yet (step 07): the XOR swizzle that frees ldmatrix of bank conflicts without padding,
// K/V buffers in stages, and tiles measured per head dim and mask rather than argued.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/problem.h"
#include "common/registry.h"

namespace fa::step06 {

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
// 13.0, docs/results/h200-kernels.md). This step stays below
// that: 128 × 64 at d = 64 (64 + 64 = 128 fp32 per lane) and 128 × 32 at d = 128 (32 + 128 =
// 160), which leaves 95–127 registers for the fragments, the softmax state of 4 rows and the
// addresses: ptxas (CUDA 13.0) uses 211–235 registers and spills nothing (FwdConfig below,
// api.cu's header). Whether a spilling tile would be faster is a measurement: step 07 makes it.
//
// Q stays in shared memory and its fragments are re-read with ldmatrix for every tile: held
// in registers it would cost another 32·kHeadDim·2/(32·4) = kHeadDim/2 registers per lane,
// which d = 128 does not have. The price is the Q share of the shared-memory traffic above.
//
// One buffer of K and one of V: every thread copies its share of a tile (16 bytes at a time,
// global → registers → shared) and waits for it, between two barriers (flash_fwd_kernel.cuh).
// The warps compute nothing while a tile is on its way.
//
// Occupancy: 2 CTAs (8 warps) per SM. Registers: 2 · 128 threads · 255 ≤ 64 K; shared memory
// at most 2 · (48 + 1) ≤ 228 KB. While one CTA's warps wait on a barrier or on the softmax's
// MUFU.EX2, the other's issue mmas.
// ---------------------------------------------------------------------------------------------
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kNumWarps_, class Element_>
struct KernelTraits {
  using Element = Element_;                   // __nv_bfloat16 or __half: Q, K, V, O and P
  static constexpr int kHeadDim = kHeadDim_;  // d
  static constexpr int kBlockM = kBlockM_;    // query rows per CTA
  static constexpr int kBlockN = kBlockN_;    // keys per K/V tile
  static constexpr int kNumWarps = kNumWarps_;
  static constexpr int kNumThreads = 32 * kNumWarps;
  static constexpr int kMinBlocksPerSm = 2;  // __launch_bounds__ (2: 255 regs)

  static constexpr int kWarpRows = kBlockM / kNumWarps;  // query rows per warp (32)
  static constexpr int kMmaM = kWarpRows / 16;           // m16 tiles per warp (2)
  static constexpr int kNTilesS = kBlockN / 8;           // n8 tiles of a warp's S (keys)
  static constexpr int kNTilesO = kHeadDim / 8;          // n8 tiles of a warp's O (dims)
  static constexpr int kKStepsS = kHeadDim / 16;         // k16 steps of S = Q Kᵀ (over d)
  static constexpr int kKStepsO = kBlockN / 16;          // k16 steps of O += P V (over keys)

  // Shared memory. Every tile is [rows][kHeadDim] Elements, row-major, in 16-byte chunks,
  // each row padded by one chunk (see "The layout" below).
  static constexpr int kChunksPerRow = kHeadDim * 2 / 16;        // 16-byte chunks per row
  static constexpr int kRowBytes = kHeadDim * 2 + 16;            // a row and its padding chunk
  static constexpr int kQBytes = kBlockM * kRowBytes;            // sQ [kBlockM][kHeadDim]
  static constexpr int kKVTileBytes = kBlockN * kRowBytes;       // one K or V tile
  static constexpr int kSmemBytes = kQBytes + 2 * kKVTileBytes;  // Q, K, V

  static_assert(sizeof(Element) == 2, "16-bit elements only");
  static_assert(kWarpRows % 16 == 0, "a warp owns whole m16 tiles");
  static_assert(kBlockN % 16 == 0 && kHeadDim % 16 == 0, "whole k16 steps and n8 pairs");
  static_assert(kNumThreads % kChunksPerRow == 0, "a thread copies the same chunk of each row");
  static_assert(32 % kChunksPerRow == 0, "epilogue: a lane copies the same chunk of each row");

  // -------------------------------------------------------------------------------------------
  // The layout
  //
  // A row of a tile is kChunksPerRow 16-byte chunks: 8 at d = 64 (128 bytes, exactly the 32
  // banks), 16 at d = 128. Stored plainly, chunk c of every row would start at the same bank,
  // and an ldmatrix phase (8 lanes reading the SAME chunk column of 8 consecutive rows, see
  // mma.cuh) would hit one group of four banks 8 times: an 8-way conflict, 8 wavefronts
  // instead of 1. Step 05's answer still works here: pad every row by one 16-byte chunk. Row r
  // then starts r·16 bytes further round the banks than a plain row would, so the 8 rows of a
  // phase fall in 8 different groups of four banks. The copies into the tile (8 lanes = 128
  // contiguous bytes of one row) and the epilogue's 4-byte writes (rows g = 0 … 7, 4 bytes at
  // 4t: banks 4g + t) are conflict-free too. The price is one chunk in every 9 (d = 64) or 17
  // (d = 128) of the shared memory; step 07 gets the same effect without it (a swizzle).
  // -------------------------------------------------------------------------------------------
  /// \brief Byte offset of chunk `chunk` (16 bytes) of row `row` inside a tile: row-major,
  /// kRowBytes (padding included) per row.
  /// (A k step moves two chunks along the row: + 32 bytes, see the kernel.)
  __device__ static constexpr uint32_t offset(int row, int chunk) {
    return static_cast<uint32_t>(row * kRowBytes + chunk * 16);
  }
};

// The tile of each head dim (see above): the one place to change when trying another.
template <int kHeadDim, class Element>
struct FwdConfig;
template <class Element>
struct FwdConfig<64, Element> {  // 128 × 64: 36 KB smem
  using Traits = KernelTraits<64, 128, 64, 4, Element>;
};
template <class Element>
struct FwdConfig<128, Element> {  // 128 × 32: 51 KB smem
  using Traits = KernelTraits<128, 128, 32, 4, Element>;
};

/// \brief The kernel's parameters for problem `prob` on tensors `t` (api.cu).
FwdParams make_fwd_params(const Problem& prob, const DeviceTensors& t);

/// \brief Launches the forward kernel for head dim kHeadDim and Element on `stream`. Defined
/// in flash_fwd_kernel.cuh and instantiated once per (d, dtype) in flash_fwd_d*_*.cu, so the
/// four kernels compile in parallel and api.cu does not compile any of them.
template <int kHeadDim, class Element>
void run_flash_fwd(const FwdParams& params, cudaStream_t stream);

}  // namespace fa::step06
