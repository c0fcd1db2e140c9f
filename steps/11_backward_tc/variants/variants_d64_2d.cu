// variants_d64_2d.cu — the rows "fa2d64", "fa2d64s2", "fa2d64m64", "fa2d64r", "fa2d64u",
// "fa2d64b", "fa2d64ub", "fa2d64t", "fa2d64c", "fa2d64ch" and "fa2d64cq" of step 11's backward
// table (bin/variants_11): the kernel with FlashAttention-2's two-dimensional warp layouts
// (flash_bwd_2d.cuh) at d = 64, in the layouts FlashAttention-2 chooses for that head dim and the
// switches of fa2ufz (the step's at d = 128), bf16, described as a Variant by make_variant.cuh's
// make_variant_2d. The first three were measured against b1p2mcz, the step's kernel at d = 64 when
// they were written; fa2d64 won (docs/results/, chapter 11), b1p2mcz became its fallback. The next
// six change fa2d64's dQ product and are predicted against it; fa2d64c was the step's at d = 64
// from commit 7496b30, fa2d64ch is its grid order under the mask, and fa2d64cq the step's kernel
// with Q and dO copied by the TMA, the step's at d = 64 now (BwdConfig<64>, kernel_traits.cuh).
#include <cuda_bf16.h>

#include <vector>

#include "make_variant.cuh"

namespace fa::step11 {

void add_d64_2d_variants(std::vector<Variant>& out) {
  using E = __nv_bfloat16;
  // Bwd2dTraits<d, E, kDqFirst, kMaskFree, kSUnroll, kDetCompiled, kTileCounter, kFastExp2,
  //             kBlockM, kSWarpsM, kKvWarpsM, kQWarpsM>
  //
  // Every row takes fa2ufz's switches (variants_d128_2d.cu): no selects on mask-free Q tiles,
  // the S/dP k loop fully unrolled (its 4 steps at d = 64, the first with C = 0), the dQ store
  // kind compiled per mode, the visited tile by counters, P's exp2 flushing subnormals.
  //
  // fa2d64: FlashAttention-2's layouts at d = 64 on a GPU with >= 144 KB of shared memory per
  // block (Flash_bwd_kernel_traits<64, 128, 128, 8, 4, 4, 4>): 128-row Q tiles, S and dP 4
  // (rows) × 2 (keys) warps of 32 × 64, dV and dK 4 (keys) × 2 (dims) of 32 × 32, dQ 4 (rows)
  // × 2 (dims) of 32 × 32. Prediction against b1p2mcz (the step's at d = 64: the 1-D kernel,
  // 64 × 128, one barrier per Q tile, v2 atomics, the same switches where it has them),
  // written before any run:
  //  - Shared memory per warp and Q tile (flash_bwd_2d.cuh counts it): 80 KB for 1.31 MFLOP,
  //    16.0 FLOPs per byte against b1p2mcz's 12.8 (kernel_traits.cuh): the shared-memory cap
  //    rises 1.25×, as it did at d = 128 (16.8 against m64b1p2's 13.6, 1.24×).
  //  - Barriers: 2 per 128-row tile, b1p2mcz 1 per 64-row tile: the same per FLOP (at d = 128
  //    fa2ufz had twice m64b1p2mcz's per FLOP and still ran 1.09×). P and dS (64 KB per tile)
  //    written and read back, where b1p2mcz writes only dSᵀ: counted in the bytes above.
  //  - The same exp2 and dQ atomics per FLOP as b1p2mcz (128 × 128 P and 128 × 64 dQ per tile
  //    against 64 × 128 and 64 × 64 for half the FLOPs); 4 L and 4 D values per lane (32 rows
  //    of S per warp), as at d = 128.
  //  - Registers: dK, dV 2 · 32 and S, dP 2 · 64 fp32 per lane, 192 at the S/dP phase as
  //    fa2ufz's at d = 128 (253 there, no spill).
  //  - Instructions per warp and Q tile, from the code's counts: the same 320 mmas and 144
  //    ldmatrix.x4 as fa2ufz at d = 128 (S, dP 48; dV, dK 64; dQ 32), but each lane's S is 64
  //    elements, not 32: 64 exp2 and 64 32-bit stores of P and dS, about 200 more than
  //    fa2ufz's ~960, ~1,150 for 1.31 MFLOP, where b1p2mcz issues ~1,930 (2 tiles of ~965).
  //  - smem 166 KB: one CTA per SM, as b1p2mcz (119 KB, also one: its registers).
  // At d = 128 the same kernel ran 1.09× the 1-D kernel with the same switches non-causal
  // (fa2ufz against m64b1p2mcz, docs/results/h200-variants-11-c6aff73.md), 1.12–1.15×
  // causal; as the step it runs at 1.08–1.09× torch_flash's backward at N = 1024 and
  // 0.92–0.97× at 4096 and 16384, causal or not (docs/results/h200-backward-506e1f8.md).
  // torch_flash runs fa2d64's layouts at d = 64 at 1.05× / 1.15× / 1.20× b1p2mcz non-causal
  // (N = 1k / 4k / 16k, the same file) and 1.07× / 1.18× / 1.23× causal; at 0.92–1.0× of it
  // as at d = 128, that is 1.06–1.15× (4k) and 1.10–1.20× (16k) non-causal, 1.08–1.18× and
  // 1.13–1.23× causal. Predicted: non-causal 0.98–1.08× b1p2mcz at N = 1024 (8 Q tiles of
  // 128 rows per CTA: the prologue and the last tile weigh more), 1.05–1.18× at 4096 and
  // 16384; causal 1.00–1.10× at 1024, 1.05–1.20× at 4096 and 16384 (one masked 128-row tile
  // per CTA on the diagonal where b1p2mcz has two of 64 rows: the same masked pairs). Below
  // 1.0× at N >= 4096 would mean the layouts' saving in fragment loads does not carry over to
  // d = 64, where every product has half the dims.
  // ptxas (sm_90, CUDA 13.0): 252 registers non-causal, 255 causal (either mode), no spill;
  // the code 2,256–2,304 instructions non-causal, 3,384–3,416 causal.
  out.push_back(make_variant_2d<Bwd2dTraits<64, E, false, true, 4, true, true, true, 128, 4, 4, 4>>(
      "fa2d64", "FlashAttention-2's d = 64 layouts (128-row tiles) with fa2ufz's switches"));
  // fa2d64s2: fa2d64 with S and dP on 2 (rows) × 4 (keys) warps of 64 rows × 32 keys
  // (Flash_bwd_kernel_traits<64, 128, 128, 8, 2, 4, 4>, the alternative FlashAttention-2 keeps
  // commented out beside the one it runs: splitting the rows 4 ways is "slightly faster", fewer
  // registers holding L). The same fragment loads and bytes per k16 step (2 · (4 + 2) against
  // 2 · (2 + 4) ldmatrix.x4, 32 mmas), 16.0 FLOPs per byte; but each lane's S covers 8 rows,
  // not 4: 8 L, 8 D, 8 key limits (causal) and 8 row checks per Q tile in P and dS, where
  // fa2d64 has 4 of each. Predicted 0.97–1.01× fa2d64, non-causal and causal, N = 4096 and
  // 16384; above 1.01× would contradict FlashAttention-2's choice on this GPU. ptxas: 250
  // registers non-causal, 255 causal, no spill; the code 2,256–2,288 instructions non-causal,
  // 3,480–3,512 causal.
  out.push_back(make_variant_2d<Bwd2dTraits<64, E, false, true, 4, true, true, true, 128, 2, 4, 4>>(
      "fa2d64s2", "fa2d64 with S, dP on 2×4 warps of 64 rows × 32 keys"));
  // fa2d64m64: FlashAttention-2's d = 64 layouts for a GPU with less shared memory
  // (Flash_bwd_kernel_traits<64, 64, 128, 8, 2, 4, 4>, without its V held in registers):
  // 64-row Q tiles, S and dP 2 × 4 warps of 32 × 32, dV and dK 4 × 2 of 32 keys × 32 dims,
  // dQ 4 × 2 of 16 rows × 32 dims, 99 KB. Per warp and Q tile 48 KB of shared memory for
  // 0.66 MFLOP, 13.3 FLOPs per byte: 1.04× b1p2mcz's 12.8, and twice its barriers per FLOP
  // (2 per 64-row tile against 1), with half fa2d64's registers of S and dP (2 · 32). The
  // registers it leaves free buy nothing: a second CTA per SM would need <= 128 per thread.
  // Predicted against b1p2mcz: 0.92–1.02× non-causal and causal at every N; against fa2d64
  // 0.85–0.95×. A data point for the tile size with the same layouts, not a candidate.
  // ptxas: 213 registers non-causal, 233–234 causal, no spill.
  out.push_back(make_variant_2d<Bwd2dTraits<64, E, false, true, 4, true, true, true, 64, 2, 4, 4>>(
      "fa2d64m64", "fa2d64 with 64-row tiles (FlashAttention-2's layouts for less smem)"));
  // Bwd2dTraits<…, kQWarpsM, kDqRed, kDqUnroll, kDqBulk> (the last three false, 2 and 0 by
  // default)
  //
  // fa2d64r: fa2d64 with dQ added by inline PTX red.global.add.v2.f32 (kDqRed), as fa2ufzr at
  // d = 128 (variants_d128_2d.cu has the reasoning): ptxas already makes a REDG (no return)
  // of fa2d64's atomicAdd on a float2, and this row's code is fa2d64's byte for byte in three
  // of the four main kernels; the causal non-deterministic one has the same 3,416
  // instructions in another order. Registers as fa2d64's: 252 non-causal, 255 causal, no
  // spill. Per warp and Q tile the same 16 v2 reductions (4 KB to the L2, nothing back).
  // Predicted against fa2d64: 0.99–1.01× at N = 4096 and 16384, non-causal and causal;
  // outside it, the table's spread (non-causal: the same code) or the other schedule
  // (causal), not return traffic.
  // Measured (h200-variants-11-1c60542.md): 1.00× fa2d64 (0.998–1.007), as predicted.
  out.push_back(
      make_variant_2d<Bwd2dTraits<64, E, false, true, 4, true, true, true, 128, 4, 4, 4, true>>(
          "fa2d64r", "fa2d64 with dQ added by red.global.add.v2.f32 (inline PTX)"));
  // fa2d64u: fa2d64 with dQ's k loop (8 steps of 16 keys) fully unrolled (kDqUnroll), its
  // first mmas taking C = 0, as fa2ufzu at d = 128: the dQ product per warp is the same
  // (32 rows × 32 dims), so are the counts: 16 CS2R and 4 trips of 33 instructions (16
  // HMMA, 8 LDSM, 9 others with the back-edge) become 64 HMMA and 32 LDSM, ~55 fewer per warp
  // and Q tile (~5% of fa2d64's ~1,150) and 4 fewer branches. The code grows 2,304 → 2,344
  // instructions non-causal. Registers 255 in all four kernels (fa2d64: 252 non-causal), no
  // spill. Predicted against fa2d64: 0.99–1.02× at N = 4096 and 16384, non-causal and causal
  // (the low end lower than fa2ufzu's: 3 more registers at the limit, where the S/dP phase's
  // 192 accumulators live). Below 0.99×: ptxas's schedule at 255 registers costs more than
  // the instructions save.
  // Measured (h200-variants-11-1c60542.md): 1.00–1.01× fa2d64 non-causal, 0.99–1.00× causal, the
  // low end of the prediction; not taken.
  out.push_back(
      make_variant_2d<Bwd2dTraits<64, E, false, true, 4, true, true, true, 128, 4, 4, 4, false, 8>>(
          "fa2d64u", "fa2d64 with the dQ k loop fully unrolled, its first mmas taking C = 0"));
  // fa2d64b: fa2d64 with dQ added by bulk reductions from shared memory (kDqBulk), as fa2ufzb
  // at d = 128 (variants_d128_2d.cu has the profile behind it): each warp's 32 rows × 32 dims
  // of dQ, the same per warp as at d = 128, staged in 36 KB in all (166 → 202 KB) and sent a
  // row per lane. Per Q tile of 128 rows the REDGs are the same 16 per warp, over twice the
  // work of S, dP, dK and dV, so their waits weigh less: predicted against fa2d64
  // 1.01–1.04× at N = 4096 and 16384, non-causal and causal.
  // Measured (h200-variants-11-343a03e.md): 0.95× fa2d64 non-causal, 0.90–0.94× causal (fa2ufzb's
  // reason, variants_d128_2d.cu).
  out.push_back(make_variant_2d<
                Bwd2dTraits<64, E, false, true, 4, true, true, true, 128, 4, 4, 4, false, 2, 1>>(
      "fa2d64b", "fa2d64 with dQ added by bulk reductions from shared memory (sm_90)"));
  // fa2d64ub: fa2d64u with kDqBulk. Predicted against fa2d64: 1.00–1.04× (fa2d64u's registers
  // at 255 may cost what the unrolling saves, as predicted for it).
  // Measured (h200-variants-11-343a03e.md): 0.95× fa2d64 non-causal, 0.92–0.95× causal.
  out.push_back(make_variant_2d<
                Bwd2dTraits<64, E, false, true, 4, true, true, true, 128, 4, 4, 4, false, 8, 1>>(
      "fa2d64ub", "fa2d64u with dQ added by bulk reductions from shared memory (sm_90)"));
  // fa2d64t: fa2d64 with kDqBulk = 2, one tensor reduction per warp, as fa2ufzut at d = 128
  // (variants_d128_2d.cu says why after fa2d64b lost). 166 → 199 KB. Predicted against
  // fa2d64: 1.01–1.04× at N = 4096 and 16384, non-causal and causal.
  // Measured (h200-variants-11-6b33d03.md): 1.01–1.03× fa2d64 non-causal, 0.97–0.99× causal.
  out.push_back(make_variant_2d<
                Bwd2dTraits<64, E, false, true, 4, true, true, true, 128, 4, 4, 4, false, 2, 2>>(
      "fa2d64t", "fa2d64 with dQ added by one tensor reduction per warp (sm_90)"));
  // fa2d64c: fa2d64 with kDqBulk = 3, as fa2ufzuc at d = 128 (variants_d128_2d.cu). fa2d64t
  // ran 1.01–1.03× fa2d64 non-causal, 0.97–0.99× causal (h200-variants-11-6b33d03.md).
  // Predicted against fa2d64: 1.02–1.05× non-causal, 1.00–1.03× causal.
  // Measured (h200-variants-11-d91d3f9.md): 1.04–1.05× fa2d64 non-causal, 1.00–1.01× causal: the
  // non-causal prediction held, causal at its low end; again with it registered
  // (h200-variants-11-7496b30.md): 1.05× non-causal, 1.00–1.02× causal. The step's at d = 64
  // (BwdConfig<64>) from then on.
  out.push_back(make_variant_2d<
                Bwd2dTraits<64, E, false, true, 4, true, true, true, 128, 4, 4, 4, false, 2, 3>>(
      "fa2d64c", "fa2d64t with the boxes sent by one thread after the next tile's barrier"));
  // fa2d64ch: fa2d64c with kHeavyFirst, as fa2ufzuch (variants_d128_2d.cu). With 128-row Q
  // tiles the same list schedule (scripts/grid_order.py --d 64) puts the last CTA's end 2.8-3.5%
  // past the even share at N = 1024 to 8192 and 0.3% at 16384 in the present order, 0.1-0.8%
  // heavy first. Predicted
  // against fa2d64c: causal 1.01-1.03× at N = 1024, 4096 and 8192, level at 16384; non-causal
  // 0.99-1.01×.
  // Measured (h200-variants-11-b59f96c.md): causal 0.98×, 1.01×, 1.02× and 1.00× at N = 1024,
  // 4096, 8192 and 16384, non-causal 0.98×, 0.99×, 1.00×, 1.00×: held from 4096 up, lost at
  // 1024 as fa2ufzuch's non-causal kernel did. The step runs it under the causal mask only
  // (kHeavyFirst = 2, BwdConfig<64>), where its one loss is 2% at N = 1024.
  out.push_back(make_variant_2d<
                Bwd2dTraits<64, E, false, true, 4, true, true, true, 128, 4, 4, 4, false, 2, 3, 1>>(
      "fa2d64ch", "fa2d64c with every head's first K/V tile launched first"));
  // fa2d64cq: the step's kernel at d = 64 (fa2d64c, heavy first under the mask only, as
  // BwdConfig<64> runs it) with kQTma, as fa2ufzucq at d = 128 (variants_d128_2d.cu): one box
  // of 64 dims × 128 rows of Q and one of dO per tile from thread 0, in the layout the cp.async
  // copies write (rows of 128 bytes). Here the profile's loss was the shared-memory queue (mio
  // 20% of the samples against FlashAttention-2's 5%), which the 8 LDGSTS per thread and tile
  // join; the TMA writes shared memory without them. Predicted against the registered step,
  // N = 4096 and 16384: 1.00–1.03×, causal and not.
  out.push_back(
      make_variant_2d<
          Bwd2dTraits<64, E, false, true, 4, true, true, true, 128, 4, 4, 4, false, 2, 3, 2, true>>(
          "fa2d64cq", "the step's kernel with Q and dO copied by the TMA (sm_90)"));
}

}  // namespace fa::step11
