// make_variant.cuh — turns one BwdTraits or Bwd2dTraits configuration of step 11's kernels into
// a backward Variant (variants.h); included by the files that instantiate the variants.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include "../flash_bwd_kernel.cuh"
#include "variants.h"

namespace fa::step11 {

/// \brief The dQ slabs of a problem for kBlockN keys per CTA: one, or (deterministic mode)
/// one per CTA along the keys, as api.cu counts them for the step's own kBlockN.
template <class T>
long long dq_slabs(const Problem& p) {
  return p.deterministic ? (p.n_kv + T::kBlockN - 1) / T::kBlockN : 1;
}

/// \brief Gives `v` the launch of traits `T` (bf16, BwdTraits or Bwd2dTraits): its head dim,
/// shared memory, workspace, the step's three kernels (run_flash_bwd_traits) and the main
/// kernel's register counts.
template <class T>
void set_launch(Variant& v) {
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
    run_flash_bwd_traits<T>(p, nullptr);
  };
  variants::set_kernel_counts(
      v, reinterpret_cast<const void*>(main_kernel<T, false, false>(typename T::WarpLayout{})));
}

/// \brief Describes and launches BwdTraits `T` (bf16) as a backward Variant.
template <class T>
Variant make_variant(std::string name, std::string change) {
  Variant v;
  v.name = std::move(name);
  v.change = std::move(change);
  v.config = std::to_string(T::kBlockM) + "×" + std::to_string(T::kBlockN) + ", " +
             std::to_string(T::kNumWarps) + " warps, " + std::to_string(T::kMinBlocks) +
             " CTA/SM, " + (T::kOneBarrier ? "1 barrier" : "2 barriers") + "/tile, dQ " +
             (T::kDqBulk ? "bulk adds, deterministic: " : "") +
             (T::kDqQuads   ? "v4 atomics"
              : T::kDqPairs ? "v2 atomics"
                            : "f32 atomics") +
             (T::kStagger ? ", staggered tiles" : ", tiles in order") +
             (int{T::kHeavyFirst} == 1   ? ", grid (B·H, keys)"
              : int{T::kHeavyFirst} == 2 ? ", grid (B·H, keys) when causal"
                                         : "") +
             (T::kMaskFree ? ", no selects on mask-free tiles" : "") +
             (T::kDetCompiled ? ", dQ store kind compiled per mode" : "") +
             (T::kFastExp2 ? ", exp2 flushing subnormals" : "");
  set_launch<T>(v);
  return v;
}

/// \brief Describes and launches Bwd2dTraits `T` (bf16, flash_bwd_2d.cuh) as a backward
/// Variant; each layout is written as its warps along M × along N (S, dP: rows × keys; dK, dV:
/// keys × dims; dQ: rows × dims).
template <class T>
Variant make_variant_2d(std::string name, std::string change) {
  auto grid = [](int m, int n) { return std::to_string(m) + "×" + std::to_string(n); };
  Variant v;
  v.name = std::move(name);
  v.change = std::move(change);
  v.config = std::to_string(T::kBlockM) + "×" + std::to_string(T::kBlockN) + ", " +
             std::to_string(T::kNumWarps) + " warps in 2-D layouts (S, dP " +
             grid(T::kSWarpsM, T::kSWarpsN) + "; dK, dV " + grid(T::kKvWarpsM, T::kKvWarpsN) +
             "; dQ " + grid(T::kQWarpsM, T::kQWarpsN) +
             "), P and dS in shared memory, 1 CTA/SM, 2 barriers/tile, dQ " +
             (T::kDqBulk == 3   ? "by tensor reductions a tile later (deterministic: stores)"
              : T::kDqBulk == 2 ? "by a tensor reduction per warp (deterministic: stores)"
              : T::kDqBulk == 1 ? "by bulk reductions per row (deterministic: stores)"
                                : "v2 atomics") +
             (T::kDqRed ? " (inline red)" : "") +
             (T::kDqFirst ? " before dK, dV" : " after dK, dV") + ", tiles in order" +
             (T::kHeavyFirst == 1   ? ", grid (B·H, keys)"
              : T::kHeavyFirst == 2 ? ", grid (B·H, keys) when causal"
                                    : "") +
             (T::kMaskFree ? ", no selects on mask-free tiles" : "") +
             (T::kSUnroll == T::kKStepsS ? ", S/dP k loop unrolled"
              : T::kSUnroll > 1 ? ", S/dP k loop unrolled by " + std::to_string(T::kSUnroll)
                                : std::string()) +
             (T::kDqUnroll == T::kKStepsQ ? ", dQ k loop unrolled" : "") +
             (T::kDetCompiled ? ", dQ store kind compiled per mode" : "") +
             (T::kTileCounter ? ", tile counters" : "") +
             (T::kFastExp2 ? ", exp2 flushing subnormals" : "") +
             (T::kQTma ? ", Q and dO by TMA" : "");
  set_launch<T>(v);
  return v;
}

}  // namespace fa::step11
