/// \file backward.h
/// \brief The backward pass computed the obvious way: the yardstick for backward kernels.
///
/// Given the gradient dO of some loss with respect to O, the backward pass returns the
/// gradients with respect to Q, K and V. Per (batch, head), with S, P, O and L as in
/// attention.h and every masked score's P exactly 0:
///
/// ```text
///   P  = softmax_rows(S) = exp(S − L)   [N_q, N_kv]   (recomputed from L, as FlashAttention does)
///   dV = Pᵀ dO                          [N_kv, d]
///   dP = dO Vᵀ                          [N_q, N_kv]
///   D  = rowsum(dO ∘ O)                 [N_q]
///   dS = P ∘ (dP − D)                   [N_q, N_kv]   (D subtracted from every entry of its row)
///   dQ = scale · dS K                   [N_q, d]
///   dK = scale · dSᵀ Q                  [N_kv, d]
/// ```
///
/// Where they come from: O = P V is linear in V (dV, dP). The softmax of one row s has the
/// Jacobian ∂p_j/∂s_k = p_j (δ_jk − p_k), so ∂loss/∂s_k = p_k (dp_k − Σ_j p_j dp_j) (dS).
/// S = scale · Q Kᵀ is linear in Q and in K (dQ, dK).
///
/// Why D = rowsum(dO ∘ O): the sum in dS is Σ_j P_ij dP_ij = Σ_j P_ij (dO_i · V_j) =
/// dO_i · (Σ_j P_ij V_j) = dO_i · O_i. A kernel that streams K and V in tiles needs this sum
/// for every entry of dS before it has seen the whole row of P; from O and dO it is one dot
/// product of length d per row, computed before the main loop. The double reference computes
/// D this way (from O), so a backward kernel's D can be checked against it.
///
/// Grouped heads (GQA, MQA): K and V head g is read by every query head of its group, so its
/// dK and dV are the sums of the contributions of those query heads.
///
/// Masking: a masked score has P = 0 and dS = 0, and a key hidden from row i takes no part in
/// any product of that row, so its K and V (even NaN) never reach row i's dQ, and row i's dO
/// and Q never reach that key's dK and dV. A row that sees no key (O = 0, L = −inf) has
/// dQ = 0 and D = 0 and adds nothing to dK and dV.
///
/// Rounding floor (dq_floor, dk_floor, dv_floor): dQ and dK are sums of dS_ij = P_ij (dP_ij − D_i),
/// a difference of two dot products of length d that cancel where the gradient is small: with one
/// key P = 1 and dP = D = dO_i · V_0, so the exact dQ and dK are 0 and a float implementation
/// returns only the rounding of the two sums. That rounding depends on the order of the sums (a
/// kernel's D comes from a pass of its own), so no implementation can match another's, and it
/// scales with the magnitudes of the cancelling terms, not with |dQ|. The floor is what rounding dS
/// alone may cause in any fp32 implementation, errors taken as independent (root sum of squares), u
/// = 2⁻²⁴:
///
/// ```text
///   e_ij          = u · (scale · Σ_k |Q_ik · K_jk| + |L_i|)   (P_ij's relative error: the
///                     rounding of its exponent, the fp32 dot product and L_i stored in fp32)
///   err_ij        = P_ij · sqrt((u · (Σ_k |dO_ik · V_jk| + Σ_k |dO_ik · O_ik|))²
///                               + (e_ij · |dP_ij − D_i|)²)   (dP_ij's and D_i's first-order
///                                        dot-product error, and P_ij's own, times P_ij)
///   dq_floor(i,c) = scale · sqrt(Σ_j (err_ij · K_jc)²)
///   dk_floor(j,c) = scale · sqrt(Σ_i (err_ij · Q_ic)²)   (i over the rows of every query
///                                                        head of K's group)
///   dv_floor(j,c) = sqrt(Σ_i (P_ij · e_ij · dO_ic)²)     (the same rows)
/// ```
///
/// e_ij grows with the scores' magnitude: with large inputs (|S| in the hundreds) a kernel
/// that recomputes P from the L it is given cannot be closer to the truth than ~|S|·u in P,
/// whatever it sums in, and the fp32 plain oracle's own error may happen to be smaller.
///
/// Where P_ij = 0 (a masked key, an underflowed weight) its err_ij is 0, so a key no row sees
/// has a floor of 0. For ordinary inputs the floor is ~u·√d times the gradient and changes
/// nothing; where dS cancels it is the whole of a correct kernel's error (compare.h,
/// verdict_backward).
///
/// FLOPs: five matrix products of 2·N_q·N_kv·d each (S recomputed, dV, dP, dQ, dK), 2.5× the
/// forward's two (docs/conventions.md, Backward).
#pragma once

#include <vector>

#include "common/problem.h"
#include "reference/attention.h"

namespace fa::ref {

/// \brief Gradients from the double reference.
struct Gradients {
  std::vector<double> dq;        ///< dQ in Q's layout (p.q_strides()), q_elems() values
  std::vector<double> dk;        ///< dK in K's layout (p.kv_strides()), summed over each group
  std::vector<double> dv;        ///< dV in V's layout, summed over each group
  std::vector<double> delta;     ///< D = rowsum(dO ∘ O), [B, H_q, N_q] contiguous; 0 for a
                                 ///< row that sees no key
  std::vector<double> dq_floor;  ///< dQ's rounding floor (see above), in Q's layout
  std::vector<double> dk_floor;  ///< dK's rounding floor, in K's layout, over each group
  std::vector<double> dv_floor;  ///< dV's rounding floor (P's own error), in K's layout
};

/// \brief The backward pass in double accumulation with Eigen.
/// \param p        the problem; must pass validate(p) (std::invalid_argument otherwise)
/// \param q        Q, fp32, p.q_elems() values in p.layout
/// \param k        K, fp32, p.kv_elems() values in p.layout
/// \param v        V, fp32, p.kv_elems() values in p.layout
/// \param d_o      dO, fp32, in Q's layout
/// \param forward  O and L of attention() on the same inputs, as a backward kernel receives
///                 them from the forward pass; nullptr computes them. Its `o` must hold
///                 q_elems() values and its `lse` lse_elems() (std::invalid_argument naming
///                 the field otherwise); S and P in it are not used.
/// \return dQ, dK, dV, D and the rounding floors of dQ and dK
Gradients attention_backward(const Problem& p, const float* q, const float* k, const float* v,
                             const float* d_o, const Result* forward = nullptr);

/// \brief Gradients from the plain float implementation.
struct GradientsPlain {
  std::vector<float> dq;     ///< dQ in Q's layout
  std::vector<float> dk;     ///< dK in K's layout, summed over each group
  std::vector<float> dv;     ///< dV in V's layout, summed over each group
  std::vector<float> delta;  ///< D, [B, H_q, N_q] contiguous
};

/// \brief The same backward as plain loops entirely in float, on O and L from
/// attention_plain(): an independent oracle for attention_backward() and the "plain
/// same-precision implementation" a tolerance for backward kernels can be measured against
/// (as attention_plain() is for the forward, see compare.h).
/// For fp16/bf16 problems P, dS and the gradients are rounded to that dtype where a framework
/// working in that precision stores them (P before dV = Pᵀ dO, dS before dQ and dK, dQ, dK and
/// dV at the end); dP, D and the sums stay in float.
/// \param p    the problem; must pass validate(p) (std::invalid_argument otherwise)
/// \param q    Q, fp32, in p.layout
/// \param k    K, fp32, in p.layout
/// \param v    V, fp32, in p.layout
/// \param d_o  dO, fp32, in Q's layout
/// \return dQ, dK, dV and D
GradientsPlain attention_backward_plain(const Problem& p, const float* q, const float* k,
                                        const float* v, const float* d_o);

}  // namespace fa::ref
