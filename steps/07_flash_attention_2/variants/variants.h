// variants.h — step 07's kernel in several configurations, for the measured table of
// versions of chapter 07 (variants.cu).
#pragma once

#include <vector>

#include "steps/harness/variants_table.h"

namespace fa::step07 {

using variants::Variant;

/// \brief Appends the head-dim-64 variants (variants_d64.cu).
void add_d64_variants(std::vector<Variant>& out);
/// \brief Appends the head-dim-128 variants (variants_d128.cu).
void add_d128_variants(std::vector<Variant>& out);

}  // namespace fa::step07
