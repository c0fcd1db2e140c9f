// variants.h — step 09's kernel in several configurations: the ablation of chapter 09
// (variants.cu).
#pragma once

#include <vector>

#include "steps/harness/variants_table.h"

namespace fa::step09 {

using variants::Variant;

/// \brief Appends the head-dim-64 variants (variants_d64.cu).
void add_d64_variants(std::vector<Variant>& out);
/// \brief Appends the head-dim-128 variants of the ablation (variants_d128.cu).
void add_d128_variants(std::vector<Variant>& out);
/// \brief Appends the head-dim-128 variants with other tiles and stages (variants_d128_tiles.cu).
void add_d128_tile_variants(std::vector<Variant>& out);

}  // namespace fa::step09
