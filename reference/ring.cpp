#include "reference/ring.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

#include "reference/attention.h"
#include "reference/merge.h"

namespace fa::ref {
namespace {

[[noreturn]] void refuse(const std::string& what) {
  throw std::invalid_argument("ring attention: " + what);
}

/// The refusals that do not depend on the tensors' size (the time model shares them).
void check_shape(const Problem& p, int ranks, RingLayout layout) {
  if (ranks < 1) refuse("ranks (" + std::to_string(ranks) + ") must be at least 1");
  if (p.causal && p.n_q != p.n_kv) {
    refuse("causal needs N_q = N_kv; got N_q " + std::to_string(p.n_q) + ", N_kv " +
           std::to_string(p.n_kv));
  }
  const int chunks = layout == RingLayout::Zigzag ? 2 * ranks : ranks;
  const std::string limit =
      layout == RingLayout::Zigzag
          ? "2·ranks (" + std::to_string(chunks) + ") for the zigzag layout"
          : "ranks (" + std::to_string(chunks) + ") for the contiguous layout";
  if (p.n_q < 1 || p.n_q % chunks != 0) {
    refuse("N_q (" + std::to_string(p.n_q) + ") must be a positive multiple of " + limit);
  }
  if (p.n_kv < 1 || p.n_kv % chunks != 0) {
    refuse("N_kv (" + std::to_string(p.n_kv) + ") must be a positive multiple of " + limit);
  }
}

/// The chunks rank r holds, in order.
std::vector<int> chunks_of(int r, int ranks, RingLayout layout) {
  if (layout == RingLayout::Contiguous) return {r};
  return {r, 2 * ranks - 1 - r};
}

enum class Pair { Full, Diagonal, Hidden };

Pair relation(const Problem& p, int qc, int kc) {
  if (!p.causal || kc < qc) return Pair::Full;
  return kc == qc ? Pair::Diagonal : Pair::Hidden;
}

/// Visible entries of one pair, for one (batch, query head).
std::int64_t pair_entries(Pair rel, std::int64_t cq, std::int64_t ckv) {
  switch (rel) {
    case Pair::Full:
      return cq * ckv;
    case Pair::Diagonal:  // cq = ckv (causal needs N_q = N_kv)
      return cq * (cq + 1) / 2;
    case Pair::Hidden:
      break;
  }
  return 0;
}

int num_chunks(int ranks, RingLayout layout) {
  return layout == RingLayout::Zigzag ? 2 * ranks : ranks;
}

/// Rows [row0, row0 + rows) of every (b, head) of `src` (strides `from`) into `dst` (`to`).
void copy_rows(const float* src, Strides from, float* dst, Strides to, int batch, int heads,
               int row0, int rows, int d) {
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < rows; ++i)
        std::copy_n(src + b * from.batch + h * from.head + (row0 + i) * from.row, d,
                    dst + b * to.batch + h * to.head + i * to.row);
}

/// work[r·P + s] in T: int64 for the simulation's counts, double for the time model (whose N
/// may make B·H_q·C² overflow 64 bits).
template <typename T>
std::vector<T> work_table(const Problem& p, int ranks, RingLayout layout) {
  check_shape(p, ranks, layout);
  const int n = num_chunks(ranks, layout);
  const std::int64_t cq = p.n_q / n, ckv = p.n_kv / n;
  const T heads = T(p.batch) * T(p.heads_q);
  std::vector<T> work(std::size_t(ranks) * ranks, T(0));
  for (int r = 0; r < ranks; ++r)
    for (int s = 0; s < ranks; ++s) {
      const int src = ((r - s) % ranks + ranks) % ranks;
      for (int qc : chunks_of(r, ranks, layout))
        for (int kc : chunks_of(src, ranks, layout))
          work[std::size_t(r) * ranks + s] += heads * T(pair_entries(relation(p, qc, kc), cq, ckv));
    }
  return work;
}

}  // namespace

const char* ring_layout_name(RingLayout l) {
  return l == RingLayout::Zigzag ? "zigzag" : "contiguous";
}

void check_ring(const Problem& p, int ranks, RingLayout layout) {
  const std::string error = validate(p);
  if (!error.empty()) refuse(error);
  check_shape(p, ranks, layout);
}

std::vector<std::int64_t> ring_work(const Problem& p, int ranks, RingLayout layout) {
  return work_table<std::int64_t>(p, ranks, layout);
}

RingResult ring_attention(const Problem& p, const float* q, const float* k, const float* v,
                          int ranks, RingLayout layout) {
  check_ring(p, ranks, layout);
  const int n = num_chunks(ranks, layout);
  const int cq = p.n_q / n, ckv = p.n_kv / n, d = p.head_dim;
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  RingResult res{std::vector<double>(p.q_elems(), 0.0), std::vector<double>(p.lse_elems(), kNegInf),
                 std::vector<std::int64_t>(std::size_t(ranks) * ranks, 0)};
  const Strides qs = p.q_strides(), kvs = p.kv_strides();
  Problem sub = p;  // one (q chunk, kv chunk) pair
  sub.n_q = cq;
  sub.n_kv = ckv;
  const Strides sqs = sub.q_strides(), skvs = sub.kv_strides();
  std::vector<float> qb(sub.q_elems()), kb(sub.kv_elems()), vb(sub.kv_elems());
  std::vector<double> merged(d);
  for (int r = 0; r < ranks; ++r) {
    for (int s = 0; s < ranks; ++s) {
      const int src = ((r - s) % ranks + ranks) % ranks;  // whose K/V slice visits now
      for (int qc : chunks_of(r, ranks, layout)) {
        for (int kc : chunks_of(src, ranks, layout)) {
          const Pair rel = relation(p, qc, kc);
          if (rel == Pair::Hidden) continue;  // no work, no partial
          res.work[std::size_t(r) * ranks + s] +=
              std::int64_t{p.batch} * p.heads_q * pair_entries(rel, cq, ckv);
          sub.causal = rel == Pair::Diagonal;
          copy_rows(q, qs, qb.data(), sqs, p.batch, p.heads_q, qc * cq, cq, d);
          copy_rows(k, kvs, kb.data(), skvs, p.batch, p.heads_kv, kc * ckv, ckv, d);
          copy_rows(v, kvs, vb.data(), skvs, p.batch, p.heads_kv, kc * ckv, ckv, d);
          const Result part = attention(sub, qb.data(), kb.data(), vb.data());
          for (int b = 0; b < p.batch; ++b)
            for (int h = 0; h < p.heads_q; ++h)
              for (int i = 0; i < cq; ++i) {  // merge into the running (O, L) of the row
                const int row = qc * cq + i;
                double* o = res.o.data() + b * qs.batch + h * qs.head + std::int64_t{row} * qs.row;
                double& l = res.lse[(std::int64_t{b} * p.heads_q + h) * p.n_q + row];
                const double* os[2] = {o,
                                       part.o.data() + b * sqs.batch + h * sqs.head + i * sqs.row};
                const double ls[2] = {l, part.lse[(std::int64_t{b} * p.heads_q + h) * cq + i]};
                l = merge_row(2, os, ls, d, merged.data());
                std::copy(merged.begin(), merged.end(), o);
              }
        }
      }
    }
  }
  return res;
}

RingTime ring_time(const Problem& p, int ranks, RingLayout layout, double flops_per_s,
                   double bytes_per_s) {
  if (!(flops_per_s > 0)) {
    refuse("flops_per_s (" + std::to_string(flops_per_s) + ") must be positive");
  }
  if (!(bytes_per_s > 0)) {
    refuse("bytes_per_s (" + std::to_string(bytes_per_s) + ") must be positive");
  }
  const std::vector<double> work = work_table<double>(p, ranks, layout);
  RingTime t;
  t.send_s = 2.0 * p.batch * p.heads_kv * (double(p.n_kv) / ranks) * p.head_dim *
             double(dtype_size(p.dtype)) / bytes_per_s;
  double hidden = 0;
  for (int s = 0; s < ranks; ++s) {
    double most = 0;  // the critical rank of this step
    for (int r = 0; r < ranks; ++r) most = std::max(most, work[std::size_t(r) * ranks + s]);
    const double compute = 4.0 * p.head_dim * most / flops_per_s;
    t.compute_s += compute;
    const bool sends = s < ranks - 1;
    t.step_s.push_back(sends ? std::max(compute, t.send_s) : compute);
    t.total_s += t.step_s.back();
    if (sends) hidden += std::min(compute, t.send_s);
    if (sends && compute < t.send_s) ++t.exposed_steps;
  }
  const double sent = (ranks - 1) * t.send_s;
  t.hidden_fraction = sent > 0 ? hidden / sent : 1.0;
  return t;
}

std::int64_t ring_min_hidden_n(const Problem& p, int ranks, RingLayout layout, double flops_per_s,
                               double bytes_per_s) {
  const std::int64_t granule = num_chunks(std::max(ranks, 1), layout);
  constexpr std::int64_t kMaxN = std::int64_t{1} << 30;
  auto hides = [&](std::int64_t m) {  // all hidden at N = m·granule?
    Problem q = p;
    q.n_q = q.n_kv = static_cast<int>(m * granule);
    return ring_time(q, ranks, layout, flops_per_s, bytes_per_s).exposed_steps == 0;
  };
  std::int64_t lo = 0, hi = kMaxN / granule;  // hides(hi) must hold; hides(lo) never asked
  if (!hides(hi)) {
    refuse("communication does not hide for any N up to " + std::to_string(kMaxN) +
           " (flops_per_s " + std::to_string(flops_per_s) + ", bytes_per_s " +
           std::to_string(bytes_per_s) + ")");
  }
  while (hi - lo > 1) {  // hidden_fraction never falls as N grows: compute ∝ N², sends ∝ N
    const std::int64_t mid = lo + (hi - lo) / 2;
    (hides(mid) ? hi : lo) = mid;
  }
  return hi * granule;
}

}  // namespace fa::ref
