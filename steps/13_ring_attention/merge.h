/// \file merge.h
/// \brief Step 13's merge: the partial (O, L) of every ring step combined into one (O, L) per
/// query row, in fp32, by the combine of step 12 (combine_row, steps/12_decode/combine.cuh).
/// The C API runs it as fa_merge (steps/harness/flash_tutorial.h).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/problem.h"

namespace fa::step13 {

/// \brief The most partials one merge takes (one per ring step: the ranks of the ring).
constexpr int kMaxParts = 1024;

/// \brief What the merge combines: `parts` partials, each O [B, rows, H, d] (bnhd) or
/// [B, H, rows, d] (bhnd) in fp16 or bf16, stored one after another, and each L [B, H, rows] in
/// fp32, one after another; the result has the shape of one partial.
struct MergeProblem {
  int parts = 1;                 ///< partials per row, 1 .. kMaxParts
  int batch = 1;                 ///< B >= 1
  int heads = 1;                 ///< H >= 1
  int rows = 1;                  ///< query rows per (batch, head) >= 1
  int head_dim = 64;             ///< 64 or 128
  DType dtype = DType::BF16;     ///< of every O (fp16 or bf16)
  Layout layout = Layout::BNHD;  ///< of every O
};

/// \brief The refusals, before any launch: "" when `p` can be merged, else one line naming the
/// parameter, its value and the limit. \param p the problem \return the message or ""
std::string check_merge(const MergeProblem& p);

/// \brief The required alignment of the O pointers, bytes (L: 4).
constexpr std::size_t kMergeAlignment = 16;

/// \brief Launches the merge on `stream` (no check: call check_merge first). For every row,
/// L = log Σ_s e^(L_s), O = Σ_s e^(L_s − L) O_s, summed in fp32; a partial with L_s = −inf is
/// skipped (its O_s may hold anything), a row with every partial empty gets O = 0, L = −inf.
/// \param p the problem \param o_parts the partials' O \param lse_parts their L \param o the
/// merged O (written) \param lse the merged L (written) \param stream the stream
void run_merge(const MergeProblem& p, const void* o_parts, const float* lse_parts, void* o,
               float* lse, cudaStream_t stream);

}  // namespace fa::step13
