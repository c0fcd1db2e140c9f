/// \file inputs.h
/// \brief Seeded random inputs as host-side tensors (their device copies: device_problem.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/problem.h"

namespace fa {

/// \brief The input distributions every step is tested and measured on.
enum class Distribution {
  Normal,   ///< Q, K, V ~ N(0, 1)
  Shifted,  ///< Q, K, V ~ N(0.5, 1): a mean shift makes all scores of a row alike
  Large,    ///< Q, K ~ N(0, 5²): scores of magnitude ~100, exp() overflows without the max
};
/// \brief "normal", "shifted" or "large". \param d a distribution \return its name
const char* distribution_name(Distribution d);
/// \brief Parses a distribution_name(). \param s the name \param out receives it
/// \return whether \p s was a known name
bool parse_distribution(const std::string& s, Distribution* out);

/// \brief Q, K, V on the host as float, already rounded to the problem's dtype so that the
/// reference sees exactly the values the GPU sees.
struct HostInputs {
  Problem problem;  ///< the problem they were made for
  ///@{
  /// Q, K and V in the problem's layout, as float (values of the problem's dtype).
  std::vector<float> q, k, v;
  ///@}
  std::uint64_t seed = 0;                    ///< the seed they were made from
  Distribution dist = Distribution::Normal;  ///< the distribution they were drawn from
};

/// \brief Fresh random inputs from `seed` (mt19937_64).
/// \param p the problem \param dist the distribution \param seed the seed
/// \return Q, K and V, rounded to p.dtype
HostInputs make_inputs(const Problem& p, Distribution dist, std::uint64_t seed);

/// \brief Rounds `x` to the nearest value representable in `t` (identity for fp32).
/// \param t the type \param x the value \return the rounded value
float round_to(DType t, float x);

}  // namespace fa
