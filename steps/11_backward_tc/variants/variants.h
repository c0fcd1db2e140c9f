// variants.h — step 11's main kernel in several configurations, for the measured table of
// backward versions (variants.cu).
#pragma once

#include <vector>

#include "steps/harness/variants_table.h"

namespace fa::step11 {

using variants::Variant;

/// \brief Appends the head-dim-64 variants (variants_d64.cu).
void add_d64_variants(std::vector<Variant>& out);
/// \brief Appends the head-dim-128 variants (variants_d128.cu).
void add_d128_variants(std::vector<Variant>& out);
/// \brief Appends the head-dim-128 kernel with FlashAttention-2's 2-D warp layouts
/// (variants_d128_2d.cu, flash_bwd_2d.cuh).
void add_d128_2d_variants(std::vector<Variant>& out);
/// \brief Appends the head-dim-64 kernel with FlashAttention-2's 2-D warp layouts for that head
/// dim (variants_d64_2d.cu, flash_bwd_2d.cuh).
void add_d64_2d_variants(std::vector<Variant>& out);

}  // namespace fa::step11
