// compare.h — how a step's output is judged against the reference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "problem.h"

namespace fa {

/// \brief Errors of an output against the reference. NaN or Inf where the reference has a
/// finite value (or the reverse) counts as a mismatch and never passes.
struct Comparison {
  double rel_err = 0;          ///< ‖out − ref‖₂ / ‖ref‖₂ over the matching finite elements
  double max_abs_err = 0;      ///< max |out − ref|
  std::int64_t mismatches = 0; ///< elements whose finiteness (NaN, ±Inf) differs from ref
  std::string worst;           ///< where max_abs_err (or the first mismatch) is: "(b, h, i, j)"
};

/// \brief Compares O (Q's layout: j is the d index) against the reference.
Comparison compare_output(const Problem& p, const std::vector<float>& out,
                          const std::vector<double>& ref);
/// \brief Compares L ([B, H_q, N_q]); -inf must match -inf exactly.
Comparison compare_lse(const Problem& p, const std::vector<float>& out,
                       const std::vector<double>& ref);

/// \brief The tolerance policy (see STYLE.md). A step passes when
///   rel_err     <= kRelSlack + kFactor · (plain rel_err)   and
///   max_abs_err <= kAbsSlack + kFactor · (plain max_abs_err),
/// with no mismatches. "plain" is the plain same-precision implementation against the same
/// double reference: for fp32 it is the float loop oracle, so a large-score problem (where
/// fp32 itself cannot do better) gets a fair bound and a normal one a tight bound (~1e-5).
struct Tolerance {
  static constexpr double kFactor = 4.0;
  static constexpr double kRelSlack = 1e-5;
  static constexpr double kAbsSlack = 1e-4;
};

/// \brief Applies the tolerance policy; returns "" on a pass, otherwise why it failed.
std::string judge(const Comparison& step, const Comparison& plain, const char* what);

}  // namespace fa
