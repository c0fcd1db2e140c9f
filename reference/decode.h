/// \file decode.h
/// \brief The decoding reference: attention of each sequence's new queries against its cache
/// (contiguous or paged), and the split-KV merge.
///
/// decode_attention() gathers each sequence's keys and values through the cache and hands
/// them to the forward reference (attention.h) as the equivalent dense problem
/// (fa::dense_problem): the decoding step is that problem, read through another address map.
///
/// Split-KV cuts the keys of every sequence into disjoint ranges; each range gives a partial
/// result (O_s, L_s) over its keys alone (decode_partial(), in double), and the partials of
/// one row combine with the online-softmax rescale (merge_splits(), row by row with merge.h's
/// merge_row(), which ring attention shares):
///
/// ```text
///   L = log Σ_s exp(L_s)             (computed as m + log Σ_s exp(L_s − m), m = max_s L_s)
///   O = Σ_s exp(L_s − L) · O_s
/// ```
///
/// A range in which a row sees no key (past the sequence's end, or past the causal limit of
/// that row) gives O_s = 0 and L_s = −inf; its weight exp(−inf − L) is 0. A row whose every
/// partial is empty keeps O = 0 and L = −inf, never NaN. NaN in an input propagates.
#pragma once

#include <vector>

#include "common/decode.h"

namespace fa::ref {

/// \brief Output of a decoding step in double.
struct DecodeResult {
  std::vector<double> o;    ///< O, [B, q_len, H_q, d]
  std::vector<double> lse;  ///< L, [B, H_q, q_len]
};

/// \brief The decoding reference: every sequence's keys gathered through the cache, then
/// attention() on dense_problem(p, b). The cache must already hold this step's new keys and
/// values (append_kv). For fp16 and bf16 steps, Q and the cache hold values already rounded to
/// that type (fa::round_to), so that the reference sees what the GPU sees.
/// \param p the step (std::invalid_argument with validate()'s message if invalid)
/// \param q Q, [B, q_len, H_q, d] \param cache K and V, p.cache_elems() each
/// \return O and L
DecodeResult decode_attention(const DecodeProblem& p, const float* q, const HostKVCache& cache);

/// \brief Attention over the keys at positions [key_begin, key_end) of every sequence only
/// (each row also limited by its causal end and its sequence's length), in double: one split's
/// partial (O_s, L_s). Rows that see no key there: O = 0, L = −inf.
/// \param p the step \param q Q \param cache K and V
/// \param key_begin first position \param key_end one past the last (0 <= begin <= end,
/// std::invalid_argument otherwise) \return the partial O and L
DecodeResult decode_partial(const DecodeProblem& p, const float* q, const HostKVCache& cache,
                            int key_begin, int key_end);

/// \brief Combines partial results over disjoint key ranges of the same rows (formula above).
/// \param p the step \param parts at least one partial, each shaped like decode_attention()'s
/// result (std::invalid_argument otherwise) \return the merged O and L
DecodeResult merge_splits(const DecodeProblem& p, const std::vector<DecodeResult>& parts);

/// \brief Split-KV in full: the positions [0, max_kv_len) cut into `num_splits` ranges
/// [⌊s·N/n⌋, ⌊(s+1)·N/n⌋), a partial for each, merged. Ranges past a sequence's end (and
/// empty ones, when num_splits > N) give empty partials.
/// \param p the step \param q Q \param cache K and V
/// \param num_splits n >= 1 (std::invalid_argument otherwise) \return O and L
DecodeResult split_kv_attention(const DecodeProblem& p, const float* q, const HostKVCache& cache,
                                int num_splits);

}  // namespace fa::ref
