// variants_d64.cu — step 11's kernels at head dim 64 in the configurations of the backward
// table (bin/variants_11). The step itself runs BwdConfig<64, ·> (kernel_traits.cuh). Each
// row changes one thing against "r"; the prediction, written before measuring, is beside it
// (kernel_traits.cuh, "What limits it", has the arithmetic behind them).
#include <cuda_bf16.h>

#include <type_traits>

#include "make_variant.cuh"

namespace fa::step11 {

void add_d64_variants(std::vector<Variant>& out) {
  using E = __nv_bfloat16;
  // BwdTraits<d, M, N, E, CTAs/SM, 1 barrier, v2 dQ, stagger, heavy first, v4 dQ, bulk dQ>
  // r: the configuration first measured (kTunedBwd = false, kernel_traits.cuh): the baseline.
  out.push_back(make_variant<BwdTraits<64, 64, 128, E, 1, false, false, false>>(
      "r", "first measured (BwdConfig<64> with kTunedBwd = false)"));
  // m32: half the rows per Q tile. Predicted 5–15% slower: twice the barriers and L/D loads
  // per FLOP, each K and V fragment feeding half the mmas.
  out.push_back(make_variant<BwdTraits<64, 32, 128, E, 1, false, false, false>>(
      "m32", "32-row Q tiles (more, smaller tiles)"));
  // n64: 64 keys per CTA, 4 warps, two CTAs per SM (the same 8 warps per SM, but one CTA's
  // barrier no longer stops the other). Predicted level to 5% slower: twice the dQ atomics
  // per FLOP (kBlockN halves) against barriers overlapped by the other CTA.
  out.push_back(make_variant<BwdTraits<64, 64, 64, E, 2, false, false, false>>(
      "n64", "64 keys per CTA, 4 warps, 2 CTAs per SM"));
  // b1: one barrier per Q tile (dSᵀ double-buffered). Predicted 3–8% faster: of ~7,000 clocks
  // per Q tile one barrier's drain (the slowest warp's lag, a few hundred clocks) goes.
  out.push_back(make_variant<BwdTraits<64, 64, 128, E, 1, true, false, false>>(
      "b1", "one barrier per Q tile (dSᵀ double-buffered)"));
  // p2: dQ atomics as red.global.add.v2.f32. Predicted 0–8% faster: half the atomic
  // instructions and L2 requests for the same bytes; more at N = 16384 where more CTAs add.
  out.push_back(make_variant<BwdTraits<64, 64, 128, E, 1, false, true, false>>(
      "p2", "dQ atomics two floats at a time (v2)"));
  // s: CTA n starts n/⌈N/128⌉ of the way round its Q tiles. Predicted 0–5% faster (fewer
  // atomics to the same dQ lines at once), or level if the L2 does not serialise them.
  out.push_back(make_variant<BwdTraits<64, 64, 128, E, 1, false, false, true>>(
      "s", "staggered Q tile order per CTA"));
  // all: b1 + p2 + s. Predicted 5–15% faster than r: the three gains, roughly additive.
  out.push_back(make_variant<BwdTraits<64, 64, 128, E, 1, true, true, true>>("all", "b1 + p2 + s"));
  // b1p2: the two analytic wins without the stagger.
  out.push_back(make_variant<BwdTraits<64, 64, 128, E, 1, true, true, false>>("b1p2", "b1 + p2"));
  // m128b1p2: 128-row Q tiles (FlashAttention-2's at d = 64) + b1 + p2, 200 KB of shared
  // memory. Its non-causal kernel spills 32 bytes (ptxas, CUDA 13.0): a data point, not a
  // candidate. Predicted 0–10% faster than b1p2 if the spill stays off the inner loops.
  out.push_back(make_variant<BwdTraits<64, 128, 128, E, 1, true, true, false>>(
      "m128b1p2", "128-row Q tiles + b1 + p2 (spills 32 B)"));
  // b1p4: the registered configuration (b1p2) with dQ's atomics four floats at a time
  // (red.global.add.v4.f32) after one exchange between neighbour lanes. Predicted 2–8% faster
  // than b1p2 at N >= 4096 (half its atomic instructions, the same bytes), 0–5% at N = 1024.
  out.push_back(make_variant<BwdTraits<64, 64, 128, E, 1, true, false, false, false, true>>(
      "b1p4", "b1 + dQ atomics four floats at a time (v4)"));
  // b1p2b: the registered configuration with dQ added by the copy engine (each warp's 16 × 32
  // part of the tile through 20 KB of shared memory, one 128-byte bulk reduction per row; the
  // deterministic mode keeps p2's stores). Predicted −5% to +10% against b1p2, as m64b1p2b
  // at d = 128: fewer issued instructions against more shared-memory traffic, and 128-byte
  // reductions are the engine's smallest useful size.
  out.push_back(make_variant<BwdTraits<64, 64, 128, E, 1, true, true, false, false, false, true>>(
      "b1p2b", "b1 + dQ by bulk reductions from shared memory"));
  // BwdTraits<…, bulk dQ, mask-free tiles, deterministic mode compiled>
  //
  // The two rows below remove instructions from each warp's stream per Q tile, as fa2m and
  // fa2mc do in the 2-D kernel (variants_d128_2d.cu). Counts per warp and Q tile from ptxas's
  // output for sm_90 (CUDA 13.0; SASS instructions are 16 bytes: the size of each kernel's
  // code, compiled with only the masked or only the unmasked path): b1p2's non-causal kernel
  // is 1,496 instructions, 1,080 of them the Q tile loop, whose Sᵀ and dQ k loops run 2 and 4
  // trips: ~1,200 per tile (160 mma, 96 ldmatrix). Issue: 8 warps × 1,200 over 4 schedulers is
  // ~2,400 cycles of a tile's ~6,000 at the measured 227 TFLOP/s (N = 4096), ~40% busy.
  //
  // b1p2m: b1p2 + kMaskFree. A Q tile that needs no mask (no tail row or key, no key of the
  // CTA hidden from a row: flash_bwd_kernel.cuh, mask_free) computes Pᵀ and dSᵀ without the
  // visibility test and its selects (a lane holds 32 elements: 2 keys × 16 rows): 112
  // instructions fewer non-causal (64 FSEL, the row checks and predicate logic: −9%), 176
  // causal (the 16 rows' key limits too: −15%). Mask-free tiles: every tile without causal at
  // N = 4096 and 16384; causal, all but the two 64-row tiles on each CTA's diagonal: 94% of
  // the tiles at N = 4096, 98% at 16384. They lie between each warp's Sᵀ, dPᵀ and its dV, dK
  // mmas, before the barrier that publishes dSᵀ; with issue ~40% busy, only part of the ~220
  // (non-causal) to ~350 (causal) issue cycles per tile saved is time. Predicted against
  // b1p2: 1.01–1.04× non-causal, 1.01–1.05× causal, at N = 4096 and 16384. Below 1.0× would
  // mean the second copy of the code costs more (instruction cache, scheduling) than it saves.
  out.push_back(
      make_variant<BwdTraits<64, 64, 128, E, 1, true, true, false, false, false, false, true>>(
          "b1p2m", "b1p2 with no selects on the Q tiles that need no mask"));
  // b1p2mc: b1p2m + kDetCompiled. With p.deterministic read at run time, each of the warp's 8
  // dQ pairs per Q tile (4 n8 tiles × rows g and g + 8) carries a plain store predicated on
  // the mode beside its reduction; compiled per mode, 32 instructions fewer per tile
  // non-causal, 24 causal (~4 a pair: fewer than the 2-D kernel's ~8, 188 → 57 for its 16,
  // docs/results/h200-ncu-backward-fa2.txt), after the tile's only barrier and before the next
  // tile's Sᵀ. In all 144 fewer than b1p2 non-causal (−12%), 200 causal on mask-free tiles
  // (−16%). Predicted against b1p2: 1.01–1.05× non-causal, 1.02–1.06× causal, N = 4096 and
  // 16384.
  out.push_back(make_variant<
                BwdTraits<64, 64, 128, E, 1, true, true, false, false, false, false, true, true>>(
      "b1p2mc", "b1p2m with the dQ store kind compiled per mode"));
  // BwdTraits<…, deterministic mode compiled, exp2 without subnormals>
  //
  // b1p2mcz: b1p2mc + kFastExp2: Pᵀ's exponentials by ex2.approx.ftz.f32 instead of exp2f,
  // which (compiled without --use_fast_math) keeps subnormal results at 3 instructions more
  // per call (kernel_traits.cuh, kFastExp2). A lane computes 32 per Q tile: 96 instructions
  // fewer per warp and tile, on either path (masked or not) and causal or not, ~9% of
  // b1p2mc's ~1,060. They lie in the Pᵀ, dSᵀ phase before the tile's barrier, but they are
  // not the 32 MUFU.EX2, which stay; with issue ~40% busy, 8 warps × 96 over 4 schedulers is
  // ~190 of a tile's ~5,900 cycles (3%) at most. Predicted against b1p2mc: 1.00–1.03×
  // non-causal and causal, N = 4096 and 16384; below 0.99× would be noise, the code being
  // otherwise the same. ptxas (sm_90, CUDA 13.0): 236–246 registers over the four kernels
  // (causal or not, deterministic or not), no spill, each as b1p2mc's; each kernel's code 192
  // instructions shorter (1,768 → 1,576 non-causal: 32 exp2 × 3 in each P path).
  // The step's fallback at d = 64 (BwdConfig<64>::Fallback), which ctest's
  // 11_backward_tc/fallbacks checks through this row.
  using B1p2mcz =
      BwdTraits<64, 64, 128, E, 1, true, true, false, false, false, false, true, true, true>;
  static_assert(std::is_same_v<B1p2mcz, BwdConfig<64, E>::Fallback>,
                "row b1p2mcz is the step's fallback at d = 64");
  out.push_back(make_variant<B1p2mcz>("b1p2mcz",
                                      "b1p2mc with P's exp2 flushing subnormals (ex2.approx.ftz)"));
  // hf: the grid's x and y swapped, the first K/V tile of every head launched first. Causal,
  // predicted 0–5% faster at N = 16384 (no long CTA left for the tail); at N = 1024, 5% slower
  // to 3% faster: the CTAs of a head no longer run together, so their re-reads of Q and dO
  // hit the L2 less. Full: level.
  out.push_back(make_variant<BwdTraits<64, 64, 128, E, 1, false, false, false, true>>(
      "hf", "heaviest K/V tiles first (grid y = key tiles)"));
}

}  // namespace fa::step11
