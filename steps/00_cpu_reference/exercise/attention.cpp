#include "reference/attention.h"

#include "common/inputs.h"  // round_to

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>

namespace fa::ref {
namespace {

// Row-major, like the tensors: one sequence position per row, d contiguous.
using MatrixF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
// A view of one head's rows inside a [B, N, H, d] or [B, H, N, d] tensor: consecutive
// rows are `row` elements apart (the outer stride), d is contiguous.
using ConstHeadF = Eigen::Map<const MatrixF, 0, Eigen::OuterStride<>>;
using HeadD = Eigen::Map<MatrixD, 0, Eigen::OuterStride<>>;

void check_problem(const Problem& p) {
  const std::string error = validate(p);
  if (!error.empty()) throw std::invalid_argument(error);
}

}  // namespace

Result attention(const Problem& p, const float* q, const float* k, const float* v,
                 bool keep_scores) {
  check_problem(p);
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  const Strides qs = p.q_strides(), kvs = p.kv_strides();
  const int n_q = p.n_q, n_kv = p.n_kv, d = p.head_dim;
  // The kernels scale by this float; using the same value keeps the comparison about
  // the algorithm, not about how 1/sqrt(d) was rounded.
  const double scale = p.softmax_scale();

  Result r;
  r.o.assign(p.q_elems(), 0.0);
  r.lse.assign(p.lse_elems(), 0.0);
  const std::int64_t nxn = std::int64_t{n_q} * n_kv;  // one head's S or P
  if (keep_scores) {
    r.s.assign(p.lse_elems() * n_kv, 0.0);
    r.p.assign(p.lse_elems() * n_kv, 0.0);
  }

  for (int b = 0; b < p.batch; ++b) {
    for (int h = 0; h < p.heads_q; ++h) {
      const int g = h / p.group_size();  // GQA: the K/V head this query head reads
      const std::int64_t bh = std::int64_t{b} * p.heads_q + h;
      // Cast this head's slices to double: every product and sum below is in double.
      const MatrixD Q = ConstHeadF(q + b * qs.batch + h * qs.head, n_q, d,
                                   Eigen::OuterStride<>(qs.row))
                            .cast<double>();  // [N_q, d]
      const MatrixD K = ConstHeadF(k + b * kvs.batch + g * kvs.head, n_kv, d,
                                   Eigen::OuterStride<>(kvs.row))
                            .cast<double>();  // [N_kv, d]
      const MatrixD V = ConstHeadF(v + b * kvs.batch + g * kvs.head, n_kv, d,
                                   Eigen::OuterStride<>(kvs.row))
                            .cast<double>();  // [N_kv, d]
      HeadD O(r.o.data() + b * qs.batch + h * qs.head, n_q, d,
              Eigen::OuterStride<>(qs.row));  // [N_q, d]

      MatrixD S = scale * (Q * K.transpose());  // [N_q, N_kv]
      MatrixD P = MatrixD::Zero(n_q, n_kv);     // [N_q, N_kv]
      for (int i = 0; i < n_q; ++i) {
        const int e = p.kv_end(i);  // row i sees keys [0, e)
        S.row(i).tail(n_kv - e).setConstant(kNegInf);
        if (e == 0) {  // sees nothing: O = 0 (already), L = -inf, and no 0/0
          r.lse[bh * n_q + i] = kNegInf;
          continue;
        }
        // TODO(exercise): the stable softmax. exp(s) overflows double once s > 709, and the
        // scores of large inputs are far above that. Choose the m that every score of the row
        // is measured against so that the largest exponent is exactly exp(0) = 1 (only the
        // visible keys, head(e), count). As given, m = 0: the plain, unstable softmax.
        const double m = 0.0;
        P.row(i).head(e) = (S.row(i).head(e).array() - m).exp().matrix();
        const double l = P.row(i).head(e).sum();
        P.row(i).head(e) /= l;
        r.lse[bh * n_q + i] = m + std::log(l);
        // Only the visible keys take part: a masked key's weight is exactly 0, but
        // 0 · NaN = NaN would let a NaN in a hidden V row leak into this row.
        O.row(i) = P.row(i).head(e) * V.topRows(e);
      }
      if (keep_scores) {
        Eigen::Map<MatrixD>(r.s.data() + bh * nxn, n_q, n_kv) = S;
        Eigen::Map<MatrixD>(r.p.data() + bh * nxn, n_q, n_kv) = P;
      }
    }
  }
  return r;
}

std::vector<float> attention_plain(const Problem& p, const float* q, const float* k, const float* v,
                                   std::vector<float>* lse) {
  check_problem(p);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const Strides qs = p.q_strides(), kvs = p.kv_strides();
  const int d = p.head_dim;
  const float scale = p.softmax_scale();

  std::vector<float> o(p.q_elems(), 0.f);
  if (lse) lse->assign(p.lse_elems(), 0.f);
  std::vector<float> s(p.n_kv);  // one row of S, then of exp(S − m)
  std::vector<float> acc(d);     // one row of Σ_j exp(s_j − m) · v_j
  // fp16/bf16: S, P and O are rounded to the dtype where a same-precision implementation
  // stores them; the inputs were rounded already (make_inputs).
  const bool lowp = p.dtype != DType::F32;
  auto rnd = [&](float x) { return lowp ? round_to(p.dtype, x) : x; };

  for (int b = 0; b < p.batch; ++b) {
    for (int h = 0; h < p.heads_q; ++h) {
      const int g = h / p.group_size();
      const float* q_bh = q + b * qs.batch + h * qs.head;
      const float* k_bg = k + b * kvs.batch + g * kvs.head;
      const float* v_bg = v + b * kvs.batch + g * kvs.head;
      float* o_bh = o.data() + b * qs.batch + h * qs.head;
      for (int i = 0; i < p.n_q; ++i) {
        const int e = p.kv_end(i);
        const float* qi = q_bh + i * qs.row;
        float* oi = o_bh + i * qs.row;
        float l_out = kNegInf;  // L of a row that sees nothing; O stays 0
        if (e > 0) {
          // Pass 1: scores and their max.
          float m = kNegInf;
          for (int j = 0; j < e; ++j) {
            const float* kj = k_bg + j * kvs.row;
            float dot = 0.f;
            for (int t = 0; t < d; ++t) dot += qi[t] * kj[t];
            s[j] = rnd(scale * dot);
            m = std::max(m, s[j]);
          }
          // Pass 2: exponentials and their sum. A NaN score makes exp(NaN − m) NaN, so
          // the sum, and with it the whole row, becomes NaN, whatever max() did with it.
          float l = 0.f;
          for (int j = 0; j < e; ++j) {
            s[j] = std::exp(s[j] - m);
            l += s[j];
          }
          // Pass 3: O = Σ_j p_j · v_j / l. In fp16/bf16, P is rounded before the second
          // matmul (as a same-precision framework does) and so is O.
          std::fill(acc.begin(), acc.end(), 0.f);
          if (lowp) {
            for (int j = 0; j < e; ++j) {
              const float pj = rnd(s[j] / l);
              const float* vj = v_bg + j * kvs.row;
              for (int t = 0; t < d; ++t) acc[t] += pj * vj[t];
            }
            for (int t = 0; t < d; ++t) oi[t] = rnd(acc[t]);
          } else {
            for (int j = 0; j < e; ++j) {
              const float* vj = v_bg + j * kvs.row;
              for (int t = 0; t < d; ++t) acc[t] += s[j] * vj[t];
            }
            for (int t = 0; t < d; ++t) oi[t] = acc[t] / l;
          }
          l_out = m + std::log(l);
        }
        if (lse) (*lse)[(std::int64_t{b} * p.heads_q + h) * p.n_q + i] = l_out;
      }
    }
  }
  return o;
}

}  // namespace fa::ref
