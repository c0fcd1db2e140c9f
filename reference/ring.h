/// \file ring.h
/// \brief Ring attention (context parallelism) simulated on the CPU, and its time model.
///
/// The sequence is sharded over P ranks. Each rank keeps its Q chunk(s); the K/V slices travel
/// round a ring: at step s = 0..P−1 rank r holds the K/V slice of rank (r − s) mod P. For every
/// (local q chunk, visiting kv chunk) pair it computes a partial (O, L) with attention() and
/// merges it into its running (O, L) with the online-softmax rescale (merge.h), in double.
///
/// Layouts (N = N_q = N_kv rows; C the chunk length):
///   - Contiguous: P chunks of C = N/P rows; rank r holds chunk r.
///   - Zigzag: 2P chunks of C = N/(2P) rows; rank r holds chunks r and 2P−1−r, which balances
///     the causal work: every rank does exactly (2P−1)·C² + C·(C+1) visible entries per head,
///     2C² at every step but the first (2C² + C).
///
/// Causal pairs (bottom-right aligned, which for N_q = N_kv is also top-left): kv chunk before
/// the q chunk: fully visible; the same chunk: diagonal (causal mask within the pair); after:
/// hidden, skipped (no work, no partial). Non-causal: every pair fully visible.
///
/// Refused (std::invalid_argument naming the parameter, its value and the limit): ranks < 1;
/// an invalid problem (validate()); causal with N_q ≠ N_kv; N_q or N_kv not divisible by P
/// (contiguous) or 2P (zigzag).
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.h"

namespace fa::ref {

/// \brief How the sequence is cut over the ranks (see the file comment).
enum class RingLayout { Contiguous, Zigzag };

/// \brief "contiguous" or "zigzag". \param l a layout \return its name, a static string
const char* ring_layout_name(RingLayout l);

/// \brief Output of the simulated ring.
struct RingResult {
  std::vector<double> o;    ///< O in Q's layout (p.q_strides()), gathered in the original order
  std::vector<double> lse;  ///< L, [B, H_q, N_q]
  /// Visible score entries computed by rank r at step s, summed over batches and query heads:
  /// work[r·P + s]. Hidden pairs count 0.
  std::vector<std::int64_t> work;
};

/// \brief Throws std::invalid_argument if the ring cannot run \p p (the refusals above).
/// \param p the problem \param ranks P \param layout the layout
void check_ring(const Problem& p, int ranks, RingLayout layout);

/// \brief The work of every rank at every step (RingResult::work) without any tensor: pure
/// arithmetic from the chunk pairs. \param p the problem \param ranks P \param layout the layout
/// \return work[r·P + s]
std::vector<std::int64_t> ring_work(const Problem& p, int ranks, RingLayout layout);

/// \brief The ring simulated pair by pair, exactly as the GPU step runs it (file comment).
/// \param p the problem (refusals above) \param q Q \param k K \param v V (fp32, in p.layout)
/// \param ranks P >= 1 \param layout the layout \return O, L and the work per rank and step
RingResult ring_attention(const Problem& p, const float* q, const float* k, const float* v,
                          int ranks, RingLayout layout);

/// \brief The time model of one ring, pure arithmetic. Ranks run in lockstep; while step s
/// computes, the K/V slice for step s+1 is sent (P − 1 sends, none after the last step).
///
/// ```text
///   compute_s = 4·d·max_r work[r, s] / flops_per_s       (two matmuls, 2 FLOPs per MAC)
///   send      = 2·B·H_kv·(N_kv/P)·d·dtype_size / bytes_per_s   (one K and one V slice)
///   step_s    = max(compute_s, send) for s < P−1;  step_{P−1} = compute_{P−1}
///   hidden    = Σ_{s<P−1} min(compute_s, send) / ((P−1)·send)   (1 when there is nothing to send)
/// ```
struct RingTime {
  std::vector<double> step_s;  ///< time of each step, seconds
  double total_s = 0;          ///< Σ step_s
  double compute_s = 0;        ///< Σ compute_s (the critical rank of each step)
  double send_s = 0;           ///< time of one slice send
  double hidden_fraction = 1;  ///< share of the communication hidden behind compute, in [0, 1]
  int exposed_steps = 0;       ///< sending steps whose compute is shorter than the send
};

/// \brief The model above. \param p the problem (check_ring's refusals but validate()'s: the
/// model needs no tensor, so N may pass the element limit) \param ranks P
/// \param layout the layout \param flops_per_s compute throughput of one rank (> 0)
/// \param bytes_per_s link bandwidth (> 0; infinity: sends take no time) \return the times
RingTime ring_time(const Problem& p, int ranks, RingLayout layout, double flops_per_s,
                   double bytes_per_s);

/// \brief The smallest N (N_q = N_kv, a multiple of P or 2P as the layout needs, at most
/// 2³⁰) at which ring_time() hides all communication (no exposed step); below it, communication
/// shows. \param p the problem (its N is ignored) \param ranks P \param layout the layout \param
/// flops_per_s as ring_time \param bytes_per_s as ring_time \return that N; the granule itself when
/// P = 1 or the bandwidth is infinite
std::int64_t ring_min_hidden_n(const Problem& p, int ranks, RingLayout layout, double flops_per_s,
                               double bytes_per_s);

}  // namespace fa::ref
