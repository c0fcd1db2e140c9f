/// \file expected.h
/// \brief What a step's output is judged against, and the judgement: the double reference,
/// the plain same-precision implementation and compare.h's tolerance policy, in one place
/// for the tests, the sweep and the step-06 variants.
#pragma once

#include <string>
#include <vector>

#include "attention.h"
#include "inputs.h"
#include "problem.h"

namespace fa::ref {

/// \brief The double reference and the plain same-precision oracle for one input.
struct Expected {
  Result ref;                    ///< attention(): O and L in double
  std::vector<float> plain_o;    ///< attention_plain(): O
  std::vector<float> plain_lse;  ///< attention_plain(): L
  double score_rounding = 0;     ///< compare.h: score_rounding_error() of the inputs
};

/// \brief Computes what `in` must give. \param in the inputs \return the expected outputs
Expected expected_for(const HostInputs& in);

/// \brief The verdict on a step's outputs: O judged in its storage format with the
/// score-rounding allowance, then L in fp32 (compare.h's judge()).
/// \param p the problem \param o the step's O, as float \param lse the step's L
/// \param want expected_for() of the inputs \return "" on a pass, otherwise why not
std::string verdict(const Problem& p, const std::vector<float>& o, const std::vector<float>& lse,
                    const Expected& want);

}  // namespace fa::ref
