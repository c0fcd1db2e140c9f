// test_ring.cpp — the ring attention simulation and its time model, before any GPU step is
// judged by them.
//
//   1. ring_attention equals attention() for P = 1..4, both ring layouts, causal and not, MHA
//      and GQA, both tensor layouts, N = 2P·k with k = 1 and k odd (and N_q ≠ N_kv unmasked).
//   2. The work: zigzag gives every rank exactly (2P−1)·C² + C·(C+1) entries per head (C =
//      N/2P), 2C² per step but the first; contiguous causal gives rank r r·C² + C·(C+1)/2
//      (C = N/P), so the last over the first tends to 2P−1.
//   3. Every refusal, with its message.
//   4. The time model: P = 1 sends nothing; infinite bandwidth hides everything; more
//      bandwidth or a longer sequence never hides less; ring_min_hidden_n is the edge.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/inputs.h"
#include "reference/attention.h"
#include "reference/ring.h"
#include "tests/catch.hpp"

namespace {

using fa::Layout;
using fa::Problem;
using fa::ref::RingLayout;

/// The ring and attention() both sum in double, in another order only: they agree to a few
/// units of double rounding. Relative to max(1, |value|).
constexpr double kRingTol = 1e-12;

bool close(double a, double b) {
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::abs(a - b) <= kRingTol * std::max(1.0, std::abs(b));
}

std::int64_t count_far(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return -1;
  std::int64_t far = 0;
  for (std::size_t i = 0; i < got.size(); ++i) far += close(got[i], want[i]) ? 0 : 1;
  return far;
}

constexpr RingLayout kLayouts[] = {RingLayout::Contiguous, RingLayout::Zigzag};

}  // namespace

TEST_CASE("ring: equals attention() for every rank count, layout and mask", "[ring]") {
  for (int ranks = 1; ranks <= 4; ++ranks)
    for (int k : {1, 3})
      for (bool causal : {false, true})
        for (Layout layout : {Layout::BNHD, Layout::BHND})
          for (int hkv : {4, 2}) {  // MHA, GQA
            const int n = 2 * ranks * k;
            const Problem p = fa::make_problem(2, 4, hkv, n, n, 16, causal, layout);
            const fa::HostInputs in = fa::make_inputs(p, fa::Distribution::Normal, 11 + n);
            const fa::ref::Result want =
                fa::ref::attention(p, in.q.data(), in.k.data(), in.v.data());
            for (RingLayout rl : kLayouts) {
              INFO(p.describe() << " ranks " << ranks << " " << fa::ref::ring_layout_name(rl));
              const fa::ref::RingResult got =
                  fa::ref::ring_attention(p, in.q.data(), in.k.data(), in.v.data(), ranks, rl);
              CHECK(count_far(got.o, want.o) == 0);
              CHECK(count_far(got.lse, want.lse) == 0);
              CHECK(got.work == fa::ref::ring_work(p, ranks, rl));
            }
          }
}

TEST_CASE("ring: unmasked N_q != N_kv, and scores of magnitude ~100", "[ring]") {
  const Problem p = fa::make_problem(1, 2, 1, 12, 36, 8, false, Layout::BHND);
  const fa::HostInputs in = fa::make_inputs(p, fa::Distribution::Large, 5);
  const fa::ref::Result want = fa::ref::attention(p, in.q.data(), in.k.data(), in.v.data());
  for (RingLayout rl : kLayouts) {
    const fa::ref::RingResult got =
        fa::ref::ring_attention(p, in.q.data(), in.k.data(), in.v.data(), 3, rl);
    CHECK(count_far(got.o, want.o) == 0);
    CHECK(count_far(got.lse, want.lse) == 0);
  }
}

TEST_CASE("ring: zigzag balances the causal work, contiguous does not", "[ring]") {
  for (int ranks = 1; ranks <= 6; ++ranks) {
    const int c = 5;  // zigzag chunk
    const int n = 2 * ranks * c;
    const Problem p = fa::make_problem(2, 3, 1, n, n, 16, true);
    const std::int64_t heads = 2 * 3;
    INFO("ranks " << ranks);
    const std::vector<std::int64_t> zz = fa::ref::ring_work(p, ranks, RingLayout::Zigzag);
    for (int r = 0; r < ranks; ++r) {
      std::int64_t total = 0;
      for (int s = 0; s < ranks; ++s) {
        total += zz[r * ranks + s];
        CHECK(zz[r * ranks + s] == heads * (s == 0 ? 2 * c * c + c : 2 * c * c));
      }
      CHECK(total == heads * ((2 * ranks - 1) * c * c + c * (c + 1)));
    }
    // Contiguous: chunk C = 2c; rank r sees r full chunks and its diagonal.
    const std::int64_t cc = 2 * c;
    const std::vector<std::int64_t> ct = fa::ref::ring_work(p, ranks, RingLayout::Contiguous);
    for (int r = 0; r < ranks; ++r) {
      std::int64_t total = 0;
      for (int s = 0; s < ranks; ++s) total += ct[r * ranks + s];
      CHECK(total == heads * (r * cc * cc + cc * (cc + 1) / 2));
    }
    // Both do the same total: the causal triangle, N·(N+1)/2 per head.
    std::int64_t sum_zz = 0, sum_ct = 0;
    for (std::size_t i = 0; i < zz.size(); ++i) {
      sum_zz += zz[i];
      sum_ct += ct[i];
    }
    CHECK(sum_zz == heads * std::int64_t{n} * (n + 1) / 2);
    CHECK(sum_ct == sum_zz);
  }
  // Last over first for contiguous: ((2P−1)·C + 1) / (C + 1) → 2P − 1 as C grows.
  const int ranks = 4, n = 4 * 1000;
  const std::vector<std::int64_t> ct =
      fa::ref::ring_work(fa::make_problem(1, 1, 1, n, n, 16, true), ranks, RingLayout::Contiguous);
  std::int64_t first = 0, last = 0;
  for (int s = 0; s < ranks; ++s) {
    first += ct[s];
    last += ct[(ranks - 1) * ranks + s];
  }
  CHECK(double(last) / double(first) == 7001.0 / 1001.0);  // C = 1000
  CHECK(double(last) / double(first) > 6.99);
}

TEST_CASE("ring: refusals name the parameter, its value and the limit", "[ring]") {
  const Problem p = fa::make_problem(1, 2, 2, 12, 12, 16, true);
  const std::vector<float> x(p.q_elems(), 0.f);
  auto run = [&](const Problem& pr, int ranks, RingLayout rl) {
    fa::ref::ring_attention(pr, x.data(), x.data(), x.data(), ranks, rl);
  };
  CHECK_THROWS_WITH(run(p, 0, RingLayout::Zigzag), "ring attention: ranks (0) must be at least 1");
  CHECK_THROWS_WITH(run(p, 4, RingLayout::Zigzag),
                    "ring attention: N_q (12) must be a positive multiple of 2·ranks (8) for the "
                    "zigzag layout");
  CHECK_THROWS_WITH(run(p, 5, RingLayout::Contiguous),
                    "ring attention: N_q (12) must be a positive multiple of ranks (5) for the "
                    "contiguous layout");
  Problem rect = fa::make_problem(1, 2, 2, 6, 12, 16, true);
  CHECK_THROWS_WITH(run(rect, 2, RingLayout::Contiguous),
                    "ring attention: causal needs N_q = N_kv; got N_q 6, N_kv 12");
  rect.causal = false;
  rect.n_kv = 9;
  CHECK_THROWS_WITH(run(rect, 2, RingLayout::Contiguous),
                    "ring attention: N_kv (9) must be a positive multiple of ranks (2) for the "
                    "contiguous layout");
  Problem bad = p;
  bad.heads_kv = 3;
  CHECK_THROWS_WITH(run(bad, 2, RingLayout::Contiguous), "ring attention: " + fa::validate(bad));
  CHECK_THROWS_WITH(fa::ref::ring_time(p, 2, RingLayout::Zigzag, 0.0, 1e9),
                    "ring attention: flops_per_s (0.000000) must be positive");
  CHECK_THROWS_WITH(fa::ref::ring_time(p, 2, RingLayout::Zigzag, 1e12, -1.0),
                    "ring attention: bytes_per_s (-1.000000) must be positive");
}

TEST_CASE("ring: the time model's limits and monotonicity", "[ring]") {
  constexpr double kFlops = 400e12, kBytes = 50e9;  // arbitrary; only the shape matters
  constexpr double kInf = std::numeric_limits<double>::infinity();
  SECTION("one rank sends nothing; infinite bandwidth hides everything") {
    for (RingLayout rl : kLayouts) {
      const Problem p = fa::make_problem(1, 8, 8, 64, 64, 64, true);
      const fa::ref::RingTime one = fa::ref::ring_time(p, 1, rl, kFlops, kBytes);
      CHECK(one.hidden_fraction == 1.0);
      CHECK(one.exposed_steps == 0);
      CHECK(one.total_s == one.compute_s);
      const double want = 4.0 * 64 * 8 * (64.0 * 65 / 2) / kFlops;  // 4·d FLOPs per entry
      CHECK(std::abs(one.compute_s - want) <= 1e-12 * want);
      const fa::ref::RingTime fast = fa::ref::ring_time(p, 4, rl, kFlops, kInf);
      CHECK(fast.send_s == 0.0);
      CHECK(fast.hidden_fraction == 1.0);
      CHECK(fast.total_s == fast.compute_s);
      CHECK(fa::ref::ring_min_hidden_n(p, 1, rl, kFlops, kBytes) ==
            (rl == RingLayout::Zigzag ? 2 : 1));
      CHECK(fa::ref::ring_min_hidden_n(p, 4, rl, kFlops, kInf) ==
            (rl == RingLayout::Zigzag ? 8 : 4));
    }
  }
  SECTION("more bandwidth or a longer sequence never hides less") {
    for (RingLayout rl : kLayouts)
      for (bool causal : {false, true}) {
        double last = 0;
        for (int n = 64; n <= 1 << 16; n *= 2) {
          const Problem p = fa::make_problem(1, 8, 8, n, n, 64, causal);
          const fa::ref::RingTime t = fa::ref::ring_time(p, 4, rl, kFlops, kBytes);
          CHECK(t.hidden_fraction >= last);
          CHECK(t.hidden_fraction <= 1.0);
          CHECK(t.total_s >= t.compute_s);
          last = t.hidden_fraction;
        }
        last = 0;
        const Problem p = fa::make_problem(1, 8, 8, 4096, 4096, 64, causal);
        for (double bw = 1e9; bw <= 1e13; bw *= 10) {
          const fa::ref::RingTime t = fa::ref::ring_time(p, 4, rl, kFlops, bw);
          CHECK(t.hidden_fraction >= last);
          last = t.hidden_fraction;
        }
      }
  }
  SECTION("ring_min_hidden_n is the edge, and zigzag causal needs twice the unmasked N") {
    for (RingLayout rl : kLayouts)
      for (bool causal : {false, true}) {
        Problem p = fa::make_problem(1, 8, 2, 64, 64, 64, causal);
        const std::int64_t n = fa::ref::ring_min_hidden_n(p, 4, rl, kFlops, kBytes);
        const int granule = rl == RingLayout::Zigzag ? 8 : 4;
        INFO(fa::ref::ring_layout_name(rl) << (causal ? " causal" : "") << " N* " << n);
        CHECK(n % granule == 0);
        p.n_q = p.n_kv = static_cast<int>(n);
        CHECK(fa::ref::ring_time(p, 4, rl, kFlops, kBytes).exposed_steps == 0);
        p.n_q = p.n_kv = static_cast<int>(n - granule);
        CHECK(fa::ref::ring_time(p, 4, rl, kFlops, kBytes).exposed_steps > 0);
      }
    // Unmasked: C² entries per step vs a slice of C rows: 4·d·H_q·C²/F = 2·H_kv·C·d·e/W, so
    // C* = H_kv·e·F / (2·H_q·W); zigzag causal does half of C² per step, so N* doubles.
    Problem p = fa::make_problem(1, 8, 2, 64, 64, 64, false);
    const double c_star = 2.0 * 4 * kFlops / (2.0 * 8 * kBytes);
    const std::int64_t plain =
        fa::ref::ring_min_hidden_n(p, 4, RingLayout::Contiguous, kFlops, kBytes);
    CHECK(plain == 4 * static_cast<std::int64_t>(std::ceil(c_star)));
    p.causal = true;
    const std::int64_t zz = fa::ref::ring_min_hidden_n(p, 4, RingLayout::Zigzag, kFlops, kBytes);
    CHECK(std::abs(double(zz) - 2.0 * double(plain)) <= 16);
    // Causal, the same N, well above N*: zigzag's ring is faster than contiguous's (whose busiest
    // rank does a full C² at every step after the first).
    p.n_q = p.n_kv = 1 << 16;
    CHECK(fa::ref::ring_time(p, 4, RingLayout::Zigzag, kFlops, kBytes).total_s <
          0.6 * fa::ref::ring_time(p, 4, RingLayout::Contiguous, kFlops, kBytes).total_s);
  }
}
