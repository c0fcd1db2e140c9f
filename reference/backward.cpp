// backward.cpp — the backward pass in double (Eigen) and in plain float loops (backward.h).
#include "reference/backward.h"

#include "common/inputs.h"  // round_to

#include <Eigen/Dense>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace fa::ref {
namespace {

// Row-major, like the tensors (see attention.cpp).
using MatrixF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstHeadF = Eigen::Map<const MatrixF, 0, Eigen::OuterStride<>>;
using ConstHeadD = Eigen::Map<const MatrixD, 0, Eigen::OuterStride<>>;
using HeadD = Eigen::Map<MatrixD, 0, Eigen::OuterStride<>>;

void check_problem(const Problem& p) {
  const std::string error = validate(p);
  if (!error.empty()) throw std::invalid_argument(error);
}

// A forward result handed in must have the sizes of this problem's O and L.
void check_forward(const Problem& p, const Result& f) {
  auto check = [](const char* name, std::size_t have, std::int64_t want, const char* what) {
    if (have != static_cast<std::size_t>(want))
      throw std::invalid_argument(std::string(name) + " (" + std::to_string(have) +
                                  " values) must hold " + what + " = " + std::to_string(want) +
                                  " values");
  };
  check("forward.o", f.o.size(), p.q_elems(), "q_elems()");
  check("forward.lse", f.lse.size(), p.lse_elems(), "lse_elems()");
}

}  // namespace

Gradients attention_backward(const Problem& p, const float* q, const float* k, const float* v,
                             const float* d_o, const Result* forward) {
  check_problem(p);
  Result computed;
  if (forward) {
    check_forward(p, *forward);
  } else {
    computed = attention(p, q, k, v);
    forward = &computed;
  }
  const Strides qs = p.q_strides(), kvs = p.kv_strides();
  const int n_q = p.n_q, n_kv = p.n_kv, d = p.head_dim;
  const double scale = p.softmax_scale();  // the float the kernels use (see attention.cpp)

  Gradients g;
  g.dq.assign(p.q_elems(), 0.0);
  g.dk.assign(p.kv_elems(), 0.0);
  g.dv.assign(p.kv_elems(), 0.0);
  g.delta.assign(p.lse_elems(), 0.0);
  g.dq_floor.assign(p.q_elems(), 0.0);
  g.dk_floor.assign(p.kv_elems(), 0.0);   // Σ (err · Q)² until the square root at the end
  g.dv_floor.assign(p.kv_elems(), 0.0);   // Σ (P · err_exp · dO)² until the square root
  const double u = std::ldexp(1.0, -24);  // fp32's unit roundoff

  for (int b = 0; b < p.batch; ++b) {
    for (int h = 0; h < p.heads_q; ++h) {
      const int kv_h = h / p.group_size();  // GQA: the K/V head this query head reads
      const std::int64_t bh = std::int64_t{b} * p.heads_q + h;
      const std::int64_t q_off = b * qs.batch + h * qs.head;
      const std::int64_t kv_off = b * kvs.batch + kv_h * kvs.head;
      const Eigen::OuterStride<> q_row(qs.row), kv_row(kvs.row);
      // This head's slices in double: every product and sum below is in double.
      const MatrixD Q = ConstHeadF(q + q_off, n_q, d, q_row).cast<double>();     // [N_q, d]
      const MatrixD dO = ConstHeadF(d_o + q_off, n_q, d, q_row).cast<double>();  // [N_q, d]
      const MatrixD K = ConstHeadF(k + kv_off, n_kv, d, kv_row).cast<double>();  // [N_kv, d]
      const MatrixD V = ConstHeadF(v + kv_off, n_kv, d, kv_row).cast<double>();  // [N_kv, d]
      const ConstHeadD O(forward->o.data() + q_off, n_q, d, q_row);              // [N_q, d]
      HeadD dQ(g.dq.data() + q_off, n_q, d, q_row);                              // [N_q, d]
      // Shared by the query heads of one group: each adds its contribution.
      HeadD dK(g.dk.data() + kv_off, n_kv, d, kv_row);               // [N_kv, d]
      HeadD dV(g.dv.data() + kv_off, n_kv, d, kv_row);               // [N_kv, d]
      HeadD dQ_floor(g.dq_floor.data() + q_off, n_q, d, q_row);      // [N_q, d]
      HeadD dK_floor2(g.dk_floor.data() + kv_off, n_kv, d, kv_row);  // [N_kv, d], squared
      HeadD dV_floor2(g.dv_floor.data() + kv_off, n_kv, d, kv_row);  // [N_kv, d], squared

      // Row by row, over the keys the row sees only (like the forward): a hidden key's K and
      // V never meet this row's Q and dO, so nothing (not even a NaN) crosses the mask.
      for (int i = 0; i < n_q; ++i) {
        const int e = p.kv_end(i);  // row i sees keys [0, e)
        if (e == 0) continue;       // sees nothing: dQ = 0, D = 0, adds nothing to dK, dV
        const double lse = forward->lse[bh * n_q + i];
        const auto Ke = K.topRows(e), Ve = V.topRows(e);
        // P recomputed from L: exp(S − L) is the softmax without a second pass over the row.
        const Eigen::RowVectorXd P =
            ((scale * (Q.row(i) * Ke.transpose())).array() - lse).exp().matrix();  // [e]
        const Eigen::RowVectorXd dP = dO.row(i) * Ve.transpose();                  // [e]
        const double D = dO.row(i).dot(O.row(i));
        g.delta[bh * n_q + i] = D;
        const Eigen::RowVectorXd dS = (P.array() * (dP.array() - D)).matrix();  // [e]
        dV.topRows(e) += P.transpose() * dO.row(i);            // Pᵀ dO, one row's share
        dQ.row(i) = scale * (dS * Ke);                         // scale · dS K
        dK.topRows(e) += scale * (dS.transpose() * Q.row(i));  // scale · dSᵀ Q, one row's share

        // The rounding floor (backward.h): P_ij's relative error from the fp32 rounding of its
        // exponent (the dot product Q_i · K_j and L_i as fp32 stores it), and dS_ij's from that
        // and from the fp32 sums of dP_ij and D_i, carried through dV = Pᵀ dO,
        // dQ = scale · dS K and dK = scale · dSᵀ Q as independent errors.
        const Eigen::RowVectorXd abs_dO = dO.row(i).cwiseAbs();
        const Eigen::RowVectorXd err_exp =  // [e]
            (u *
             (scale * (Q.row(i).cwiseAbs() * Ke.cwiseAbs().transpose()).array() + std::abs(lse)))
                .matrix();
        const Eigen::ArrayXXd p_err = (P.array() * err_exp.array()).transpose();  // [e, 1]
        dV_floor2.topRows(e) += (p_err.matrix() * abs_dO).cwiseAbs2();
        const Eigen::ArrayXd sum_err =  // dP_ij's and D_i's first-order dot-product errors
            u * ((abs_dO * Ve.cwiseAbs().transpose()).array() + abs_dO.dot(O.row(i).cwiseAbs()))
                    .transpose();
        const Eigen::ArrayXd exp_err =
            err_exp.array().transpose() * (dP.array() - D).abs().transpose();
        const Eigen::RowVectorXd err2 =  // [e]
            (P.array().transpose().square() * (sum_err.square() + exp_err.square()))
                .transpose()
                .matrix();
        dQ_floor.row(i) = scale * (err2 * Ke.cwiseAbs2()).cwiseSqrt();
        dK_floor2.topRows(e) += err2.transpose() * Q.row(i).cwiseAbs2();
      }
    }
  }
  for (double& x : g.dk_floor) x = scale * std::sqrt(x);
  for (double& x : g.dv_floor) x = std::sqrt(x);
  return g;
}

GradientsPlain attention_backward_plain(const Problem& p, const float* q, const float* k,
                                        const float* v, const float* d_o) {
  check_problem(p);
  // The forward in float gives O and L, as a same-precision framework would have them.
  std::vector<float> lse;
  const std::vector<float> o = attention_plain(p, q, k, v, &lse);
  const Strides qs = p.q_strides(), kvs = p.kv_strides();
  const int d = p.head_dim;
  const float scale = p.softmax_scale();
  const bool lowp = p.dtype != DType::F32;
  auto rnd = [&](float x) { return lowp ? round_to(p.dtype, x) : x; };

  GradientsPlain g;
  g.dq.assign(p.q_elems(), 0.f);
  g.dk.assign(p.kv_elems(), 0.f);
  g.dv.assign(p.kv_elems(), 0.f);
  g.delta.assign(p.lse_elems(), 0.f);
  std::vector<float> pr(p.n_kv), ds(p.n_kv);  // one row of P and of dS

  for (int b = 0; b < p.batch; ++b) {
    for (int h = 0; h < p.heads_q; ++h) {
      const int kv_h = h / p.group_size();
      const std::int64_t bh = std::int64_t{b} * p.heads_q + h;
      const std::int64_t q_off = b * qs.batch + h * qs.head;
      const std::int64_t kv_off = b * kvs.batch + kv_h * kvs.head;
      for (int i = 0; i < p.n_q; ++i) {
        const int e = p.kv_end(i);
        if (e == 0) continue;  // dQ = 0, D = 0, nothing for dK, dV
        const float* qi = q + q_off + i * qs.row;
        const float* doi = d_o + q_off + i * qs.row;
        const float* oi = o.data() + q_off + i * qs.row;
        float* dqi = g.dq.data() + q_off + i * qs.row;
        const float li = lse[bh * p.n_q + i];
        float D = 0.f;
        for (int t = 0; t < d; ++t) D += doi[t] * oi[t];
        g.delta[bh * p.n_q + i] = D;
        for (int j = 0; j < e; ++j) {
          const float* kj = k + kv_off + j * kvs.row;
          const float* vj = v + kv_off + j * kvs.row;
          float s = 0.f, dp = 0.f;
          for (int t = 0; t < d; ++t) {
            s += qi[t] * kj[t];
            dp += doi[t] * vj[t];
          }
          pr[j] = rnd(std::exp(rnd(scale * s) - li));
          ds[j] = rnd(pr[j] * (dp - D));
        }
        // dQ_i = scale · Σ_j dS_ij K_j; dK_j += scale · dS_ij Q_i; dV_j += P_ij dO_i.
        for (int j = 0; j < e; ++j) {
          const float* kj = k + kv_off + j * kvs.row;
          float* dkj = g.dk.data() + kv_off + j * kvs.row;
          float* dvj = g.dv.data() + kv_off + j * kvs.row;
          for (int t = 0; t < d; ++t) {
            dqi[t] += ds[j] * kj[t];
            dkj[t] += scale * ds[j] * qi[t];
            dvj[t] += pr[j] * doi[t];
          }
        }
        for (int t = 0; t < d; ++t) dqi[t] = scale * dqi[t];
      }
    }
  }
  if (lowp)
    for (auto* t : {&g.dq, &g.dk, &g.dv})
      for (float& x : *t) x = rnd(x);
  return g;
}

}  // namespace fa::ref
