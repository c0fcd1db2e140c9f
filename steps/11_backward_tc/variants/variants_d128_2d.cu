// variants_d128_2d.cu — the rows "fa2" and "fa2q" of step 11's backward table
// (bin/variants_11): the kernel with FlashAttention-2's two-dimensional warp layouts
// (flash_bwd_2d.cuh), bf16, d = 128, described and launched as a Variant the way
// make_variant.cuh does it for BwdTraits.
#include <cuda_bf16.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "flash_bwd_2d.cuh"
#include "make_variant.cuh"

namespace fa::step11 {

namespace {

/// \brief Describes and launches Bwd2dTraits `T` (bf16) as a backward Variant.
template <class T>
Variant make_variant_2d(std::string name, std::string change) {
  Variant v;
  v.name = std::move(name);
  v.change = std::move(change);
  v.config = std::to_string(T::kBlockM) + "×" + std::to_string(T::kBlockN) + ", " +
             std::to_string(T::kNumWarps) +
             " warps in 2-D layouts (S, dP 2×4; dK, dV 4×2; dQ 2×4), P and dS in shared "
             "memory, 1 CTA/SM, 2 barriers/tile, dQ v2 atomics" +
             (T::kDqFirst ? " before dK, dV" : " after dK, dV") + ", tiles in order";
  v.head_dim = T::kHeadDim;
  v.smem_bytes = T::kSmemBytes;
  v.backward_workspace_bytes = [](const Problem& p) {
    return sizeof(float) * static_cast<std::size_t>(p.q_elems() * dq_slabs<T>(p) + p.lse_elems());
  };
  v.backward = [](const Problem& prob, const BackwardTensors& t, void* workspace) {
    if (prob.dtype != DType::BF16 || prob.head_dim != T::kHeadDim)
      throw std::invalid_argument("variant for bf16, head_dim " + std::to_string(T::kHeadDim) +
                                  ", given " + prob.describe());
    BwdParams p = make_bwd_params(prob, t, workspace);
    p.delta = p.dq_acc + p.q_elems * dq_slabs<T>(prob);  // the slabs of T's kBlockN
    run_flash_bwd_2d<T>(p, nullptr);
  };
  variants::set_kernel_counts(v, reinterpret_cast<const void*>(&flash_bwd_2d_kernel<T, false>));
  return v;
}

}  // namespace

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
}

}  // namespace fa::step11
