// kernel_traits.cuh — step 11's tiles, what each choice should buy, the shared-memory layout,
// the kernels' parameters, and the one function each instantiation file provides.
#pragma once

#include <cuda.h>  // CUtensorMap (a type only: the driver is reached through the runtime)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "common/problem.h"

namespace fa::step11 {

constexpr float kLog2e = 1.4426950408889634f;  // log2(e): exp(x) = exp2(x · log2(e))

/// \brief What the three kernels need, by value (a __grid_constant__ kernel argument). Offsets
/// are int: validate() keeps every index into Q, K, V, O and L below 2^31 (problem.h, Limits).
struct BwdParams {
  const void* q;      // [B, N_q, H_q, d] or [B, H_q, N_q, d], Element
  const void* k;      // [B, N_kv, H_kv, d] or [B, H_kv, N_kv, d], Element
  const void* v;      // same as k
  const void* o;      // same as q
  const void* d_o;    // same as q
  const float* lse;   // [B, H_q, N_q] fp32, natural log (−inf: the row sees no key)
  void* dq;           // same as q (written by the convert kernel)
  void* dk;           // same as k (written once per key by the main kernel)
  void* dv;           // same as k
  float* dq_acc;      // workspace: [B, H_q, N_q, d] fp32, dQ / scale summed over K/V tiles by
                      // atomics; deterministic: [⌈N_kv / kBlockN⌉][B, H_q, N_q, d], CTA n's own
                      // part in slab n (plain stores), summed in order by the convert kernel
  float* delta;       // workspace: [B, H_q, N_q] fp32, D = rowsum(dO ∘ O)
  long long q_elems;  // B · H_q · N_q · d: one slab of dq_acc
  int batch, heads_q, heads_kv, group;  // group = H_q / H_kv query heads per K/V head
  int n_q, n_kv, head_dim;
  int q_batch_stride, q_head_stride, q_row_stride;     // elements, for Q, O, dO and dQ
  int kv_batch_stride, kv_head_stride, kv_row_stride;  // elements, for K, V, dK and dV
  float scale;                                         // the softmax scale
  float scale_log2;  // scale · log2(e): P = exp2(S · scale_log2 − L · log2(e))
  bool causal;
  bool deterministic;  // Problem::deterministic: dQ from per-CTA slabs, no atomics
  // Bwd2dTraits with kDqBulk = 2 or 3 (run_flash_bwd_traits fills it in): the tensor map of
  // dq_acc, in boxes of one warp's part of a dQ tile (flash_bwd_2d.cuh). Zero otherwise.
  CUtensorMap dq_map;
  // Bwd2dTraits with kQTma (run_flash_bwd_traits fills them in): the tensor maps of Q and dO,
  // [B, H_q, N_q, d] by their strides, in boxes of 64 dims × kBlockM rows. Zero otherwise.
  CUtensorMap q_map;
  CUtensorMap do_map;
};

// ---------------------------------------------------------------------------------------------
// Tiles and warps
//
// A CTA owns kBlockN = 128 keys of one (batch, K/V head) for the whole kernel and streams the
// Q tiles of kBlockM query rows that can see them past, for every query head of the group
// (flash_bwd_kernel.cuh). Its kNumWarps = 8 warps split the KEYS: warp w owns keys
// [16w, 16w + 16), one m16 tile, and computes everything with those keys as the rows:
//
//   Sᵀ  = K Qᵀ        16 keys × kBlockM rows   A = K (ldmatrix),   B = Q   (ldmatrix)
//   dPᵀ = V dOᵀ       16 keys × kBlockM rows   A = V (ldmatrix),   B = dO  (ldmatrix)
//   Pᵀ, dSᵀ           in the same registers (the accumulator layout of Sᵀ and dPᵀ)
//   dV += Pᵀ dO       16 keys × d              A = Pᵀ (registers), B = dO  (ldmatrix.trans)
//   dK += dSᵀ Q       16 keys × d              A = dSᵀ (registers), B = Q  (ldmatrix.trans)
//
// Why the transposes (Sᵀ, not S): dV and dK are sums over query rows, Pᵀ dO and dSᵀ Q. With
// the keys as the rows of the warp's Sᵀ, the accumulator of Sᵀ converted to 16 bits IS the A
// fragment of Pᵀ dO (step 07's "two n8 accumulator tiles make one k16 A tile", mma.cuh): P
// and dS never go through shared memory for dV and dK. Only dQ = dS K needs dS with the QUERY
// rows as the A rows, i.e. the transpose of what the warps hold: dSᵀ is written to shared
// memory once per Q tile (16 bits, padded rows) and read back with ldmatrix.trans, and every
// warp then computes a 16-row × 32-dim part of the kBlockM × d tile of dQ:
//
//   dQ_tile = dS K   kBlockM × d, warp w: rows 16·(w % (kBlockM/16)), dims 32·(w / (kBlockM/16))
//                    A = dS (ldmatrix.trans of dSᵀ), B = K (ldmatrix.trans), added to dQ_acc
//                    with fp32 atomics (red.global.add.f32): the other K/V tiles' CTAs add to
//                    the same rows.
//
// Registers (per lane, fp32 unless said): dK and dV accumulators 2 · 16·d/32 = d (128 at
// d = 128, 64 at d = 64), held for the whole kernel; Sᵀ and dPᵀ 2 · 16·kBlockM/32 = kBlockM;
// Pᵀ and dSᵀ as 16-bit A fragments kBlockM/4 each; the warp's part of dQ
// 16 · kDqCols / 32 = 16 (kDqCols = 32 at both d). So kBlockM is what d leaves: at d = 64,
// 64 + 64 + 32 + 16 ≈ 180 plus addresses, kBlockM = 64; at d = 128, 128 + 32 + 16 + 16 ≈ 192
// plus addresses, the per-row L, D and mask limits and the fragments in flight, kBlockM = 32.
// That is at ptxas's edge (CUDA 13.0, sm_90): it took three things to keep d = 128 free of
// spills — the k loops of Sᵀ and dQ unrolled by 2, not fully (fewer fragments loaded ahead),
// the exact path's dQ loop in a function of its own (flash_bwd_kernel.cuh), and Pᵀ given a
// shared-memory tile of its own there, so Pᵀ and dSᵀ are stored together and dropped. With
// kBlockM = 16 there is room to spare, but each K and V fragment a warp loads then feeds two
// mmas instead of four, and a Q tile's barriers are paid for half the work.
//
// Shared memory: K and V (kBlockN × d each, whole kernel), Q and dO double-buffered
// (2 · kBlockM × d each, cp.async: the next Q tile lands while this one is computed), L and D
// of the Q tile (double-buffered with it), dSᵀ and Pᵀ (kBlockN × (kBlockM + 8), 16 bits;
// Pᵀ is written only on the exact path):
//     d = 64,  kBlockM = 64:  32 KB + 32 KB + 2 · 18 KB + 1 KB = 101 KB
//     d = 128, kBlockM = 32:  64 KB + 32 KB + 2 · 10 KB + 0.5 KB = 116.5 KB
// and with one barrier per Q tile (kOneBarrier, below: a second dSᵀ tile), as BwdConfig runs
// them: 119 KB at d = 64, and at d = 128 with kBlockM = 64 (which that makes room for, Sᵀ's
// and dQ's k loops not unrolled) 64 KB + 64 KB + 3 · 18 KB + 1 KB = 183 KB.
// One CTA (8 warps) per SM: the registers (~250 · 256 threads) allow no second one.
//
// FLOPs per byte. Per Q tile a CTA computes five products of 2 · kBlockM · kBlockN · d FLOPs
// (Sᵀ, dPᵀ, dV, dK, dQ). Device memory: it reads Q and dO (2 · kBlockM · d · 2 bytes) and adds
// kBlockM · d fp32 atomics to dQ_acc (4 bytes each way, through L2):
//     FLOPs / byte = 10 · kBlockM · kBlockN · d / (4 · kBlockM · d + 8 · kBlockM · d)
//                  = 10 · kBlockN / 12 ≈ 107 at kBlockN = 128, for either d
// — below the ~135 FLOPs per byte at which mma.sync (~650 TFLOP/s) would outrun the H200's
// HBM (4.8 TB/s), so the Q and dO re-reads must hit L2: they are read by all ⌈N_kv / 128⌉
// CTAs of a head, which run roughly in step, and the atomics are L2 operations. The atomics
// are the weak point: kBlockM · d per Q tile per CTA, (N_kv / kBlockN) · N_q · d per head
// in all, which is why kBlockN is 128 and not 64.
//
// Shared memory, per warp and Q tile (bytes read or written, Element = 2 bytes):
//   A of Sᵀ, dPᵀ (the warp's K and V rows)       2 · 16 · d · 2        =  64 d
//   B of Sᵀ, dPᵀ (Q, dO) and of dV, dK (again)   4 · kBlockM · d · 2   =   8 kBlockM d
//   dSᵀ written, then A of dQ (dS, 16 rows)      16·kBlockM·2 + 16·kBlockN·2
//   B of dQ (K, the warp's kDqCols dims)         kBlockN · kDqCols · 2
// for 4 · 2 · 16 · kBlockM · d + 2 · 16 · kBlockN · kDqCols FLOPs:
//   d = 64,  kBlockM = 64, kDqCols = 32:  655,360 FLOPs / 51,200 B = 12.8 FLOPs per byte
//   d = 128, kBlockM = 32, kDqCols = 32:  655,360 FLOPs / 54,272 B = 12.1 FLOPs per byte
// (step 07's forward: ~21 at d = 128). Shared memory serves 128 bytes per clock per SM, so the
// main loop is capped at ~1,640 (d = 64) and ~1,550 (d = 128) FLOPs per clock per SM, about
// 0.65 of mma.sync's ~2,500 (~650 TFLOP/s on 132 SMs at 1.98 GHz, step 07): shared memory, not
// the tensor cores, is the expected limit.
//
// Prediction, to be measured against torch_flash's backward: bf16, B = 4, H = 16, N = 4096,
// d = 128, non-causal: 1.37 · 10¹² FLOPs (5 products, 2.5 × the forward's). The cap above is
// ~370 TFLOP/s at 1.8 GHz, 3.7 ms; with the barriers (2 per Q tile), the atomics and the
// exposed latency of one CTA of 8 warps per SM, expect 50–65% of the cap: 5.7–7.5 ms,
// 180–240 TFLOP/s. FlashAttention-2's own Sm80 backward holds more of Q, dO in registers and
// uses wider tiles at d = 128; expect this step 1.5–2.5 × slower than torch_flash there, closer
// at d = 64.
//
// Measured (H200, bf16, bench_all --pass backward, B·N = 16384, H·d = 2048, [B, N, H, d]),
// N = 1024 / 4096 / 16384, TFLOP/s at 2.5 × the forward's FLOPs:
//   d = 128 full   180.2 / 193.7 / 198.0    torch_flash 228.4 / 288.1 / 305.6
//   d = 128 causal 129.7 / 161.9 / 183.6    torch_flash 169.3 / 257.1 / 310.1
//   d = 64  full   169.4 / 186.6 / 189.9    d = 64 causal 120.9 / 157.5 / 174.3
// Inside the predicted 180–240, and 0.6–0.8 × torch_flash. That is the configuration first
// measured (kTunedBwd = false below); the step runs the tuned ones (kTunedBwd = true: the
// 2-D kernel of flash_bwd_2d.cuh at both d, this kernel with five switches as the fallback),
// which chapter 11 times against torch_flash's backward.
//
// What limits it. 194 TFLOP/s is ~740 FLOPs per clock per SM (132 SMs, ~1.98 GHz): 45–50% of
// the shared-memory cap above and under a third of mma.sync's rate, so neither pipe is full;
// the time goes to latency that one CTA of 8 warps (two per SM sub-partition, 240–255
// registers, no room for a second CTA) cannot hide:
//  * Barriers. Two __syncthreads per Q tile (three on the causal diagonal, __syncthreads_or).
//    A Q tile is ~7,000 clocks of the CTA's time at d = 128 (5.2 MFLOP at 740 per clock),
//    ~14,000 at d = 64; at each barrier all 8 warps wait for the slowest, and nothing of the
//    next phase can be issued early (its ldmatrix reads what the barrier publishes).
//  * Shared-memory bytes per FLOP: 12.1–12.8 (above). The 1-D split (16 keys per warp) makes
//    every warp read ALL of the Q and dO tiles twice per tile (B of Sᵀ and dPᵀ, then
//    transposed for dK and dV): 8 · kBlockM · d bytes, 60–64% of its shared-memory traffic.
//  * The dQ atomics: kBlockM · d fp32 reductions per Q tile per CTA (16 KB at either d),
//    issued by every lane one float at a time (32 per lane per tile), all CTAs of a head
//    adding to the same rows at about the same time (they visit the Q tiles in the same
//    order). The variants table measured it (docs/results/h200-variants-11.md): pairing the
//    atomics (p2) gained 17-19%, the staggered order (s) nothing.
//  * Small Q tiles: kBlockM is what the registers leave (32 at d = 128), so each tile's fixed
//    costs (barriers, L and D, the exp2 and masks, the atomics' issue) weigh on few FLOPs.
//
// What FlashAttention-2's Sm80 backward does differently (its public code and paper, Dao 2023;
// Flash_bwd_kernel_traits at d = 128: 64 × 128 tiles, 8 warps; at d = 64 on GPUs with ≥ 144 KB
// of shared memory: 128 × 128):
//  * Twice our Q tile (kBlockM 64 at d = 128, 128 at d = 64) with the same 128 keys, so half
//    the barriers and per-tile costs per FLOP.
//  * 2-D warp layouts, one per product. d = 128: S and dP as 2 (rows) × 4 (keys) warps, 32 × 32
//    per warp; dK and dV as 4 (keys) × 2 (dims), 32 keys × 64 dims; dQ as 2 (rows) × 4 (dims).
//    d = 64: S and dP 4 × 2 (32 rows × 64 keys), dK and dV 4 × 2 (32 × 32), dQ 4 × 2. Each
//    fragment a warp loads feeds more mmas; counting as above, ~17 FLOPs per byte of shared
//    memory at d = 128 (ours 12.1), ~16 at d = 64 (ours 12.8).
//  * The price: P and dS both go through shared memory (written once per tile, read as Pᵀ and
//    dSᵀ for dV and dK and as dS for dQ), with the barriers that needs; we keep Pᵀ and dSᵀ in
//    registers for dV and dK and write only dSᵀ.
//  * dQ the same way as ours: fp32 atomicAdd into an accumulator, one element at a time, and a
//    convert kernel after; dK and dV per CTA, as ours.
// So the gap is partly structural (the warp layout and the tile it allows), partly the scalar
// work around the products. bin/variants_11 measured both (chapter 11, and
// docs/results/h200-variants-11-13100b5.md): the switches below, without changing the
// layout, and a second kernel with FlashAttention-2's layouts at d = 128 (flash_bwd_2d.cuh).
// That kernel alone was level without the causal mask (row fa2, 0.98 × this kernel's
// 64 × 128) and, with the per-tile instructions it issued beyond FlashAttention-2's removed
// (row fa2uf), 1.08–1.19 × it, and 1–2% more with P's exp2 flushing subnormals (row fa2ufz,
// docs/results/h200-variants-11-c6aff73.md), then 1.04–1.05 × with dQ's k loop unrolled (row
// fa2ufzu) and 1.04 × that with dQ sent by tensor reductions (row fa2ufzuc,
// docs/results/h200-variants-11-d91d3f9.md). It is the step's kernel at d = 128
// (BwdConfig<128>), where a block may have its 196 KB. At d = 64 this kernel with the same kind of
// switches gained 1.02–1.07 × (rows b1p2mc, b1p2mcz), and then the 2-D kernel in FlashAttention-2's
// d = 64 layouts (128-row tiles, 166 KB) ran 1.11–1.22 × that (row fa2d64), and 1.00–1.05 ×
// more with dQ sent by tensor reductions (row fa2d64c, 199 KB, docs/results/
// h200-variants-11-7496b30.md): it is the step's at d = 64, and this kernel the fallback at both
// d where a block cannot have that much. At both d the 2-D kernel then ran 1.06–1.15 × faster
// with each Q tile's Q and dO copied by the TMA (rows fa2ufzucq, fa2d64cq, 197 and 200 KB,
// docs/results/h200-variants-11-24679ea.md), as the step runs it on sm_90.
// ---------------------------------------------------------------------------------------------
//
// The switches after the tiles (all off in the configuration above; bin/variants_11 measures
// each one alone, and variants/variants_d64.cu and variants_d128.cu predict what each buys).
// The step's fallbacks (BwdConfig, below) run kOneBarrier, kDqPairs, kMaskFree, kDetCompiled
// and kFastExp2 at d = 64, and kOneBarrier and kDqPairs in the 32-row one at d = 128:
//   kMinBlocks   CTAs per SM promised to ptxas (__launch_bounds__): 2 needs kBlockN = 64 (4
//                warps) so that two CTAs' registers fit, and caps them at 255 anyway
//   kOneBarrier  one __syncthreads per Q tile instead of two: dSᵀ double-buffered (+18 KB at
//                d = 64, +10 KB at d = 128), and the next Q tile's copies waited for at the
//                barrier that publishes dSᵀ; the exact path keeps a second barrier
//   kDqPairs     dQ's atomics two floats at a time (red.global.add.v2.f32, sm_90): half the
//                atomic instructions, the same bytes
//   kStagger     CTA n of a head starts its Q tiles n / ⌈N_kv / kBlockN⌉ of the way round
//                (and wraps), so that the CTAs of a head do not add to the same rows of dQ at
//                the same time
//   kHeavyFirst  the grid's x and y swapped: (B · H_kv, ⌈N_kv / kBlockN⌉), so that the first
//                K/V tile of every head starts before any second one; causal, those see the
//                most Q tiles, and the longest CTAs no longer run last (the grid's tail)
//   kDqQuads     dQ's atomics four floats at a time (red.global.add.v4.f32, sm_90): half
//                kDqPairs' atomic instructions, a quarter of the f32 ones, the same bytes. A
//                lane holds 2 neighbouring dims of rows g and g + 8 (mma.cuh); one exchange
//                (__shfl_xor_sync) with lane t ^ 1 gives each lane 4 neighbouring dims of one
//                row (even t: row g, odd t: row g + 8). Instead of kDqPairs, not with it
//   kDqBulk      dQ added by the copy engine (sm_90): each warp stores its 16 rows × kDqCols
//                of dQ (fp32) into a shared-memory area of its own (rows padded by 32 bytes:
//                the stores conflict-free), and lanes 0–15 each add one row to dQ_acc with
//                one cp.reduce.async.bulk .add.f32 (kDqCols · 4 bytes; rows past N_q not
//                added). Per warp and Q tile 16 bulk operations from one instruction instead
//                of 2 · kNTilesDq reductions of 32 lanes (v2, 16 at d = 128), at the price of
//                16 · (kDqCols + 8) · 4 bytes of shared memory per warp (+20 KB at
//                d = 64, +36 KB at d = 128 with 64-row tiles) and its bytes written and read
//                again. The deterministic mode keeps the plain stores (of kDqPairs or
//                kDqQuads, if set), and so does a GPU before sm_90
//   kMaskFree    a Q tile that needs no mask (every row and key real, no key of the CTA's
//                tile hidden from any row: decided once per tile, the same in the whole CTA)
//                computes Pᵀ and dSᵀ without the per-element visibility test and its two
//                selects (flash_bwd_kernel.cuh, mask_free); the other tiles keep them
//   kDetCompiled the deterministic mode a template argument of the main kernel (a kernel for
//                each mode, chosen on the host where it is launched) instead of
//                p.deterministic read at run time: the non-deterministic kernel then carries
//                no predicated-off plain store beside each of dQ's reductions
//   kFastExp2    Pᵀ = exp2(Sᵀ·scale_log2 − L·log2e) by one ex2.approx.ftz.f32 (step 07's
//                fast_exp2, what FlashAttention-2's fast-math build emits) instead of exp2f,
//                which without --use_fast_math is ex2.approx.f32 (subnormal results kept) and
//                costs 3 instructions more per call: a test kernel of 64 and of 128 calls
//                (sm_90, CUDA 13.0) has 7 per call against 4 with its load, fma and add, and
//                the variants' kernels are 192 instructions shorter with the switch (32
//                exp2 in each of the masked and the mask-free P paths). A lane computes
//                kBlockM / 2 exponentials per Q tile: 96 instructions per warp and tile at
//                kBlockM = 64. Numerics: a P below 2^-126 (S·scale more than ~87.3 below the
//                row's L) becomes +0 instead of a subnormal, and so does its dS = P·(dP − D);
//                exp2(−inf) is +0 and a NaN stays a NaN either way (PTX ISA, ex2). Such a P
//                is below 1.2e-38 of its row's sum of P (which is 1), and rounded to fp16 it
//                was 0 already (fp16's smallest subnormal is 2^-24); each term of dV, dK or dQ
//                it drops is below 2^-126 · |dO|, or 2^-126 · |dP − D| · scale · |Q| or |K|,
//                far under the tolerance rule's slack (rel_slack and abs_slack 1e-3 for fp16
//                and bf16, docs/conventions.md), and no value turns from finite to non-finite
//                or back (a mismatch in finiteness the rule never passes)
/// \brief Tags naming a traits struct's kernel (its member WarpLayout): main_kernel, defined
/// beside each kernel (flash_bwd_kernel.cuh, flash_bwd_2d.cuh), returns the kernel of a tag.
struct WarpLayout1d {};  // BwdTraits: flash_bwd_kernel, each warp 16 keys of every product
struct WarpLayout2d {};  // Bwd2dTraits: flash_bwd_2d_kernel, a 2-D warp layout per product

template <int kHeadDim_, int kBlockM_, int kBlockN_, class Element_, int kMinBlocks_ = 1,
          bool kOneBarrier_ = false, bool kDqPairs_ = false, bool kStagger_ = false,
          bool kHeavyFirst_ = false, bool kDqQuads_ = false, bool kDqBulk_ = false,
          bool kMaskFree_ = false, bool kDetCompiled_ = false, bool kFastExp2_ = false>
struct BwdTraits {
  using Element = Element_;                       // __nv_bfloat16 or __half
  using WarpLayout = WarpLayout1d;                // launched as flash_bwd_kernel
  static constexpr int kHeadDim = kHeadDim_;      // d
  static constexpr int kBlockM = kBlockM_;        // query rows per Q tile
  static constexpr int kBlockN = kBlockN_;        // keys per CTA
  static constexpr int kNumWarps = kBlockN / 16;  // one m16 tile of keys per warp
  static constexpr int kNumThreads = 32 * kNumWarps;
  static constexpr int kStages = 2;  // Q, dO, L, D buffers: tile t computed, t + 1 in flight
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr bool kOneBarrier = kOneBarrier_;
  static constexpr bool kDqPairs = kDqPairs_;
  static constexpr bool kStagger = kStagger_;
  static constexpr bool kHeavyFirst = kHeavyFirst_;
  static constexpr bool kQTma = false;  // Q and dO by cp.async (Bwd2dTraits has the switch)
  static constexpr bool kDqQuads = kDqQuads_;
  static constexpr bool kDqBulk = kDqBulk_;
  static constexpr bool kMaskFree = kMaskFree_;
  static constexpr bool kDetCompiled = kDetCompiled_;
  static constexpr bool kFastExp2 = kFastExp2_;
  static constexpr int kDsBuffers = kOneBarrier ? 2 : 1;  // dSᵀ tiles: tile t's, t − 1's

  static constexpr int kNTilesS = kBlockM / 8;    // n8 tiles of a warp's Sᵀ (query rows)
  static constexpr int kKStepsS = kHeadDim / 16;  // k16 steps of Sᵀ = K Qᵀ (over d)
  static constexpr int kNTilesD = kHeadDim / 8;   // n8 tiles of a warp's dK, dV (dims)
  static constexpr int kKStepsD = kBlockM / 16;   // k16 steps of dV += Pᵀ dO (over rows)
  static constexpr int kDqWarpsM = kBlockM / 16;  // warps along the rows of the dQ tile
  static constexpr int kDqCols = kHeadDim / (kNumWarps / kDqWarpsM);  // dims per warp of dQ
  static constexpr int kNTilesDq = kDqCols / 8;   // n8 tiles of a warp's part of dQ
  static constexpr int kKStepsDq = kBlockN / 16;  // k16 steps of dQ = dS K (over keys)

  // Shared memory: K, V, Q, dO tiles are [rows][kHeadDim] Elements in 16-byte chunks, swizzled
  // as in step 07; dSᵀ is [kBlockN][kBlockM + 8] Elements, padded by one chunk per row.
  static constexpr int kChunksPerRow = kHeadDim * 2 / 16;
  static constexpr int kRowBytes = kHeadDim * 2;
  static constexpr int kKVBytes = kBlockN * kRowBytes;   // one K or V tile
  static constexpr int kQBytes = kBlockM * kRowBytes;    // one Q or dO tile (one stage)
  static constexpr int kDsRowBytes = (kBlockM + 8) * 2;  // padded: ldmatrix conflict-free
  static constexpr int kDsBytes = kBlockN * kDsRowBytes;
  static constexpr int kRowVecBytes = kBlockM * 4;  // L or D of one Q tile (one stage)
  static constexpr int kOffK = 0;
  static constexpr int kOffV = kOffK + kKVBytes;
  static constexpr int kOffQ = kOffV + kKVBytes;             // [kStages][kBlockM][kHeadDim]
  static constexpr int kOffDo = kOffQ + kStages * kQBytes;   // [kStages][kBlockM][kHeadDim]
  static constexpr int kOffDs = kOffDo + kStages * kQBytes;  // [kDsBuffers][kBlockN][kBlockM + 8]
  static constexpr int kOffP = kOffDs + kDsBuffers * kDsBytes;  // Pᵀ, the same: exact path only
  static constexpr int kOffL = kOffP + kDsBytes;                // [kStages][kBlockM] fp32
  static constexpr int kOffD = kOffL + kStages * kRowVecBytes;  // [kStages][kBlockM] fp32
  // kDqBulk: [kNumWarps][16][kDqCols + 8] fp32, each warp's part of the dQ tile (16-byte
  // aligned rows, as the bulk reduction's source must be)
  static constexpr int kDqRowBytes = (kDqCols + 8) * 4;
  static constexpr int kOffDq = kOffD + kStages * kRowVecBytes;
  static constexpr int kDqWarpBytes = 16 * kDqRowBytes;
  static constexpr int kSmemBytes = kOffDq + (kDqBulk ? kNumWarps * kDqWarpBytes : 0);

  static_assert(sizeof(Element) == 2, "16-bit elements only");
  static_assert(kBlockN % 16 == 0 && kBlockM % 16 == 0 && kHeadDim % 16 == 0, "whole mma tiles");
  static_assert(kNumWarps % kDqWarpsM == 0 && kDqCols % 16 == 0, "dQ splits into 16-dim pairs");
  static_assert(kChunksPerRow % 8 == 0, "the swizzle permutes groups of 8 chunks (d >= 64)");
  static_assert(kNumThreads % kChunksPerRow == 0, "a thread copies the same chunk of each row");
  static_assert((kNumThreads / kChunksPerRow) % 8 == 0, "copy passes of whole swizzle periods");
  static_assert(kBlockM % (kNumThreads / kChunksPerRow) == 0, "Q tiles copy in whole passes");
  static_assert(kBlockM <= kNumThreads, "one thread per row copies L and D");
  static_assert((kDsRowBytes / 4) % 8 == 4, "dSᵀ rows start 16 bytes apart modulo 128");
  static_assert(!(kDqPairs && kDqQuads), "dQ's atomics in pairs or in quads, not both");
  static_assert(!kDqBulk || (kOffDq % 16 == 0 && kDqRowBytes % 16 == 0),
                "bulk reductions read 16-byte aligned rows");
  static_assert(!kDqBulk || (kDqRowBytes / 4) % 32 == 8,
                "dQ staging rows 32 bytes apart modulo 128: stores without bank conflicts");
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than a block may have (sm_90)");

  /// \brief Byte offset of chunk `chunk` (16 bytes, logical) of row `row` inside a K, V, Q or
  /// dO tile: step 07's XOR swizzle (its kernel_traits.cuh draws it).
  __device__ static constexpr uint32_t swizzle(int row, int chunk) {
    return static_cast<uint32_t>((row * kChunksPerRow + (chunk ^ (row % 8))) * 16);
  }
  /// \brief Byte offset of element `col` of row `row` of a K, V, Q or dO tile.
  __device__ static constexpr uint32_t element(int row, int col) {
    return swizzle(row, col / 8) + 2 * (col % 8);
  }
};

/// \brief The kernel with FlashAttention-2's two-dimensional warp layouts (flash_bwd_2d.cuh,
/// which defines it and gives the defaults of the first twelve parameters): declared here so
/// that BwdConfig can name it. The last five (kDqRed, kDqUnroll, kDqBulk: switches of the dQ
/// product; kHeavyFirst: the grid's order; kQTma: Q's and dO's copies; flash_bwd_2d.cuh) take
/// their defaults here, so that a configuration named by the first twelve arguments (the
/// variants' older rows) keeps its meaning.
template <int kHeadDim_, class Element_, bool kDqFirst_, bool kMaskFree_, int kSUnroll_,
          bool kDetCompiled_, bool kTileCounter_, bool kFastExp2_, int kBlockM_, int kSWarpsM_,
          int kKvWarpsM_, int kQWarpsM_, bool kDqRed_ = false, int kDqUnroll_ = 2, int kDqBulk_ = 0,
          int kHeavyFirst_ = 0, bool kQTma_ = false>
struct Bwd2dTraits;

/// \brief The grid-order switch of `Traits`: BwdTraits' kHeavyFirst (a bool: both masks), or
/// Bwd2dTraits' (0 never, 1 both masks, 2 under the causal mask only) read from its template
/// argument, so that code which sees Bwd2dTraits only declared (api.cu) can ask too.
template <class Traits>
struct HeavyFirstOf {
  static constexpr int value = Traits::kHeavyFirst;
};
template <int D, class E, bool A, bool B, int C, bool F, bool G, bool H, int M, int S, int K, int Q,
          bool R, int U, int Bu, int kHeavyFirst, bool T>
struct HeavyFirstOf<Bwd2dTraits<D, E, A, B, C, F, G, H, M, S, K, Q, R, U, Bu, kHeavyFirst, T>> {
  static constexpr int value = kHeavyFirst;
};

/// \brief Whether the main kernel of `Traits` for this mask runs on the grid (B · H_kv, key
/// tiles), every head's first K/V tile launched first, rather than (key tiles, B · H_kv).
template <class Traits, bool IsCausal>
constexpr bool heavy_first_grid() {
  constexpr int kOrder = HeavyFirstOf<Traits>::value;
  return kOrder == 1 || (kOrder == 2 && IsCausal);
}

/// \brief Which configuration the step runs. true (the step's): the ones bin/variants_11
/// measured fastest (docs/results/h200-variants-11-*.md) — at both d the kernel with
/// FlashAttention-2's 2-D warp layouts (flash_bwd_2d.cuh), its S/dP loop unrolled, no selects
/// on the Q tiles that need no mask, the deterministic mode compiled per mode, the tiles
/// counted, P's exp2 flushing subnormals and dQ sent by tensor reductions, and at d = 128 dQ's
/// k loop unrolled, and on sm_90 Q and dO copied by the TMA (rows fa2ufzucq at d = 128, fa2d64cq
/// at d = 64, with 128-row tiles); where a
/// block cannot have its shared memory, this file's kernel with one barrier per Q tile, dQ's
/// atomics in pairs and, at d = 64, the same switches (row b1p2mcz). false: the configuration
/// chapter 11 builds first (64 × 128 at d = 64, 32 × 128 at d = 128, this kernel with every switch
/// off; bin/variants_11's row r, the baseline its table times the others against). Both pass the
/// same tests.
constexpr bool kTunedBwd = true;

/// \brief The tiles and switches per head dim; both masks and dtypes use them. `Traits` runs
/// where the device's shared memory per block allows it, `Fallback` elsewhere (check_device
/// asks only that `Fallback` fits; both have kBlockN = 128, the dQ slabs' width).
template <int kHeadDim, class Element>
struct BwdConfig;
template <class Element>
struct BwdConfig<64, Element> {  // 128 rows × 128 keys, 8 warps, 2-D layouts: 200 KB smem
  // fa2d64c, FlashAttention-2's d = 64 layouts (128 rows; S, dP 4 warps along the rows, dK, dV
  // 4 along the keys, dQ 4 along the rows) with fa2ufz's switches and dQ sent by tensor
  // reductions a tile later (kDqBulk = 3, sm_90; the REDGs before it); under the causal mask
  // the grid launches every head's first K/V tile first (kHeavyFirst = 2: row fa2d64ch's
  // causal kernel, fa2d64c's without the mask); each Q tile's Q and dO copied by the TMA
  // (kQTma, sm_90: row fa2d64cq).
  using Traits = std::conditional_t<kTunedBwd,
                                    Bwd2dTraits<64, Element, false, true, 4, true, true, true, 128,
                                                4, 4, 4, false, 2, 3, 2, true>,
                                    BwdTraits<64, 64, 128, Element>>;
  // This file's kernel, 64 rows × 128 keys, 119 KB (untuned: 101 KB), row b1p2mcz: for a
  // device whose blocks cannot have the 2-D kernel's 200 KB (or older than sm_90).
  using Fallback = std::conditional_t<
      kTunedBwd,
      BwdTraits<64, 64, 128, Element, 1, true, true, false, false, false, false, true, true, true>,
      Traits>;
};
template <class Element>
struct BwdConfig<128, Element> {  // 64 rows × 128 keys, 8 warps, 2-D layouts: 197 KB smem
  // fa2ufzuc, FlashAttention-2's d = 128 layouts (64 rows; S, dP 2 warps along the rows, dK,
  // dV 4 along the keys, dQ 2 along the rows) with dQ's k loop unrolled (kDqUnroll = 8) and
  // dQ sent by tensor reductions a tile later (kDqBulk = 3, sm_90; the REDGs before it); under
  // the causal mask heavy first (kHeavyFirst = 2: row fa2ufzuch's causal kernel, fa2ufzuc's
  // without the mask); each Q tile's Q and dO copied by the TMA (kQTma, sm_90: row fa2ufzucq).
  using Traits = std::conditional_t<kTunedBwd,
                                    Bwd2dTraits<128, Element, false, true, 8, true, true, true, 64,
                                                2, 4, 2, false, 8, 3, 2, true>,
                                    BwdTraits<128, 32, 128, Element>>;
  // This file's kernel, 32 rows × 128 keys, 126.5 KB (untuned: 116.5 KB): for a device whose
  // blocks cannot have the 2-D kernel's 197 KB (an A100, whose limit is 163 KB; one with less
  // than 126.5 KB is refused by check_device).
  using Fallback =
      std::conditional_t<kTunedBwd, BwdTraits<128, 32, 128, Element, 1, true, true>, Traits>;
};

/// \brief The kernels' parameters for problem `prob` (api.cu).
BwdParams make_bwd_params(const Problem& prob, const BackwardTensors& t, void* workspace);

/// \brief Launches the three kernels (D, main, convert) for head dim kHeadDim and Element on
/// `stream`. Defined in flash_bwd_kernel.cuh, instantiated once per (d, dtype) in
/// flash_bwd_d*_*.cu.
template <int kHeadDim, class Element>
void run_flash_bwd(const BwdParams& params, cudaStream_t stream);

}  // namespace fa::step11
