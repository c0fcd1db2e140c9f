// variants_d128_2d.cu — the rows "fa2", "fa2q", "fa2m", "fa2u", "fa2mc", "fa2uf", "fa2ufz",
// "fa2ufzr", "fa2ufzu", "fa2ufzru", "fa2ufzb", "fa2ufzub", "fa2ufzut", "fa2ufzuc", "fa2ufzuch" and
// "fa2ufzucq" of step 11's backward table (bin/variants_11): the kernel with FlashAttention-2's
// two-dimensional warp layouts (flash_bwd_2d.cuh, the step's at d = 128 in fa2ufzucq's switches)
// and its switches, bf16, d = 128, described as a Variant by make_variant.cuh's make_variant_2d.
#include <cuda_bf16.h>

#include <string>
#include <utility>
#include <vector>

#include "make_variant.cuh"

namespace fa::step11 {

void add_d128_2d_variants(std::vector<Variant>& out) {
  // fa2: FlashAttention-2's warp layouts at d = 128 (flash_bwd_2d.cuh), against m64b1p2 (the
  // step's configuration: 64 × 128 tiles, one barrier, v2 atomics). Prediction, written
  // before any measurement. Shared memory per warp and Q tile: 76 KB for 1.31 MFLOP, 16.8
  // FLOPs per byte against m64b1p2's 13.6 (flash_bwd_2d.cuh and kernel_traits.cuh count
  // both): the shared-memory cap rises by 16.8 / 13.6 = 1.24×, from ~1,740 to ~2,150 FLOPs per
  // clock per SM, close to mma.sync's ~2,500. m64b1p2 runs at ~251 (N = 4096) and ~259
  // (N = 16384) TFLOP/s, non-causal; at the same share of its cap this row would run at
  // ~310 and ~320. Against that: a second barrier per Q tile (b1 bought 2–3% by removing
  // one at 32-row tiles), P and dS stored and read back before dV, dK and dQ can start (the
  // warps wait at the barrier for the slowest one's exp2 and stores), and the k loop of S
  // and dP not unrolled (128 + 64 accumulators live). Predicted, non-causal: 265–310
  // TFLOP/s at N = 4096 (1.05–1.23× m64b1p2), 270–320 at N = 16384 (1.05–1.24×); causal
  // the same ratios. Below 1.0× m64b1p2 would mean the barriers and the P, dS round trip cost
  // more than the fragment loads they save. Measured (docs/results/h200-variants-11-5192ee8.md):
  // non-causal 0.98× m64b1p2 at N = 4096, 0.97× at 16384 (missed); causal 1.09–1.12×.
  out.push_back(make_variant_2d<Bwd2dTraits<128, __nv_bfloat16>>(
      "fa2", "FlashAttention-2's 2-D warp layouts, P and dS through shared memory"));
  // fa2q: fa2 with each Q tile's dQ (and its v2 atomics) computed before dV and dK, as
  // FlashAttention-2 orders them, instead of after: the reductions are then issued in the
  // middle of the tile and drain behind dV's and dK's 64 mmas per warp, not just before the
  // next tile's barrier; but they share the memory pipe with dV's and dK's ldmatrix. The same
  // registers and shared memory. Predicted −3% to +5% against fa2 at N = 4096 and 16384.
  // Measured (the same file): 0.99× fa2 non-causal, 0.96–0.97× causal.
  out.push_back(make_variant_2d<Bwd2dTraits<128, __nv_bfloat16, true>>(
      "fa2q", "fa2 with dQ (and its atomics) before dV and dK"));
  // Bwd2dTraits<kHeadDim, Element, kDqFirst, kMaskFree, kSUnroll, kDetCompiled, kTileCounter>
  //
  // The rows below remove instructions that fa2 issues and FlashAttention-2's backward does
  // not. Nsight Compute on both main kernels (B = 4, H = 16, N = 4096, non-causal): the same
  // HMMA, LDSM, STS, F2FP and MUFU counts, but 1.51 G warp instructions against 1.07 G, about
  // 1,440 per warp and Q tile against 1,020 (2,048 CTAs × 64 Q tiles × 8 warps = 1.05 M warp
  // tiles). The counts below, per warp and Q tile, are from the code and from ptxas's output
  // for sm_90 (straight-line code executed once per tile, the loops times their trips).
  //
  // fa2m: a Q tile that needs no mask (non-causal, or causal and wholly visible, with no tail
  // row or key: flash_bwd_2d.cuh, mask_free) writes P and dS without the visibility test
  // and the two selects per element. fa2's P and dS code is ~425 instructions per warp and
  // tile, ~300 without them: 64 FSEL, ~46 ISETP, ~15 adds of the key and row limits, i.e.
  // ~125 of fa2's ~1,440 (−9%), and in the phase that every warp must finish before the
  // barrier after P and dS. Mask-free tiles: all of them without causal at N = 4096 and
  // 16384; causal, all but the two diagonal tiles of each CTA: 94% of the tiles at N = 4096,
  // 98% at 16384. Issue slots are ~30% busy, so the saving shows only where one warp's stream
  // is the critical path (P and dS before the barrier). Predicted against fa2: 1.02–1.06×
  // non-causal, 1.02–1.05× causal, at N = 4096 and 16384. Below 1.0× would mean the second
  // copy of the P and dS code (~300 instructions) costs more in instruction cache than it
  // saves.
  out.push_back(make_variant_2d<Bwd2dTraits<128, __nv_bfloat16, false, true>>(
      "fa2m", "fa2 with no selects on the Q tiles that need no mask"));
  // fa2u: fa2m with the k loop of S and dP (8 steps) unrolled by 2, the first step's 16 mmas
  // taking C = 0 (RZ): the 64 accumulators are no longer zeroed (32 CS2R per warp and tile,
  // gone from ptxas's output), and 3 trips of 2 steps replace 8 of one (fa2's trip: 16 HMMA,
  // 8 LDSM and 11 others: counter, compare, branch, the swizzle's XORs and adds of the 8
  // ldmatrix addresses): ~120 → ~65 around the 128 mmas, ~55 fewer. Fully unrolled, the
  // non-causal kernel spills (255 registers, 12 bytes stored and loaded per thread), so 2.
  // In all ~180 fewer than fa2 (−13%). Predicted against fa2: 1.03–1.08× non-causal and
  // causal, N = 4096 and 16384.
  out.push_back(make_variant_2d<Bwd2dTraits<128, __nv_bfloat16, false, true, 2>>(
      "fa2u", "fa2m with the S/dP k loop unrolled by 2, its first mmas taking C = 0"));
  // fa2mc: fa2m with two fixes of per-tile bookkeeping (the S and dP loop as in fa2).
  //  - kDetCompiled: fa2 reads p.deterministic at run time, and ptxas if-converts the choice
  //    at each of a warp's 16 dQ pairs per tile: a predicated STG (issued with its predicate
  //    off when not deterministic), a predicated branch around the REDG, and the predicates
  //    and addresses of both: 188 instructions per warp and tile between the last dQ mma and
  //    the last REDG. These are the 17 M STG of the profile (16 per warp tile × 1.05 M, the
  //    plain stores of the deterministic mode, never executing in the timed runs). With the
  //    mode a template argument, 57 (16 REDG, the row checks and addresses): ~130 fewer.
  //  - kTileCounter: the tile's head and first row by a compare and an add, not by dividing
  //    the visit number by num_m twice per tile (this tile and the next one's copies): ~40.
  // In all ~295 fewer than fa2 (−20%), the dQ part right before the next tile's barrier.
  // Predicted against fa2: 1.05–1.10× non-causal, 1.04–1.09× causal, N = 4096 and 16384.
  out.push_back(make_variant_2d<Bwd2dTraits<128, __nv_bfloat16, false, true, 1, true, true>>(
      "fa2mc", "fa2m with the dQ store kind compiled per mode and the visited tile by counters"));
  // fa2uf: fa2mc with the S and dP loop fully unrolled (the first step with C = 0), which
  // fits in 255 registers without a spill once kDetCompiled and kTileCounter have freed a
  // few (fa2m fully unrolled spills). The 8 steps' 128 mmas and 64 ldmatrix carry ~34 other
  // instructions, against fa2's 88 and 32 CS2R: ~85 fewer than fa2mc, ~380 fewer than fa2
  // (−26%: ~1,060 per warp and tile, near FlashAttention-2's ~1,020). Predicted against fa2:
  // 1.06–1.14× non-causal, 1.05–1.12× causal, N = 4096 and 16384; FlashAttention-2 is 1.25×
  // fa2, so the rest of the gap would lie elsewhere than in the instruction count.
  out.push_back(make_variant_2d<Bwd2dTraits<128, __nv_bfloat16, false, true, 8, true, true>>(
      "fa2uf", "fa2mc with the S/dP k loop fully unrolled, its first mmas taking C = 0"));
  // Bwd2dTraits<…, kTileCounter, kFastExp2>
  //
  // fa2ufz: fa2uf + kFastExp2: P's exponentials by ex2.approx.ftz.f32, as FlashAttention-2's
  // fast-math build computes them, instead of exp2f, which keeps subnormal results at 3
  // instructions more per call (kernel_traits.cuh, kFastExp2). A lane computes 32 per Q tile
  // (a warp's 32 × 32 of S): 96 fewer per warp and tile, ~9% of fa2uf's ~1,060, leaving
  // ~960, below FlashAttention-2's ~1,020 in count. They lie in the P and dS phase, which
  // every warp must finish before the barrier after it, but they are not the 32 MUFU.EX2,
  // which stay (fa2's MUFU count already matched FlashAttention-2's): 8 warps × 96 over 4
  // schedulers is ~190 of a tile's ~10,000 cycles (~2%) at most. Predicted against fa2uf:
  // 1.00–1.03× non-causal and causal, N = 4096 and 16384. ptxas (sm_90, CUDA 13.0): 249–255
  // registers over the four kernels, no spill, each as fa2uf's; each kernel's code 192
  // instructions shorter (2,216 → 2,024 non-causal).
  out.push_back(make_variant_2d<Bwd2dTraits<128, __nv_bfloat16, false, true, 8, true, true, true>>(
      "fa2ufz", "fa2uf with P's exp2 flushing subnormals (ex2.approx.ftz)"));
  // Bwd2dTraits<…, kQWarpsM, kDqRed, kDqUnroll, kDqBulk> (the last three false, 2 and 0 by
  // default)
  //
  // The rows below test two readings of Nsight Compute at N = 16384 (docs/results/
  // h200-ncu-backward-16k.txt): fa2ufz executes 6% fewer instructions than FlashAttention-2's
  // backward but takes 10% more cycles (IPC 0.89 against 1.04), with 71.6 M branches against
  // 12.7 M (~17 per warp and Q tile against ~3) and the L2 at 39% of its peak against 26%.
  // Counts below from the code and from ptxas's output (sm_90, CUDA 13.0; opcodes read from
  // the cubin's code sections).
  //
  // fa2ufzr: fa2ufz with each dQ pair added by inline PTX red.global.add.v2.f32 (kDqRed)
  // instead of atomicAdd on a float2, which nvcc writes as atom.global.add.v2.f32 with two
  // result registers: were it a returning atomic, each of a warp's 16 per Q tile would bring
  // 256 bytes back from the L2 (4 KB per warp and tile, as much as it sends). It is not: ptxas
  // compiles the unused-result atom to the REDG it makes of the inline red (the same opcode in
  // a one-line kernel; fa2's profile, docs/results/h200-ncu-backward-fa2.txt, counts 16 REDG
  // per warp tile and no ATOMG), and this row's code is fa2ufz's byte for byte in three of
  // the four main kernels (non-causal in both modes, causal deterministic); the causal
  // non-deterministic one has the same 3,592 instructions (one opcode apart) in another
  // order. Registers as fa2ufz's: 253 non-causal, 254 causal, no spill. The same 4 KB per
  // warp and tile to the L2 either way, nothing back. Predicted against fa2ufz: 0.99–1.01×
  // at N = 4096 and 16384, non-causal and causal. Outside that range non-causal: the spread
  // between two rows of the same code (the table's resolution); causal: the other schedule.
  // Neither would be return traffic, which neither form has.
  // Measured (docs/results/h200-variants-11-1c60542.md, N = 1024, 4096, 16384): 1.00× fa2ufz
  // non-causal and causal, as predicted: the REDGs were REDGs already.
  out.push_back(
      make_variant_2d<
          Bwd2dTraits<128, __nv_bfloat16, false, true, 8, true, true, true, 64, 2, 4, 2, true>>(
          "fa2ufzr", "fa2ufz with dQ added by red.global.add.v2.f32 (inline PTX)"));
  // fa2ufzu: fa2ufz with dQ's k loop (kBlockN / 16 = 8 steps) fully unrolled (kDqUnroll),
  // its first step's 16 mmas taking C = 0 as kSUnroll's do. fa2ufz runs it as a loop
  // unrolled by 2: 16 CS2R zeroing the 32 accumulators, then 4 trips of 33 instructions
  // (16 HMMA, 8 LDSM, 7 for the counter, the compare and the ldmatrix addresses, a NOP, the
  // back-edge): ~150 per warp and Q tile. Unrolled, the 64 HMMA and 32 LDSM with their
  // addresses constants apart and nothing else: ~55 fewer (~6% of fa2ufz's ~960), 4 of them
  // branches (of the ~17 per warp and tile counted), and the later steps' ldmatrix free to
  // issue ahead of the earlier steps' mmas. The code grows 2,024 → 2,064 instructions
  // non-causal. Registers 252 non-causal (fa2ufz 253), 255 causal, no spill in the timed
  // (non-deterministic) kernels; the causal deterministic one, run only by the check, spills
  // 8 bytes (255 registers). Past rows removing as many instructions elsewhere: fa2uf (~85
  // fewer in S and dP) ran 1.004–1.008× fa2mc, fa2ufz (96 fewer in P) 1.01–1.02× fa2uf
  // (docs/results/h200-variants-11-c6aff73.md, N = 1024 to 16384). Predicted against
  // fa2ufz: 1.00–1.02× at N = 4096 and 16384, non-causal and causal. Below 0.99×: the longer code
  // or ptxas's new schedule costs more than the instructions save; above 1.03×: the dQ phase was
  // bound by the loop's latency (each pair of steps' ldmatrix waited for before its mmas), not by
  // its instruction count.
  // Measured (h200-variants-11-1c60542.md): 1.04–1.05× fa2ufz non-causal, 1.01–1.02× causal,
  // and again in h200-variants-11-343a03e.md: above the 1.03 named, so the dQ phase was bound
  // by the loop's latency. The step's at d = 128 at commit 24ef2a1 (fa2ufzuc since).
  out.push_back(
      make_variant_2d<
          Bwd2dTraits<128, __nv_bfloat16, false, true, 8, true, true, true, 64, 2, 4, 2, false, 8>>(
          "fa2ufzu", "fa2ufz with the dQ k loop fully unrolled, its first mmas taking C = 0"));
  // fa2ufzru: fa2ufzr and fa2ufzu together. kDqRed changes nothing in three of the four
  // kernels (the code fa2ufzu's byte for byte); the causal non-deterministic one is
  // scheduled otherwise (3,640 instructions against fa2ufzu's 3,648). Registers and spills
  // as fa2ufzu's (252 non-causal, 255 causal; 8 bytes in the causal deterministic kernel
  // only). Predicted: fa2ufzu's time within ±1%, so 1.00–1.02× fa2ufz.
  // Measured (h200-variants-11-1c60542.md): fa2ufzu's times within 0.2%, as predicted.
  out.push_back(
      make_variant_2d<
          Bwd2dTraits<128, __nv_bfloat16, false, true, 8, true, true, true, 64, 2, 4, 2, true, 8>>(
          "fa2ufzru", "fa2ufzr and fa2ufzu together"));
  // fa2ufzb: fa2ufz with dQ added by bulk reductions from shared memory (kDqBulk). Measured
  // first (ncu, N = 16384, docs/results/h200-ncu-backward-16k-1c60542.txt): of fa2ufz's warp
  // stall samples, 10.5% sit on three IMADs that rewrite the address registers of the REDG
  // batches before them (long scoreboard: a REDG's registers stay held until the L1 has sent
  // its requests, and each REDG of a warp covers 8 rows × 32 bytes, 8 requests of one
  // sector: 537 M requests to the L2 against FlashAttention-2's 134 M for the same sectors),
  // and 5.8% on the barrier at the top of the next tile, where the other warps wait for
  // those. With kDqBulk a warp's dQ goes to its own 36 KB / 8 staging area (16 conflict-free
  // STS.64 per lane, as many instructions as the REDGs), and lane r sends row r (128 bytes,
  // one L2 request of 4 sectors) by one bulk reduction: no register waits on the L1, a
  // quarter of the requests. Shared memory 163 → 199 KB (one CTA per SM either way).
  // Predicted against fa2ufz: 1.02–1.06× at N = 4096 and 16384 non-causal, 1.01–1.05×
  // causal. Below 1.0×: the staging stores and the wait for the last tile's reduction to read
  // its area cost more than the REDGs' waits (the step's 1-D kernel found its kDqBulk level
  // at d = 128 and slower at d = 64, but its profile was not the REDGs').
  // Measured (h200-variants-11-343a03e.md): 0.96× fa2ufz non-causal, 0.91–0.92× causal: the
  // prediction's sign wrong. The profile (h200-ncu-backward-16k-343a03e.txt) shows why: the 32
  // lanes' bulk reductions are issued one lane at a time (their addresses are uniform registers:
  // ELECT, R2UR, UBLKRED, BRA.U.ANY, 134 M trips), 18% of the stall samples.
  out.push_back(make_variant_2d<Bwd2dTraits<128, __nv_bfloat16, false, true, 8, true, true, true,
                                            64, 2, 4, 2, false, 2, 1>>(
      "fa2ufzb", "fa2ufz with dQ added by bulk reductions from shared memory (sm_90)"));
  // fa2ufzub: fa2ufzu (dQ's k loop unrolled) with kDqBulk. Predicted against fa2ufzu: as
  // fa2ufzb against fa2ufz (1.02–1.06× non-causal, 1.01–1.05× causal), the two changes
  // touching different parts of the dQ phase (its loop, its reductions).
  // Measured (h200-variants-11-343a03e.md): 0.93–0.94× fa2ufzu non-causal, 0.93–0.95× causal
  // (fa2ufzb's reason).
  out.push_back(make_variant_2d<Bwd2dTraits<128, __nv_bfloat16, false, true, 8, true, true, true,
                                            64, 2, 4, 2, false, 8, 1>>(
      "fa2ufzub", "fa2ufzu with dQ added by bulk reductions from shared memory (sm_90)"));
  // fa2ufzut: fa2ufzu (the step's at d = 128) with kDqBulk = 2: the warp's 32 × 32 of dQ staged
  // in the 128-byte swizzle (16 STS.64 per lane, conflict-free) and sent by ONE tensor
  // reduction from lane 0 (a tensor map of dq_acc). Measured first: fa2ufzb and fa2ufzub lost
  // 3-8% (docs/results/h200-variants-11-343a03e.md); their profile (h200-ncu-backward-16k-
  // 343a03e.txt) shows why: a bulk reduction's operands are uniform registers, so ptxas issues
  // the 32 lanes' reductions one lane at a time (ELECT, R2UR, UBLKRED, BRA.U.ANY: 134 M
  // trips, 18% of the stall samples), where the REDGs' waits were 10.5%. One reduction per
  // warp removes that loop and keeps what kDqBulk = 1 bought (no register held by the L1,
  // 128-byte requests). Shared memory 163 → 196 KB. Predicted against fa2ufzu: 1.02–1.06× at
  // N = 4096 and 16384 non-causal, 1.01–1.04× causal; below 1.0×: the staging stores and the
  // engine's reads of shared memory cost more than the REDGs' waits.
  // Measured (h200-variants-11-6b33d03.md): 1.01–1.02× fa2ufzu non-causal, 1.01× causal, the
  // low end of the prediction or under it; 1.01× again in h200-variants-11-d91d3f9.md. Its
  // profile (h200-ncu-backward-16k-6b33d03.txt): the REDGs' waits gone, and 7.4% of the stall
  // samples on the wait at the top of the next tile (fa2ufzuc says why).
  out.push_back(make_variant_2d<Bwd2dTraits<128, __nv_bfloat16, false, true, 8, true, true, true,
                                            64, 2, 4, 2, false, 8, 2>>(
      "fa2ufzut", "fa2ufzu with dQ added by one tensor reduction per warp (sm_90)"));
  // fa2ufzuc: fa2ufzu with kDqBulk = 3: staged as fa2ufzut, but the 8 boxes sent by thread 0
  // after the next tile's first barrier. Measured first (h200-variants-11-6b33d03.md):
  // fa2ufzut ran 1.01–1.02× fa2ufzu, and its profile (h200-ncu-backward-16k-6b33d03.txt) puts
  // 7.4% of the stall samples on the wait for the cp.async copies at the top of the next tile
  // (long scoreboard; 0.1% in fa2ufz): in SASS that wait (DEPBAR on SB0) also waits for the
  // warp's own bulk group, issued just before, to complete. Sent by one thread a tile later,
  // only warp 0 waits, and for a reduction a whole tile old. Predicted against fa2ufzu:
  // 1.03–1.07× at N = 4096 and 16384 non-causal, 1.02–1.05× causal.
  // Measured (h200-variants-11-d91d3f9.md): 1.04× fa2ufzu at every length, non-causal and
  // causal, inside the prediction. The step's at d = 128 (BwdConfig<128>, kernel_traits.cuh)
  // from commit d91d3f9, with the grid's order and the TMA's copies (fa2ufzucq) added since.
  out.push_back(make_variant_2d<Bwd2dTraits<128, __nv_bfloat16, false, true, 8, true, true, true,
                                            64, 2, 4, 2, false, 8, 3>>(
      "fa2ufzuc", "fa2ufzut with the boxes sent by one thread after the next tile's barrier"));
  // fa2ufzuch: fa2ufzuc with kHeavyFirst, the grid (B · H, key tiles): every head's first K/V
  // tile, which sees the most Q tiles under the mask, launched before any head's second. Nsight
  // Compute at N = 16384 (h200-ncu-backward-16k-2b799ae.txt): fa2ufzuc's main kernel takes 0.510
  // of its non-causal time under the mask, FlashAttention-2's 0.487, for the same share of
  // instructions (0.546 and 0.547). A list schedule of the grid's CTAs over 132 SMs, each CTA
  // as long as its Q tiles plus one (scripts/grid_order.py), puts the last CTA's end 0.7%
  // (N = 16384), 5.8% (8192), 6.9% (4096) and 7.0% (1024) past the even share in the present
  // order, 0.2-0.5% heavy first (the 1-D kernel's row hf, 32-row Q tiles, measured +4% and +6%
  // at 1024 and 4096, level at 16384, where the same schedule with 32-row tiles gives about
  // 6.9%, 6.9% and 0.8% in its order). Predicted against fa2ufzuc: causal 1.03-1.06× at
  // N = 1024, 4096 and 8192, 1.00-1.01× at 16384; non-causal 0.99-1.01× (only the L2's reuse
  // of Q and dO changes: the CTAs running together now span many heads).
  // Measured (h200-variants-11-b59f96c.md): causal 1.01×, 1.06×, 1.05× and 1.01× at N = 1024,
  // 4096, 8192 and 16384, non-causal 0.98×, 1.00×, 1.00×, 1.00×: held from 4096 up, short at
  // 1024 (with 8 key tiles per head the heads' Q and dO are reread by CTAs far apart in time,
  // which the non-causal loss there shows too). The step runs it under the causal mask only
  // (kHeavyFirst = 2, BwdConfig<128>).
  out.push_back(make_variant_2d<Bwd2dTraits<128, __nv_bfloat16, false, true, 8, true, true, true,
                                            64, 2, 4, 2, false, 8, 3, 1>>(
      "fa2ufzuch", "fa2ufzuc with every head's first K/V tile launched first"));
  // fa2ufzucq: the step's kernel at d = 128 (fa2ufzuc, heavy first under the mask only, as
  // BwdConfig<128> runs it) with kQTma: each Q tile's Q and dO copied by the TMA, thread 0
  // asking for two boxes of 64 dims × 64 rows of each, instead of 8 cp.async per thread whose
  // address registers the code after them rewrites. Nsight Compute at N = 16384
  // (h200-ncu-backward-16k-2b799ae.txt): 6.4% of the causal kernel's stall samples (4.3%
  // without the mask) on the instruction after those copies, waiting for them to leave; ours
  // took 0.510 of its non-causal time under the mask where FlashAttention-2's took 0.487. Per
  // warp and Q tile ~25 instructions fewer (8 LDGSTS, their 64-bit addresses and row checks)
  // of ~1,000, the mbarrier wait added; Q and dO in two boxes of 128-byte rows (q_swizzle),
  // still conflict-free for ldmatrix. Predicted against the registered step, N = 4096 and 16384:
  // 1.00–1.04× causal, 1.00–1.03× non-causal; below 1.0× would mean one thread's copies reach
  // shared memory later than 256 threads' did (the wait at the top of the tile grows).
  out.push_back(make_variant_2d<Bwd2dTraits<128, __nv_bfloat16, false, true, 8, true, true, true,
                                            64, 2, 4, 2, false, 8, 3, 2, true>>(
      "fa2ufzucq", "the step's kernel with Q and dO copied by the TMA (sm_90)"));
}

}  // namespace fa::step11
