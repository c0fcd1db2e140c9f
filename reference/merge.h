/// \file merge.h
/// \brief The online-softmax merge of partial results of one query row over disjoint key
/// sets, shared by split-KV (decode.h) and ring attention (ring.h).
///
/// ```text
///   L = log Σ_s exp(L_s)             (computed as m + log Σ_s exp(L_s − m), m = max_s L_s)
///   O = Σ_s exp(L_s − L) · O_s
/// ```
///
/// An empty partial (L_s = −inf: the row saw no key there) is skipped, so its O never matters.
/// A partial that saw keys is weighed even when its weight underflows to 0: a NaN in its O then
/// reaches the row, as it does in attention() (0 · NaN). A NaN in any L_s makes O and L NaN.
/// A row whose every partial is empty gets O = 0 and L = −inf, never NaN.
#pragma once

#include <cstddef>

namespace fa::ref {

/// \brief Merges `n` partials of one row (formula above).
/// \param n the number of partials (>= 0; 0 gives the empty row)
/// \param o o[s] points to the d values of partial s's O
/// \param lse lse[s] is partial s's L
/// \param d the head dimension
/// \param out receives the merged O (d values; overwritten)
/// \return the merged L
double merge_row(std::size_t n, const double* const* o, const double* lse, int d, double* out);

}  // namespace fa::ref
