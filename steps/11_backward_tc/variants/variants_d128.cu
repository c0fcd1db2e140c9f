// variants_d128.cu — step 11's kernels at head dim 128 in the configurations of the backward
// table (bin/variants_11). The step itself runs BwdConfig<128, ·> (kernel_traits.cuh). Each
// row changes one thing against "r"; the prediction, written before measuring, is beside it
// (kernel_traits.cuh, "What limits it", has the arithmetic behind them).
#include <cuda_bf16.h>

#include <type_traits>

#include "make_variant.cuh"

namespace fa::step11 {

void add_d128_variants(std::vector<Variant>& out) {
  using E = __nv_bfloat16;
  // BwdTraits<d, M, N, E, CTAs/SM, 1 barrier, v2 dQ, stagger, heavy first, v4 dQ, bulk dQ>
  // r: the configuration first measured (kTunedBwd = false, kernel_traits.cuh): the baseline.
  out.push_back(make_variant<BwdTraits<128, 32, 128, E, 1, false, false, false>>(
      "r", "first measured (BwdConfig<128> with kTunedBwd = false)"));
  // m16: 16-row Q tiles. Predicted 15–25% slower: every K and V fragment feeds two mmas
  // instead of four, and a Q tile's two barriers buy half the work.
  out.push_back(make_variant<BwdTraits<128, 16, 128, E, 1, false, false, false>>(
      "m16", "16-row Q tiles (more, smaller tiles)"));
  // n64: 64 keys per CTA, 4 warps, two CTAs per SM (149 KB of shared memory for both).
  // Predicted 0–10% slower: twice the dQ atomics per FLOP, barriers overlapped by the other CTA.
  out.push_back(make_variant<BwdTraits<128, 32, 64, E, 2, false, false, false>>(
      "n64", "64 keys per CTA, 4 warps, 2 CTAs per SM"));
  // b1: one barrier per Q tile. Predicted 4–10% faster: at 32 rows a Q tile is short (~3,500
  // clocks at the measured rate), so a barrier's drain weighs more than at d = 64.
  out.push_back(make_variant<BwdTraits<128, 32, 128, E, 1, true, false, false>>(
      "b1", "one barrier per Q tile (dSᵀ double-buffered)"));
  // p2: dQ atomics as red.global.add.v2.f32. Predicted 0–8% faster (as at d = 64; the atomics
  // per FLOP are the same at both d).
  out.push_back(make_variant<BwdTraits<128, 32, 128, E, 1, false, true, false>>(
      "p2", "dQ atomics two floats at a time (v2)"));
  // s: staggered Q tile order. Predicted 0–5% faster.
  out.push_back(make_variant<BwdTraits<128, 32, 128, E, 1, false, false, true>>(
      "s", "staggered Q tile order per CTA"));
  // all: b1 + p2 + s. Predicted 5–15% faster than r.
  out.push_back(
      make_variant<BwdTraits<128, 32, 128, E, 1, true, true, true>>("all", "b1 + p2 + s"));
  // b1p2: the two analytic wins without the stagger (the step's fallback, BwdConfig<128>::
  // Fallback, on a GPU whose blocks cannot have the 2-D kernel's 196 KB; ctest's
  // 11_backward_tc/fallbacks checks it through this row).
  using B1p2 = BwdTraits<128, 32, 128, E, 1, true, true, false>;
  static_assert(std::is_same_v<B1p2, BwdConfig<128, E>::Fallback>,
                "row b1p2 is the step's fallback at d = 128");
  out.push_back(make_variant<B1p2>("b1p2", "b1 + p2"));
  // m64b1: 64-row Q tiles (FlashAttention-2's kBlockM at d = 128) with one barrier; Sᵀ's and
  // dQ's k loops not unrolled, which keeps it free of spills (183 KB of shared memory). Per
  // warp and Q tile 13.6 FLOPs per byte of shared memory instead of 12.1 (each K and V
  // fragment feeds 8 mmas), and a quarter of the barriers per FLOP of r. Predicted 10–25%
  // faster than r: the best row at d = 128.
  out.push_back(make_variant<BwdTraits<128, 64, 128, E, 1, true, false, false>>(
      "m64b1", "64-row Q tiles + b1"));
  // m64b1p2: the same with the v2 atomics. Predicted as m64b1, up to 5% better.
  out.push_back(make_variant<BwdTraits<128, 64, 128, E, 1, true, true, false>>(
      "m64b1p2", "64-row Q tiles + b1 + p2"));
  // m64b1p4: the registered configuration (m64b1p2) with dQ's atomics four floats at a time
  // (red.global.add.v4.f32), each lane's quad of one row after one exchange with its
  // neighbour lane. p2 gained 17-19% by halving the atomic instructions; halving them again
  // should buy less, since the L2 still does the same bytes and the exchange costs 2 shuffles
  // per n8 tile. Predicted 2–8% faster than m64b1p2 at N >= 4096, 0–5% at N = 1024; if the
  // exchange's registers push it past 255 (it is at 255 now) and it spills, slower.
  out.push_back(make_variant<BwdTraits<128, 64, 128, E, 1, true, false, false, false, true>>(
      "m64b1p4", "64-row Q tiles + b1 + dQ atomics four floats at a time (v4)"));
  // b1p4: the 32-row fallback (b1p2, for a GPU with less than 183 KB of shared memory per
  // block) with the v4 atomics, so that a change of both to kDqQuads is measured on each.
  // Predicted as m64b1p4 against m64b1p2: 2–8% faster than b1p2 at N >= 4096.
  out.push_back(make_variant<BwdTraits<128, 32, 128, E, 1, true, false, false, false, true>>(
      "b1p4", "b1 + dQ atomics four floats at a time (v4)"));
  // m64b1p2b: the registered configuration with dQ added by the copy engine: each warp's
  // 16 × 64 part of the dQ tile stored to shared memory (fp32, 36 KB in all: 219 KB), then one
  // cp.reduce.async.bulk .add.f32 of 256 bytes per row, 16 per warp from one instruction
  // (the deterministic mode keeps p2's stores). The issue cost of the atomics goes, but each
  // warp writes 4 KB more to shared memory and the engine reads it back: ~15% more
  // shared-memory traffic per Q tile on a kernel that shared memory already limits, and the
  // engine's rate for 256-byte reductions is unknown here. Predicted −5% to +10% against
  // m64b1p2 at N >= 4096, the same spread at N = 1024.
  out.push_back(make_variant<BwdTraits<128, 64, 128, E, 1, true, true, false, false, false, true>>(
      "m64b1p2b", "64-row Q tiles + b1 + dQ by bulk reductions from shared memory"));
  // BwdTraits<…, bulk dQ, mask-free tiles, deterministic mode compiled>
  //
  // The two rows below remove instructions from each warp's stream per Q tile, as fa2m and
  // fa2mc do in the 2-D kernel (variants_d128_2d.cu), from the registered configuration.
  // Counted as at d = 64 (variants_d64.cu, b1p2m): m64b1p2's non-causal kernel is 2,080
  // instructions, 1,472 of them the Q tile loop, whose Sᵀ and dQ k loops (not unrolled) run
  // 8 trips each: ~1,820 per tile (320 mma, 184 ldmatrix). Issue: 8 warps × 1,820 over 4
  // schedulers is ~3,640 cycles of a tile's ~10,900 at 251 TFLOP/s (N = 4096), ~33% busy.
  //
  // m64b1p2m: m64b1p2 + kMaskFree: 104 instructions fewer per tile non-causal (64 FSEL and
  // the predicate logic, −6%), 184 causal (−10%), on the same share of the tiles as at d = 64
  // (every one without causal; causal 94% at N = 4096, 98% at 16384). Pᵀ and dSᵀ are packed
  // into 16 bits inside each path: joined on Sᵀ and dPᵀ, the two paths spilled 32–52 bytes at
  // 255 registers; joined on the packed fragments, none. Predicted against m64b1p2:
  // 1.00–1.03× non-causal, 1.01–1.04× causal, N = 4096 and 16384.
  out.push_back(
      make_variant<BwdTraits<128, 64, 128, E, 1, true, true, false, false, false, false, true>>(
          "m64b1p2m", "m64b1p2 with no selects on the Q tiles that need no mask"));
  // m64b1p2mc: m64b1p2m + kDetCompiled: the plain dQ stores predicated off beside each of the
  // warp's 16 reductions per Q tile (8 n8 tiles × 2 rows) go, 48 instructions non-causal, 32
  // causal, after the tile's barrier and before the next tile's Sᵀ. In all 152 fewer than
  // m64b1p2 non-causal (−8%), 216 causal on mask-free tiles (−12%). Predicted against
  // m64b1p2: 1.00–1.04× non-causal, 1.01–1.05× causal, N = 4096 and 16384.
  out.push_back(make_variant<
                BwdTraits<128, 64, 128, E, 1, true, true, false, false, false, false, true, true>>(
      "m64b1p2mc", "m64b1p2m with the dQ store kind compiled per mode"));
  // BwdTraits<…, deterministic mode compiled, exp2 without subnormals>
  //
  // m64b1p2mcz: m64b1p2mc + kFastExp2 (kernel_traits.cuh): a lane's 32 exponentials per Q tile
  // by ex2.approx.ftz.f32, 96 instructions fewer per warp and tile (3 per exp2f), ~6% of
  // m64b1p2mc's ~1,670, in the phase before the tile's barrier. 8 warps × 96 over 4
  // schedulers is ~190 of a tile's ~10,900 cycles (1.7%) at most, with issue ~33% busy.
  // Predicted against m64b1p2mc: 1.00–1.02× non-causal and causal, N = 4096 and 16384.
  // ptxas (sm_90, CUDA 13.0): 251–255 registers over the four kernels, no spill, each as
  // m64b1p2mc's; each kernel's code 192 instructions shorter (2,336 → 2,144 non-causal).
  out.push_back(
      make_variant<
          BwdTraits<128, 64, 128, E, 1, true, true, false, false, false, false, true, true, true>>(
          "m64b1p2mcz", "m64b1p2mc with P's exp2 flushing subnormals (ex2.approx.ftz)"));
  // hf: the grid's x and y swapped, the first K/V tile of every head launched first. Causal,
  // predicted 0–5% faster at N = 16384 (no long CTA left for the tail); at N = 1024, 5% slower
  // to 3% faster: the CTAs of a head no longer run together, so their re-reads of Q and dO
  // hit the L2 less. Full: level.
  out.push_back(make_variant<BwdTraits<128, 32, 128, E, 1, false, false, false, true>>(
      "hf", "heaviest K/V tiles first (grid y = key tiles)"));
}

}  // namespace fa::step11
