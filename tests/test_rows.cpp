// test_rows.cpp — the reference for sampled rows (what the tour checks on large problems):
// the rows it computes are the full reference's rows, and the sampler takes every head's
// first and last rows, the requested count, and the same rows again for the same seed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

#include "common/problem.h"
#include "reference/attention.h"
#include "tests/catch.hpp"

namespace {

using fa::Problem;

std::vector<float> normal_values(std::int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x(static_cast<std::size_t>(n));
  for (float& e : x) e = normal(rng);
  return x;
}

/// Equal up to the order of the double sums: Eigen's product blocks a few rows differently
/// from a whole head, so the last bits may differ (1e-12 is ~10⁴ double ulps, far below any
/// kernel's error); -inf and 0 must match exactly.
bool same_double(double got, double want) {
  if (got == want) return true;
  return std::isfinite(got) && std::isfinite(want) &&
         std::abs(got - want) <= 1e-12 * (1.0 + std::abs(want));
}

}  // namespace

TEST_CASE("attention_rows gives the full reference's O and L for those rows (to 1e-12)", "[rows]") {
  const Problem problems[] = {
      fa::make_problem(2, 4, 2, 77, 130, 64, true),                    // GQA, causal
      fa::make_problem(1, 3, 3, 200, 33, 32, true, fa::Layout::BHND),  // rows that see nothing
      fa::make_problem(2, 2, 1, 129, 257, 128, false),                 // MQA
      fa::make_problem(1, 1, 1, 1, 1, 1, false),
      fa::make_problem(1, 1, 1, 150, 70000, 1, true),  // S taken a few rows at a time
  };
  for (const Problem& p : problems) {
    CAPTURE(p.describe());
    std::mt19937_64 rng(7);
    const std::vector<float> q = normal_values(p.q_elems(), rng);
    const std::vector<float> k = normal_values(p.kv_elems(), rng);
    const std::vector<float> v = normal_values(p.kv_elems(), rng);
    const fa::ref::Result full = fa::ref::attention(p, q.data(), k.data(), v.data());
    for (int per_head : {1, 2, 5, p.n_q}) {
      CAPTURE(per_head);
      std::vector<std::int64_t> rows = fa::ref::sample_rows(p, per_head, 99);
      // Out of order and repeated rows are fine too.
      std::reverse(rows.begin(), rows.end());
      rows.push_back(rows.front());
      const fa::ref::RowsResult got =
          fa::ref::attention_rows(p, q.data(), k.data(), v.data(), rows);
      REQUIRE(got.rows == rows);
      REQUIRE(got.o.size() == rows.size() * p.head_dim);
      REQUIRE(got.lse.size() == rows.size());
      const fa::Strides qs = p.q_strides();
      for (std::size_t t = 0; t < rows.size(); ++t) {
        const std::int64_t bh = rows[t] / p.n_q, i = rows[t] % p.n_q;
        const std::int64_t b = bh / p.heads_q, h = bh % p.heads_q;
        CAPTURE(t, got.lse[t], full.lse[rows[t]]);
        REQUIRE(same_double(got.lse[t], full.lse[rows[t]]));
        for (int c = 0; c < p.head_dim; ++c) {
          CAPTURE(c);
          REQUIRE(same_double(got.o[t * p.head_dim + c],
                              full.o[b * qs.batch + h * qs.head + i * qs.row + c]));
        }
      }
    }
  }
}

TEST_CASE("attention_rows refuses rows outside the problem", "[rows]") {
  const Problem p = fa::make_problem(1, 2, 2, 8, 8, 16);
  const std::vector<float> q(p.q_elems(), 0.5f), kv(p.kv_elems(), 0.25f);
  REQUIRE_THROWS_AS(fa::ref::attention_rows(p, q.data(), kv.data(), kv.data(), {16}),
                    std::invalid_argument);
  REQUIRE_THROWS_AS(fa::ref::attention_rows(p, q.data(), kv.data(), kv.data(), {-1}),
                    std::invalid_argument);
}

TEST_CASE("sample_rows: first and last rows of every head, distinct, seeded", "[rows]") {
  const Problem p = fa::make_problem(3, 4, 2, 1000, 500, 64);
  for (int per_head : {2, 3, 17, 998}) {
    CAPTURE(per_head);
    const std::vector<std::int64_t> rows = fa::ref::sample_rows(p, per_head, 1234);
    REQUIRE(rows.size() == std::size_t(p.batch) * p.heads_q * per_head);
    REQUIRE(std::is_sorted(rows.begin(), rows.end()));
    REQUIRE(std::set<std::int64_t>(rows.begin(), rows.end()).size() == rows.size());
    for (std::int64_t bh = 0; bh < std::int64_t{p.batch} * p.heads_q; ++bh) {
      const auto lo = std::lower_bound(rows.begin(), rows.end(), bh * p.n_q);
      const auto hi = std::lower_bound(rows.begin(), rows.end(), (bh + 1) * p.n_q);
      REQUIRE(hi - lo == per_head);
      REQUIRE(*lo == bh * p.n_q);                    // first row
      REQUIRE(*(hi - 1) == bh * p.n_q + p.n_q - 1);  // last row
    }
    REQUIRE(fa::ref::sample_rows(p, per_head, 1234) == rows);
  }
  // Another seed, other rows (the interior ones).
  REQUIRE(fa::ref::sample_rows(p, 17, 1) != fa::ref::sample_rows(p, 17, 2));
  // Heads draw different rows.
  const std::vector<std::int64_t> r = fa::ref::sample_rows(p, 17, 5);
  std::set<std::int64_t> head0, head1;
  for (std::int64_t x : r) {
    if (x / p.n_q == 0) head0.insert(x % p.n_q);
    if (x / p.n_q == 1) head1.insert(x % p.n_q);
  }
  REQUIRE(head0 != head1);
  // As many rows as the head has, or more: every row.
  REQUIRE(fa::ref::sample_rows(p, p.n_q, 3).size() == std::size_t(p.lse_elems()));
  REQUIRE(fa::ref::sample_rows(p, 5000, 3).size() == std::size_t(p.lse_elems()));
  REQUIRE_THROWS_AS(fa::ref::sample_rows(p, 0, 3), std::invalid_argument);
}

TEST_CASE("rows_per_head_to_check: every row when small, a bounded sample when large", "[rows]") {
  // The tour's default problem: every row.
  REQUIRE(fa::ref::rows_per_head_to_check(fa::make_problem(1, 4, 4, 1024, 1024, 64)) == 1024);
  const Problem big[] = {
      fa::make_problem(1, 8, 8, 65536, 65536, 64),
      fa::make_problem(4, 16, 16, 16384, 16384, 128),
      fa::make_problem(1, 4, 4, 46000, 46000, 1),
      fa::make_problem(64, 32, 32, 16384, 16384, 128),
  };
  for (const Problem& p : big) {
    CAPTURE(p.describe());
    const int per_head = fa::ref::rows_per_head_to_check(p);
    REQUIRE(per_head >= 2);
    REQUIRE(per_head < p.n_q);
    const double heads = double(p.batch) * p.heads_q;
    const double row_cost = double(p.n_kv) * std::max(p.head_dim, 16);
    const double cost = heads * per_head * row_cost;
    // About the budget: at most one more row per head, unless the two-row minimum.
    if (per_head > 2) REQUIRE(cost <= double(fa::ref::kFullCheckMacs) + heads * row_cost);
    REQUIRE(cost >= double(fa::ref::kFullCheckMacs) - heads * row_cost);
  }
  REQUIRE(fa::ref::rows_per_head_to_check(fa::make_problem(1, 8, 8, 65536, 65536, 64)) == 32);
}
