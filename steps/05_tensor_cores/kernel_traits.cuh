// kernel_traits.cuh — step 05's tile configuration, its shared-memory layout (the padding),
// the kernel's parameters, and the one function each instantiation file provides.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/problem.h"
#include "common/registry.h"

namespace fa::step05 {

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
// The block (4 warps, 128 threads) owns kBlockM = 64 query rows; warp w owns rows
// 16w … 16w + 15 — one row of fragments — of S, P and O:
//
//             S tile 64 × 64 (fp32, smem)              O accumulator 64 × d (fp32, registers)
//           keys 0-15 16-31 32-47 48-63              dims 0-15  16-31  …  d-16 … d-1
//   rows  0-15  [w0]   [w0]   [w0]   [w0]               [w0]     [w0]   …   [w0]
//   rows 16-31  [w1]   [w1]   [w1]   [w1]               [w1]     [w1]   …   [w1]
//   rows 32-47  [w2]    …                               [w2]      …
//   rows 48-63  [w3]    …                               [w3]      …
//
// Every [w] is one 16 × 16 fragment (mma.cuh). So warp w computes its 4 S fragments from its
// Q rows and all of K, and its d/16 O fragments from its P rows and all of V. Every warp
// reads the whole K and V tile (that is the cost of the split); no warp reads another warp's
// S, P or O.
//
// In the softmax, lanes 2r and 2r + 1 of warp w own S row 16w + r; lane `half` (0 or 1) takes
// the float4 column groups half, half + 2, half + 4, … (col_of):
//   lane 0: cols 0-3, 8-11, …, 56-59    lane 1: cols 4-7, 12-15, …, 60-63     (row 0)
//   lane 2: cols 0-3, 8-11, …           lane 3: cols 4-7, …                    (row 1) …
//
// Shared-memory rows are padded (kSkew): an unpadded row of d = 64 16-bit values is 128
// bytes, so row r of every tile starts at bank 0 and the 8 rows read by one ldmatrix phase
// would all hit the same 4 banks (8-way conflict). 16 extra bytes per row shift each row by 4
// banks: conflict-free fragment loads. For the fp32 S tile, 8 extra floats (32 bytes) make the
// 4 rows read in one phase of the softmax's float4 loads land on 4 different 8-bank groups.
//
// Why these sizes (H200: 228 KB shared memory, 64 K registers per SM):
//   * 16 rows per warp is the fragment height; 4 warps × 16 = 64 rows per block.
//   * kBlockN = 64 keys: 4 S fragments per warp (32 fp32 registers) and 32 scores per lane.
//   * Shared memory: Q, K, V tiles (2·64·(d+8) bytes each) + S (64 × 72 floats, 18 KB; P lives
//     in it) = 69 KB at d = 128 (three blocks per SM), 45 KB at d = 64 (four).
//   * Registers follow (kMinBlocksPerSm): O is d/2 fp32 registers per lane (64 at d = 128), S
//     32 more; ptxas fits d = 128 into 168 per thread and d = 64 into 128, without spills.
// ---------------------------------------------------------------------------------------------
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kNumWarps_, class Element_>
struct KernelTraits {
  using Element = Element_;                   // __nv_bfloat16 or __half: Q, K, V, O and P
  static constexpr int kHeadDim = kHeadDim_;  // d
  static constexpr int kBlockM = kBlockM_;    // query rows per block (Q, O rows)
  static constexpr int kBlockN = kBlockN_;    // keys per K/V tile (S columns)
  static constexpr int kNumWarps = kNumWarps_;
  static constexpr int kNumThreads = 32 * kNumWarps;
  static constexpr int kMinBlocksPerSm = kHeadDim >= 128 ? 3 : 4;  // what smem allows

  static constexpr int kFrag = 16;                       // WMMA fragment: m = n = k = 16
  static constexpr int kWarpRows = kBlockM / kNumWarps;  // query rows per warp (16)
  static constexpr int kSFrags = kBlockN / kFrag;        // S fragments per warp (columns)
  static constexpr int kOFrags = kHeadDim / kFrag;       // O fragments per warp (columns)
  static constexpr int kDimSteps = kHeadDim / kFrag;     // k-steps of S = Q Kᵀ
  static constexpr int kKeySteps = kBlockN / kFrag;      // k-steps of O += P V

  static constexpr int kRowLanes = 32 / kWarpRows;          // lanes sharing an S row: 2
  static constexpr int kColsPerLane = kBlockN / kRowLanes;  // scores per lane per tile: 32

  // Padded row strides (see above), in elements of their tile.
  static constexpr int kSkew = 16 / sizeof(Element);    // 16 bytes of 16-bit elements
  static constexpr int kTileStride = kHeadDim + kSkew;  // Q, K, V rows
  static constexpr int kSStride = kBlockN + 8;          // S rows, floats
  static constexpr int kPStride = kBlockN + kSkew;      // P rows (P overlays S, see kernel)
  static constexpr int kOutCols = kHeadDim < kBlockN ? kHeadDim : kBlockN;  // O cols per pass

  // Shared memory. Every region starts at a multiple of 32 bytes (WMMA's pointer alignment).
  static constexpr int kQElems = kBlockM * kTileStride;   // Q [kBlockM][kTileStride]
  static constexpr int kKVElems = kBlockN * kTileStride;  // K, V [kBlockN][kTileStride]
  static constexpr int kSFloats = kBlockM * kSStride;     // S [kBlockM][kSStride]
  static constexpr std::size_t kSmemBytes =
      sizeof(Element) * (kQElems + 2 * kKVElems) + sizeof(float) * (kSFloats + kBlockM);

  static_assert(sizeof(Element) == 2, "16-bit elements only");
  static_assert(kWarpRows == kFrag, "a warp owns one row of fragments");
  static_assert(kHeadDim % kFrag == 0 && kBlockN % kFrag == 0, "whole fragments");
  static_assert(kRowLanes * kWarpRows == 32, "a warp's lanes cover its rows exactly");
  static_assert(kColsPerLane % 4 == 0, "lanes own whole float4 column groups");
  static_assert((sizeof(Element) * kQElems) % 32 == 0 && (sizeof(Element) * kKVElems) % 32 == 0,
                "tile regions keep 32-byte alignment");
  static_assert(kWarpRows * kPStride * sizeof(Element) <= kWarpRows * kSStride * sizeof(float),
                "a warp's P rows fit in its S rows");
  static_assert(kHeadDim % kOutCols == 0 && kOutCols % 8 == 0, "whole epilogue passes");

  /// Tile column (key) of the c-th score a lane holds, c < kColsPerLane.
  __device__ static constexpr int col_of(int half, int c) {
    return ((c / 4) * kRowLanes + half) * 4 + c % 4;
  }
};

// The tiles per head dim (see above): 64 query rows of 4 warps and 64 keys for every d.
template <int kHeadDim, class Element>
struct FwdConfig {
  using Traits = KernelTraits<kHeadDim, 64, 64, 4, Element>;
};

/// \brief The kernel's parameters for problem `prob` on tensors `t` (api.cu).
FwdParams make_fwd_params(const Problem& prob, const DeviceTensors& t);

/// \brief Launches the forward kernel for head dim kHeadDim and Element on `stream`. Defined
/// in flash_fwd_kernel.cuh and instantiated once per (d, dtype) in flash_fwd_d*_*.cu, so the
/// six kernels compile in parallel and api.cu does not compile any of them.
template <int kHeadDim, class Element>
void run_flash_fwd(const FwdParams& params, cudaStream_t stream);

}  // namespace fa::step05
