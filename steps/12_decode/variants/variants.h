// variants.h — step 12's candidate kernels (candidate/decode_kernel_v2.cuh on the CUDA cores,
// candidate/decode_kernel_mma.cuh on the tensor cores) in several configurations, for
// bin/variants_12 (variants.cpp): each is a decoding step's DecodeStepInfo, run through
// fa::run_decode like a registered one, not registered.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/decode_registry.h"

namespace fa::step12 {

/// \brief One configuration of the candidate kernel (bf16, d = 128 only).
struct DecodeVariant {
  DecodeStepInfo info;           ///< its name, split rule, launch (dtypes {BF16}, head_dims {128})
  std::string change;            ///< what it changes against the registered candidate
  std::string config;            ///< stages, warps, tile, shared memory
  std::string predicted;         ///< the prediction written before it ran (variants.cu)
  const void* kernel = nullptr;  ///< its attention kernel, for the registers and occupancy
  int threads = 0;               ///< threads per block
  std::size_t smem_bytes = 0;    ///< dynamic shared memory per block
};

/// \brief The configurations, today's first (variants.cu). \return them
std::vector<DecodeVariant> decode_variants();

/// \brief Blocks of `kernel` that fit one SM of the current device (cudaOccupancy…, after
/// opting in to `smem` bytes of dynamic shared memory), cached per kernel.
/// \param kernel a __global__ function \param threads per block \param smem dynamic bytes
/// \return the blocks, 0 when none fits
int blocks_per_sm(const void* kernel, int threads, std::size_t smem);

/// \brief The wave-aware split rule of the variants: the split count s (1 .. kMaxSplits, at
/// least kMinTilesPerSplit tiles each) that minimises waves(s) × (⌈tiles / s⌉ + 2), the
/// launch's time in tile times when every block streams a tile at the same pace
/// (docs/12-decode.md, "One block's pace") and pays 2 more for its prologue and merge, with
/// waves(s) = ⌈blocks(s) / (slots · SMs)⌉; the fewest splits on a tie.
/// With heads_per_block > 1 a block reads that many K/V heads (blocks: ⌈H_kv / heads⌉ per
/// sequence and row chunk) and a tile holds block_n / heads_per_block positions of each, its
/// fixed cost still 2 tiles of block_n rows.
/// \param p the problem \param sm_count the device's SMs \param rows_per_block rows per block
/// \param block_n rows of K (or V) per tile \param slots blocks per SM (at least 1 is used)
/// \param heads_per_block K/V heads per block \return the split count
int wave_splits(const DecodeProblem& p, int sm_count, int rows_per_block, int block_n, int slots,
                int heads_per_block = 1);

/// \brief The h23s row's kernel for `splits` splits of p: m2w4s's (2 stages) when the splits
/// are at least the 3-slot count (wave_splits(p, sm_count, 16, 64, 3)) and give each split at
/// least 8 tiles of 64 keys, or are 1; otherwise m3w4s's (3 stages). A forced count is judged
/// the same way. \param p the problem \param sm_count the device's SMs \param splits the split
/// count \return true for m2w4s's kernel
bool h23s_two_stages(const DecodeProblem& p, int sm_count, int splits);

/// \brief The h23s row's split rule: the 3-slot count where h23s_two_stages takes it, else the
/// 2-slot count (wave_splits(p, sm_count, 16, 64, 2)), which h23s_two_stages then refuses, so
/// that the kernel launched is the one the count was chosen for.
/// \param p the problem \param sm_count the device's SMs \return the split count
int h23s_splits(const DecodeProblem& p, int sm_count);

}  // namespace fa::step12
