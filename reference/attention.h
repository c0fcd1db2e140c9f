/// \file attention.h
/// \brief The single source of truth: attention computed the obvious way.
///
/// Every step, test and benchmark compares against `attention()`: Eigen matrices in double,
/// one (batch, head) slice at a time, exactly as the formula reads —
///
/// ```text
///   S = scale · Q Kᵀ          [N_q, N_kv], -inf where the causal mask hides a key
///   P = softmax_rows(S)       [N_q, N_kv], stable: exp(S − rowmax) / rowsum
///   O = P V                   [N_q, d]
///   L = rowmax + log rowsum   [N_q], the row logsumexp (natural log)
/// ```
///
/// Why double: the kernels accumulate in fp32 (or fp16/bf16 inputs with fp32 accumulators),
/// so a double reference is a yardstick whose own error is far below anything we measure.
/// Why it materialises S and P: this is the O(N²)-memory algorithm FlashAttention avoids;
/// the reference can afford it for the sizes the tests use.
///
/// `attention_plain()` is the same algorithm as plain loops entirely in float. It serves
/// twice: as an independent oracle for `attention()` (no Eigen, no double), and as the
/// "plain same-precision implementation" whose error against `attention()` sets the
/// tolerance for low-precision steps (flash-attention's 2× rule, see fa::Tolerance in compare.h
/// and docs/conventions.md).
///
/// Semantics shared with every step (see problem.h):
///   - GQA: query head h reads key/value head h / group_size().
///   - Causal masks are bottom-right aligned: row i sees keys [0, kv_end(i)).
///   - A row that sees no key has O = 0 and L = -inf, never NaN.
///   - NaN in Q, K or V propagates to the outputs that depend on it; it is never hidden.
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.h"

/// \brief The CPU reference: attention in double, the plain float oracle and the
/// streaming model of the online softmax.
namespace fa::ref {

/// \brief Output of the double reference.
struct Result {
  std::vector<double> o;    ///< O in Q's layout (p.q_strides()), q_elems() values
  std::vector<double> lse;  ///< L, [B, H_q, N_q] contiguous
  std::vector<double> s;    ///< scaled scores, [B, H_q, N_q, N_kv], -inf where masked;
                            ///< empty unless keep_scores
  std::vector<double> p;    ///< probabilities, [B, H_q, N_q, N_kv], 0 where masked;
                            ///< empty unless keep_scores
};

/// \brief Attention in double accumulation with Eigen: the reference every step is judged by.
/// \param p            the problem; must pass validate(p) (std::invalid_argument otherwise)
/// \param q            Q, fp32, p.q_elems() values in p.layout
/// \param k            K, fp32, p.kv_elems() values in p.layout
/// \param v            V, fp32, p.kv_elems() values in p.layout
/// \param keep_scores  also return S and P (B·H_q·N_q·N_kv doubles each)
/// \return O, L and, when asked for, S and P
Result attention(const Problem& p, const float* q, const float* k, const float* v,
                 bool keep_scores = false);

/// \brief The same algorithm as plain loops entirely in float: an independent oracle for
/// attention() and the "plain same-precision implementation" that sets test tolerances.
/// For fp16/bf16 problems S, P and O are rounded to that dtype where a framework working in
/// that precision stores them (S after the first matmul, P before the second, O at the end).
/// \param p    the problem; must pass validate(p) (std::invalid_argument otherwise)
/// \param q    Q, fp32, in p.layout
/// \param k    K, fp32, in p.layout
/// \param v    V, fp32, in p.layout
/// \param lse  if not null, receives L, [B, H_q, N_q] contiguous
/// \return O in Q's layout
std::vector<float> attention_plain(const Problem& p, const float* q, const float* k, const float* v,
                                   std::vector<float>* lse = nullptr);

/// \brief The rule for checking a large problem against the double reference. One query
/// row costs N_kv·max(d, 16) operations (its QKᵀ and PV products; the 16 stands for the
/// exponential when d is small). Every row of every head is checked while B·H_q·N_q rows cost
/// at most kFullCheckMacs = 2³⁰ (about a second on one core); above that, a seeded sample of
/// max(2, ⌈2³⁰ / (N_kv·max(d, 16)) / (B·H_q)⌉) rows (at most N_q) of every (batch, head), the
/// first and the last row of each included (sample_rows()).
constexpr std::int64_t kFullCheckMacs = std::int64_t{1} << 30;

/// \brief How many query rows of each (batch, head) the rule above checks.
/// \param p the problem \return N_q when every row is checked, else the sample size per head
int rows_per_head_to_check(const Problem& p);

/// \brief A seeded sample of query rows: for every (b, h), rows 0 and N_q − 1 and
/// `per_head` − 2 more distinct rows drawn uniformly (mt19937_64 from \p seed, heads in
/// order); every row when per_head >= N_q. Deterministic for a given seed.
/// \param p the problem \param per_head rows per head (at least 1; 2 takes first and last)
/// \param seed the seed \return flat row indices (b·H_q + h)·N_q + i, ascending — the index
/// of the row's L in [B, H_q, N_q]
std::vector<std::int64_t> sample_rows(const Problem& p, int per_head, std::uint64_t seed);

/// \brief The double reference for some query rows only.
struct RowsResult {
  std::vector<std::int64_t> rows;  ///< the rows, as given: (b·H_q + h)·N_q + i
  std::vector<double> o;           ///< O of each row, [rows.size(), d]
  std::vector<double> lse;         ///< L of each row, [rows.size()]
};

/// \brief attention() for the given query rows only: the same computation in double, on the
/// rows of each head gathered together, with memory rows.size()·N_kv (never N_q·N_kv). Each
/// row's O and L are attention()'s for that row up to the order of the double sums (Eigen
/// blocks a few rows differently from a whole head: relative differences ~1e-15).
/// \param p the problem; must pass validate(p) (std::invalid_argument otherwise)
/// \param q Q \param k K \param v V (fp32, in p.layout)
/// \param rows flat row indices in [0, p.lse_elems()) (std::invalid_argument otherwise)
/// \return O and L of those rows
RowsResult attention_rows(const Problem& p, const float* q, const float* k, const float* v,
                          const std::vector<std::int64_t>& rows);

}  // namespace fa::ref
