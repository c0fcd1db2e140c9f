// kernel_traits.cuh — step 08's tile configuration, its shared-memory layout, the kernel's
// parameters, and the arithmetic behind the choice (what the H200 can do, what this uses).
#pragma once

#include <cuda.h>  // CUtensorMap
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/problem.h"
#include "common/registry.h"

namespace fa::step08 {

/// \brief What the kernel needs besides the tensor maps, by value (a __grid_constant__
/// kernel argument). Q, K and V are read through the tensor maps only; O and L are written
/// with ordinary stores, so O's row stride is here. Offsets are int: validate() keeps every
/// index below 2^31 (problem.h, Limits).
struct FwdParams {
  void* o;                    // same shape and layout as q, Element
  float* lse;                 // [B, H_q, N_q] fp32, natural log
  int batch, heads_q, group;  // group = H_q / H_kv query heads per K/V head (GQA)
  int n_q, n_kv;
  int o_batch_stride, o_head_stride, o_row_stride;  // elements
  float scale_log2;  // softmax scale · log2(e): scores are exponentiated with exp2
  bool causal;
  // The order of the tensor maps' middle dimensions: true when heads are the inner one
  // ([B, N, H, d]: dims d, H, N, B), false for [B, H, N, d] (dims d, N, H, B). api.cu says why.
  bool heads_inner;
};

/// \brief The three tensor maps (TMA descriptors) of one call, built on the host (api.cu).
struct TensorMaps {
  CUtensorMap q, k, v;
};

// ---------------------------------------------------------------------------------------------
// Tiles, warpgroups, and the arithmetic
//
// One warpgroup (4 warps, 128 threads) owns 64 query rows: the M of one wgmma.m64nNk16. A CTA
// is kNumWarpgroups of them (kBlockM = 64 · kNumWarpgroups rows of one head); they share the
// K/V tiles that stream through shared memory. Every warpgroup does the whole FlashAttention
// loop on its rows (no warp specialisation: that is the next step), and one elected thread
// (thread 0) also issues the TMA copies.
//
//   per K/V tile, per warpgroup:
//     S[64 × kBlockN]  = Q[64 × d] · K[kBlockN × d]ᵀ   d/16 wgmma m64n{kBlockN}k16 (Q, K from smem)
//     softmax on S in registers (quad shuffles), P = S rounded to 16 bits, in registers
//     O[64 × d]       += P[64 × kBlockN] · V[kBlockN × d]   kBlockN/16 · d/64 wgmma m64n64k16
//                                                          (P from registers, V from smem)
//
// The peak. Dense bf16/fp16 wgmma: 989 TFLOP/s on an H100 SXM by the datasheet: 132 SMs ×
// 1830 MHz × 4096 FLOP per clock per SM, i.e. one m64n256k16 (262,144 multiply-adds) every
// 128 clocks on each SM. The H200 has the same SMs; what cuBLAS reaches there, bf16 8192³, is
// 784.9 TFLOP/s (docs/results/h200-ceilings.json): the practical ceiling, the one the
// chapters' floors use. Step 07 (mma.sync) reaches ~320–335 TFLOP/s at N = 4096; cuDNN
// (FlashAttention-3-like) 480–670.
//
// Per tile and warpgroup (d = 128, kBlockN = 128): S is 64·128·128·2 = 2.1 MFLOP, O the same:
// 4.2 MFLOP = 1024 clocks of one SM's tensor cores at 4096 FLOP/clock. Against that:
//   * shared-memory operand traffic: wgmma reads Q (64 × 128 × 2 = 16 KB) and K (32 KB) for
//     S and V (32 KB) for O, 80 KB per 1024 clocks = 80 B/clock, under the 128 B/clock of
//     shared memory (P comes from registers). With two warpgroups K and V are read twice,
//     once per warpgroup: 160 KB per 2048 clocks, still 80 B/clock.
//   * the softmax: 64·128 = 8192 scores per warpgroup, 64 per thread, each an FFMA, a
//     MUFU.EX2, a max and an add, plus the rescale of 64 O registers and the cvt of P: ~400
//     instructions per thread, 1600 warp-instructions per warpgroup (~400 issue clocks of
//     the SM's 4 schedulers). The exponentials bind first: the SM's MUFU units do 16 per
//     clock, so 8192 of them take 512 clocks, half the tensor-core time of the tile (at
//     d = 64, where the wgmmas take 512 clocks, as long as it). In this step a warpgroup
//     does not overlap its own softmax with its own wgmmas (it waits for S before the
//     softmax and for O before the next tile); the warpgroups of the SM overlap one's
//     softmax with another's wgmmas only as the scheduling falls.
//   Prediction, d = 128: 1024 tensor clocks + 512 softmax + ~100 of waits per tile and
//   warpgroup; one warpgroup alone would keep the tensor cores ~60% busy, two share them and
//   fill some of each other's gaps: 60–75% of the peak, and since the practical peak is
//   cuBLAS's 785, ~450–550 TFLOP/s at N = 4096 non-causal (~1.5× step 07's 335). d = 64:
//   512 + 512 + ~100 clocks, three warpgroups: ~350–450 TFLOP/s. FlashAttention-3 gets
//   further by overlapping the softmax of one tile with the wgmmas of another on purpose
//   (ping-pong scheduling between warpgroups, pipelining inside a warpgroup) and by a
//   producer warp of its own — the following steps.
//
// Registers per thread (the accumulators are fp32, one register each):
//   S: 64·kBlockN/128 = kBlockN/2;  O: 64·d/128 = d/2;  P: kBlockN/4 (16-bit pairs)
//   d = 128, kBlockN = 128: 64 + 64 + 32 = 160, plus softmax state, addresses: fits 255
//     (2 warpgroups = 256 threads × 255 ≤ 64 K registers: one CTA per SM).
//   d = 64, kBlockN = 128: 64 + 32 + 32 = 128, 3 warpgroups = 384 threads: ≤ 168 each.
//
// Shared memory (tiles of 16-bit elements, 1024-byte aligned, plus 1 KB of alignment slack
// and the barriers):
//   d = 128: Q 128 × 128 × 2 = 32 KB; K and V 128 × 128 × 2 = 32 KB each per stage, 2 stages:
//            128 KB; total 161 KB (of 227 KB) → 1 CTA per SM (registers decide anyway).
//   d = 64:  Q 192 × 64 × 2 = 24 KB; K, V 16 KB each per stage, 2 stages: 64 KB; total 89 KB.
//   A third stage would fit at d = 64 (121 KB); two keep one tile in flight while one is
//   computed, as step 07 found enough — to be measured.
//
// Layout of a tile in shared memory: TMA boxes are 64 elements (128 bytes, the width of the
// 128-byte swizzle) wide, so a [rows][d] tile is stored as kDBlocks = d/64 column blocks,
// each [rows][64] with its rows swizzled (hopper.cuh draws it):
//     tile = [kDBlocks][rows][64],  block b at byte b · rows · 128.
// ---------------------------------------------------------------------------------------------
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kStages_, class Element_>
struct KernelTraits {
  using Element = Element_;                   // __nv_bfloat16 or __half: Q, K, V, O and P
  static constexpr int kHeadDim = kHeadDim_;  // d
  static constexpr int kBlockM = kBlockM_;    // query rows per CTA
  static constexpr int kBlockN = kBlockN_;    // keys per K/V tile
  static constexpr int kStages = kStages_;    // K/V buffers in the ring

  static constexpr int kNumWarpgroups = kBlockM / 64;  // one per 64 query rows
  static constexpr int kNumThreads = 128 * kNumWarpgroups;
  static constexpr int kDBlocks = kHeadDim / 64;  // 128-byte column blocks of a row
  static constexpr int kNTilesS = kBlockN / 8;    // n8 column blocks of S per warp
  static constexpr int kNTilesO = kHeadDim / 8;   // n8 column blocks of O per warp
  static constexpr int kSRegs = kBlockN / 2;      // S accumulator registers per thread
  static constexpr int kKStepsS = kHeadDim / 16;  // k16 wgmmas of S = Q Kᵀ
  static constexpr int kKStepsO = kBlockN / 16;   // k16 steps of O += P V

  // Shared memory, byte offsets from the 1024-aligned base.
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kKVTileBytes = kBlockN * kHeadDim * 2;  // one K or one V tile
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kQBytes;                 // [kStages] K tiles
  static constexpr int kVOffset = kKOffset + kStages * kKVTileBytes;  // [kStages] V tiles
  static constexpr int kBarOffset = kVOffset + kStages * kKVTileBytes;
  // Barriers: full_q, full_k[kStages], full_v[kStages], empty[kStages], 8 bytes each.
  static constexpr int kNumBarriers = 1 + 3 * kStages;
  // + 1024: the dynamic shared memory is only guaranteed 16-byte aligned; the kernel rounds
  // its base up to 1024 (the 128-byte swizzle's atom) and may lose up to 1008 bytes.
  static constexpr int kSmemBytes = kBarOffset + 8 * kNumBarriers + 1024;

  static_assert(sizeof(Element) == 2, "16-bit elements only");
  static_assert(kBlockM % 64 == 0 && kNumWarpgroups >= 1 && kNumWarpgroups <= 3,
                "one warpgroup per 64 rows, at most 3 (384 threads; named barriers 1-3)");
  static_assert(kHeadDim % 64 == 0, "whole 128-byte column blocks");
  static_assert(kBlockN == 64 || kBlockN == 128, "S is one wgmma of N = kBlockN (64 or 128)");
  static_assert(kBlockM <= 256 && kBlockN <= 256, "a TMA box is at most 256 rows");
  static_assert(kQBytes % 1024 == 0 && kKVTileBytes % 1024 == 0, "tiles stay 1024-aligned");
  static_assert(kStages >= 2, "one tile in flight while one is computed");
};

// The tiles per head dim (see above). The same for both masks and both dtypes.
template <int kHeadDim, class Element>
struct FwdConfig;
template <class Element>
struct FwdConfig<64, Element> {  // 192 × 128, 3 warpgroups, 2 stages: 89 KB smem
  using Traits = KernelTraits<64, 192, 128, 2, Element>;
};
template <class Element>
struct FwdConfig<128, Element> {  // 128 × 128, 2 warpgroups, 2 stages: 161 KB smem
  using Traits = KernelTraits<128, 128, 128, 2, Element>;
};

/// \brief The kernel's parameters for problem `prob` on tensors `t` (api.cu).
FwdParams make_fwd_params(const Problem& prob, const DeviceTensors& t);

/// \brief The tensor maps of Q, K and V for problem `prob` on tensors `t`, with boxes of
/// 64 elements × `block_m` rows (Q) and × `block_n` rows (K, V), 128-byte swizzle (api.cu).
TensorMaps make_tensor_maps(const Problem& prob, const DeviceTensors& t, int block_m, int block_n);

/// \brief Launches the forward kernel for head dim kHeadDim and Element on `stream`. Defined
/// in flash_fwd_kernel.cuh, instantiated once per (d, dtype) in flash_fwd_d*_*.cu.
template <int kHeadDim, class Element>
void run_flash_fwd(const FwdParams& params, const TensorMaps& maps, cudaStream_t stream);

}  // namespace fa::step08
