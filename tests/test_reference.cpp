// test_reference.cpp — the yardsticks are checked before anything is measured with them.
//
//   1. The double Eigen reference agrees with an independent plain-loop float oracle.
//   2. Tiny cases computed by hand pin the semantics (bottom-right causal, GQA, empty rows).
//   3. The CPU streaming model of the online softmax equals the reference for every tiling,
//      for huge scores, for fully masked rows, and lets NaN through.
//   4. The judge (compare.h) allows one output ulp for 16-bit outputs and no more.
//   5. The backward reference equals finite differences of the forward's loss, the plain float
//      backward agrees with it, and nothing crosses the causal mask; the backward verdict's
//      rounding floor lets a D summed in another order pass and still fails real errors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/inputs.h"
#include "common/problem.h"
#include "reference/attention.h"
#include "reference/backward.h"
#include "reference/compare.h"
#include "reference/streaming.h"
#include "tests/catch.hpp"

namespace {

using fa::Layout;
using fa::Problem;

constexpr double kTol = 1e-5;  // fp32 accumulation against double: relative, on ‖·‖₂
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// Q, K and V of one problem, in its layout.
struct Inputs {
  std::vector<float> q, k, v;
};

/// Fresh normal(mean, 1) inputs from `seed` (the caller CAPTUREs it).
Inputs random_inputs(const Problem& p, std::uint64_t seed, float mean = 0.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(mean, 1.f);
  Inputs in{std::vector<float>(p.q_elems()), std::vector<float>(p.kv_elems()),
            std::vector<float>(p.kv_elems())};
  for (auto* t : {&in.q, &in.k, &in.v})
    for (float& x : *t) x = normal(rng);
  return in;
}

using fa::make_problem;

/// A problem's shape: B, H_q, H_kv, N_q, N_kv, d.
struct Shape {
  int batch, hq, hkv, nq, nkv, d;
};

/// The shapes on which the plain float oracles are checked against the double references.
const Shape kOracleShapes[] = {
    {1, 1, 1, 1, 1, 32},      // the smallest problem
    {2, 2, 2, 1, 97, 64},     // one query row (decoding)
    {1, 2, 2, 97, 1, 64},     // one key
    {2, 3, 3, 65, 65, 32},    // N one past a power of two
    {1, 4, 2, 50, 130, 64},   // GQA, N_q < N_kv
    {1, 4, 1, 130, 50, 128},  // MQA, N_q > N_kv: rows that see no key when causal
    {1, 2, 1, 257, 257, 64},  // larger, odd N
};

/// Q and K of integers in [-100, 100] (V stays normal): with d = 64 and scale 1/8 every score
/// is exact in float and reaches ~1e4, far past where exp() overflows without the max.
Inputs huge_score_inputs(const Problem& p, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> big(-100, 100);
  Inputs in = random_inputs(p, seed);
  for (float& x : in.q) x = static_cast<float>(big(rng));
  for (float& x : in.k) x = static_cast<float>(big(rng));
  return in;
}

/// The largest |score| the reference saw (it must be called with keep_scores).
double max_abs_score(const fa::ref::Result& ref) {
  double m = 0.0;
  for (double s : ref.s)
    if (std::isfinite(s)) m = std::max(m, std::abs(s));
  return m;
}

/// ‖a − b‖₂ / ‖b‖₂ over the entries where b is finite; NaN if a is NaN there. Entries where
/// b is ±inf must be equal in a (that is how L = -inf rows are compared).
template <class A>
double rel_error(const std::vector<A>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    const double x = a[i];
    if (std::isinf(b[i])) {
      if (x != b[i]) return std::numeric_limits<double>::infinity();
      continue;
    }
    diff += (x - b[i]) * (x - b[i]);  // NaN in a (or b) makes diff NaN: the check fails
    norm += b[i] * b[i];
  }
  return norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

/// Index of element (b, h, i, t) of Q or O in the problem's layout.
std::int64_t q_index(const Problem& p, int b, int h, int i, int t) {
  const fa::Strides s = p.q_strides();
  return b * s.batch + h * s.head + i * s.row + t;
}

/// Runs the streaming model; O in Q's layout, L [B, H_q, N_q].
struct Streamed {
  std::vector<float> o, lse;
};
Streamed stream(const Problem& p, const Inputs& in, fa::ref::StreamingOptions opt) {
  Streamed r{std::vector<float>(p.q_elems(), kNaN), std::vector<float>(p.lse_elems(), kNaN)};
  fa::ref::streaming_attention(p, in.q.data(), in.k.data(), in.v.data(), r.o.data(), r.lse.data(),
                               opt);
  return r;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// 1. Reference against the plain-loop oracle
// ---------------------------------------------------------------------------------------

TEST_CASE("reference matches the plain float loops on random inputs", "[cpu][reference]") {
  const bool causal = GENERATE(false, true);
  const Layout layout = GENERATE(Layout::BNHD, Layout::BHND);
  std::uint64_t seed = 100 + (causal ? 10 : 0) + (layout == Layout::BHND ? 1 : 0);
  for (const Shape& sh : kOracleShapes) {
    const Problem p = make_problem(sh.batch, sh.hq, sh.hkv, sh.nq, sh.nkv, sh.d, causal, layout);
    seed = seed * 31 + 7;
    const float mean = (seed % 2) ? 0.5f : 0.f;  // half the shapes get mean-shifted inputs
    INFO(p.describe());
    CAPTURE(seed, mean);
    const Inputs in = random_inputs(p, seed, mean);
    const fa::ref::Result ref = fa::ref::attention(p, in.q.data(), in.k.data(), in.v.data());
    std::vector<float> lse;
    const std::vector<float> o =
        fa::ref::attention_plain(p, in.q.data(), in.k.data(), in.v.data(), &lse);
    CHECK(rel_error(o, ref.o) < kTol);
    CHECK(rel_error(lse, ref.lse) < kTol);
  }
}

TEST_CASE("reference gives the same answer in both layouts", "[cpu][reference]") {
  // Same numbers stored as [B, N, H, d] and as [B, H, N, d]: O must be the same numbers.
  const Problem a = make_problem(2, 4, 2, 33, 47, 32, true, Layout::BNHD);
  Problem c = a;
  c.layout = Layout::BHND;
  const std::uint64_t seed = 7;
  CAPTURE(seed);
  const Inputs in = random_inputs(a, seed);
  Inputs moved{std::vector<float>(in.q.size()), std::vector<float>(in.k.size()),
               std::vector<float>(in.v.size())};
  const fa::Strides qa = a.q_strides(), qc = c.q_strides();
  const fa::Strides ka = a.kv_strides(), kc = c.kv_strides();
  for (int b = 0; b < a.batch; ++b)
    for (int t = 0; t < a.head_dim; ++t) {
      for (int h = 0; h < a.heads_q; ++h)
        for (int i = 0; i < a.n_q; ++i)
          moved.q[b * qc.batch + h * qc.head + i * qc.row + t] =
              in.q[b * qa.batch + h * qa.head + i * qa.row + t];
      for (int h = 0; h < a.heads_kv; ++h)
        for (int j = 0; j < a.n_kv; ++j) {
          const std::int64_t from = b * ka.batch + h * ka.head + j * ka.row + t;
          const std::int64_t to = b * kc.batch + h * kc.head + j * kc.row + t;
          moved.k[to] = in.k[from];
          moved.v[to] = in.v[from];
        }
    }
  const auto ra = fa::ref::attention(a, in.q.data(), in.k.data(), in.v.data());
  const auto rc = fa::ref::attention(c, moved.q.data(), moved.k.data(), moved.v.data());
  double worst = 0.0;
  for (int b = 0; b < a.batch; ++b)
    for (int h = 0; h < a.heads_q; ++h)
      for (int i = 0; i < a.n_q; ++i)
        for (int t = 0; t < a.head_dim; ++t)
          worst = std::max(worst,
                           std::abs(ra.o[q_index(a, b, h, i, t)] - rc.o[q_index(c, b, h, i, t)]));
  CHECK(worst == 0.0);
  CHECK(rel_error(rc.lse, ra.lse) == 0.0);
}

TEST_CASE("reference survives scores of magnitude 1e4", "[cpu][reference]") {
  // exp(s) overflows double above s ≈ 709: only subtracting the row max keeps O and L finite.
  // Integer entries and scale = 1/8 (d = 64) make every score exact in float too, so the
  // plain float loops (which subtract the max as well) must agree tightly.
  const bool causal = GENERATE(false, true);
  const Problem p = make_problem(1, 2, 2, 40, 50, 64, causal, Layout::BNHD);
  const std::uint64_t seed = 310;
  CAPTURE(seed);
  const Inputs in = huge_score_inputs(p, seed);
  const auto ref = fa::ref::attention(p, in.q.data(), in.k.data(), in.v.data(), true);
  const double max_score = max_abs_score(ref);
  CAPTURE(max_score);
  REQUIRE(max_score > 1e3);  // far beyond what exp() survives without the max
  bool all_finite = true;
  for (double x : ref.o) all_finite = all_finite && std::isfinite(x);
  for (double x : ref.lse) all_finite = all_finite && std::isfinite(x);
  CHECK(all_finite);
  std::vector<float> lse;
  const auto plain = fa::ref::attention_plain(p, in.q.data(), in.k.data(), in.v.data(), &lse);
  CHECK(rel_error(plain, ref.o) < kTol);
  CHECK(rel_error(lse, ref.lse) < kTol);
}

// ---------------------------------------------------------------------------------------
// 2. Cases small enough to check by hand
// ---------------------------------------------------------------------------------------

TEST_CASE("hand-checked: softmax weights, L, and bottom-right causal", "[cpu][reference]") {
  // d = 1 and scale = 1, so a score is just q·k. With q = 1 and keys 0, ln 3, ln 4 the
  // exponentials are 1, 3, 4: every probability is a simple fraction.
  const float ln3 = std::log(3.f), ln4 = std::log(4.f);
  const double eps = 1e-6;

  SECTION("one query, two keys: p = (1/4, 3/4)") {
    Problem p = make_problem(1, 1, 1, 1, 2, 1, false, Layout::BNHD);
    p.scale = 1.f;
    const std::vector<float> q = {1.f}, k = {0.f, ln3}, v = {4.f, 8.f};
    const auto r = fa::ref::attention(p, q.data(), k.data(), v.data(), true);
    CHECK(std::abs(r.p[0] - 0.25) < eps);
    CHECK(std::abs(r.p[1] - 0.75) < eps);
    CHECK(std::abs(r.o[0] - 7.0) < eps);              // 4/4 + 3·8/4
    CHECK(std::abs(r.lse[0] - std::log(4.0)) < eps);  // log(1 + 3)
  }

  SECTION("causal, N_q = 2 < N_kv = 3: the last query row sees every key") {
    // Bottom-right: row i sees keys j <= i + (3 − 2), so row 0 sees keys 0, 1 and row 1
    // sees all three. (Top-left alignment would give row 0 only key 0, and O = 4.)
    Problem p = make_problem(1, 1, 1, 2, 3, 1, true, Layout::BNHD);
    p.scale = 1.f;
    const std::vector<float> q = {1.f, 1.f}, k = {0.f, ln3, ln4}, v = {4.f, 8.f, 100.f};
    const auto r = fa::ref::attention(p, q.data(), k.data(), v.data(), true);
    // Row 0: weights 1, 3 of 4 -> O = 1 + 6 = 7, L = log 4; key 2 is masked.
    CHECK(std::abs(r.o[0] - 7.0) < eps);
    CHECK(std::abs(r.lse[0] - std::log(4.0)) < eps);
    CHECK(std::isinf(r.s[2]));
    CHECK(r.s[2] < 0);
    CHECK(r.p[2] == 0.0);
    // Row 1: weights 1, 3, 4 of 8 -> O = 4/8 + 24/8 + 400/8 = 53.5, L = log 8.
    CHECK(std::abs(r.o[1] - 53.5) < 1e-5);
    CHECK(std::abs(r.lse[1] - std::log(8.0)) < eps);
    CHECK(std::abs(r.p[5] - 0.5) < eps);
  }

  SECTION("causal, N_q = 3 > N_kv = 2: the first row sees nothing") {
    // Row i sees keys j <= i − 1: row 0 none, row 1 key 0, row 2 keys 0 and 1.
    Problem p = make_problem(1, 1, 1, 3, 2, 1, true, Layout::BNHD);
    p.scale = 1.f;
    const std::vector<float> q = {1.f, 1.f, 1.f}, k = {0.f, ln3}, v = {4.f, 8.f};
    const auto r = fa::ref::attention(p, q.data(), k.data(), v.data(), true);
    CHECK(r.o[0] == 0.0);  // no key: O = 0 exactly ...
    CHECK(std::isinf(r.lse[0]));
    CHECK(r.lse[0] < 0);  // ... and L = -inf, not NaN
    CHECK(r.p[0] == 0.0);
    CHECK(r.p[1] == 0.0);
    CHECK(std::abs(r.o[1] - 4.0) < eps);  // one key: its weight is 1, L = its score 0
    CHECK(std::abs(r.lse[1]) < eps);
    CHECK(std::abs(r.o[2] - 7.0) < eps);
    CHECK(std::abs(r.lse[2] - std::log(4.0)) < eps);
  }
}

TEST_CASE("hand-checked: GQA groups consecutive query heads", "[cpu][reference]") {
  // H_q = 4, H_kv = 2: query heads 0, 1 read K/V head 0 and heads 2, 3 read head 1
  // (h / group_size, not h % H_kv). V is 1 everywhere in head 0 and 2 in head 1, so every
  // output of a query head equals the value of the head it reads.
  const Layout layout = GENERATE(Layout::BNHD, Layout::BHND);
  const Problem p = make_problem(1, 4, 2, 3, 5, 4, false, layout);
  const std::uint64_t seed = 11;
  CAPTURE(seed);
  Inputs in = random_inputs(p, seed);
  const fa::Strides kvs = p.kv_strides();
  for (int g = 0; g < p.heads_kv; ++g)
    for (int j = 0; j < p.n_kv; ++j)
      for (int t = 0; t < p.head_dim; ++t) in.v[g * kvs.head + j * kvs.row + t] = g + 1.f;
  const auto r = fa::ref::attention(p, in.q.data(), in.k.data(), in.v.data());
  for (int h = 0; h < p.heads_q; ++h)
    for (int i = 0; i < p.n_q; ++i)
      for (int t = 0; t < p.head_dim; ++t) {
        CAPTURE(h, i, t);
        CHECK(std::abs(r.o[q_index(p, 0, h, i, t)] - (h < 2 ? 1.0 : 2.0)) < 1e-12);
      }
}

// ---------------------------------------------------------------------------------------
// 3. The streaming model of the online softmax
// ---------------------------------------------------------------------------------------

TEST_CASE("streaming model equals the reference for every tiling", "[cpu][streaming]") {
  const bool causal = GENERATE(false, true);
  const Layout layout = GENERATE(Layout::BNHD, Layout::BHND);
  const Shape shapes[] = {
      {1, 1, 1, 1, 1, 32},      // N = 1
      {1, 2, 1, 1, 150, 64},    // one query row against many keys, MQA
      {2, 4, 2, 100, 100, 32},  // GQA; 100 is a multiple of no power-of-two tile
      {1, 2, 2, 45, 131, 64},   // N_q < N_kv
      {1, 2, 1, 131, 45, 128},  // N_q > N_kv: fully masked rows when causal
  };
  // Tiles of 1, odd tiles, tiles that don't divide N, tiles larger than N.
  const fa::ref::StreamingOptions tilings[] = {{1, 1},  {3, 3},  {16, 16}, {64, 64}, {100, 100},
                                               {1, 64}, {64, 1}, {16, 3},  {3, 100}, {256, 256}};
  std::uint64_t seed = 200 + (causal ? 10 : 0) + (layout == Layout::BHND ? 1 : 0);
  for (const Shape& sh : shapes) {
    const Problem p = make_problem(sh.batch, sh.hq, sh.hkv, sh.nq, sh.nkv, sh.d, causal, layout);
    seed = seed * 31 + 7;
    INFO(p.describe());
    CAPTURE(seed);
    const Inputs in = random_inputs(p, seed, 0.5f);
    const auto ref = fa::ref::attention(p, in.q.data(), in.k.data(), in.v.data());
    for (const auto& opt : tilings) {
      CAPTURE(opt.block_q, opt.block_kv);
      const Streamed s = stream(p, in, opt);
      CHECK(rel_error(s.o, ref.o) < kTol);
      CHECK(rel_error(s.lse, ref.lse) < kTol);  // -inf rows must be -inf in both
    }
  }
}

TEST_CASE("streaming model survives scores of magnitude 1e4", "[cpu][streaming]") {
  // exp(1e4) overflows any float; only the running max keeps this finite. Integer entries
  // and scale = 1/8 (d = 64) make every score exact in float, so the model and the double
  // reference see the same scores and must agree tightly despite their size.
  const bool causal = GENERATE(false, true);
  const Problem p = make_problem(1, 2, 2, 70, 90, 64, causal, Layout::BNHD);
  const std::uint64_t seed = 300;
  CAPTURE(seed);
  const Inputs in = huge_score_inputs(p, seed);
  const auto ref = fa::ref::attention(p, in.q.data(), in.k.data(), in.v.data(), true);
  const double max_score = max_abs_score(ref);
  CAPTURE(max_score);
  REQUIRE(max_score > 5e3);  // the test is about what it says it is about
  for (const auto& opt : {fa::ref::StreamingOptions{1, 1}, fa::ref::StreamingOptions{16, 7},
                          fa::ref::StreamingOptions{64, 64}}) {
    CAPTURE(opt.block_q, opt.block_kv);
    const Streamed s = stream(p, in, opt);
    bool all_finite = true;
    for (float x : s.o) all_finite = all_finite && std::isfinite(x);
    for (float x : s.lse) all_finite = all_finite && std::isfinite(x);
    CHECK(all_finite);
    CHECK(rel_error(s.o, ref.o) < kTol);
    CHECK(rel_error(s.lse, ref.lse) < kTol);
  }
}

TEST_CASE("rows that see no key give O = 0 and L = -inf, never NaN",
          "[cpu][reference][streaming]") {
  // Causal with N_q = 50 > N_kv = 20: rows 0..29 see nothing. Tiles of 16 rows mix such
  // rows with rows that do see keys (rows 30, 31), which exercises the -inf − (-inf) guard.
  const Layout layout = GENERATE(Layout::BNHD, Layout::BHND);
  const Problem p = make_problem(2, 2, 1, 50, 20, 32, true, layout);
  const std::uint64_t seed = 400;
  CAPTURE(seed);
  const Inputs in = random_inputs(p, seed);
  const int first_seeing = p.n_q - p.n_kv;  // kv_end(i) = i − 30 + 1 > 0 from i = 30
  const auto ref = fa::ref::attention(p, in.q.data(), in.k.data(), in.v.data());
  std::vector<float> plain_lse;
  const auto plain = fa::ref::attention_plain(p, in.q.data(), in.k.data(), in.v.data(), &plain_lse);
  for (const auto& opt : {fa::ref::StreamingOptions{1, 1}, fa::ref::StreamingOptions{16, 16},
                          fa::ref::StreamingOptions{16, 7}, fa::ref::StreamingOptions{64, 64}}) {
    CAPTURE(opt.block_q, opt.block_kv);
    const Streamed s = stream(p, in, opt);
    int wrong_empty_rows = 0, nan_entries = 0;
    for (int b = 0; b < p.batch; ++b)
      for (int h = 0; h < p.heads_q; ++h)
        for (int i = 0; i < p.n_q; ++i) {
          const std::int64_t row = (std::int64_t{b} * p.heads_q + h) * p.n_q + i;
          for (int t = 0; t < p.head_dim; ++t) {
            const std::int64_t x = q_index(p, b, h, i, t);
            nan_entries += std::isnan(s.o[x]) + std::isnan(ref.o[x]) + std::isnan(plain[x]);
            if (i < first_seeing)
              wrong_empty_rows += (s.o[x] != 0.f) + (ref.o[x] != 0.0) + (plain[x] != 0.f);
          }
          nan_entries +=
              std::isnan(s.lse[row]) + std::isnan(ref.lse[row]) + std::isnan(plain_lse[row]);
          if (i < first_seeing)
            wrong_empty_rows +=
                (s.lse[row] != kNegInf) + (ref.lse[row] != kNegInf) + (plain_lse[row] != kNegInf);
        }
    CHECK(nan_entries == 0);
    CHECK(wrong_empty_rows == 0);
    CHECK(rel_error(s.o, ref.o) < kTol);
    CHECK(rel_error(s.lse, ref.lse) < kTol);
  }
}

TEST_CASE("NaN in one V entry reaches exactly the outputs that depend on it",
          "[cpu][reference][streaming]") {
  // V[key j, column c] = NaN. O[i, c] depends on it iff row i sees key j; other columns of
  // O and all of L never do. The reference must show exactly that. The streaming model
  // must show NaN wherever the reference does. (Like the GPU kernels, it may also spread
  // NaN to a masked row inside the same tile, through 0 · NaN; that is not checked.)
  const Layout layout = GENERATE(Layout::BNHD, Layout::BHND);
  const Problem p = make_problem(1, 2, 1, 40, 40, 16, true, layout);
  const std::uint64_t seed = 500;
  CAPTURE(seed);
  Inputs in = random_inputs(p, seed);
  const int j_nan = 25, c_nan = 3;  // causal, N_q = N_kv: rows i >= 25 see key 25
  in.v[j_nan * p.kv_strides().row + c_nan] = kNaN;

  const auto ref = fa::ref::attention(p, in.q.data(), in.k.data(), in.v.data());
  const auto plain = fa::ref::attention_plain(p, in.q.data(), in.k.data(), in.v.data());
  const Streamed s = stream(p, in, {16, 16});
  int ref_wrong = 0, plain_wrong = 0, stream_missed = 0;
  for (int h = 0; h < p.heads_q; ++h)
    for (int i = 0; i < p.n_q; ++i)
      for (int t = 0; t < p.head_dim; ++t) {
        const bool depends = (t == c_nan) && (j_nan < p.kv_end(i));
        const std::int64_t x = q_index(p, 0, h, i, t);
        ref_wrong += std::isnan(ref.o[x]) != depends;
        plain_wrong += std::isnan(plain[x]) != depends;
        stream_missed += depends && !std::isnan(s.o[x]);
      }
  CHECK(ref_wrong == 0);
  CHECK(plain_wrong == 0);
  CHECK(stream_missed == 0);
  for (double x : ref.lse) CHECK(std::isfinite(x));  // V does not enter L
}

TEST_CASE("NaN in Q is not hidden by the max or the empty-row guard",
          "[cpu][reference][streaming]") {
  // A NaN score must not be mistaken for "everything masked" (which would give O = 0).
  const Problem p = make_problem(1, 1, 1, 20, 20, 8, true, Layout::BNHD);
  const std::uint64_t seed = 600;
  CAPTURE(seed);
  Inputs in = random_inputs(p, seed);
  const int i_nan = 5;
  in.q[i_nan * p.q_strides().row] = kNaN;
  const auto ref = fa::ref::attention(p, in.q.data(), in.k.data(), in.v.data());
  std::vector<float> plain_lse;
  const auto plain = fa::ref::attention_plain(p, in.q.data(), in.k.data(), in.v.data(), &plain_lse);
  for (const auto& opt : {fa::ref::StreamingOptions{1, 1}, fa::ref::StreamingOptions{4, 4}}) {
    CAPTURE(opt.block_q, opt.block_kv);
    const Streamed s = stream(p, in, opt);
    CHECK(std::isnan(s.lse[i_nan]));
    CHECK(std::isnan(s.lse[i_nan - 1]) == false);
    for (int t = 0; t < p.head_dim; ++t) CHECK(std::isnan(s.o[i_nan * p.q_strides().row + t]));
  }
  CHECK(std::isnan(ref.lse[i_nan]));
  CHECK(std::isnan(plain_lse[i_nan]));
  for (int t = 0; t < p.head_dim; ++t) {
    CHECK(std::isnan(ref.o[i_nan * p.q_strides().row + t]));
    CHECK(std::isnan(plain[i_nan * p.q_strides().row + t]));
  }
}

TEST_CASE("streaming model rejects block sizes below 1, naming the parameter", "[cpu][streaming]") {
  const Problem p = make_problem(1, 1, 1, 4, 4, 8, false, Layout::BNHD);
  const Inputs in = random_inputs(p, 1);
  std::vector<float> o(p.q_elems()), lse(p.lse_elems());
  auto message = [&](fa::ref::StreamingOptions opt) -> std::string {
    try {
      fa::ref::streaming_attention(p, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data(),
                                   opt);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(no exception)";
  };
  const std::string bad_q = message({0, 64}), bad_kv = message({64, -3});
  CAPTURE(bad_q, bad_kv);
  CHECK(bad_q.find("block_q (0)") != std::string::npos);
  CHECK(bad_kv.find("block_kv (-3)") != std::string::npos);
  CHECK(message({1, 1}) == "(no exception)");
}

TEST_CASE("the judge allows one output ulp for 16-bit outputs, not two", "[cpu][reference]") {
  // fp16 spacing: 2^-10 in [1, 2), 2^-9 in [2, 4); bf16: 2^-7 in [1, 2); fp32 adds nothing.
  CHECK(fa::ulp_of(fa::DType::F16, 1.5) == std::ldexp(1.0, -10));
  CHECK(fa::ulp_of(fa::DType::F16, -3.0) == std::ldexp(1.0, -9));
  CHECK(fa::ulp_of(fa::DType::F16, 1e-9) == std::ldexp(1.0, -24));  // subnormal spacing
  CHECK(fa::ulp_of(fa::DType::BF16, 1.0) == std::ldexp(1.0, -7));
  CHECK(fa::ulp_of(fa::DType::F32, 3.0) == 0);

  // An O of magnitude ~3 whose plain implementation is almost exact (error 1e-6): a step one
  // fp16 ulp (2^-9) off passes as fp16 output, fails when judged as fp32 output, and two
  // ulps off fail either way.
  fa::Comparison plain;
  plain.rel_err = 1e-6;
  plain.max_abs_err = 1e-6;
  fa::Comparison step = plain;
  step.max_abs_ref = 3.0;
  step.max_abs_err = std::ldexp(1.0, -9);
  CHECK(fa::judge(step, plain, "O", fa::DType::F16, fa::DType::F16).empty());
  CHECK_FALSE(fa::judge(step, plain, "O", fa::DType::F16, fa::DType::F32).empty());
  step.max_abs_err = 2 * std::ldexp(1.0, -9);
  CHECK_FALSE(fa::judge(step, plain, "O", fa::DType::F16, fa::DType::F16).empty());
}

TEST_CASE("score rounding: negligible for ordinary scores, ~1e-2 for scores of 1e4",
          "[cpu][reference]") {
  fa::Problem p = fa::make_problem(1, 2, 2, 129, 200, 64);
  std::mt19937 gen(7);
  std::normal_distribution<float> normal;
  std::vector<float> q(p.q_elems()), k(p.kv_elems()), v(p.kv_elems());
  for (auto* x : {&q, &k, &v})
    for (float& e : *x) e = normal(gen);
  const double ordinary = fa::score_rounding_error(p, q.data(), k.data(), v.data());
  CHECK(ordinary < 1e-5);  // far below the 1e-4 slack: ordinary tests are as tight as before
  for (auto* x : {&q, &k})
    for (float& e : *x) e *= 50.f;  // scores ~1e4, as in the numerics test
  const double huge = fa::score_rounding_error(p, q.data(), k.data(), v.data());
  CHECK(huge > 5e-4);
  CHECK(huge < 2e-2);
  CHECK(std::abs(huge / ordinary / 2500 - 1) < 1e-6);  // linear in |q|·|k|
}

// ---------------------------------------------------------------------------------------
// 5. The backward reference
// ---------------------------------------------------------------------------------------

namespace {

/// Q, K, V and dO of multiples of 1/64 in [-2, 2]: x ± 2⁻¹² is then exact in float, so a
/// finite difference moves an input by exactly the step it divides by.
struct GridInputs {
  Inputs in;
  std::vector<float> d_o;
};
GridInputs grid_inputs(const Problem& p, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> grid(-128, 128);
  GridInputs g{random_inputs(p, seed), std::vector<float>(p.q_elems())};
  for (auto* t : {&g.in.q, &g.in.k, &g.in.v, &g.d_o})
    for (float& x : *t) x = grid(rng) / 64.f;
  return g;
}

/// The loss whose gradients the backward computes: Σ dO ∘ O, O from the double reference.
double loss(const Problem& p, const Inputs& in, const std::vector<float>& d_o) {
  const auto r = fa::ref::attention(p, in.q.data(), in.k.data(), in.v.data());
  double sum = 0.0;
  for (std::size_t i = 0; i < r.o.size(); ++i) sum += double(d_o[i]) * r.o[i];
  return sum;
}

}  // namespace

TEST_CASE("backward reference equals central differences of the forward's loss",
          "[cpu][backward]") {
  // Every element of dQ, dK and dV against (loss(x + h) − loss(x − h)) / 2h, h = 2⁻¹².
  // Its error: truncation h²/6 · |∂³loss/∂x³| ≈ 1e-8 · |∂³loss/∂x³| — with entries in
  // [-2, 2], d ≤ 4 and scores of order 1 the third derivatives are of order 10, so ~1e-7 —
  // plus rounding 2⁻⁵³ · |loss| / h ~ 1e-12. The bound 2e-6 · (1 + |g|) is ten times that
  // (measured: at most 1.5e-7), while a lost scale, a missing D, a group not summed or a key
  // crossing the mask moves a gradient by 1e-2 or more.
  const bool causal = GENERATE(false, true);
  const Layout layout = GENERATE(Layout::BNHD, Layout::BHND);
  struct Case {
    Shape shape;
    float scale;
  };
  const Case cases[] = {
      {{1, 1, 1, 1, 1, 2}, 0.f},   // the smallest problem: dQ = dK = 0, dV = dO
      {{1, 2, 2, 4, 4, 3}, 0.f},   // N_q = N_kv
      {{1, 2, 1, 3, 5, 4}, 0.7f},  // MQA, N_q < N_kv, a scale of its own
      {{2, 4, 2, 5, 3, 4}, 0.f},   // GQA, N_q > N_kv: causal rows 0 and 1 see no key
      {{1, 3, 1, 2, 6, 2}, 1.3f},  // MQA, groups of three, one query row seeing few keys
  };
  const double h = std::ldexp(1.0, -12);
  std::uint64_t seed = 500 + (causal ? 10 : 0) + (layout == Layout::BHND ? 1 : 0);
  double worst = 0.0;
  for (const Case& c : cases) {
    const Shape& sh = c.shape;
    Problem p = make_problem(sh.batch, sh.hq, sh.hkv, sh.nq, sh.nkv, sh.d, causal, layout);
    p.scale = c.scale;
    seed = seed * 31 + 7;
    INFO(p.describe() << " scale " << p.softmax_scale());
    CAPTURE(seed);
    GridInputs g = grid_inputs(p, seed);
    const auto grads =
        fa::ref::attention_backward(p, g.in.q.data(), g.in.k.data(), g.in.v.data(), g.d_o.data());
    const std::pair<std::vector<float>*, const std::vector<double>*> tensors[] = {
        {&g.in.q, &grads.dq}, {&g.in.k, &grads.dk}, {&g.in.v, &grads.dv}};
    const char* names[] = {"dQ", "dK", "dV"};
    for (int t = 0; t < 3; ++t) {
      std::vector<float>& x = *tensors[t].first;
      const std::vector<double>& grad = *tensors[t].second;
      REQUIRE(grad.size() == x.size());
      for (std::size_t i = 0; i < x.size(); ++i) {
        const float x0 = x[i];
        x[i] = static_cast<float>(x0 + h);
        const double up = loss(p, g.in, g.d_o);
        x[i] = static_cast<float>(x0 - h);
        const double down = loss(p, g.in, g.d_o);
        x[i] = x0;
        const double fd = (up - down) / (2 * h);
        const double err = std::abs(fd - grad[i]);
        worst = std::max(worst, err);
        if (!(err <= 2e-6 * (1 + std::abs(grad[i])))) {  // a NaN gradient fails too
          CAPTURE(names[t], i, fd, grad[i]);
          FAIL_CHECK("gradient differs from the finite difference");
        }
      }
    }
  }
  CAPTURE(worst);
  CHECK(worst < 2e-6);
}

TEST_CASE("backward: D = rowsum(dO ∘ O), and a forward handed in gives the same gradients",
          "[cpu][backward]") {
  const Problem p = make_problem(2, 4, 2, 7, 9, 8, true, Layout::BHND);
  const std::uint64_t seed = 610;
  CAPTURE(seed);
  const Inputs in = random_inputs(p, seed);
  const Inputs dout = random_inputs(p, seed + 1);  // its q serves as dO
  const auto fwd = fa::ref::attention(p, in.q.data(), in.k.data(), in.v.data());
  const auto own =
      fa::ref::attention_backward(p, in.q.data(), in.k.data(), in.v.data(), dout.q.data());
  const auto given =
      fa::ref::attention_backward(p, in.q.data(), in.k.data(), in.v.data(), dout.q.data(), &fwd);
  CHECK(given.dq == own.dq);
  CHECK(given.dk == own.dk);
  CHECK(given.dv == own.dv);
  CHECK(given.delta == own.delta);
  double worst = 0.0;
  for (int b = 0; b < p.batch; ++b)
    for (int hq = 0; hq < p.heads_q; ++hq)
      for (int i = 0; i < p.n_q; ++i) {
        double sum = 0.0;
        for (int t = 0; t < p.head_dim; ++t) {
          const std::int64_t at = q_index(p, b, hq, i, t);
          sum += double(dout.q[at]) * fwd.o[at];
        }
        const double d = own.delta[(std::int64_t{b} * p.heads_q + hq) * p.n_q + i];
        worst = std::max(worst, std::abs(d - sum));
      }
  CHECK(worst < 1e-12);

  // A forward of another problem's size is refused, naming the field and the size it needs.
  auto message = [&](const fa::ref::Result& f) -> std::string {
    try {
      fa::ref::attention_backward(p, in.q.data(), in.k.data(), in.v.data(), dout.q.data(), &f);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(no exception)";
  };
  fa::ref::Result short_o = fwd, short_lse = fwd;
  short_o.o.pop_back();
  short_lse.lse.clear();
  const std::string bad_o = message(short_o), bad_lse = message(short_lse);
  CAPTURE(bad_o, bad_lse);
  CHECK(bad_o.find("forward.o (" + std::to_string(p.q_elems() - 1) + " values)") !=
        std::string::npos);
  CHECK(bad_o.find(std::to_string(p.q_elems())) != std::string::npos);
  CHECK(bad_lse.find("forward.lse (0 values)") != std::string::npos);
  CHECK(message(fwd) == "(no exception)");
  Problem bad = p;
  bad.heads_kv = 3;  // 4 is not a multiple of 3
  CHECK_THROWS_AS(
      fa::ref::attention_backward(bad, in.q.data(), in.k.data(), in.v.data(), dout.q.data()),
      std::invalid_argument);
  CHECK_THROWS_AS(
      fa::ref::attention_backward_plain(bad, in.q.data(), in.k.data(), in.v.data(), dout.q.data()),
      std::invalid_argument);
}

TEST_CASE("hand-checked backward: one key, grouped heads", "[cpu][backward]") {
  // With a single key every P is 1, so O = V, dP = dO · V = D and dS = 0: dQ = dK = 0, and
  // dV is the sum of dO over every row of every query head of the group (H_q = 4, H_kv = 2:
  // heads 0, 1 feed K/V head 0 and heads 2, 3 head 1).
  const Layout layout = GENERATE(Layout::BNHD, Layout::BHND);
  const Problem p = make_problem(1, 4, 2, 3, 1, 4, false, layout);
  const std::uint64_t seed = 620;
  CAPTURE(seed);
  const Inputs in = random_inputs(p, seed);
  const Inputs dout = random_inputs(p, seed + 1);
  const auto g =
      fa::ref::attention_backward(p, in.q.data(), in.k.data(), in.v.data(), dout.q.data());
  const auto plain =
      fa::ref::attention_backward_plain(p, in.q.data(), in.k.data(), in.v.data(), dout.q.data());
  for (double x : g.dq) CHECK(std::abs(x) < 1e-12);
  for (double x : g.dk) CHECK(std::abs(x) < 1e-12);
  const fa::Strides kvs = p.kv_strides();
  for (int kv = 0; kv < p.heads_kv; ++kv)
    for (int t = 0; t < p.head_dim; ++t) {
      double sum = 0.0;
      for (int hq = 2 * kv; hq < 2 * kv + 2; ++hq)
        for (int i = 0; i < p.n_q; ++i) sum += dout.q[q_index(p, 0, hq, i, t)];
      CAPTURE(kv, t);
      CHECK(std::abs(g.dv[kv * kvs.head + t] - sum) < 1e-12);
      CHECK(std::abs(plain.dv[kv * kvs.head + t] - sum) < 1e-5);
    }
}

TEST_CASE("hand-checked backward: chapter 10's worked example", "[cpu][backward]") {
  // The example docs/10-backward.md works by hand: d = 1, scale = 1, one query q = 1, keys
  // 0 and ln 3 (weights 1/4, 3/4), values 4 and 8 (O = 7, L = ln 4), dO = 2. Then
  // dV = Pᵀ dO = (1/2, 3/2), dP = dO·V = (8, 16), D = dO·O = 14 = Σ P dP,
  // dS = P ∘ (dP − D) = (−3/2, 3/2) (a row of dS sums to 0), dQ = dS K = (3/2) ln 3,
  // dK = dSᵀ q = (−3/2, 3/2).
  Problem p = make_problem(1, 1, 1, 1, 2, 1, false, Layout::BNHD);
  p.scale = 1.f;
  const std::vector<float> q = {1.f}, k = {0.f, std::log(3.f)}, v = {4.f, 8.f}, d_o = {2.f};
  const auto g = fa::ref::attention_backward(p, q.data(), k.data(), v.data(), d_o.data());
  const auto plain = fa::ref::attention_backward_plain(p, q.data(), k.data(), v.data(), d_o.data());
  const double eps = 1e-6;
  CHECK(std::abs(g.delta[0] - 14.0) < eps);
  CHECK(std::abs(g.dv[0] - 0.5) < eps);
  CHECK(std::abs(g.dv[1] - 1.5) < eps);
  CHECK(std::abs(g.dk[0] + 1.5) < eps);
  CHECK(std::abs(g.dk[1] - 1.5) < eps);
  CHECK(std::abs(g.dq[0] - 1.5 * std::log(3.0)) < eps);
  CHECK(std::abs(plain.delta[0] - 14.f) < 1e-5f);
  CHECK(std::abs(plain.dq[0] - 1.5f * std::log(3.f)) < 1e-5f);
  CHECK(std::abs(plain.dk[1] - 1.5f) < 1e-5f);
  CHECK(std::abs(plain.dv[1] - 1.5f) < 1e-5f);
}

TEST_CASE("plain float backward matches the double backward", "[cpu][backward]") {
  // fp32: float sums of up to ~260 terms, and dS = P ∘ (dP − D) subtracts numbers of
  // similar size, so the relative error reaches 7e-7 (measured): 1e-5 leaves a margin of ten.
  // fp16/bf16: P, dS and the gradients are rounded to 11 and 8 significant bits, a relative
  // error of about one unit in their last place, 2⁻¹¹ ≈ 5e-4 and 2⁻⁸ ≈ 4e-3 (measured: 1.5e-3
  // and 4.8e-3); the bounds 1e-2 and 3e-2 leave a margin of six or more.
  const bool causal = GENERATE(false, true);
  const Layout layout = GENERATE(Layout::BNHD, Layout::BHND);
  struct Precision {
    fa::DType dtype;
    double tol;
  };
  const Precision precisions[] = {
      {fa::DType::F32, 1e-5}, {fa::DType::F16, 1e-2}, {fa::DType::BF16, 3e-2}};
  std::uint64_t seed = 700 + (causal ? 10 : 0) + (layout == Layout::BHND ? 1 : 0);
  for (const Shape& sh : kOracleShapes)
    for (const Precision& pr : precisions) {
      Problem p = make_problem(sh.batch, sh.hq, sh.hkv, sh.nq, sh.nkv, sh.d, causal, layout);
      p.dtype = pr.dtype;
      seed = seed * 31 + 7;
      INFO(p.describe());
      CAPTURE(seed);
      fa::HostInputs in = fa::make_inputs(p, fa::Distribution::Normal, seed);
      std::vector<float> d_o = fa::make_inputs(p, fa::Distribution::Normal, seed + 1).q;
      const auto ref =
          fa::ref::attention_backward(p, in.q.data(), in.k.data(), in.v.data(), d_o.data());
      const auto plain =
          fa::ref::attention_backward_plain(p, in.q.data(), in.k.data(), in.v.data(), d_o.data());
      const double e_dq = rel_error(plain.dq, ref.dq), e_dk = rel_error(plain.dk, ref.dk);
      const double e_dv = rel_error(plain.dv, ref.dv), e_d = rel_error(plain.delta, ref.delta);
      CAPTURE(e_dq, e_dk, e_dv, e_d);
      CHECK(e_dq < pr.tol);
      CHECK(e_dk < pr.tol);
      CHECK(e_dv < pr.tol);
      CHECK(e_d < pr.tol);
    }
}

TEST_CASE("backward: nothing crosses the causal mask", "[cpu][backward]") {
  // Causal, N_q = 6, N_kv = 9: row i sees keys [0, i + 4). With dO = 0 on rows r and below,
  // the rows that carry a gradient (i < r) see keys [0, r + 3) only, so keys r + 3 and on
  // must get dK = dV = 0 exactly — while the keys those rows do see must not all be 0. Their
  // dS is 0 because their P is, so their dK rounding floor must be exactly 0 too (the keys
  // the rows see get a floor > 0).
  const Layout layout = GENERATE(Layout::BNHD, Layout::BHND);
  const Problem p = make_problem(1, 2, 1, 6, 9, 8, true, layout);
  const int r = 3, hidden_from = p.kv_end(r - 1);
  REQUIRE(hidden_from == r + 3);
  const std::uint64_t seed = 810;
  CAPTURE(seed);
  Inputs in = random_inputs(p, seed);
  std::vector<float> d_o = random_inputs(p, seed + 1).q;
  for (int hq = 0; hq < p.heads_q; ++hq)
    for (int i = r; i < p.n_q; ++i)
      for (int t = 0; t < p.head_dim; ++t) d_o[q_index(p, 0, hq, i, t)] = 0.f;
  const auto g = fa::ref::attention_backward(p, in.q.data(), in.k.data(), in.v.data(), d_o.data());
  const auto plain =
      fa::ref::attention_backward_plain(p, in.q.data(), in.k.data(), in.v.data(), d_o.data());
  const fa::Strides kvs = p.kv_strides();
  double seen = 0.0;
  for (int j = 0; j < p.n_kv; ++j)
    for (int t = 0; t < p.head_dim; ++t) {
      const std::int64_t at = j * kvs.row + t;
      CAPTURE(j, t);
      if (j < hidden_from) {
        seen = std::max({seen, std::abs(g.dk[at]), std::abs(g.dv[at])});
        CHECK(g.dk_floor[at] > 0.0);
        continue;
      }
      CHECK(g.dk_floor[at] == 0.0);
      CHECK(g.dk[at] == 0.0);
      CHECK(g.dv[at] == 0.0);
      CHECK(plain.dk[at] == 0.f);
      CHECK(plain.dv[at] == 0.f);
    }
  CHECK(seen > 1e-3);

  // NaN in the keys rows 0 .. r − 1 cannot see leaves their dQ and its floor exactly as they
  // were.
  for (int j = hidden_from; j < p.n_kv; ++j)
    for (int t = 0; t < p.head_dim; ++t) in.k[j * kvs.row + t] = in.v[j * kvs.row + t] = kNaN;
  const auto gn = fa::ref::attention_backward(p, in.q.data(), in.k.data(), in.v.data(), d_o.data());
  const auto pn =
      fa::ref::attention_backward_plain(p, in.q.data(), in.k.data(), in.v.data(), d_o.data());
  for (int hq = 0; hq < p.heads_q; ++hq)
    for (int i = 0; i < p.n_q; ++i)
      for (int t = 0; t < p.head_dim; ++t) {
        const std::int64_t at = q_index(p, 0, hq, i, t);
        CAPTURE(hq, i, t);
        if (i < r) {
          CHECK(gn.dq[at] == g.dq[at]);
          CHECK(gn.dq_floor[at] == g.dq_floor[at]);
          CHECK(g.dq_floor[at] > 0.0);
          CHECK(pn.dq[at] == plain.dq[at]);
        } else {  // these rows see the NaN keys: it must show, not vanish
          CHECK(std::isnan(gn.dq[at]));
          CHECK(std::isnan(pn.dq[at]));
        }
      }
}

TEST_CASE("backward: a row that sees no key has zero gradients and its dO changes nothing",
          "[cpu][backward]") {
  // Causal, N_q = 5 > N_kv = 3: rows 0 and 1 see no key (O = 0, L = -inf). Their dQ, its
  // rounding floor and D are exactly 0, never NaN (the other rows' floors are > 0), and even a
  // dO of 1e30 on them leaves dK, dV and the floors as they were.
  const Layout layout = GENERATE(Layout::BNHD, Layout::BHND);
  const Problem p = make_problem(2, 2, 1, 5, 3, 16, true, layout);
  REQUIRE(p.kv_end(1) == 0);
  REQUIRE(p.kv_end(2) == 1);
  const std::uint64_t seed = 820;
  CAPTURE(seed);
  const Inputs in = random_inputs(p, seed);
  std::vector<float> d_o = random_inputs(p, seed + 1).q;
  const auto g = fa::ref::attention_backward(p, in.q.data(), in.k.data(), in.v.data(), d_o.data());
  const auto plain =
      fa::ref::attention_backward_plain(p, in.q.data(), in.k.data(), in.v.data(), d_o.data());
  for (int b = 0; b < p.batch; ++b)
    for (int hq = 0; hq < p.heads_q; ++hq)
      for (int i = 0; i < 2; ++i) {
        const std::int64_t row = (std::int64_t{b} * p.heads_q + hq) * p.n_q + i;
        CHECK(g.delta[row] == 0.0);
        CHECK(plain.delta[row] == 0.f);
        for (int t = 0; t < p.head_dim; ++t) {
          const std::int64_t at = q_index(p, b, hq, i, t);
          CHECK(g.dq[at] == 0.0);
          CHECK(g.dq_floor[at] == 0.0);
          CHECK(g.dq_floor[q_index(p, b, hq, i + 2, t)] > 0.0);
          CHECK(plain.dq[at] == 0.f);
          d_o[at] = 1e30f;
        }
      }
  const auto g2 = fa::ref::attention_backward(p, in.q.data(), in.k.data(), in.v.data(), d_o.data());
  const auto plain2 =
      fa::ref::attention_backward_plain(p, in.q.data(), in.k.data(), in.v.data(), d_o.data());
  CHECK(g2.dk == g.dk);
  CHECK(g2.dv == g.dv);
  CHECK(g2.dq == g.dq);
  CHECK(g2.dq_floor == g.dq_floor);
  CHECK(g2.dk_floor == g.dk_floor);
  CHECK(plain2.dk == plain.dk);
  CHECK(plain2.dv == plain.dv);
  CHECK(plain2.dq == plain.dq);
}

TEST_CASE("backward verdict: the plain gradients pass, one wrong element or a NaN fails",
          "[cpu][backward]") {
  // The judgement a backward kernel gets (compare.h, verdict_backward), tried on outputs whose
  // errors are known: the plain oracle's own (within its bound by construction) and those
  // with one element moved or never written. GQA and N_q != N_kv, so dK and dV are compared
  // in K's layout, which differs from Q's.
  const Layout layout = GENERATE(Layout::BNHD, Layout::BHND);
  const bool causal = GENERATE(false, true);
  const Problem p = make_problem(2, 4, 2, 9, 13, 8, causal, layout);
  const fa::HostInputs in = fa::make_inputs(p, fa::Distribution::Normal, 830);
  const fa::ref::ExpectedBackward want =
      fa::ref::expected_backward(in, fa::make_inputs(p, fa::Distribution::Normal, 831).q);
  REQUIRE(want.o.size() == static_cast<std::size_t>(p.q_elems()));
  REQUIRE(want.lse.size() == static_cast<std::size_t>(p.lse_elems()));
  const auto& pl = want.plain;
  CHECK(fa::ref::verdict_backward(p, pl.dq, pl.dk, pl.dv, want).empty());

  auto moved = [](std::vector<float> x) {
    x[x.size() / 3] += 0.05f;
    return x;
  };
  CHECK(fa::ref::verdict_backward(p, moved(pl.dq), pl.dk, pl.dv, want).rfind("dQ:", 0) == 0);
  CHECK(fa::ref::verdict_backward(p, pl.dq, moved(pl.dk), pl.dv, want).rfind("dK:", 0) == 0);
  CHECK(fa::ref::verdict_backward(p, pl.dq, pl.dk, moved(pl.dv), want).rfind("dV:", 0) == 0);
  std::vector<float> nan_dv = pl.dv;
  nan_dv.back() = std::numeric_limits<float>::quiet_NaN();
  const std::string e = fa::ref::verdict_backward(p, pl.dq, pl.dk, nan_dv, want);
  CHECK(e.rfind("dV: 1 non-finite mismatches", 0) == 0);
  // The last element of dV in K's layout: batch 1, K/V head 1, key 12, dim 7.
  CHECK(e.find("(b=1, h=1, i=12, j=7)") != std::string::npos);
  CHECK_THROWS_AS(fa::ref::expected_backward(in, std::vector<float>(3)), std::invalid_argument);
}

namespace {

/// Gradients from a float backward the way a kernel may compute them: on the O and L it is
/// handed (want.o, want.lse), with D = dO_i · O_i summed from the last dimension to the first
/// while dP = dO · V runs forward, so that where dS = P ∘ (dP − D) cancels it does not cancel
/// to the last bit as in attention_backward_plain (which sums both the same way).
struct FloatGradients {
  std::vector<float> dq, dk, dv;
};
FloatGradients reversed_delta_backward(const fa::HostInputs& in,
                                       const fa::ref::ExpectedBackward& want) {
  const Problem& p = in.problem;
  const fa::Strides kvs = p.kv_strides();
  const float scale = p.softmax_scale();
  FloatGradients g{std::vector<float>(p.q_elems()), std::vector<float>(p.kv_elems()),
                   std::vector<float>(p.kv_elems())};
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h)
      for (int i = 0; i < p.n_q; ++i) {
        const std::int64_t qi = q_index(p, b, h, i, 0);
        const std::int64_t kv0 = b * kvs.batch + (h / p.group_size()) * kvs.head;
        const float l = want.lse[(std::int64_t{b} * p.heads_q + h) * p.n_q + i];
        float D = 0.f;
        for (int t = p.head_dim - 1; t >= 0; --t) D += want.d_o[qi + t] * want.o[qi + t];
        for (int j = 0; j < p.kv_end(i); ++j) {
          const std::int64_t kj = kv0 + j * kvs.row;
          float s = 0.f, dp = 0.f;
          for (int t = 0; t < p.head_dim; ++t) {
            s += in.q[qi + t] * in.k[kj + t];
            dp += want.d_o[qi + t] * in.v[kj + t];
          }
          const float pij = std::exp(scale * s - l), ds = pij * (dp - D);
          for (int t = 0; t < p.head_dim; ++t) {
            g.dq[qi + t] += scale * ds * in.k[kj + t];
            g.dk[kj + t] += scale * ds * in.q[qi + t];
            g.dv[kj + t] += pij * want.d_o[qi + t];
          }
        }
      }
  return g;
}

/// The backward case of `p` on normal inputs, dO normal too.
fa::ref::ExpectedBackward normal_backward(const fa::HostInputs& in, std::uint64_t seed) {
  return fa::ref::expected_backward(in,
                                    fa::make_inputs(in.problem, fa::Distribution::Normal, seed).q);
}

/// ‖x‖₂ of a vector.
template <class T>
double norm2(const std::vector<T>& x) {
  double s = 0.0;
  for (T e : x) s += double(e) * e;
  return std::sqrt(s);
}

}  // namespace

TEST_CASE("backward verdict: the rounding floor covers a D summed in another order (one key)",
          "[cpu][backward]") {
  // One key: P = 1 and dP = D = dO_i · V_0, so the exact dQ and dK are 0 and a float kernel
  // returns the rounding of two dot products summed in different orders. The plain float
  // oracle sums them in the same order and cancels, so without the floor "4 × plain" gives
  // this noise no room (seen on the H200 at d = 32, 64, 128: dQ rel_err 1.4e-5 to 4.3e-5
  // against 1e-5; this model: 1.3e-5 to 5.0e-5). With the floor it passes with room to spare
  // (allowance 1.7e-4 to 6.2e-4, twelve times the error), and an error of 1e-3 on one element,
  // twenty times the floor's largest allowance, still fails.
  const int d = GENERATE(32, 64, 128);
  const Problem p = make_problem(1, 2, 2, 128, 1, d, false, Layout::BNHD);
  const std::uint64_t seed = 900 + d;
  CAPTURE(d, seed);
  const fa::HostInputs in = fa::make_inputs(p, fa::Distribution::Normal, seed);
  const fa::ref::ExpectedBackward want = normal_backward(in, seed + 1);
  CHECK(norm2(want.ref.dq) < 1e-12);
  CHECK(norm2(want.ref.dk) < 1e-12);
  const FloatGradients kern = reversed_delta_backward(in, want);

  Problem kv = p;  // K's layout, as verdict_backward compares dK
  kv.n_q = p.n_kv;
  kv.heads_q = p.heads_kv;
  const fa::Comparison dq = fa::compare_output(p, kern.dq, want.ref.dq);
  const fa::Comparison dk = fa::compare_output(kv, kern.dk, want.ref.dk);
  const fa::Comparison plain_dq = fa::compare_output(p, want.plain.dq, want.ref.dq);
  const fa::FloorAllowance fq = fa::floor_allowance(want.ref.dq_floor, want.ref.dq, p.dtype);
  const fa::FloorAllowance fk = fa::floor_allowance(want.ref.dk_floor, want.ref.dk, p.dtype);
  CAPTURE(dq.rel_err, dq.max_abs_err, plain_dq.rel_err, fq.rel, fq.abs);
  CAPTURE(dk.rel_err, dk.max_abs_err, fk.rel, fk.abs);
  // The CPU model shows the H200's failure: without the floor, dQ fails.
  CHECK_FALSE(fa::judge(dq, plain_dq, "dQ").empty());
  // With it the reversed D passes, and its errors are a small part of the allowance.
  CHECK(fa::ref::verdict_backward(p, kern.dq, kern.dk, kern.dv, want).empty());
  CHECK(fa::ref::verdict_backward(p, want.plain.dq, want.plain.dk, want.plain.dv, want).empty());
  CHECK(dq.rel_err < fq.rel / 4);
  CHECK(dk.rel_err < fk.rel / 4);
  CHECK(dq.max_abs_err < fq.abs / 2);
  CHECK(dk.max_abs_err < fk.abs / 2);

  // Not blind: 1e-3 on one element of dQ or of dK fails.
  for (int which = 0; which < 2; ++which) {
    std::vector<float> mq = kern.dq, mk = kern.dk;
    (which == 0 ? mq : mk)[(which == 0 ? mq : mk).size() / 3] += 1e-3f;
    CAPTURE(which);
    CHECK(
        fa::ref::verdict_backward(p, mq, mk, kern.dv, want).rfind(which == 0 ? "dQ:" : "dK:", 0) ==
        0);
  }
}

TEST_CASE("backward verdict: for ordinary inputs the rounding floor adds little",
          "[cpu][backward]") {
  // N = 512, d = 128, normal inputs, GQA: the floor's relative allowance is a few u·√d
  // (measured for dQ and dK 2.9e-6, 4.0e-6 causal, where the first rows see few keys; for dV,
  // P's own error alone, less), under half the 1e-5 slack, and its absolute one 1.1e-5 to
  // 1.2e-5 against 1e-4, so a kernel's gradients are judged about as tightly as without it.
  // A whole gradient off by 3e-5 relative, or its largest element by 1e-3 of itself, still
  // fails.
  const bool causal = GENERATE(false, true);
  const Problem p = make_problem(1, 4, 2, 512, 512, 128, causal, Layout::BHND);
  const std::uint64_t seed = 910 + (causal ? 1 : 0);
  CAPTURE(causal, seed);
  const fa::HostInputs in = fa::make_inputs(p, fa::Distribution::Normal, seed);
  const fa::ref::ExpectedBackward want = normal_backward(in, seed + 1);
  const fa::FloorAllowance fq = fa::floor_allowance(want.ref.dq_floor, want.ref.dq, p.dtype);
  const fa::FloorAllowance fk = fa::floor_allowance(want.ref.dk_floor, want.ref.dk, p.dtype);
  const fa::FloorAllowance fv = fa::floor_allowance(want.ref.dv_floor, want.ref.dv, p.dtype);
  CAPTURE(fq.rel, fq.abs, fk.rel, fk.abs, fv.rel, fv.abs);
  CHECK(fq.rel < 5e-6);
  CHECK(fk.rel < 5e-6);
  CHECK(fv.rel < 5e-6);
  CHECK(fq.abs < 2e-5);
  CHECK(fk.abs < 2e-5);
  CHECK(fv.abs < 2e-5);
  CHECK(fq.rel > 0);
  CHECK(fk.rel > 0);
  CHECK(fv.rel > 0);

  const FloatGradients kern = reversed_delta_backward(in, want);
  CHECK(fa::ref::verdict_backward(p, kern.dq, kern.dk, kern.dv, want).empty());
  auto scaled = [](std::vector<float> x) {
    for (float& e : x) e *= 1.f + 3e-5f;
    return x;
  };
  auto largest_moved = [](std::vector<float> x, const std::vector<double>& ref) {
    std::size_t at = 0;
    for (std::size_t i = 0; i < ref.size(); ++i)
      if (std::abs(ref[i]) > std::abs(ref[at])) at = i;
    x[at] += 1e-3f * static_cast<float>(ref[at]);
    return x;
  };
  const auto& pl = want.plain;
  CHECK(fa::ref::verdict_backward(p, scaled(pl.dq), pl.dk, pl.dv, want).rfind("dQ:", 0) == 0);
  CHECK(fa::ref::verdict_backward(p, pl.dq, scaled(pl.dk), pl.dv, want).rfind("dK:", 0) == 0);
  CHECK(fa::ref::verdict_backward(p, largest_moved(pl.dq, want.ref.dq), pl.dk, pl.dv, want)
            .rfind("dQ:", 0) == 0);
  CHECK(fa::ref::verdict_backward(p, pl.dq, largest_moved(pl.dk, want.ref.dk), pl.dv, want)
            .rfind("dK:", 0) == 0);
  CHECK(fa::ref::verdict_backward(p, pl.dq, pl.dk, scaled(pl.dv), want).rfind("dV:", 0) == 0);
  CHECK(fa::ref::verdict_backward(p, pl.dq, pl.dk, largest_moved(pl.dv, want.ref.dv), want)
            .rfind("dV:", 0) == 0);
}
