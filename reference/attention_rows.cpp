// attention_rows.cpp — the double reference for selected query rows, and the row sampler
// that picks them for problems too large to check every row (see attention.h).
#include "reference/attention.h"

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>

namespace fa::ref {
namespace {

using MatrixF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstHeadF = Eigen::Map<const MatrixF, 0, Eigen::OuterStride<>>;

// At most this many scores (doubles) of S at a time: 32 MiB.
constexpr std::int64_t kMaxRowScores = std::int64_t{1} << 22;

}  // namespace

int rows_per_head_to_check(const Problem& p) {
  const double heads = double(p.batch) * p.heads_q;
  const double per_row = double(p.n_kv) * std::max(p.head_dim, 16);  // one row's cost
  const double rows = std::ceil(double(kFullCheckMacs) / per_row / heads);
  return static_cast<int>(std::min<double>(p.n_q, std::max(2.0, rows)));
}

std::vector<std::int64_t> sample_rows(const Problem& p, int per_head, std::uint64_t seed) {
  if (per_head < 1)
    throw std::invalid_argument("per_head (" + std::to_string(per_head) + ") must be at least 1");
  const std::int64_t heads = std::int64_t{p.batch} * p.heads_q, n = p.n_q;
  std::vector<std::int64_t> out;
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> picked;
  for (std::int64_t bh = 0; bh < heads; ++bh) {
    const std::int64_t base = bh * n;
    if (per_head >= n) {
      for (std::int64_t i = 0; i < n; ++i) out.push_back(base + i);
      continue;
    }
    picked.assign({0, n - 1});
    if (per_head == 1) picked.pop_back();
    // Floyd's algorithm: per_head − 2 distinct rows among 1 .. n−2, uniformly.
    const std::int64_t inner = n - 2, want = per_head - static_cast<std::int64_t>(picked.size());
    std::vector<std::int64_t> drawn;
    for (std::int64_t j = inner - want; j < inner && want > 0; ++j) {
      const std::int64_t t = std::uniform_int_distribution<std::int64_t>(0, j)(rng) + 1;
      drawn.push_back(std::find(drawn.begin(), drawn.end(), t) == drawn.end() ? t : j + 1);
    }
    picked.insert(picked.end(), drawn.begin(), drawn.end());
    std::sort(picked.begin(), picked.end());
    for (std::int64_t i : picked) out.push_back(base + i);
  }
  return out;
}

RowsResult attention_rows(const Problem& p, const float* q, const float* k, const float* v,
                          const std::vector<std::int64_t>& rows) {
  if (const std::string e = validate(p); !e.empty()) throw std::invalid_argument(e);
  for (std::int64_t r : rows)
    if (r < 0 || r >= p.lse_elems())
      throw std::invalid_argument("row (" + std::to_string(r) + ") must be in [0, " +
                                  std::to_string(p.lse_elems()) + ")");
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  const Strides qs = p.q_strides(), kvs = p.kv_strides();
  const int n_kv = p.n_kv, d = p.head_dim;
  const double scale = p.softmax_scale();

  RowsResult r;
  r.rows = rows;
  r.o.assign(rows.size() * std::size_t(d), 0.0);
  r.lse.assign(rows.size(), 0.0);
  // The positions in `rows`, grouped by head: each head's K and V are read once.
  std::vector<std::size_t> order(rows.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return rows[a] / p.n_q < rows[b] / p.n_q; });
  for (std::size_t first = 0; first < order.size();) {
    const std::int64_t bh = rows[order[first]] / p.n_q;
    std::size_t last = first;
    while (last < order.size() && rows[order[last]] / p.n_q == bh) ++last;
    const int b = static_cast<int>(bh / p.heads_q), h = static_cast<int>(bh % p.heads_q);
    const int g = h / p.group_size();
    const int count = static_cast<int>(last - first);
    const MatrixD K =
        ConstHeadF(k + b * kvs.batch + g * kvs.head, n_kv, d, Eigen::OuterStride<>(kvs.row))
            .cast<double>();
    const MatrixD V =
        ConstHeadF(v + b * kvs.batch + g * kvs.head, n_kv, d, Eigen::OuterStride<>(kvs.row))
            .cast<double>();
    // As attention() does for the whole head, on these rows, a few at a time so that S stays
    // within kMaxRowScores doubles: Q in double, S = scale·QKᵀ, softmax, O = PV.
    const int chunk = static_cast<int>(std::max<std::int64_t>(1, kMaxRowScores / n_kv));
    Eigen::RowVectorXd P(n_kv);
    for (int c0 = 0; c0 < count; c0 += chunk) {
      const int rows_here = std::min(chunk, count - c0);
      MatrixD Q(rows_here, d);
      for (int t = 0; t < rows_here; ++t) {
        const std::int64_t i = rows[order[first + c0 + t]] % p.n_q;
        const float* qi = q + b * qs.batch + h * qs.head + i * qs.row;
        for (int c = 0; c < d; ++c) Q(t, c) = qi[c];
      }
      const MatrixD S = scale * (Q * K.transpose());  // [rows_here, N_kv]
      for (int t = 0; t < rows_here; ++t) {
        const std::size_t at = order[first + c0 + t];
        const int i = static_cast<int>(rows[at] % p.n_q);
        const int e = p.kv_end(i);
        if (e == 0) {  // sees no key: O = 0, L = -inf
          r.lse[at] = kNegInf;
          continue;
        }
        const double m = S.row(t).head(e).maxCoeff();
        P.head(e) = (S.row(t).head(e).array() - m).exp().matrix();
        const double l = P.head(e).sum();
        P.head(e) /= l;
        r.lse[at] = m + std::log(l);
        Eigen::Map<Eigen::RowVectorXd>(r.o.data() + at * d, d) = P.head(e) * V.topRows(e);
      }
    }
    first = last;
  }
  return r;
}

}  // namespace fa::ref
