// flash_bwd_2d.cuh — step 11's backward with FlashAttention-2's two-dimensional warp layouts:
// the step's main kernel at both head dims (BwdConfig<d, ·>::Traits, kernel_traits.cuh: the
// switches of bin/variants_11's row "fa2ufzucq" at d = 128, and FlashAttention-2's d = 64
// layouts with fa2ufz's switches, dQ by tensor reductions and Q, dO by the TMA, row
// "fa2d64cq", at d = 64: the fastest it measured with its tests run) wherever a block may have
// its 197 KB (d = 128) or 200 KB (d = 64) of shared memory on an sm_90 device. bin/variants_11
// also runs it with the other switches of Bwd2dTraits (rows "fa2", "fa2q", "fa2m", "fa2u",
// "fa2mc", "fa2uf", "fa2ufz"; the dQ product's: "fa2ufzr", "fa2ufzu", "fa2ufzru", "fa2ufzb",
// "fa2ufzub", "fa2ufzut", "fa2ufzuc", and at d = 64 "fa2d64r", "fa2d64u", "fa2d64b", "fa2d64ub",
// "fa2d64t", "fa2d64c"; the grid's order: "fa2ufzuch", "fa2d64ch"; the copies: "fa2ufzucq",
// "fa2d64cq") and other layouts at d = 64 (rows "fa2d64s2", "fa2d64m64").
//
// The kernel chapter 11 builds (flash_bwd_kernel.cuh; the step's fallback on a device with
// less shared memory per block) gives each of its 8 warps 16 keys and computes
// everything with those keys as the rows: Pᵀ and dSᵀ stay in registers for dV and dK, but
// every warp loads every fragment of the Q and dO tiles, twice (kernel_traits.cuh, "What
// FlashAttention-2's Sm80 backward does differently"). Here each of the five products has a
// warp layout of its own, chosen so that each fragment a warp loads feeds as many mmas as the
// registers allow, and P and dS go through shared memory between them. At d = 128
// (FlashAttention-2's Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2>: kBlockM = 64 rows,
// kBlockN = 128 keys, 8 warps; the Bwd2dTraits defaults):
//
//   product            warps                      per warp             A            B
//   S  = Q Kᵀ          2 (rows) × 4 (keys)        32 rows × 32 keys    Q            K
//   dP = dO Vᵀ         the same warps, tiles      32 rows × 32 keys    dO           V
//   P, dS → shared memory, 16 bits, [kBlockM][kBlockN + 8] (padded rows)
//   dV += Pᵀ dO        4 (keys) × 2 (dims)        32 keys × 64 dims    P (trans)    dO (trans)
//   dK += dSᵀ Q        the same warps             32 keys × 64 dims    dS (trans)   Q (trans)
//   dQ  = dS K         2 (rows) × 4 (dims)        32 rows × 32 dims    dS           K (trans)
//
// FlashAttention-2 names each layout by its warps along the mma's M: AtomLayoutMSdP (S's query
// rows), AtomLayoutNdKV (dK's and dV's keys), AtomLayoutMdQ (dQ's query rows); the warps along
// N are the rest of the 8 (its TiledMMA of Layout<Shape<M warps, 8 / M warps, 1>>). Bwd2dTraits
// takes the same three numbers (kSWarpsM, kKvWarpsM, kQWarpsM) and kBlockM. At d = 64 on a GPU
// with >= 144 KB of shared memory per block FlashAttention-2 runs
// Flash_bwd_kernel_traits<64, 128, 128, 8, 4, 4, 4> (flash_bwd_launch_template.h; its comment:
// splitting M more leaves fewer registers holding L), i.e. kBlockM = 128:
//
//   S, dP              4 (rows) × 2 (keys)        32 rows × 64 keys
//   dV, dK             4 (keys) × 2 (dims)        32 keys × 32 dims
//   dQ                 4 (rows) × 2 (dims)        32 rows × 32 dims
//
// and with less shared memory <64, 64, 128, 8, 2, 4, 4> (V held in registers, which this kernel
// does not do): kBlockM = 64, S and dP 2 × 4 (32 × 32), dV and dK 4 × 2 (32 keys × 32 dims),
// dQ 4 × 2 (16 rows × 32 dims).
//
// Why 2 × 4 and not 4 × 2 for S and dP at d = 128: with kBlockM = 64 rows and kBlockN = 128
// keys, 2 × 4 gives each warp a square 32 × 32 tile, 4 × 2 a 16 × 64 one. Per k16 step a warp
// loads (rows + keys) / 16 ldmatrix.x4 per product: 2 + 2 = 4 for 32 × 32 (8 mmas), 1 + 4 = 5
// for 16 × 64 (the same 8 mmas); the square tile reads 20% fewer bytes for S and dP. Both give
// each lane the same 32 fp32 registers of S and 32 of dP. (At d = 64, kBlockM = 128, 4 × 2's
// 32 × 64 and 2 × 4's 64 × 32 load the same 2 + 4 per product; 4 × 2 holds half the rows per
// lane, so half the L and D values.) Why S and not Sᵀ: a lane's S accumulators hold two
// neighbouring KEYS of a row, so P and dS go to a [row][key] tile with one 32-bit store per
// pair (Sᵀ would need 16-bit stores); dV and dK then read that tile transposed
// (ldmatrix.trans) and dQ reads it as it is.
//
// Registers per lane: dK and dV, 32 × 64 each per warp, 2 · 64 = 128 fp32 for the whole
// kernel; S and dP 2 · 32 = 64 during their phase; dQ 32 during its phase. At d = 64 with
// kBlockM = 128: dK and dV 2 · 32 = 64, S and dP 2 · 64 = 128, dQ 32: the same 192 at the
// S and dP phase as at d = 128.
//
// Shared memory (d = 128, kBlockM = 64, kBlockN = 128): K, V 2 · 32 KB (whole kernel); Q, dO
// double-buffered 2 · 2 · 16 KB (cp.async, or the TMA with kQTma); P and dS 2 · 64 · 272 B = 34 KB;
// L and D of both stages 1 KB: 163 KB; with kDqBulk = 3 (the step's) each warp's 32 × 32 of dQ
// staged, 32 KB and 1 KB of alignment slack: 196 KB (197 KB with kQTma's barriers and slack). Two
// barriers per Q tile: one at its start (this tile's copies have landed; every warp is done with
// the previous tile's P, dS and stage), one after P and dS are written (the causal diagonal's
// __syncthreads_or stands in for it).
//
// Shared-memory bytes per warp and Q tile, against FLOPs (step 11's count, kernel_traits.cuh):
//   S, dP     A: Q, dO 2 · 32 · 128 · 2 = 16 KB; B: K, V 2 · 32 · 128 · 2 = 16 KB   0.52 MFLOP
//   P, dS     written: 2 · 32 · 32 · 2 = 4 KB
//   dV, dK    A: Pᵀ, dSᵀ 2 · 32 · 64 · 2 = 8 KB; B: dO, Q 2 · 64 · 64 · 2 = 16 KB  0.52 MFLOP
//   dQ        A: dS 32 · 128 · 2 = 8 KB; B: K 128 · 32 · 2 = 8 KB                0.26 MFLOP
//   in all    76 KB for 1.31 MFLOP: 16.8 FLOPs per byte (the 1-D kernel's m64b1p2: 13.6)
//
// At d = 64 (kBlockN = 128, the same 2 barriers per Q tile):
//   kBlockM = 128 (4 × 2, 4 × 2, 4 × 2): K, V 2 · 16 KB; Q, dO 2 · 2 · 16 KB; P and dS
//   2 · 128 · 272 B = 68 KB; L and D 2 KB: 166 KB, and with kDqBulk's staging areas (8 warps ×
//   4 KB, plus up to 1 KB to align them) 199 KB (200 KB with kQTma's). Per warp and Q tile:
//     S, dP     A: Q, dO 2 · 32 · 64 · 2 = 8 KB; B: K, V 2 · 64 · 64 · 2 = 16 KB     0.52 MFLOP
//     P, dS     written: 2 · 32 · 64 · 2 = 8 KB
//     dV, dK    A: Pᵀ, dSᵀ 2 · 32 · 128 · 2 = 16 KB; B: dO, Q 2 · 128 · 32 · 2 = 16 KB 0.52 MFLOP
//     dQ        A: dS 32 · 128 · 2 = 8 KB; B: K 128 · 32 · 2 = 8 KB                0.26 MFLOP
//     in all    80 KB for 1.31 MFLOP: 16.0 FLOPs per byte (the 1-D kernel's b1p2: 12.8)
//   kBlockM = 64 (2 × 4, 4 × 2, 4 × 2): K, V 32 KB; Q, dO 32 KB; P and dS 34 KB; L and D
//   1 KB: 99 KB. Per warp and Q tile: S, dP 8 + 8 KB; P, dS 4 KB; dV, dK 8 + 8 KB; dQ (16 rows
//   × 32 dims) 4 + 8 KB: 48 KB for 0.66 MFLOP, 13.3 FLOPs per byte.
//
// Everything else is the 1-D kernel's: the grid (one CTA per K/V tile of 128 keys and (batch, K/V
// head)), the visits (each query head of the GQA group, each Q tile that sees a key of the
// CTA's tile, dK and dV summed over the group in registers), bottom-right causal masks by
// selects, tails zero-filled by the copies, dQ by v2 fp32 atomics into dq_acc (deterministic
// mode: plain stores into the CTA's slab), the exact path for a tile on the causal diagonal
// when an input holds an inf or a NaN, and the preprocessing and convert kernels themselves
// (flash_bwd_kernel.cuh), launched by the same host code (run_flash_bwd_traits).
//
// Included by flash_bwd_kernel.cuh after its own kernels, whose helpers (the copies in and
// out, masks, the exact path's checks and its dQ loop) this file uses and whose host side
// (run_flash_bwd_traits) launches either main kernel; include flash_bwd_kernel.cuh, not this
// file.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernel_traits.cuh"

namespace fa::step11 {

/// \brief The tiles of the two-dimensional kernel. It has the members the step's preprocessing
/// and convert kernels read (Element, kBlockM, kBlockN, kHeadDim, kNumThreads) and those of
/// load_tile_async (kChunksPerRow, kRowBytes, swizzle). The switches, all off in row fa2:
///   kDqFirst     each Q tile's dQ (and its atomics) before dV and dK instead of after them
///   kMaskFree    a Q tile that needs no mask (decided once per tile for the whole CTA) writes
///                P and dS without the per-element selects ("P and dS" in the kernel)
///   kSUnroll     the k loop of S and dP unrolled by 1 (a loop, as in fa2), 2 (a loop of two
///                steps) or kHeadDim / 16 (no loop); above 1 its first step's mmas take C = 0
///   kDetCompiled the deterministic mode a template argument of the kernel (two kernels per
///                mask, chosen on the host) instead of p.deterministic read at run time
///   kTileCounter the visited tile's head and first row kept by counters, not divided out
///   kFastExp2    P = exp2(S·scale_log2 − L·log2e) by one ex2.approx.ftz.f32 instead of
///                exp2f (exp2_p, flash_bwd_kernel.cuh): 3 instructions fewer per exponential,
///                32 per lane and Q tile at d = 128 (a warp's 32 × 32 of S), so 96 per warp
///                and tile; a P below 2^-126 becomes 0 (BwdTraits' kFastExp2,
///                kernel_traits.cuh, has the numerics and why the tolerance rule does not
///                notice)
/// and the tiles and warp layouts (the defaults FlashAttention-2's at d = 128, see the top):
///   kBlockM      query rows per Q tile
///   kSWarpsM     warps along S's and dP's rows (AtomLayoutMSdP); along their keys the rest
///   kKvWarpsM    warps along dK's and dV's keys (AtomLayoutNdKV); along their dims the rest
///   kQWarpsM     warps along dQ's rows (AtomLayoutMdQ); along its dims the rest
/// and three more switches of the dQ product, off by default (their defaults, false, 2 and 0,
/// are given by the declaration in kernel_traits.cuh, which BwdConfig names before this file is
/// read):
///   kDqRed       each dQ pair added by inline PTX red.global.add.v2.f32 (no result) instead
///                of atomicAdd on a float2, which nvcc writes as atom.global.add.v2.f32 with
///                two result registers that nothing reads (ptxas for sm_90 makes both REDG)
///   kDqUnroll    the k loop of dQ (kBlockN / 16 = 8 steps) unrolled by 2 (a loop of 4 trips
///                with a back-edge) or by kBlockN / 16 (no loop); fully unrolled, its first
///                step's mmas take C = 0, as kSUnroll's, so the accumulators are not zeroed
///   kDqBulk      dQ added by the copy engine (sm_90), as the step's kDqBulk: each warp stores
///                its kQRows (32) rows × kQDims dims of dQ (fp32) into a shared-memory area of
///                its own (rows padded by 16 bytes: the stores conflict-free), and lane r adds
///                row r with one cp.reduce.async.bulk .add.f32 (kQDims · 4 bytes, 128; rows
///                past N_q not added). No register waits for a reduction to read it (a REDG's
///                registers stay held until the L1 has sent all 8 of its rows' requests), and
///                the L2 sees one request of 4 sectors per row instead of 4 of one sector.
///                +36 KB of shared memory. The deterministic mode, and a GPU before sm_90,
///                keep the stores or REDGs above. That is kDqBulk = 1; kDqBulk = 2 sends the
///                warp's whole 32 × 32 part by ONE tensor reduction (cp.reduce.async.bulk.tensor,
///                a tensor map of dq_acc in BwdParams: the rows past N_q out of its bounds),
///                issued by lane 0, the part staged in the map's 128-byte swizzle (4 KB per warp,
///                1024-byte aligned): a bulk reduction's addresses are uniform registers, so
///                kDqBulk = 1's 32 per warp are issued one lane at a time. kDqBulk = 3 stages
///                as 2 but sends all 8 warps' boxes from thread 0 after the NEXT tile's first
///                barrier: the other warps never wait for a reduction (a warp's wait for its
///                cp.async copies, at the top of each tile, also waits for its own bulk
///                groups), and thread 0 waits only until the engine has read the area, before
///                the next tile's P/dS barrier
/// and the grid's order, as the 1-D kernel's switch of the same name (kernel_traits.cuh):
///   kHeavyFirst  the grid (B · H_kv, ⌈N_kv / kBlockN⌉) instead of (⌈N_kv / kBlockN⌉, B · H_kv):
///                the first K/V tile of every head is launched before any second one. Causal,
///                the first tiles see the most Q tiles, so the longest CTAs no longer start
///                last; without the mask every CTA is as long and only the L2's reuse changes.
///                0: never, 1: under both masks, 2: under the causal mask only
///                (heavy_first_grid, kernel_traits.cuh)
/// and the copies of each Q tile:
///   kQTma        Q and dO copied by the TMA (sm_90): thread 0 asks for one box of 64 dims ×
///                kBlockM rows of each per 64 dims (tensor maps of Q and dO in BwdParams), the
///                bytes completed on an mbarrier of the stage, which every thread waits on
///                beside its cp.async wait; instead of 8 cp.async per thread and tile, whose
///                address registers stay held until the copies have left (Nsight Compute at
///                N = 16384: 6.4% of the causal d = 128 kernel's stall samples on the first
///                instruction that rewrites them). L and D stay cp.async. A box is at most 128
///                bytes wide in the 128-byte swizzle, so at d = 128 a Q or dO tile is two boxes
///                of 64 dims one after the other, rows of 128 bytes in each (q_swizzle), where
///                the cp.async copies write rows of 256 bytes; at d = 64 the two layouts are one.
///                + 1 KB of shared memory (the tiles from a 1024-byte boundary) and the barriers.
template <int kHeadDim_, class Element_, bool kDqFirst_ = false, bool kMaskFree_ = false,
          int kSUnroll_ = 1, bool kDetCompiled_ = false, bool kTileCounter_ = false,
          bool kFastExp2_ = false, int kBlockM_ = 64, int kSWarpsM_ = 2, int kKvWarpsM_ = 4,
          int kQWarpsM_ = 2, bool kDqRed_, int kDqUnroll_, int kDqBulk_, int kHeavyFirst_,
          bool kQTma_>
struct Bwd2dTraits {
  using Element = Element_;
  using WarpLayout = WarpLayout2d;                  // launched as flash_bwd_2d_kernel
  static constexpr int kHeavyFirst = kHeavyFirst_;  // 0, 1 or 2: heavy_first_grid()
  static_assert(kHeavyFirst >= 0 && kHeavyFirst <= 2, "0: never, 1: both masks, 2: causal");
  static constexpr bool kDqFirst = kDqFirst_;
  static constexpr bool kMaskFree = kMaskFree_;
  static constexpr int kSUnroll = kSUnroll_;
  static constexpr bool kDetCompiled = kDetCompiled_;
  static constexpr bool kTileCounter = kTileCounter_;
  static constexpr bool kFastExp2 = kFastExp2_;
  static constexpr bool kDqRed = kDqRed_;
  static constexpr int kDqUnroll = kDqUnroll_;
  static constexpr int kDqBulk = kDqBulk_;
  static constexpr bool kQTma = kQTma_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;  // query rows per Q tile
  static constexpr int kBlockN = 128;       // keys per CTA
  static constexpr int kNumWarps = 8;
  static constexpr int kNumThreads = 32 * kNumWarps;
  static constexpr int kStages = 2;  // Q, dO, L, D: tile t computed, t + 1 in flight

  // S, dP: warps kSWarpsM (rows) × kSWarpsN (keys), each kSRows × kSKeys: kSMt m16 tiles ×
  // kSNt n8 tiles (d = 128: 2 × 4 warps of 32 × 32; d = 64, kBlockM = 128: 4 × 2 of 32 × 64).
  static constexpr int kSWarpsM = kSWarpsM_;
  static constexpr int kSWarpsN = kNumWarps / kSWarpsM;
  static constexpr int kSRows = kBlockM / kSWarpsM;
  static constexpr int kSKeys = kBlockN / kSWarpsN;
  static constexpr int kSMt = kSRows / 16, kSNt = kSKeys / 8;
  static constexpr int kKStepsS = kHeadDim / 16;
  static_assert(kSUnroll == 1 || kSUnroll == 2 || kSUnroll == kKStepsS, "1, 2 or every step");
  // dV, dK: warps kKvWarpsM (keys) × kKvWarpsN (dims), each kKvKeys × kKvDims (d = 128: 4 × 2
  // of 32 keys × 64 dims; d = 64: 4 × 2 of 32 × 32).
  static constexpr int kKvWarpsM = kKvWarpsM_;
  static constexpr int kKvWarpsN = kNumWarps / kKvWarpsM;
  static constexpr int kKvKeys = kBlockN / kKvWarpsM;
  static constexpr int kKvDims = kHeadDim / kKvWarpsN;
  static constexpr int kKvMt = kKvKeys / 16, kKvNt = kKvDims / 8;
  static constexpr int kKStepsKv = kBlockM / 16;
  // dQ: warps kQWarpsM (rows) × kQWarpsN (dims), each kQRows × kQDims (d = 128: 2 × 4 of
  // 32 × 32; d = 64, kBlockM = 128: 4 × 2 of 32 × 32).
  static constexpr int kQWarpsM = kQWarpsM_;
  static constexpr int kQWarpsN = kNumWarps / kQWarpsM;
  static constexpr int kQRows = kBlockM / kQWarpsM;
  static constexpr int kQDims = kHeadDim / kQWarpsN;
  static constexpr int kQMt = kQRows / 16, kQNt = kQDims / 8;
  static constexpr int kKStepsQ = kBlockN / 16;
  static_assert(kDqUnroll == 2 || kDqUnroll == kKStepsQ, "dQ's k loop by 2 or every step");

  // Shared memory: K, V, Q, dO swizzled [rows][kHeadDim] as in the step (Q and dO with kQTma
  // at d = 128: kQBoxes boxes of [rows][64], q_swizzle); P and dS
  // [kBlockM][kBlockN + 8] Elements (rows 272 bytes apart: 8 rows fall in 8 different 16-byte
  // bank groups, for the 32-bit stores and for ldmatrix with or without .trans).
  static constexpr int kChunksPerRow = kHeadDim * 2 / 16;
  static constexpr int kRowBytes = kHeadDim * 2;
  static constexpr int kKVBytes = kBlockN * kRowBytes;
  static constexpr int kQBytes = kBlockM * kRowBytes;
  static constexpr int kPRowBytes = (kBlockN + 8) * 2;
  static constexpr int kPBytes = kBlockM * kPRowBytes;
  static constexpr int kRowVecBytes = kBlockM * 4;
  static constexpr int kOffK = 0;
  static constexpr int kOffV = kOffK + kKVBytes;
  static constexpr int kOffQ = kOffV + kKVBytes;            // [kStages] Q tiles (q_swizzle)
  static constexpr int kOffDo = kOffQ + kStages * kQBytes;  // [kStages] dO tiles (q_swizzle)
  static constexpr int kOffP = kOffDo + kStages * kQBytes;  // [kBlockM][kBlockN + 8]
  static constexpr int kOffDs = kOffP + kPBytes;            // [kBlockM][kBlockN + 8]
  static constexpr int kOffL = kOffDs + kPBytes;            // [kStages][kBlockM] fp32
  static constexpr int kOffD = kOffL + kStages * kRowVecBytes;
  // kDqBulk: [kNumWarps][kQRows][kQDims (+ 4)] fp32, each warp's part of the dQ tile. 1: rows
  // 16-byte aligned, as the bulk reduction's source must be, and padded to 16 bytes apart
  // modulo 128; 2: rows of 128 bytes in the 128-byte swizzle, each warp's part 1024-byte
  // aligned (the kernel rounds the area's start up: + 1 KB of slack).
  static constexpr int kDqRowBytes = (kQDims + (kDqBulk == 1 ? 4 : 0)) * 4;  // 2, 3: 128 bytes
  static constexpr int kDqWarpBytes = kQRows * kDqRowBytes;
  static constexpr int kOffDq = kOffD + kStages * kRowVecBytes;
  // kQTma: the two stages' mbarriers after the dQ staging areas (and their slack).
  static constexpr int kOffBar =
      kOffDq + (kDqBulk ? kNumWarps * kDqWarpBytes : 0) + (kDqBulk >= 2 ? 1024 : 0);
  static constexpr int kSmemBytes = kOffBar + (kQTma ? kStages * 8 + 1024 : 0);
  // A Q or dO tile: kQBoxes boxes of kBlockM rows of kQPitch bytes (kQTma at d = 128: two boxes
  // of 64 dims; otherwise one of whole rows).
  static constexpr int kQBoxes = kQTma ? kHeadDim / 64 : 1;
  static constexpr int kQPitch = kRowBytes / kQBoxes;
  static constexpr int kQBoxBytes = kBlockM * kQPitch;

  static_assert(sizeof(Element) == 2, "16-bit elements only");
  static_assert(kHeadDim == 64 || kHeadDim == 128,
                "d = 64 or 128: rows of whole swizzle periods (8 chunks), in which each step "
                "of 16 dims is one XOR with 32 bytes");
  static_assert(kNumWarps % kSWarpsM == 0 && kNumWarps % kKvWarpsM == 0 &&
                    kNumWarps % kQWarpsM == 0,
                "each layout's warps along M divide the 8 warps");
  static_assert(kSRows * kSWarpsM == kBlockM && kSKeys * kSWarpsN == kBlockN,
                "S and dP: the warps' tiles cover the Q tile's rows and the CTA's keys");
  static_assert(kKvKeys * kKvWarpsM == kBlockN && kKvDims * kKvWarpsN == kHeadDim,
                "dK and dV: the warps' tiles cover the keys and the dims");
  static_assert(kQRows * kQWarpsM == kBlockM && kQDims * kQWarpsN == kHeadDim,
                "dQ: the warps' tiles cover the rows and the dims");
  static_assert(kSRows % 16 == 0 && kKvKeys % 16 == 0 && kQRows % 16 == 0,
                "whole m16 tiles (one ldmatrix.x4 of A each)");
  static_assert(kSKeys % 16 == 0 && kKvDims % 16 == 0 && kQDims % 16 == 0,
                "n8 tiles in pairs (one ldmatrix.x4 of B per pair)");
  static_assert((kPRowBytes / 4) % 32 == 4, "P, dS rows 16 bytes apart modulo 128");
  static_assert(kNumThreads % kChunksPerRow == 0 && (kNumThreads / kChunksPerRow) % 8 == 0,
                "copy passes of whole swizzle periods");
  static_assert(kBlockM % (kNumThreads / kChunksPerRow) == 0, "Q tiles copy in whole passes");
  static_assert(kBlockM <= kNumThreads, "one thread per row copies L and D");
  static_assert(kDqBulk < 2 || (kQDims * 4 == 128 && kDqWarpBytes % 1024 == 0),
                "kDqBulk = 2, 3: boxes of 128-byte rows (the 128-byte swizzle's width), whole "
                "swizzle periods of 8 rows per warp");
  static_assert(kDqBulk != 1 || (kQRows == 32 && kOffDq % 16 == 0 && (kDqRowBytes / 4) % 32 == 4),
                "kDqBulk: one row per lane, 16-byte aligned rows 16 bytes apart modulo 128 (a "
                "warp's 8 rows × 32 bytes of one store in distinct banks)");
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than a block may have (sm_90)");
  static_assert(!kQTma || (kOffQ % 1024 == 0 && kOffDo % 1024 == 0 && kQBoxBytes % 1024 == 0),
                "kQTma: every box of Q and dO at a 1024-byte boundary (the swizzle's period)");
  static_assert(kQPitch == 128 || !kQTma, "kQTma: boxes of 128-byte rows");
  static_assert(kOffBar % 8 == 0, "kQTma: mbarriers are 8-byte aligned");
  static_assert(kQBoxes == 1 || kKvDims == 64,
                "kQTma's boxes: each warp's dims of dK and dV inside one box (kv_q_lane, the "
                "exact path)");

  /// \brief Byte offset of chunk `chunk` of row `row` of a K or V tile, and of a Q or dO tile
  /// without kQTma's boxes (q_swizzle).
  __device__ static constexpr uint32_t swizzle(int row, int chunk) {
    return static_cast<uint32_t>((row * kChunksPerRow + (chunk ^ (row % 8))) * 16);
  }
  /// \brief Byte offset of element `col` of row `row` of a K or V tile (or Q, dO as swizzle()).
  __device__ static constexpr uint32_t element(int row, int col) {
    return swizzle(row, col / 8) + 2 * (col % 8);
  }
  /// \brief Byte offset of chunk `chunk` of row `row` of a Q or dO tile: swizzle(), or, in
  /// kQBoxes boxes, chunk / 8's box, its rows 128 bytes apart, the same XOR inside the row.
  __device__ static constexpr uint32_t q_swizzle(int row, int chunk) {
    if constexpr (kQBoxes == 1)
      return swizzle(row, chunk);
    else
      return static_cast<uint32_t>((chunk / 8) * kQBoxBytes + row * 128 +
                                   ((chunk % 8) ^ (row % 8)) * 16);
  }
  /// \brief A lane's ldmatrix offset in a Q or dO tile at k16 step `step` along d (dims
  /// 16·step …), from its offset `lane_off` at step 0 (q_swizzle of chunk 0 or 1): one XOR with
  /// 32·step inside a row of whole swizzle periods, and with boxes the box's offset.
  __device__ static constexpr uint32_t q_step(uint32_t lane_off, int step) {
    if constexpr (kQBoxes == 1)
      return lane_off ^ (32 * step);
    else
      return (step / 4) * kQBoxBytes + (lane_off ^ (32 * (step % 4)));
  }
};

/// \brief kQTma: the Q tile of query head h at row i0 (kBlockM rows, zeros past N_q) and its
/// dO tile into stage `stage` by the TMA (thread 0; their bytes completed on the stage's
/// mbarrier at bars + 8 · stage), and the rows' L and D by cp.async, as load_q_stage does.
template <class Traits>
__device__ __forceinline__ void load_q_stage_tma(const BwdParams& p, int b, int h, int i0,
                                                 int stage, uint32_t sQ, uint32_t sdO, uint32_t sL,
                                                 uint32_t sD, uint32_t bars) {
  if (threadIdx.x == 0) {
    const uint32_t bar = bars + 8 * stage;
    mbarrier_arrive_expect_tx(bar, 2 * Traits::kQBytes);
#pragma unroll
    for (int box = 0; box < Traits::kQBoxes; ++box) {
      const uint32_t at = stage * Traits::kQBytes + box * Traits::kQBoxBytes;
      tma_load_4d(sQ + at, &p.q_map, bar, 64 * box, i0, h, b);
      tma_load_4d(sdO + at, &p.do_map, bar, 64 * box, i0, h, b);
    }
  }
  const int tid = threadIdx.x;
  if (tid < Traits::kBlockM) {  // L and D of the tile's rows; zeros past N_q (load_q_stage's)
    const int i = i0 + tid;
    const int r = (b * p.heads_q + h) * p.n_q + (i < p.n_q ? i : i0);
    cp_async_4(sL + stage * Traits::kRowVecBytes + 4 * tid, p.lse + r, i < p.n_q);
    cp_async_4(sD + stage * Traits::kRowVecBytes + 4 * tid, p.delta + r, i < p.n_q);
  }
}

/// \brief d = a · b, an m16n8k16 mma whose C is zero (the first k step of a product): the
/// accumulators need no zeroing beforehand, and ptxas reads the zero C from RZ (kSUnroll).
template <class Element>
__device__ __forceinline__ void mma_m16n8k16_zero_c(float (&d)[4], const uint32_t (&a)[4],
                                                    uint32_t b0, uint32_t b1) {
  static_assert(std::is_same_v<Element, __nv_bfloat16> || std::is_same_v<Element, __half>,
                "Element must be __nv_bfloat16 or __half");
  constexpr bool kBf16 = std::is_same_v<Element, __nv_bfloat16>;
  if constexpr (kBf16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %10, %10, %10};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.f));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %10, %10, %10};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.f));
  }
}

/// \brief One k16 step of a product: mma_m16n8k16 adding to d, or with kZeroC (the product's
/// first step) mma_m16n8k16_zero_c, which writes d with C = 0 (kSUnroll, kDqUnroll).
template <bool kZeroC, class Element>
__device__ __forceinline__ void mma_k_step(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                           uint32_t b1) {
  if constexpr (kZeroC)
    mma_m16n8k16_zero_c<Element>(d, a, b0, b1);
  else
    mma_m16n8k16<Element>(d, a, b0, b1);
}

/// \brief exact_dq_tile (flash_bwd_kernel.cuh) on this kernel's dS tile ([kBlockM][kBlockN + 8]:
/// the Q tile's rows as rows). Not inlined, as the step's exact_dq: it runs while the caller
/// holds dK and dV.
template <class Traits, bool IsCausal>
__device__ __noinline__ void exact_dq_2d(const BwdParams& p, const unsigned char* smem,
                                         float* dq_rows, int i0, int j0) {
  exact_dq_tile<Traits, IsCausal>(
      p, smem, Traits::kOffDs, [](int r, int key) { return r * (Traits::kPRowBytes / 2) + key; },
      dq_rows, i0, j0);
}

/// \brief The main kernel. grid: (⌈N_kv / kBlockN⌉, B · H_kv), or the two swapped
/// (heavy_first_grid), block: kNumThreads, smem: kSmemBytes. The visits, copies and masks are the
/// step's flash_bwd_kernel's; the products are laid out as at the top of this file. Deterministic:
/// the mode, read only with Traits::kDetCompiled (then p.deterministic must equal it; otherwise
/// p.deterministic is read).
template <class Traits, bool IsCausal, bool Deterministic = false>
__global__ void __launch_bounds__(Traits::kNumThreads, 1)
    flash_bwd_2d_kernel(const __grid_constant__ BwdParams p) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
  constexpr int kHeadDim = Traits::kHeadDim, kRowBytes = Traits::kRowBytes;
  constexpr int kPRowBytes = Traits::kPRowBytes;
  constexpr int kSMt = Traits::kSMt, kSNt = Traits::kSNt;
  constexpr int kKvMt = Traits::kKvMt, kKvNt = Traits::kKvNt;
  constexpr int kQMt = Traits::kQMt, kQNt = Traits::kQNt;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  // kQTma: the layout from the first 1024-byte boundary (the 128-byte swizzle's period, which
  // the TMA counts from absolute addresses; kSmemBytes has the 1 KB of slack).
  unsigned char* const smem =
      smem_raw + (Traits::kQTma ? (1024 - smem_u32(smem_raw) % 1024) % 1024 : 0);
  const uint32_t s0 = smem_u32(smem);
  const uint32_t sK = s0 + Traits::kOffK, sV = s0 + Traits::kOffV;
  const uint32_t sQ = s0 + Traits::kOffQ, sdO = s0 + Traits::kOffDo;  // [kStages] each
  const uint32_t sP = s0 + Traits::kOffP, sDs = s0 + Traits::kOffDs;
  const uint32_t sL = s0 + Traits::kOffL, sD = s0 + Traits::kOffD;  // [kStages][kBlockM]
  const uint32_t sBar = s0 + Traits::kOffBar;                       // kQTma: [kStages] mbarriers

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;  // mma.cuh: lane (g, t) holds rows g, g+8, cols 2t, 2t+1
  constexpr bool kHeavyFirst = heavy_first_grid<Traits, IsCausal>();
  const int n_blk = kHeavyFirst ? blockIdx.y : blockIdx.x;
  const int j0 = n_blk * kBlockN;  // first key of this CTA's tile
  const int bh = kHeavyFirst ? blockIdx.x : blockIdx.y;
  const int b = bh / p.heads_kv, h_kv = bh % p.heads_kv;
  const int kv_off = b * p.kv_batch_stride + h_kv * p.kv_head_stride;
  const Element* k_head = static_cast<const Element*>(p.k) + kv_off;
  const Element* v_head = static_cast<const Element*>(p.v) + kv_off;
  const Element* q_all = static_cast<const Element*>(p.q);
  const Element* do_all = static_cast<const Element*>(p.d_o);
  // kDetCompiled: a constant, so the dQ stores below compile to the one kind the mode uses.
  // Read at run time (fa2), ptxas (sm_90) compiles the choice at each of a warp's 16 dQ pairs
  // per Q tile to both: an STG predicated on the mode, issued with its predicate off when the
  // mode is off, then a predicated branch around the REDG.
  auto deterministic = [&] { return Traits::kDetCompiled ? Deterministic : p.deterministic; };
  // kDqBulk: dQ added by bulk reductions from shared memory (sm_90 only; before it, and in the
  // deterministic mode, the stores or REDGs of the other switches). The deterministic kernel of
  // kDetCompiled is compiled without the bulk path: none of its waits or barriers.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kBulk = Traits::kDetCompiled && Deterministic ? 0 : Traits::kDqBulk;
#else
  constexpr int kBulk = 0;
#endif
  // kDqBulk = 2, 3: the staging area's start rounded up to 1024 bytes (the swizzle's period).
  const uint32_t s_dq_area = (s0 + Traits::kOffDq + 1023) & ~1023u;
  // kDqBulk = 3: the head and first row of the Q tile whose dQ is staged and not yet sent
  // (pend_h < 0: none), the same in every thread; thread 0 sends every warp's box.
  int pend_h = -1, pend_i0 = 0;
  // kDqBulk = 2, 3: one tensor reduction adds warp w's staged box to dQ rows i0 + its first row
  // of head h (the warp's first dim and row as q_d and q_m below).
  auto send_box = [&](int w, int h, int i0) {
    tma_reduce_add_3d(&p.dq_map, s_dq_area + w * Traits::kDqWarpBytes,
                      Traits::kQDims * (w % Traits::kQWarpsN),
                      i0 + Traits::kQRows * (w / Traits::kQWarpsN), b * p.heads_q + h);
  };
  auto send_staged_dq = [&] {
    if (tid == 0 && pend_h >= 0) {
#pragma unroll
      for (int w = 0; w < Traits::kNumWarps; ++w) send_box(w, pend_h, pend_i0);
      bulk_commit();
    }
    pend_h = -1;
  };

  // The Q tiles this CTA visits: for each query head of the group, the tiles from the one
  // holding the first row that sees key j0 to the last (the step's order, no stagger).
  const int first_row = first_row_seeing<IsCausal>(j0, p.n_q, p.n_kv);
  const int i_first = first_row / kBlockM * kBlockM;
  const int num_m = first_row < p.n_q ? (p.n_q - i_first + kBlockM - 1) / kBlockM : 0;
  const int visits = p.group * num_m;
  auto tile_of = [&](int it, int* h, int* i0) {
    *h = h_kv * p.group + it / num_m;
    *i0 = i_first + (it % num_m) * kBlockM;
  };
  auto load_q_tile_async = [&](int h, int i0, int stage) {
    if constexpr (Traits::kQTma)
      load_q_stage_tma<Traits>(p, b, h, i0, stage, sQ, sdO, sL, sD, sBar);
    else
      load_q_stage<Traits>(p, q_all, do_all, b, h, i0, stage, sQ, sdO, sL, sD);
  };
  auto load_q_async = [&](int it, int stage) {
    int h, i0;
    tile_of(it, &h, &i0);
    load_q_tile_async(h, i0, stage);
  };
  // kTileCounter: the tile after (h, i0), by the order of tile_of (the next row tile, or the
  // group's next head from i_first): one add and one compare, where tile_of divides by num_m
  // (an integer division, twice per tile: this tile and the next one's copies).
  auto next_tile = [&](int h, int i0, int* h_next, int* i0_next) {
    const bool wrap = i0 + kBlockM >= p.n_q;  // i0 is the head's last tile
    *h_next = wrap ? h + 1 : h;
    *i0_next = wrap ? i_first : i0 + kBlockM;
  };

  // kQTma: each stage's mbarrier, one arrival (thread 0's, with the bytes) per tile.
  if constexpr (Traits::kQTma) {
    if (tid == 0) {
      for (int st = 0; st < Traits::kStages; ++st) mbarrier_init(sBar + 8 * st, 1);
      fence_mbarrier_init();
    }
    __syncthreads();
  }

  // Prologue: K, V and the first Q tile in one group.
  if (visits > 0) {
    load_kv_async<Traits>(p, k_head, v_head, j0, sK, sV);
    load_q_async(0, 0);
  }
  cp_async_commit();

  // Causal: does K or V hold an inf or a NaN? (Then the diagonal's tiles take the exact path.)
  const bool kv_nonfinite = kv_has_nonfinite<Traits, IsCausal>(visits, sK);

  // The warp's place in each layout.
  const int s_m = Traits::kSRows * (warp / Traits::kSWarpsN);     // S, dP: first row
  const int s_n = Traits::kSKeys * (warp % Traits::kSWarpsN);     // S, dP: first key
  const int kv_n = Traits::kKvKeys * (warp / Traits::kKvWarpsN);  // dK, dV: first key
  const int kv_d = Traits::kKvDims * (warp % Traits::kKvWarpsN);  // dK, dV: first dim
  const int q_m = Traits::kQRows * (warp / Traits::kQWarpsN);     // dQ: first row
  const int q_d = Traits::kQDims * (warp % Traits::kQWarpsN);     // dQ: first dim

  float acc_dk[kKvMt][kKvNt][4], acc_dv[kKvMt][kKvNt][4];  // kKvKeys × kKvDims per warp
#pragma unroll
  for (int mt = 0; mt < kKvMt; ++mt)
#pragma unroll
    for (int nt = 0; nt < kKvNt; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_dk[mt][nt][e] = acc_dv[mt][nt][e] = 0.f;

  // Per-lane ldmatrix offsets. Swizzled tiles (rows a multiple of 8 added outside; step j
  // along d is one XOR with 32·j, as in the step; with kQTma Q and dO use qa_lane below):
  //   a_lane   A from a [row][d] tile (Q, dO as A of S, dP)
  //   b_lane   B from a [row][d] tile, non-transposed (K, V as B of S, dP: two n8 key tiles)
  //   bt_lane  B from a [row][d] tile, transposed (dO, Q for dV, dK; K for dQ: two n8 dim tiles)
  // P and dS tiles ([row][key], padded):
  //   pt_lane  A of Pᵀ, dSᵀ (keys × rows): ldmatrix.trans, rows +8 in lanes 16–31, keys +8 in
  //            lanes 8–15 and 24–31
  //   ds_lane  A of dS (rows × keys): ldmatrix, rows lane % 16, keys +8 in lanes 16–31
  const uint32_t a_lane = Traits::swizzle(lane % 16, lane / 16);
  const uint32_t b_lane = Traits::swizzle(lane % 8 + 8 * (lane / 16), (lane / 8) % 2);
  const uint32_t bt_lane = Traits::swizzle(lane % 16, lane / 16);
  const uint32_t pt_lane = (lane % 8 + 8 * (lane / 16)) * kPRowBytes + 16 * ((lane / 8) % 2);
  const uint32_t ds_lane = (lane % 16) * kPRowBytes + 16 * (lane / 16);
  // Q and dO tiles (q_swizzle): qa_lane is a_lane and bt_lane in their layout (the same as
  // either without kQTma's boxes), kv_q_lane the dK and dV products' B offset at the warp's
  // first dim (kv_d / 16 is a multiple of the warp's kKvNt / 2 steps, a power of two, so each
  // step dp2 after it is one XOR with 32 · dp2, inside one box).
  const uint32_t qa_lane = Traits::q_swizzle(lane % 16, lane / 16);
  static_assert(((Traits::kKvNt / 2) & (Traits::kKvNt / 2 - 1)) == 0, "steps a power of two");
  const uint32_t kv_q_lane = Traits::q_step(qa_lane, kv_d / 16);

  int h_next = h_kv * p.group, i0_next = i_first;  // kTileCounter: tile_of(0)
  for (int it = 0; it < visits; ++it) {
    const int stage = it % Traits::kStages;
    int h, i0;
    if constexpr (Traits::kTileCounter) {
      h = h_next;
      i0 = i0_next;
      next_tile(h, i0, &h_next, &i0_next);
    } else {
      tile_of(it, &h, &i0);
    }
    const uint32_t sQs = sQ + stage * Traits::kQBytes, sdOs = sdO + stage * Traits::kQBytes;
    const float* lse =
        reinterpret_cast<const float*>(smem + Traits::kOffL + stage * Traits::kRowVecBytes);
    const float* delta =
        reinterpret_cast<const float*>(smem + Traits::kOffD + stage * Traits::kRowVecBytes);

    // This tile's copies have landed and every warp is done with the previous tile (its stage,
    // P and dS); then the next tile's copies go to the other stage.
    cp_async_wait<0>();
    if constexpr (Traits::kQTma) mbarrier_wait(sBar + 8 * stage, (it / Traits::kStages) % 2);
    __syncthreads();
    if constexpr (kBulk == 3) send_staged_dq();  // the last tile's dQ, staged before the barrier
    if (it + 1 < visits) {
      if constexpr (Traits::kTileCounter)
        load_q_tile_async(h_next, i0_next, (it + 1) % Traits::kStages);
      else
        load_q_async(it + 1, (it + 1) % Traits::kStages);
    }
    cp_async_commit();

    // ---- S = Q Kᵀ and dP = dO Vᵀ: the warp's kSRows rows × kSKeys keys --------------------
    float s[kSMt][kSNt][4], dp[kSMt][kSNt][4];
    // One k16 step (16 dims of Q, dO, K, V): 2 · (kSMt + kSNt / 2) ldmatrix.x4, 2 · kSMt · kSNt
    // mmas (d = 128: 8 and 16; d = 64, kBlockM = 128: 12 and 32). kZeroC: the first step,
    // whose mmas write the accumulators with C = 0 instead of adding to zeroed ones.
    auto s_dp_step = [&](int ks, auto zero_c) {
      constexpr bool kZeroC = decltype(zero_c)::value;
      auto mma = mma_k_step<kZeroC, Element>;
      uint32_t aq[kSMt][4], ao[kSMt][4];
#pragma unroll
      for (int mt = 0; mt < kSMt; ++mt) {
        if constexpr (Traits::kQTma) {
          const uint32_t off = (s_m + 16 * mt) * Traits::kQPitch + Traits::q_step(qa_lane, ks);
          ldmatrix_x4(aq[mt], sQs + off);
          ldmatrix_x4(ao[mt], sdOs + off);
        } else {
          ldmatrix_x4(aq[mt], sQs + (s_m + 16 * mt) * kRowBytes + (a_lane ^ (32 * ks)));
          ldmatrix_x4(ao[mt], sdOs + (s_m + 16 * mt) * kRowBytes + (a_lane ^ (32 * ks)));
        }
      }
#pragma unroll
      for (int np = 0; np < kSNt / 2; ++np) {
        uint32_t bk[4], bv[4];
        ldmatrix_x4(bk, sK + (s_n + 16 * np) * kRowBytes + (b_lane ^ (32 * ks)));
        ldmatrix_x4(bv, sV + (s_n + 16 * np) * kRowBytes + (b_lane ^ (32 * ks)));
#pragma unroll
        for (int mt = 0; mt < kSMt; ++mt) {
          mma(s[mt][2 * np], aq[mt], bk[0], bk[1]);
          mma(s[mt][2 * np + 1], aq[mt], bk[2], bk[3]);
          mma(dp[mt][2 * np], ao[mt], bv[0], bv[1]);
          mma(dp[mt][2 * np + 1], ao[mt], bv[2], bv[3]);
        }
      }
    };
    if constexpr (Traits::kSUnroll == Traits::kKStepsS) {
      // The kKStepsS steps (8 at d = 128) unrolled: no loop counter, compare or branch, the
      // swizzle's XOR along d a constant of each step, and the first step's mmas take C = 0
      // (RZ), so the accumulators are not zeroed (at d = 128 64 of them: 32 CS2R per warp and
      // Q tile in the loop's version).
      s_dp_step(0, std::true_type{});
#pragma unroll
      for (int ks = 1; ks < Traits::kKStepsS; ++ks) s_dp_step(ks, std::false_type{});
    } else if constexpr (Traits::kSUnroll == 2) {
      // Two steps per pass: the first pair outside the loop (its first step with C = 0, no
      // zeroing), then passes of two steps (3 at d = 128): half the loop's counters and
      // branches, and the fragments of one step at most loaded ahead of the other's mmas.
      s_dp_step(0, std::true_type{});
      s_dp_step(1, std::false_type{});
#pragma unroll 1
      for (int ks = 2; ks < Traits::kKStepsS; ks += 2) {
        s_dp_step(ks, std::false_type{});
        s_dp_step(ks + 1, std::false_type{});
      }
    } else {
#pragma unroll
      for (int mt = 0; mt < kSMt; ++mt)
#pragma unroll
        for (int nt = 0; nt < kSNt; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][nt][e] = dp[mt][nt][e] = 0.f;
#pragma unroll 1  // dK, dV, S, dP live (192 fp32 at d = 128): no second step's fragments ahead
      for (int ks = 0; ks < Traits::kKStepsS; ++ks) s_dp_step(ks, std::false_type{});
    }

    // ---- P and dS, masked by selects, → shared memory (16 bits) ---------------------------
    // s[mt][nt][2hh + e]: row s_m + 16mt + g + 8hh, key s_n + 8nt + 2t + e of the tiles.
    // kMasked false: the same values without the selects, for a tile where every pair is
    // visible (mask_free below).
    auto p_ds = [&](auto masked) {
      constexpr bool kMasked = decltype(masked)::value;
#pragma unroll
      for (int mt = 0; mt < kSMt; ++mt) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int row = s_m + 16 * mt + g + 8 * hh;
          const int limit = kv_limit<IsCausal>(i0 + row, p.n_q, p.n_kv) - j0;  // tile's keys
          const bool row_ok = i0 + row < p.n_q;
          const float l2 = lse[row] * kLog2e, dlt = delta[row];
#pragma unroll
          for (int nt = 0; nt < kSNt; ++nt) {
            const int key = s_n + 8 * nt + 2 * t;
            float pv[2], dsv[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int x = 2 * hh + e;
              if constexpr (kMasked) {
                const bool vis = row_ok && key + e < limit;
                const float pr = exp2_p<Traits::kFastExp2>(fmaf(s[mt][nt][x], p.scale_log2, -l2));
                pv[e] = vis ? pr : 0.f;
                dsv[e] = vis ? pv[e] * (dp[mt][nt][x] - dlt) : 0.f;
              } else {
                pv[e] = exp2_p<Traits::kFastExp2>(fmaf(s[mt][nt][x], p.scale_log2, -l2));
                dsv[e] = pv[e] * (dp[mt][nt][x] - dlt);
              }
            }
            const uint32_t at = row * kPRowBytes + 2 * key;
            st_shared_u32(sP + at, pack_pair<Element>(pv[0], pv[1]));
            st_shared_u32(sDs + at, pack_pair<Element>(dsv[0], dsv[1]));
          }
        }
      }
    };
    // kMaskFree: does this tile need no mask? Decided from i0, j0, N_q and N_kv alone, so the
    // same in every thread of the CTA (no divergence). It needs none when
    //   - every row is real: i0 + kBlockM <= N_q (row_ok holds for each row < kBlockM),
    //   - every key is real: j0 + kBlockN <= N_kv, and
    //   - no row misses a key of the tile: !tile_hides_a_pair, which, with the keys real, is
    //     kv_limit(i0) >= j0 + kBlockN (always so without causal: kv_limit = N_kv); kv_limit
    //     grows with the row, so every row's limit − j0 is >= kBlockN > key + e.
    // Then vis is true for every pair, each select returns its first operand, and the path
    // without them writes the same bits. Any tile with a tail row, a tail key or a causal
    // pair hidden takes the selects as before; the exact path (non-finite inputs) is taken
    // only on a tile that hides a pair, never on one found mask-free.
    const bool mask_free = Traits::kMaskFree && i0 + kBlockM <= p.n_q && j0 + kBlockN <= p.n_kv &&
                           !tile_hides_a_pair<IsCausal>(i0, j0, kBlockN, p.n_q, p.n_kv);
    if (mask_free)
      p_ds(std::false_type{});
    else
      p_ds(std::true_type{});

    // kDqBulk = 3: the engine has read the staged dQ before any warp stages this tile's.
    if constexpr (kBulk == 3)
      if (tid == 0) bulk_wait_read<0>();

    // P and dS are published. On a tile that hides a pair, the same barrier asks whether an
    // input holds an inf or a NaN (the exact path).
    bool exact = false;
    if (tile_hides_a_pair<IsCausal>(i0, j0, kBlockN, p.n_q, p.n_kv))  // the same in the CTA
      exact = __syncthreads_or(kv_nonfinite || tile_has_nonfinite<Traits>(sQs, Traits::kQBytes) ||
                               tile_has_nonfinite<Traits>(sdOs, Traits::kQBytes)) != 0;
    else
      __syncthreads();

    float* dq_rows = p.dq_acc + (deterministic() ? n_blk * p.q_elems : 0) +
                     ((b * p.heads_q + h) * p.n_q + i0) * kHeadDim;

    if (!exact) {
      // dV and dK, then dQ; with kDqFirst dQ first, so that its atomics drain while the
      // tensor cores do dV and dK.
      // ---- dV += Pᵀ dO, dK += dSᵀ Q: the warp's kKvKeys keys × kKvDims dims ----------------
      auto dkv = [&]() {
#pragma unroll
        for (int kk = 0; kk < Traits::kKStepsKv; ++kk) {  // 16 rows of the Q tile per step
          uint32_t pa[kKvMt][4], dsa[kKvMt][4];
#pragma unroll
          for (int mt = 0; mt < kKvMt; ++mt) {
            const uint32_t off = kk * 16 * kPRowBytes + 2 * (kv_n + 16 * mt) + pt_lane;
            ldmatrix_x4_trans(pa[mt], sP + off);
            ldmatrix_x4_trans(dsa[mt], sDs + off);
          }
#pragma unroll
          for (int dp2 = 0; dp2 < kKvNt / 2; ++dp2) {  // 16 dims (two n8 tiles) per ldmatrix
            uint32_t bo[4], bq[4];
            const uint32_t off = Traits::kQTma
                                     ? kk * 16 * Traits::kQPitch + (kv_q_lane ^ (32 * dp2))
                                     : kk * 16 * kRowBytes + (bt_lane ^ (32 * (kv_d / 16 + dp2)));
            ldmatrix_x4_trans(bo, sdOs + off);
            ldmatrix_x4_trans(bq, sQs + off);
#pragma unroll
            for (int mt = 0; mt < kKvMt; ++mt) {
              mma_m16n8k16<Element>(acc_dv[mt][2 * dp2], pa[mt], bo[0], bo[1]);
              mma_m16n8k16<Element>(acc_dv[mt][2 * dp2 + 1], pa[mt], bo[2], bo[3]);
              mma_m16n8k16<Element>(acc_dk[mt][2 * dp2], dsa[mt], bq[0], bq[1]);
              mma_m16n8k16<Element>(acc_dk[mt][2 * dp2 + 1], dsa[mt], bq[2], bq[3]);
            }
          }
        }
      };
      // ---- dQ_acc += dS K: the warp's kQRows rows × kQDims dims ----------------------------
      auto dq = [&]() {
        float acc_dq[kQMt][kQNt][4];
        // One k16 step (16 keys): kQMt + kQNt / 2 ldmatrix.x4 and 2 · kQMt · (kQNt / 2) mmas
        // (d = 128: 4 and 8). kZeroC: the first step, with C = 0, as in s_dp_step.
        auto dq_step = [&](int kk, auto zero_c) {
          constexpr bool kZeroC = decltype(zero_c)::value;
          auto mma = mma_k_step<kZeroC, Element>;
          uint32_t a[kQMt][4];
#pragma unroll
          for (int mt = 0; mt < kQMt; ++mt)
            ldmatrix_x4(a[mt], sDs + (q_m + 16 * mt) * kPRowBytes + 2 * 16 * kk + ds_lane);
#pragma unroll
          for (int dp2 = 0; dp2 < kQNt / 2; ++dp2) {
            uint32_t bk[4];
            ldmatrix_x4_trans(bk, sK + kk * 16 * kRowBytes + (bt_lane ^ (32 * (q_d / 16 + dp2))));
#pragma unroll
            for (int mt = 0; mt < kQMt; ++mt) {
              mma(acc_dq[mt][2 * dp2], a[mt], bk[0], bk[1]);
              mma(acc_dq[mt][2 * dp2 + 1], a[mt], bk[2], bk[3]);
            }
          }
        };
        if constexpr (Traits::kDqUnroll == Traits::kKStepsQ) {
          // kDqUnroll: the kKStepsQ steps (8) unrolled: no counter, compare or back-edge, each
          // step's ldmatrix addresses constants apart, and no zeroing of the 32 accumulators.
          dq_step(0, std::true_type{});
#pragma unroll
          for (int kk = 1; kk < Traits::kKStepsQ; ++kk) dq_step(kk, std::false_type{});
        } else {
#pragma unroll
          for (int mt = 0; mt < kQMt; ++mt)
#pragma unroll
            for (int nt = 0; nt < kQNt; ++nt)
#pragma unroll
              for (int e = 0; e < 4; ++e) acc_dq[mt][nt][e] = 0.f;
#pragma unroll 2
          for (int kk = 0; kk < Traits::kKStepsQ; ++kk)  // 16 keys per step
            dq_step(kk, std::false_type{});
        }
        // kDqBulk: the lane's pairs of dQ into the warp's staging area, the pair of m tile mt,
        // row half hh and n tile nt at address at(mt, hh, nt).
        auto stage_dq = [&](auto at) {
#pragma unroll
          for (int mt = 0; mt < kQMt; ++mt)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh)
#pragma unroll
              for (int nt = 0; nt < kQNt; ++nt)
                st_shared_f32x2(at(mt, hh, nt), acc_dq[mt][nt][2 * hh], acc_dq[mt][nt][2 * hh + 1]);
        };
        if (kBulk >= 2 && !deterministic()) {
          // kDqBulk = 2, 3: the warp's kQRows rows × 32 dims into its own 4 KB, 16-byte chunk c
          // of row r at chunk c ^ (r % 8) (the map's 128-byte swizzle; r % 8 = g). 2: then one
          // tensor reduction of the whole box by lane 0, which first waits until its reduction
          // of the last tile has read the area. 3: sent by thread 0 after the next barrier,
          // which waited for the read before the P/dS barrier (send_staged_dq).
          const uint32_t s_dq = s_dq_area + warp * Traits::kDqWarpBytes;
          if (kBulk == 2) {
            if (lane == 0) bulk_wait_read<0>();
            __syncwarp();
          }
          stage_dq([&](int mt, int hh, int nt) {
            return s_dq + (16 * mt + g + 8 * hh) * 128 + 16 * ((2 * nt + t / 2) ^ g) + 8 * (t % 2);
          });
          fence_proxy_async_shared();  // this lane's stores, before the engine reads them
          if (kBulk == 3) {            // sent by thread 0 after the next barrier
            pend_h = h;
            pend_i0 = i0;
          } else {
            __syncwarp();
            if (lane == 0) {
              send_box(warp, h, i0);
              bulk_commit();
            }
          }
        } else if (kBulk == 1 && !deterministic()) {
          // kDqBulk = 1: the warp's kQRows rows × kQDims dims into its own staging area; lane r
          // then adds row r with one bulk reduction. Before the stores, each lane waits until
          // its reduction of the last tile has read the area.
          const uint32_t s_dq = s0 + Traits::kOffDq + warp * Traits::kDqWarpBytes;
          bulk_wait_read<0>();
          __syncwarp();
          stage_dq([&](int mt, int hh, int nt) {
            return s_dq + (16 * mt + g + 8 * hh) * Traits::kDqRowBytes + 4 * (8 * nt + 2 * t);
          });
          fence_proxy_async_shared();  // this lane's stores, before the engine reads them
          __syncwarp();
          // Row q_m + lane: 16-byte aligned at both ends (dq_acc's rows are kHeadDim floats,
          // q_d a multiple of 32). Rows past N_q are not added.
          if (i0 + q_m + lane < p.n_q) {
            bulk_reduce_add_f32(dq_rows + (q_m + lane) * kHeadDim + q_d,
                                s_dq + lane * Traits::kDqRowBytes, Traits::kQDims * 4);
            bulk_commit();
          }
        } else {
          // Two neighbouring floats per atomic (sm_90), as the step's p2; deterministic: plain
          // stores into this CTA's slab. atomicAdd on a float2 is written by nvcc as
          // atom.global.add.v2.f32 with two result registers, which nothing reads: ptxas (sm_90)
          // emits a REDG for it, as for kDqRed's red.global.add.v2.f32 (no result): 16 per warp
          // and Q tile at either d, nothing returned from the L2.
#pragma unroll
          for (int mt = 0; mt < kQMt; ++mt)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
              const int row = q_m + 16 * mt + g + 8 * hh;
              if (i0 + row >= p.n_q) continue;
#pragma unroll
              for (int nt = 0; nt < kQNt; ++nt) {
                float* at = dq_rows + row * kHeadDim + q_d + 8 * nt + 2 * t;
                const float v0 = acc_dq[mt][nt][2 * hh], v1 = acc_dq[mt][nt][2 * hh + 1];
                if (deterministic()) {
                  *reinterpret_cast<float2*>(at) = make_float2(v0, v1);
                } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
                  if constexpr (Traits::kDqRed)
                    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(at), "f"(v0),
                                 "f"(v1)
                                 : "memory");
                  else
                    atomicAdd(reinterpret_cast<float2*>(at), make_float2(v0, v1));
#else
                  atomicAdd(at, v0);
                  atomicAdd(at + 1, v1);
#endif
                }
              }
            }
        }
      };
      if constexpr (Traits::kDqFirst) {
        dq();
        dkv();
      } else {
        dkv();
        dq();
      }
    } else {
      // ---- The exact path: every product pair by pair, hidden pairs skipped ----------------
      // Σ over the rows that see the key of w[row][key] · x[row][dim], for the lane's own
      // accumulators (keys kv_n + 16mt + g + 8hh, dims kv_d + 8nt + 2t, +1).
      auto exact_update = [&](float(&acc)[kKvMt][kKvNt][4], int w_offset, uint32_t s_x) {
        const Element* w = reinterpret_cast<const Element*>(smem + w_offset);
        const unsigned char* x = smem + (s_x - s0);
        // kQTma's boxes: the warp's dims kv_d … kv_d + kKvDims − 1 lie in box kv_d / 64, where
        // dim kv_d + 8nt + 2t is chunk nt of its row (q_swizzle, written out for this case).
        static_assert(Traits::kQBoxes == 1 || Traits::kKvDims == 64, "one box per warp");
        const unsigned char* x_box = x + (kv_d / 64) * Traits::kQBoxBytes + 4 * t;
#pragma unroll 1
        for (int r = 0; r < kBlockM && i0 + r < p.n_q; ++r) {
          const int limit = kv_limit<IsCausal>(i0 + r, p.n_q, p.n_kv) - j0;
#pragma unroll
          for (int mt = 0; mt < kKvMt; ++mt)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
              const int key = kv_n + 16 * mt + g + 8 * hh;
              if (key >= limit) continue;  // hidden from row r: skipped, never multiplied by 0
              const float wv = static_cast<float>(w[r * (kPRowBytes / 2) + key]);
#pragma unroll
              for (int nt = 0; nt < kKvNt; ++nt) {
                const Element* xe = reinterpret_cast<const Element*>(
                    Traits::kQBoxes == 1 ? x + Traits::element(r, kv_d + 8 * nt + 2 * t)
                                         : x_box + r * 128 + ((nt ^ (r % 8)) * 16));
                acc[mt][nt][2 * hh] = fmaf(wv, static_cast<float>(xe[0]), acc[mt][nt][2 * hh]);
                acc[mt][nt][2 * hh + 1] =
                    fmaf(wv, static_cast<float>(xe[1]), acc[mt][nt][2 * hh + 1]);
              }
            }
        }
      };
      exact_update(acc_dv, Traits::kOffP, sdOs);
      exact_update(acc_dk, Traits::kOffDs, sQs);
      exact_dq_2d<Traits, IsCausal>(p, smem, dq_rows, i0, j0);
    }
  }

  // kDqBulk = 3: the last tile's dQ, once every warp has staged it.
  if constexpr (kBulk == 3) {
    __syncthreads();
    send_staged_dq();
  }

  // ---- dK = scale · dK, dV: through shared memory (the K and V tiles, once every warp is
  // done reading them), then 16-byte stores of whole rows ------------------------------------
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < kKvMt; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = kv_n + 16 * mt + g + 8 * hh;
#pragma unroll
      for (int nt = 0; nt < kKvNt; ++nt) {  // dims kv_d + 8nt + 2t, +1
        const int chunk = kv_d / 8 + nt;
        st_shared_u32(sK + Traits::swizzle(row, chunk) + 4 * t,
                      pack_pair<Element>(p.scale * acc_dk[mt][nt][2 * hh],
                                         p.scale * acc_dk[mt][nt][2 * hh + 1]));
        st_shared_u32(sV + Traits::swizzle(row, chunk) + 4 * t,
                      pack_pair<Element>(acc_dv[mt][nt][2 * hh], acc_dv[mt][nt][2 * hh + 1]));
      }
    }
  __syncthreads();  // a row's two halves come from two warps
  store_dk_dv<Traits, kBlockN>(p, kv_off, j0, 0, tid, Traits::kNumThreads, sK, sV);
  // kDqBulk: the CTA's shared memory must outlive the reductions that read it (their staging
  // areas are apart from K and V, so dK and dV were stored while the last ones ran).
  if (kBulk) bulk_wait<0>();
}

/// \brief The main kernel of Bwd2dTraits `Traits` (its WarpLayout), for launch_flash_bwd_main
/// (flash_bwd_kernel.cuh).
template <class Traits, bool IsCausal, bool Deterministic>
constexpr auto main_kernel(WarpLayout2d) {
  return flash_bwd_2d_kernel<Traits, IsCausal, Deterministic>;
}

}  // namespace fa::step11
