// variants.h — step 07's kernel in several configurations, for the measured table of
// versions of chapter 07 (variants.cu).
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "../kernel_traits.cuh"

namespace fa::step07 {

/// \brief One configuration of step 07's kernel (bf16), launchable on any problem with its
/// head dim.
struct Variant {
  std::string name;           ///< short label, e.g. "v2"
  std::string change;         ///< what it changes against the previous row
  std::string config;         ///< tiles, warps, stages and switches
  int head_dim = 0;           ///< the head dim it is compiled for
  int smem_bytes = 0;         ///< dynamic shared memory per block
  cudaFuncAttributes attr{};  ///< registers and local memory (spills) of the non-causal kernel
  void (*launch)(const FwdParams&, cudaStream_t) = nullptr;  ///< causal or not, by params
};

/// \brief Appends the head-dim-64 variants (variants_d64.cu).
void add_d64_variants(std::vector<Variant>& out);
/// \brief Appends the head-dim-128 variants (variants_d128.cu).
void add_d128_variants(std::vector<Variant>& out);

}  // namespace fa::step07
