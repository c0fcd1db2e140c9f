// test_steps.cpp — the GPU test suite, the same for every registered step.
//
// Each case draws fresh random inputs from a printed seed, runs the step on outputs poisoned
// with NaN, and judges O and L against the double-precision reference with the tolerance
// policy of compare.h (set from what a plain float implementation achieves on the same
// inputs). The program is linked with one step (test_NN_slug), so steps() holds that step.
//
// Replay a failure: FA_SEED=<base seed printed in the failure> test_NN_slug "[group]" draws
// the same inputs for every case of that group again.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "reference/compare.h"
#include "tests/catch.hpp"
#include "tests/gpu_suite.h"

namespace {

using fa::Distribution;
using fa::Problem;
using fa::StepInfo;
using namespace fa::test;

// The head dims to test: 32, 64, 128 where the step supports them, else its own list.
std::vector<int> dims_for(const StepInfo& s) { return fa::test::dims_for(s, {32, 64, 128}); }

// Changes the inputs of a case before it runs (numerics tests plant NaN, Inf, huge values).
using Mutate = void (*)(fa::HostInputs&);

// The one check every group uses, once per dtype the step supports.
void check_case(const StepInfo& step, Problem p, Distribution dist = Distribution::Normal,
                Mutate mutate = nullptr) {
  for (fa::DType t : step.dtypes) {
    p.dtype = t;
    const std::uint64_t seed = next_seed();
    INFO(step.name << ": " << p.describe() << " dist=" << fa::distribution_name(dist)
                   << " case seed " << seed << ", replay with FA_SEED=" << base_seed());
    REQUIRE(fa::check_step(step, p).empty());
    fa::HostInputs in = fa::make_inputs(p, dist, seed);
    if (mutate) mutate(in);
    const std::string e = verdict(p, run_on_device(step, in), expected_for(in));
    INFO(e);
    CHECK(e.empty());
  }
}

// A problem in the step's first dtype.
Problem for_step(const StepInfo& step, Problem p) {
  p.dtype = step.dtypes.front();
  return p;
}

}  // namespace

TEST_CASE("every N, d and N_q != N_kv", "[shapes]") {
  for (const StepInfo* step : fa::steps())
    for (int d : dims_for(*step))
      for (const Problem& p : shape_problems(d)) check_case(*step, p);
}

TEST_CASE("causal, bottom-right aligned, including N_q != N_kv", "[causal]") {
  for (const StepInfo* step : fa::steps()) {
    if (!step->causal) continue;
    // N_q > N_kv leaves the first N_q - N_kv rows without any key (O = 0, L = -inf).
    for (int d : dims_for(*step))
      for (const Problem& p : causal_problems(d)) check_case(*step, p);
  }
}

TEST_CASE("grouped-query and multi-query attention", "[gqa]") {
  for (const StepInfo* step : fa::steps()) {
    if (!step->gqa) continue;
    for (int d : dims_for(*step))
      for (bool causal : {false, true})
        for (const Problem& p : gqa_problems(d, causal)) check_case(*step, p);
  }
}

TEST_CASE("[B, H, N, d] layout as well as [B, N, H, d]", "[layout]") {
  for (const StepInfo* step : fa::steps())
    for (int d : dims_for(*step))
      for (const Problem& p : layout_problems(d, step->causal, step->gqa)) check_case(*step, p);
}

TEST_CASE("mean-shifted and large-magnitude inputs", "[distributions]") {
  for (const StepInfo* step : fa::steps())
    for (int d : dims_for(*step))
      for (Distribution dist : {Distribution::Shifted, Distribution::Large})
        for (bool causal : {false, true}) {
          if (causal && !step->causal) continue;
          for (const Problem& p : distribution_problems(d, causal)) check_case(*step, p, dist);
        }
}

TEST_CASE("edges: fully masked rows, many heads, odd d, and checks that can fail", "[edges]") {
  for (const StepInfo* step : fa::steps()) {
    const int d = dims_for(*step).front();
    if (step->causal) {
      // Rows 0..63 see no key at all: O must be exactly 0 and L exactly -inf, never NaN.
      const Problem p = for_step(*step, make_problem(1, 2, 2, 100, 36, d, true));
      const fa::HostInputs in = fa::make_inputs(p, Distribution::Normal, next_seed());
      const Outputs got = run_on_device(*step, in);
      const fa::Strides s = p.q_strides();
      for (int h = 0; h < 2; ++h)
        for (int i = 0; i < 64; ++i) {
          INFO(step->name << " h=" << h << " i=" << i);
          REQUIRE(std::isinf(got.lse[h * p.n_q + i]));
          REQUIRE(got.lse[h * p.n_q + i] < 0);
          for (int c = 0; c < d; ++c) REQUIRE(got.o[h * s.head + i * s.row + c] == 0.f);
        }
      check_case(*step, p);
    }
    check_case(*step, make_problem(3, 5, 5, 65, 65, d, step->causal));  // B·H not a power of 2
    const Problem odd = for_step(*step, make_problem(1, 2, 2, 33, 33, 17, false));
    if (fa::check_step(*step, odd).empty()) check_case(*step, odd);

    // The judge must reject an output with one wrong element, and one never written.
    const Problem p = for_step(*step, make_problem(1, 2, 2, 64, 64, d, false));
    const fa::HostInputs in = fa::make_inputs(p, Distribution::Normal, next_seed());
    const Expected want = expected_for(in);
    Outputs got = run_on_device(*step, in);
    REQUIRE(verdict(p, got, want).empty());
    got.o[got.o.size() / 2] += 0.01f;
    CHECK_FALSE(verdict(p, got, want).empty());
    fa::DeviceProblem unrun(in, 0);  // poisoned, the step never launched
    Outputs poisoned;
    unrun.download(&poisoned.o, &poisoned.lse);
    CHECK_FALSE(verdict(p, poisoned, want).empty());
  }
}

TEST_CASE("the same inputs give bitwise-identical outputs", "[determinism]") {
  for (const StepInfo* step : fa::steps()) {
    const Problem p = for_step(*step, make_problem(2, 4, step->gqa ? 2 : 4, 1000, 1000,
                                                   dims_for(*step).back(), step->causal));
    const std::uint64_t seed = next_seed();
    INFO(step->name << ": " << p.describe() << " case seed " << seed
                    << ", replay with FA_SEED=" << base_seed());
    const fa::HostInputs in = fa::make_inputs(p, Distribution::Normal, seed);
    const Outputs a = run_on_device(*step, in);
    for (int rep = 0; rep < 3; ++rep) {
      const Outputs b = run_on_device(*step, in);
      REQUIRE(std::memcmp(a.o.data(), b.o.data(), a.o.size() * sizeof(float)) == 0);
      REQUIRE(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)) == 0);
    }
  }
}

// Numerics at the edges. Inputs are planted after drawing; the reference (double) and the
// plain float oracle see the same values, and NaN/Inf must match element by element
// (compare.h: a NaN where the reference has a number, or the reverse, never passes).
//  - Scores of magnitude ~1e4: the max subtraction keeps exp() in range.
//  - A NaN in K makes every row that sees that key NaN: it is never hidden.
//  - +Inf in V: the rows that see that key get +Inf in that column (their weight is > 0),
//    the other columns stay finite. Key 0 is seen by every row, causal or not. (A NaN or Inf in a
//    key or value a row does NOT see is not promised to stay out of that row: tiled kernels
//    multiply masked weights of 0 by V.)
//  - fp16 values near the top of the range and bf16 values with large exponents in V: O is
//    an average of V, so it stays representable.
TEST_CASE("numerics: huge scores, NaN and Inf propagation, extreme values", "[numerics]") {
  for (const StepInfo* step : fa::steps())
    for (int d : dims_for(*step)) {
      // q, k ~ N(0, 50²): scale·q·k has a standard deviation of 2500 and reaches ~1e4.
      check_case(*step, make_problem(1, 2, 2, 129, 200, d, false), Distribution::Normal,
                 [](fa::HostInputs& in) {
                   for (float& x : in.q) x = fa::round_to(in.problem.dtype, x * 50.f);
                   for (float& x : in.k) x = fa::round_to(in.problem.dtype, x * 50.f);
                 });
      check_case(*step, make_problem(1, 2, 2, 77, 77, d, false), Distribution::Normal,
                 [](fa::HostInputs& in) {
                   const fa::Strides s = in.problem.kv_strides();
                   in.k[static_cast<std::size_t>(40 * s.row + 3)] = NAN;  // key 40, head 0
                 });
      check_case(*step, make_problem(1, 2, 2, 77, 77, d, step->causal), Distribution::Normal,
                 [](fa::HostInputs& in) {
                   in.v[1] = INFINITY;  // key 0 (seen by every row, causal too), column 1
                 });
      check_case(*step, make_problem(1, 2, 2, 100, 100, d, false), Distribution::Normal,
                 [](fa::HostInputs& in) {
                   // fp16: |V| up to its top (65504); bf16 and fp32: |V| ~ 1e30.
                   const bool f16 = in.problem.dtype == fa::DType::F16;
                   for (float& x : in.v) {
                     x = f16 ? std::clamp(x * 3e4f, -65000.f, 65000.f) : x * 1e30f;
                     x = fa::round_to(in.problem.dtype, x);
                   }
                 });
    }
}
