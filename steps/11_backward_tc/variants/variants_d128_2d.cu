// variants_d128_2d.cu — the rows "fa2", "fa2q", "fa2m", "fa2u", "fa2mc" and "fa2uf" of step
// 11's backward table (bin/variants_11): the kernel with FlashAttention-2's two-dimensional
// warp layouts (flash_bwd_2d.cuh, the step's at d = 128 in fa2uf's switches) and its switches,
// bf16, d = 128, described as a Variant by make_variant.cuh's make_variant_2d.
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
}

}  // namespace fa::step11
