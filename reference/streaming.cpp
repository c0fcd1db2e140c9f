#include "reference/streaming.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace fa::ref {

void streaming_attention(const Problem& p, const float* q, const float* k, const float* v, float* o,
                         float* lse, StreamingOptions opt) {
  if (opt.block_q < 1)
    throw std::invalid_argument("block_q (" + std::to_string(opt.block_q) + ") must be at least 1");
  if (opt.block_kv < 1)
    throw std::invalid_argument("block_kv (" + std::to_string(opt.block_kv) +
                                ") must be at least 1");
  const std::string error = validate(p);
  if (!error.empty()) throw std::invalid_argument(error);

  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const Strides qs = p.q_strides(), kvs = p.kv_strides();
  const int d = p.head_dim, bq = opt.block_q, bkv = opt.block_kv;
  const float scale = p.softmax_scale();

  // The running state of one query tile (on the GPU: registers).
  std::vector<float> m(bq);        // running max m        [block_q]
  std::vector<float> l(bq);        // running denominator ℓ [block_q]
  std::vector<float> acc(bq * d);  // accumulator a        [block_q][d]
  std::vector<float> s(bkv);       // one row of the S tile [block_kv]

  for (int b = 0; b < p.batch; ++b) {
    for (int h = 0; h < p.heads_q; ++h) {
      const int g = h / p.group_size();  // GQA: the K/V head this query head reads
      const float* q_bh = q + b * qs.batch + h * qs.head;
      const float* k_bg = k + b * kvs.batch + g * kvs.head;
      const float* v_bg = v + b * kvs.batch + g * kvs.head;
      float* o_bh = o + b * qs.batch + h * qs.head;
      float* lse_bh = lse + (std::int64_t{b} * p.heads_q + h) * p.n_q;

      for (int i0 = 0; i0 < p.n_q; i0 += bq) {  // one query tile: rows [i0, i0 + rows)
        const int rows = std::min(bq, p.n_q - i0);
        // Nothing seen yet: m = -inf, ℓ = 0, a = 0.
        std::fill(m.begin(), m.end(), kNegInf);
        std::fill(l.begin(), l.end(), 0.f);
        std::fill(acc.begin(), acc.end(), 0.f);

        // Causal: keys from kv_end(last row) on are hidden from every row of this tile, so
        // the stream stops there — the kernels skip those tiles the same way.
        const int kv_stop = p.kv_end(i0 + rows - 1);
        for (int j0 = 0; j0 < kv_stop; j0 += bkv) {  // one K/V tile: keys [j0, j0 + cols)
          const int cols = std::min(bkv, p.n_kv - j0);
          for (int r = 0; r < rows; ++r) {
            const int i = i0 + r, end = p.kv_end(i);
            const float* qi = q_bh + i * qs.row;
            float* a = &acc[r * d];  // this row's a [d]

            // S tile row: s_j = scale · q_i · k_j, -inf where the mask hides key j.
            float row_max = kNegInf;
            for (int c = 0; c < cols; ++c) {
              const float* kj = k_bg + (j0 + c) * kvs.row;
              float dot = 0.f;
              for (int t = 0; t < d; ++t) dot += qi[t] * kj[t];
              s[c] = (j0 + c < end) ? scale * dot : kNegInf;
              row_max = std::max(row_max, s[c]);
            }

            const float m_new = std::max(m[r], row_max);  // m_new = max(m_old, rowmax(S_tile))
            // Guard: m_new = -inf means every key so far is masked, and exp(-inf − (-inf))
            // would be NaN. Measuring against 0 instead gives α = exp(-inf) = 0 and
            // exp(s − 0) = 0 for the masked scores: the state stays empty, no NaN.
            const float m_ref = (m_new == kNegInf) ? 0.f : m_new;

            // --- rescale: the heart of the online softmax (an exercise blanks these) ---
            const float alpha = std::exp(m[r] - m_ref);  // α = exp(m_old − m_new)
            l[r] *= alpha;                               // ℓ ← ℓ·α
            for (int t = 0; t < d; ++t) a[t] *= alpha;   // a ← a·α
            // --- end rescale ---

            for (int c = 0; c < cols; ++c) {
              const float pc = std::exp(s[c] - m_ref);  // p̃_j = exp(s_j − m_new)
              const float* vj = v_bg + (j0 + c) * kvs.row;
              l[r] += pc;                                      // ℓ ← ℓ + Σ_j p̃_j
              for (int t = 0; t < d; ++t) a[t] += pc * vj[t];  // a ← a + Σ_j p̃_j · v_j
            }
            m[r] = m_new;  // m_old ← m_new
          }
        }

        // Finalize: O = a / ℓ, L = m + log ℓ. ℓ = 0 only for a row that saw no key at all:
        // O = 0 and L = -inf by definition, instead of 0/0.
        for (int r = 0; r < rows; ++r) {
          float* oi = o_bh + (i0 + r) * qs.row;
          const float* a = &acc[r * d];
          if (l[r] == 0.f) {
            std::fill(oi, oi + d, 0.f);
            lse_bh[i0 + r] = kNegInf;
          } else {
            for (int t = 0; t < d; ++t) oi[t] = a[t] / l[r];
            lse_bh[i0 + r] = m[r] + std::log(l[r]);
          }
        }
      }
    }
  }
}

}  // namespace fa::ref
