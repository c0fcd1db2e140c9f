#include "reference/merge.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace fa::ref {

double merge_row(std::size_t n, const double* const* o, const double* lse, int d, double* out) {
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  std::fill_n(out, d, 0.0);
  double m = kNegInf;
  bool nan = false;
  for (std::size_t s = 0; s < n; ++s) {
    m = std::max(m, lse[s]);
    nan = nan || std::isnan(lse[s]);
  }
  if (nan) {  // max() skips a NaN: carry it to O and L explicitly
    std::fill_n(out, d, std::numeric_limits<double>::quiet_NaN());
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (m == kNegInf) return kNegInf;  // every partial empty: O = 0, L = -inf
  double sum = 0;                    // Σ exp(L_s − m)
  for (std::size_t s = 0; s < n; ++s) sum += std::exp(lse[s] - m);
  const double l = m + std::log(sum);
  for (std::size_t s = 0; s < n; ++s) {
    if (lse[s] == kNegInf) continue;  // empty partial: skipped
    const double w = std::exp(lse[s] - l);
    for (int t = 0; t < d; ++t) out[t] += w * o[s][t];
  }
  return l;
}

}  // namespace fa::ref
