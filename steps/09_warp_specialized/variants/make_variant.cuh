// make_variant.cuh — turns one KernelTraits configuration of step 09's kernel into a Variant
// (variants.h); included by the files that instantiate the variants.
#pragma once

#include <string>
#include <utility>

#include "../flash_fwd_kernel.cuh"
#include "variants.h"

namespace fa::step09 {

/// \brief Describes and launches KernelTraits `T` as a Variant.
template <class T>
Variant make_variant(std::string name, std::string change) {
  Variant v;
  v.name = std::move(name);
  v.change = std::move(change);
  v.config = std::to_string(T::kBlockM) + "×" + std::to_string(T::kBlockN) + ", " +
             std::to_string(T::kNumConsumers) + " consumers, " + std::to_string(T::kStages) +
             " stages" + (T::kPingPong ? ", ping-pong" : "") +
             (T::kOverlap ? ", softmax under P V" : "");
  v.head_dim = T::kHeadDim;
  v.smem_bytes = T::kSmemBytes;
  v.run = [](const Problem& prob, const DeviceTensors& t) {
    const FwdParams p = make_fwd_params(prob, t);
    const TensorMaps maps = make_tensor_maps(prob, t, T::kBlockM, T::kBlockN);
    if (p.causal)
      launch_flash_fwd<T, true>(p, maps, nullptr);
    else
      launch_flash_fwd<T, false>(p, maps, nullptr);
  };
  variants::set_kernel_counts(v, reinterpret_cast<const void*>(&flash_fwd_kernel<T, false>));
  return v;
}

}  // namespace fa::step09
