// kernel_traits.cuh — step 09's roles (producer, consumers), tiles, shared-memory layout,
// registers and named barriers, the kernel's parameters, and the arithmetic behind the
// choice: what each technique of this step should buy.
#pragma once

#include <cuda.h>  // CUtensorMap
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/problem.h"
#include "common/registry.h"

namespace fa::step09 {

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
// Roles, tiles, and the arithmetic
//
// Step 08 gave every warpgroup the whole loop: wait for K, S = Q Kᵀ, wait, softmax, wait for
// V, O += P V, wait — the tensor cores idle during its softmax unless another warpgroup
// happens to fill the gap — and thread 0 of a consumer also issued the TMA copies. This step
// changes WHO does what and WHEN, not what is computed (the wgmmas, the online softmax, the
// tiles and the shared-memory layout are step 08's):
//
//   warpgroup 0        the producer: one thread of it issues every TMA copy (Q once, then K
//                      and V tile by tile into the ring); its registers are given away
//                      (setmaxnreg.dec to kProducerRegs), the other three warps exit
//   warpgroups 1…C     the consumers: consumer c owns query rows [64c, 64c + 64) of the block;
//                      setmaxnreg.inc to kConsumerRegs
//
// Three techniques, each with what it should buy (predictions, to be measured):
//
// 1. Warp specialisation + register reallocation. The producer no longer sits in a consumer's
//    instruction stream (step 08's thread 0 waited on an empty barrier in the middle of the
//    loop, holding its warp back), and the consumers get the producer's registers: at d = 128
//    with C = 2, 3·128 threads launch with 168 each (65536 / 384, rounded down to 8; the CTA's
//    pool is 384·168 = 64512); the producer drops to 24 and frees 128·144 = 18432, which
//    raises each consumer from 168 to 240 (2·128·72 = 18432). 240 is what the overlap in (3)
//    needs: S of the next tile (64) + P of this one (32) + O (64) + softmax state and
//    addresses, ~180: more than the 168 that 384 threads would each get without it.
//    Buys: FlashAttention-3's ablation (H100, d = 128, N = 8K, fp16) loses 14% when warp
//    specialisation is taken out of the full kernel (661 → 570 TFLOP/s), but most of that is
//    what it enables — (2) and (3) need the registers and a consumer that never stops to
//    issue copies. On its own, over step 08 (whose copies are issued early and overlap
//    already): +3–8%, from the waits thread 0 no longer puts in warp 0's path.
//
// 2. Ping-pong between consumer warpgroups (named barriers kBarTurn0 + c, flash_fwd_kernel.cuh
//    draws them). Consumers take turns to ISSUE their wgmmas: consumer c waits for its turn,
//    issues S = Q Kᵀ of the next tile and O += P V of the current one, and passes the turn on;
//    then does its softmax while the next consumer's wgmmas run. Per tile at d = 128,
//    kBlockN = 128: the wgmmas of one consumer take 1024 tensor clocks (2·64·128·128·2 FLOP /
//    4096 FLOP per clock), its softmax ~512 clocks of MUFU.EX2 (8192 exponentials at 16 per
//    clock) plus ~100 of shuffles and waits. With two consumers in turn, one's softmax
//    (~600) hides under the other's wgmmas (1024): the tensor cores could be busy all the
//    time — the bound is the wgmmas themselves and the issue slots. FlashAttention-3 reports
//    ping-pong alone taking its d = 128 forward from ~570 to ~620 TFLOP/s (+9%).
//    At d = 64 the wgmmas take 512 clocks per tile and the softmax ~600: the softmax is the
//    longer, so three consumers (C = 3: 192 rows, FwdConfig below) share the MUFU time of one
//    under the wgmmas of two. Buys at d = 64: less (+5–10%), the exponentials bind.
//
// 3. Overlap inside a warpgroup. Iteration j of a consumer issues S_j = Q K_jᵀ and then
//    O += P_{j−1} V_{j−1} (two commit groups); wgmma.wait_group 1 returns when S_j is done
//    (groups complete in order) while P V still runs, so the softmax of S_j runs under this
//    warpgroup's own P V; wait_group 0 then, and only then, rescales O by α_j and packs P_j.
//    Buys: the part of the softmax that ping-pong does not hide (the turn is strict, so a
//    consumer whose softmax runs long delays the other's turn). FlashAttention-3's ablation:
//    582 → 661 TFLOP/s from this pipelining (+14%) with warp specialisation on.
//
// Prediction, all three together, N ≥ 4096, non-causal: d = 128, from step 08's 510 TFLOP/s
// (0.75–0.82× cuDNN) to 580–640 (0.85–0.95× cuDNN's 659–680); d = 64, from 426 to 450–500
// (cuDNN 480–485: 0.95–1.0×). Causal: the same ratios minus the masked tiles' extra work
// (step 08 loses ~12%). If the measurement lands at step 08's speed, the first suspect is
// serialised wgmmas (ptxas warns "wgmma.mma_async instructions are serialized" when it cannot
// keep the operand registers untouched between issue and wait), then the turn order (a
// consumer waiting on a turn it cannot get until the producer's load lands).
//
// 4. A persistent tile scheduler (one CTA per SM looping over blocks, longest causal first)
//    is not done. What it would save: the partial last wave, and each CTA's prologue (barrier
//    init, the Q load, the first K tile) not overlapping the previous CTA's epilogue. At the
//    benchmark's N = 4096 the grid is deep — d = 128: 32 blocks × 16 heads × 4 = 2048 CTAs
//    on 132 SMs, 15.5 waves; d = 64: 22 × 32 × 4 = 2816, 21.3 waves — so the last wave costs
//    at most 0.5/16 ≈ 3%, and a prologue (1–2 µs of latency — the Q load and the first K
//    tile — in a CTA of 4·128·4096·128 FLOP = 268 MFLOP, ~70 µs at step 08's 510 TFLOP/s
//    over 132 SMs) 1.5–3%. For causal inputs the longest-first block order already fills
//    the tail. Prediction: +2–5%, to be measured (with the three above in place) before it
//    is written.
//
// Registers per consumer thread (fp32 accumulators, one register each):
//   S: kBlockN/2 = 64;  O: d/2;  P: kBlockN/4 = 32 (16-bit pairs)
//   d = 128, C = 2: 64 + 64 + 32 = 160 + state: under 240.
//   d = 64,  C = 3: 4·128 threads launch with 128 each (pool 65536); producer 24, consumers
//   (512 − 24) / 3 → 160: 64 + 32 + 32 = 128 + state: under 160.
//
// Shared memory (step 08's layout; the ring's barriers are now full and empty per K and per
// V, so that K of tile j + kStages can land while V of tile j is still read):
//   d = 128: Q 32 KB + 2 stages × (K 32 KB + V 32 KB) = 160 KB + barriers + 1 KB slack.
//   d = 64:  Q 24 KB + 2 stages × (16 + 16 KB) = 88 KB.
//
// Named barriers (bar.sync / bar.arrive ids; 0 is __syncthreads'):
//   kBarEpilogue0 + c  (1…3)  consumer c's 128 threads before the epilogue reuses its Q rows
//   kBarTurn0 + c      (4…6)  "consumer c may issue its wgmmas": 256 arrivals, 128 from c
//                             (bar.sync) and 128 from consumer c − 1 mod C (bar.arrive)
// ---------------------------------------------------------------------------------------------
template <int kHeadDim_, int kNumConsumers_, int kBlockN_, int kStages_, class Element_,
          bool kPingPong_ = true, bool kOverlap_ = true>
struct KernelTraits {
  using Element = Element_;                             // __nv_bfloat16 or __half: Q, K, V, O and P
  static constexpr int kHeadDim = kHeadDim_;            // d
  static constexpr int kNumConsumers = kNumConsumers_;  // consumer warpgroups (C)
  static constexpr int kBlockM = 64 * kNumConsumers;    // query rows per CTA
  static constexpr int kBlockN = kBlockN_;              // keys per K/V tile
  static constexpr int kStages = kStages_;              // K/V buffers in the ring
  // Consumers take turns to issue their wgmmas (technique 2). false: every consumer issues
  // when it is ready (the ablation of ping-pong alone; the turn barriers go unused).
  static constexpr bool kPingPong = kPingPong_;
  // The softmax of S_j runs under this warpgroup's own P_{j−1} V_{j−1} (technique 3). false:
  // it waits for both before the softmax (the ablation of the overlap alone).
  static constexpr bool kOverlap = kOverlap_;

  static constexpr int kNumThreads = 128 * (kNumConsumers + 1);  // + the producer warpgroup
  static constexpr int kNumConsumerThreads = 128 * kNumConsumers;
  // Registers: what __launch_bounds__(kNumThreads, 1) gives every thread at launch (65536 per
  // SM, allocated per warp in multiples of 8 per thread), what setmaxnreg moves them to.
  static constexpr int kLaunchRegs = (65536 / kNumThreads) / 8 * 8;
  static constexpr int kProducerRegs = 24;  // the least setmaxnreg allows
  static constexpr int kConsumerRegsFit =
      ((kLaunchRegs * (kNumConsumers + 1) - kProducerRegs) / kNumConsumers) / 8 * 8;
  static constexpr int kConsumerRegs = kConsumerRegsFit < 240 ? kConsumerRegsFit : 240;

  static constexpr int kDBlocks = kHeadDim / 64;  // 128-byte column blocks of a row
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
  // Barriers, 8 bytes each: full_q, full_k[kStages], full_v[kStages], empty_k[kStages],
  // empty_v[kStages].
  static constexpr int kNumBarriers = 1 + 4 * kStages;
  // + 1024: the dynamic shared memory is only guaranteed 16-byte aligned; the kernel rounds
  // its base up to 1024 (the 128-byte swizzle's atom) and may lose up to 1008 bytes.
  static constexpr int kSmemBytes = kBarOffset + 8 * kNumBarriers + 1024;

  // Named barrier ids (above).
  static constexpr int kBarEpilogue0 = 1;
  static constexpr int kBarTurn0 = 4;

  static_assert(sizeof(Element) == 2, "16-bit elements only");
  static_assert(kNumConsumers == 2 || kNumConsumers == 3,
                "ping-pong between 2 or 3 consumer warpgroups (named barriers 1-6)");
  static_assert(kHeadDim % 64 == 0, "whole 128-byte column blocks");
  static_assert(kBlockN == 64 || kBlockN == 128, "S is one wgmma of N = kBlockN (64 or 128)");
  static_assert(kBlockM <= 256 && kBlockN <= 256, "a TMA box is at most 256 rows");
  static_assert(kQBytes % 1024 == 0 && kKVTileBytes % 1024 == 0, "tiles stay 1024-aligned");
  static_assert(kStages >= 2, "one tile in flight while one is computed");
  static_assert(kProducerRegs + kNumConsumers * kConsumerRegs <= kLaunchRegs * (kNumConsumers + 1),
                "setmaxnreg.inc would wait forever: the CTA's pool has fewer registers");
  static_assert(kConsumerRegs >= kLaunchRegs, "the consumers must not lose registers");
};

// The tiles per head dim (see above). The same for both masks and both dtypes.
template <int kHeadDim, class Element>
struct FwdConfig;
template <class Element>
struct FwdConfig<64, Element> {  // 192 × 128: 3 consumers + producer, 2 stages, 89 KB smem
  using Traits = KernelTraits<64, 3, 128, 2, Element>;
};
template <class Element>
struct FwdConfig<128, Element> {  // 128 × 128: 2 consumers + producer, 2 stages, 161 KB smem
  using Traits = KernelTraits<128, 2, 128, 2, Element>;
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

}  // namespace fa::step09
