/// \file compare.h
/// \brief How a step's output is judged against the reference, in one place for the tour,
/// the tests, the sweep and the step-06 variants: the errors (compare_output, compare_lse),
/// the tolerance policy (Tolerance, judge), and what the output is judged against (the
/// double reference and the plain same-precision implementation: expected_for, verdict).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/inputs.h"
#include "common/problem.h"
#include "reference/attention.h"
#include "reference/backward.h"

namespace fa {

/// \brief Errors of an output against the reference. NaN or Inf where the reference has a
/// finite value (or the reverse) counts as a mismatch and never passes.
struct Comparison {
  double rel_err = 0;  ///< ‖out − ref‖₂ / ‖ref‖₂ over the matching finite elements
  double max_abs_err = 0;       ///< max |out − ref|
  std::int64_t mismatches = 0;  ///< elements whose finiteness (NaN, ±Inf) differs from ref
  std::string worst;            ///< where max_abs_err (or the first mismatch) is: "(b, h, i, j)"
  double max_abs_ref = 0;       ///< max |ref| over the finite elements compared
};

/// \brief Compares O (Q's layout: j is the d index) against the reference.
/// \param p the problem \param out the step's O, as float \param ref the reference O
/// \return the errors
Comparison compare_output(const Problem& p, const std::vector<float>& out,
                          const std::vector<double>& ref);
/// \brief Compares L ([B, H_q, N_q]); -inf must match -inf exactly.
/// \param p the problem \param out the step's L \param ref the reference L
/// \return the errors
Comparison compare_lse(const Problem& p, const std::vector<float>& out,
                       const std::vector<double>& ref);

/// \brief The tolerance policy (docs/conventions.md). A step passes when
///   rel_err     <= rel_slack + factor · (plain rel_err)   and
///   max_abs_err <= abs_slack + factor · (plain max_abs_err),
/// with no mismatches. "plain" is the plain same-precision implementation
/// (fa::ref::attention_plain) against the same double reference, so a problem where the
/// precision itself cannot do better (scores of magnitude 100 in fp32, any bf16 problem)
/// gets a fair bound, and an easy one a tight bound (~1e-5 relative in fp32).
///
/// An output stored in fp16 or bf16 gets one more term in its absolute bound: one unit in the
/// last place (ulp) of that format at the largest |ref|. Rounding the fp32 result to 16 bits
/// lands on the neighbouring value whenever the kernel's fp32 result sits on the other side of
/// a rounding boundary from the reference's, which any change in the order of the sums can
/// cause; an fp16 O near 3 then differs by 2⁻⁹ ≈ 0.002 with nothing wrong. The plain
/// implementation, summing in the reference's order, rarely shows that flip, so the factor
/// alone does not cover it (seen on the H200: a tensor-core kernel off by exactly one fp16
/// ulp at |O| ≈ 2 on one seed in a few).
struct Tolerance {
  ///@{
  /// The rule's factor and its relative and absolute slack (see above).
  double factor, rel_slack, abs_slack;
  ///@}
  /// fp32: factor 4 — kernels sum in another order and contract multiply-adds (FMA), so
  /// they may land a little further from the truth than a sequential float loop.
  /// fp16/bf16: flash-attention's rule, factor 2 with a small slack.
  /// \param t the problem's dtype \return the tolerance for it
  static Tolerance for_dtype(DType t) {
    return t == DType::F32 ? Tolerance{4.0, 1e-5, 1e-4} : Tolerance{2.0, 1e-3, 1e-3};
  }
};

/// \brief One unit in the last place of `t` at magnitude |x| (0 for fp32 and for x = 0).
/// \param t the storage format \param x a value \return the spacing of `t` around |x|
double ulp_of(DType t, double x);

/// \brief The error in O that rounding the scores alone may cause, for any implementation.
///
/// A score s = scale·(q·k) summed in fp32 (every step does) carries a rounding error of order
/// u·scale·Σ|q_i·k_i| ≤ u·scale·‖q‖·‖k‖ (u = 2⁻²⁴; the first-order term of the standard
/// dot-product error bound), in whatever order it is summed. That error moves exp(s − m), and
/// so a weight of its row, by as much relatively, and O, an average of V, by up to that times
/// max|V|. For ordinary inputs this is ~1e-6 and changes nothing; for scores of 1e4 it is
/// ~1e-2, above the plain implementation's own error, whose particular rounding pattern a
/// kernel summing in another order cannot reproduce (seen on the H200: a correct fp32 kernel
/// 2.5× over "4 × plain" on one seed in four of the huge-score test, 1e-3 against 4e-4).
/// \param p the problem \param q Q \param k K \param v V (float values, p's layout)
/// \return u · scale · max_i ‖q_i‖ · max_j ‖k_j‖ · max|v|
double score_rounding_error(const Problem& p, const float* q, const float* k, const float* v);

/// \brief The allowance a backward gradient gets for its rounding floor (backward.h,
/// Gradients::dq_floor): where dS = P ∘ (dP − D) cancels, a correct fp32 kernel's dQ and dK
/// differ from the reference by the rounding of dP and D, in an order no yardstick shares.
/// With one key the exact dQ is 0, and the plain implementation, which sums dP and D in the
/// same order, cancels almost exactly: "factor × plain" then says nothing of the noise a
/// kernel with a D of its own must show (seen on the H200: N_kv = 1, d = 128, dQ rel_err
/// 4.3e-5 against a bound of 1e-5). Both terms are the dtype's factor times the floor: its
/// largest element for the absolute bound and ‖floor‖₂ / ‖ref‖₂ for the relative one (over
/// the elements where both are finite; ‖floor‖₂ alone where ‖ref‖₂ = 0, as rel_err is then
/// ‖out − ref‖₂). For ordinary inputs both are a small part of the slack (~2e-6 relative at
/// d = 128 in fp32).
struct FloorAllowance {
  double abs = 0;  ///< factor · max floor, added to the absolute bound
  double rel = 0;  ///< factor · ‖floor‖₂ / ‖ref‖₂, added to the relative bound
};

/// \brief The allowance for a rounding floor (see FloorAllowance).
/// \param floor the floor, in ref's layout \param ref the reference values
/// \param dtype the problem's dtype (its Tolerance::factor)
/// \return the absolute and relative allowances; std::invalid_argument if the sizes differ
FloorAllowance floor_allowance(const std::vector<double>& floor, const std::vector<double>& ref,
                               DType dtype);

/// \brief Applies the tolerance policy for `dtype`; returns "" on a pass, otherwise why.
/// \param step the step's errors \param plain the plain implementation's errors
/// \param what what was compared, for the message ("O" or "L")
/// \param dtype the problem's dtype
/// \param stored_as the format the compared values were stored in: the problem's dtype for
///        O, fp32 for L; a 16-bit format adds ulp_of(stored_as, max |ref|) to the absolute bound
/// \param extra_abs added to the absolute bound: score_rounding_error() for O,
///        FloorAllowance::abs for dQ and dK, 0 for L and dV
/// \param extra_rel added to the relative bound: FloorAllowance::rel for dQ and dK, otherwise 0
/// \return "" or the reason it failed
std::string judge(const Comparison& step, const Comparison& plain, const char* what,
                  DType dtype = DType::F32, DType stored_as = DType::F32, double extra_abs = 0,
                  double extra_rel = 0);

}  // namespace fa

namespace fa::ref {

/// \brief The double reference and the plain same-precision oracle for one input.
struct Expected {
  Result ref;                    ///< attention(): O and L in double
  std::vector<float> plain_o;    ///< attention_plain(): O
  std::vector<float> plain_lse;  ///< attention_plain(): L
  double score_rounding = 0;     ///< score_rounding_error() of the inputs
};

/// \brief Computes what `in` must give. \param in the inputs \return the expected outputs
Expected expected_for(const HostInputs& in);

/// \brief The verdict on a step's outputs: O judged in its storage format with the
/// score-rounding allowance, then L in fp32 (judge()).
/// \param p the problem \param o the step's O, as float \param lse the step's L
/// \param want expected_for() of the inputs \return "" on a pass, otherwise why not
std::string verdict(const Problem& p, const std::vector<float>& o, const std::vector<float>& lse,
                    const Expected& want);

/// \brief What a backward kernel is given and what it must give, for one input: the forward's
/// O and L (from the double reference, rounded to float: the backward is judged alone), dO,
/// the double reference's gradients on that forward and the plain float oracle's.
struct ExpectedBackward {
  std::vector<float> o;  ///< O, the kernel's input (Q's layout)
  std::vector<float>
      lse;  ///< L, the kernel's input ([B, H_q, N_q]; −inf for a row that sees no key)
  std::vector<float> d_o;  ///< dO, the kernel's input (Q's layout)
  Gradients ref;           ///< attention_backward() on the same forward
  GradientsPlain plain;    ///< attention_backward_plain(): the yardstick
};

/// \brief Computes a backward case: O and L from attention(), the gradients of both
/// implementations. \param in Q, K, V \param d_o dO, q_elems() values in Q's layout
/// \return the inputs and the expected gradients
ExpectedBackward expected_backward(const HostInputs& in, std::vector<float> d_o);

/// \brief The verdict on a backward kernel's gradients: dQ, dK and dV each judged by the
/// tolerance policy (judge()) against the double reference, with the plain oracle's errors as
/// the yardstick, stored in the problem's dtype; dQ and dK with the allowance for their
/// rounding floors (floor_allowance()), dV (= Pᵀ dO, nothing cancels) without. dK and dV are
/// compared in K's layout, their messages naming (b, K/V head, key, dim).
/// \param p the problem \param dq dQ \param dk dK \param dv dV (as float, in their layouts)
/// \param want expected_backward() of the inputs \return "" on a pass, otherwise why not
std::string verdict_backward(const Problem& p, const std::vector<float>& dq,
                             const std::vector<float>& dk, const std::vector<float>& dv,
                             const ExpectedBackward& want);

}  // namespace fa::ref
