// test_backward.cpp — the GPU test suite for backward steps, the same for every registered
// step that has a backward pass (StepInfo::backward).
//
// Each case draws fresh random Q, K, V and dO from a printed seed, takes O and L from the
// double reference (so a backward error is never a forward error in disguise), runs the
// step's backward on gradients poisoned with NaN and a workspace poisoned with NaN, and judges
// dQ, dK and dV against the double reference with the tolerance policy of compare.h, the
// yardstick being the plain float backward (ref::attention_backward_plain) on the same inputs.
// The program is linked with one step (test_NN_slug), so steps() holds that step.
//
// Replay a failure: FA_SEED=<base seed printed in the failure> test_NN_slug "[group]" draws
// the same inputs for every case of that group again.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/device_problem.h"
#include "common/launch.h"
#include "reference/compare.h"
#include "tests/backward_case.h"
#include "tests/catch.hpp"
#include "tests/gpu_suite.h"

namespace {

using fa::Distribution;
using fa::Problem;
using fa::StepInfo;
using fa::ref::ExpectedBackward;
using namespace fa::test;

/// What a backward step wrote.
using Plant = void (*)(fa::HostInputs&, std::vector<float>& d_o);

std::pair<fa::HostInputs, ExpectedBackward> make_case(const Problem& p, Distribution dist,
                                                      std::uint64_t seed, Plant plant = nullptr) {
  fa::HostInputs in = fa::make_inputs(p, dist, seed);
  if (!plant) {
    ExpectedBackward want = backward_expected(in, seed);
    return {std::move(in), std::move(want)};
  }
  // dO as backward_expected draws it, then the plant edits the inputs and dO together.
  std::vector<float> d_o = fa::make_inputs(p, Distribution::Normal, seed ^ 0x9e3779b97f4a7c15ull).q;
  plant(in, d_o);
  ExpectedBackward want = fa::ref::expected_backward(in, std::move(d_o));
  return {std::move(in), std::move(want)};
}

Grads run_backward_on_device(const StepInfo& step, const fa::HostInputs& in,
                             const ExpectedBackward& want) {
  return run_backward_case(step, in, want);
}

std::string verdict(const Problem& p, const Grads& g, const ExpectedBackward& want) {
  return fa::ref::verdict_backward(p, g.dq, g.dk, g.dv, want);
}

// The head dims to test: 16, 32, 64, 128 where the step supports them, else its own list.
std::vector<int> dims_for(const StepInfo& s) { return fa::test::dims_for(s, {16, 32, 64, 128}); }

// The one check every group uses, once per dtype the step supports.
void check_case(const StepInfo& step, Problem p, Distribution dist = Distribution::Normal,
                Plant plant = nullptr) {
  for (fa::DType t : step.dtypes) {
    p.dtype = t;
    const std::uint64_t seed = next_seed();
    INFO(step.name << " backward: " << p.describe() << " dist=" << fa::distribution_name(dist)
                   << " case seed " << seed << ", replay with FA_SEED=" << base_seed());
    REQUIRE(fa::check_step(step, p).empty());
    const auto [in, want] = make_case(p, dist, seed, plant);
    const std::string e = verdict(p, run_backward_on_device(step, in, want), want);
    INFO(e);
    CHECK(e.empty());
  }
}

// A problem in the step's first dtype.
Problem for_step(const StepInfo& step, Problem p) {
  p.dtype = step.dtypes.front();
  return p;
}

// The steps this program tests: those with a backward pass.
std::vector<const StepInfo*> backward_steps() {
  std::vector<const StepInfo*> out;
  for (const StepInfo* s : fa::steps())
    if (s->backward) out.push_back(s);
  return out;
}

}  // namespace

TEST_CASE("backward: the program tests at least one backward step", "[shapes]") {
  REQUIRE_FALSE(backward_steps().empty());
}

TEST_CASE("backward: every N, d and N_q != N_kv", "[shapes]") {
  for (const StepInfo* step : backward_steps())
    for (int d : dims_for(*step))
      for (const Problem& p : shape_problems(d)) check_case(*step, p);
}

TEST_CASE("backward: causal, bottom-right aligned, including N_q != N_kv", "[causal]") {
  for (const StepInfo* step : backward_steps()) {
    if (!step->causal) continue;
    // N_q > N_kv leaves the first N_q - N_kv rows without any key (dQ = 0).
    for (int d : dims_for(*step))
      for (const Problem& p : causal_problems(d)) check_case(*step, p);
  }
}

TEST_CASE("backward: grouped-query and multi-query attention (dK, dV summed over the group)",
          "[gqa]") {
  for (const StepInfo* step : backward_steps()) {
    if (!step->gqa) continue;
    for (int d : dims_for(*step))
      for (bool causal : {false, true}) {
        if (causal && !step->causal) continue;
        for (const Problem& p : gqa_problems(d, causal)) check_case(*step, p);
        check_case(*step, make_problem(1, 8, 1, 300, 70, d, causal));  // MQA, N_q > N_kv
      }
  }
}

TEST_CASE("backward: [B, H, N, d] layout as well as [B, N, H, d]", "[layout]") {
  for (const StepInfo* step : backward_steps())
    for (int d : dims_for(*step))
      for (const Problem& p : layout_problems(d, step->causal, step->gqa)) check_case(*step, p);
}

TEST_CASE("backward: mean-shifted and large-magnitude inputs", "[distributions]") {
  for (const StepInfo* step : backward_steps())
    for (int d : dims_for(*step))
      for (Distribution dist : {Distribution::Shifted, Distribution::Large})
        for (bool causal : {false, true}) {
          if (causal && !step->causal) continue;
          for (const Problem& p : distribution_problems(d, causal)) check_case(*step, p, dist);
        }
}

TEST_CASE("backward edges: fully masked rows, odd d, many heads, refusals, checks that can fail",
          "[edges]") {
  for (const StepInfo* step : backward_steps()) {
    const int d = dims_for(*step).front();
    if (step->causal) {
      // Rows 0..63 see no key at all (L = -inf): their dQ must be exactly 0, never NaN, and
      // they add nothing to dK and dV (the verdict compares those). Every head dim: a step
      // may run a different kernel for each (step 11 does at d = 128).
      for (int dm : dims_for(*step)) {
        const Problem p = for_step(*step, make_problem(1, 2, 2, 100, 36, dm, true));
        const auto [in, want] = make_case(p, Distribution::Normal, next_seed());
        const Grads got = run_backward_on_device(*step, in, want);
        const fa::Strides s = p.q_strides();
        for (int h = 0; h < 2; ++h)
          for (int i = 0; i < 64; ++i) {
            INFO(step->name << " d=" << dm << " h=" << h << " i=" << i);
            for (int c = 0; c < dm; ++c) REQUIRE(got.dq[h * s.head + i * s.row + c] == 0.f);
          }
        CHECK(verdict(p, got, want).empty());
        // Only the last row sees every key; N_q = 1 with N_kv = 1000 causal: one row, all keys.
        check_case(*step, make_problem(1, 2, 2, 1, 1000, dm, true));
      }
    }
    check_case(*step, make_problem(3, 5, 5, 65, 65, d, step->causal));  // B·H not a power of 2
    for (int odd : {1, 17, 40, 96, 200, 256}) {  // head dims off the usual list, where accepted
      const Problem p = for_step(*step, make_problem(1, 2, 2, 33, 70, odd, step->causal));
      if (fa::check_step(*step, p).empty()) check_case(*step, p);
    }

    // Refused before any launch, naming the parameter: a null gradient, an unsupported dtype.
    {
      const Problem p = for_step(*step, make_problem(1, 2, 2, 64, 64, d, false));
      const auto [in, want] = make_case(p, Distribution::Normal, next_seed());
      fa::DeviceBackward dev(
          in, want.o, want.lse, want.d_o,
          step->backward_workspace_bytes ? step->backward_workspace_bytes(p) : 0);
      fa::BackwardTensors t = dev.tensors();
      t.dk = nullptr;
      try {
        fa::run_backward(*step, p, t, dev.workspace());
        FAIL("a null dk was not refused");
      } catch (const std::invalid_argument& e) {
        CHECK(std::string(e.what()) == "pointer dk is null");
      }
      if (step->backward_workspace_bytes && step->backward_workspace_bytes(p) > 0)
        CHECK_THROWS_AS(fa::run_backward(*step, p, dev.tensors(), nullptr), std::invalid_argument);
    }

    // The judge must reject a gradient with one wrong element, and gradients never written.
    const Problem p = for_step(*step, make_problem(1, 2, 2, 64, 64, d, false));
    const auto [in, want] = make_case(p, Distribution::Normal, next_seed());
    const Grads good = run_backward_on_device(*step, in, want);
    REQUIRE(verdict(p, good, want).empty());
    for (std::vector<float> Grads::*g : {&Grads::dq, &Grads::dk, &Grads::dv}) {
      Grads bad = good;
      (bad.*g)[(bad.*g).size() / 2] += 0.01f;
      CHECK_FALSE(verdict(p, bad, want).empty());
    }
    fa::DeviceBackward unrun(in, want.o, want.lse, want.d_o, 0);  // poisoned, never launched
    Grads poisoned;
    unrun.download(&poisoned.dq, &poisoned.dk, &poisoned.dv);
    CHECK_FALSE(verdict(p, poisoned, want).empty());
  }
}

TEST_CASE("backward: bitwise-identical gradients where the step promises them", "[determinism]") {
  for (const StepInfo* step : backward_steps()) {
    const Problem p = for_step(*step, make_problem(2, 4, step->gqa ? 2 : 4, 1000, 1000,
                                                   dims_for(*step).back(), step->causal));
    const std::uint64_t seed = next_seed();
    INFO(step->name << ": " << p.describe() << " case seed " << seed
                    << ", replay with FA_SEED=" << base_seed());
    const auto [in, want] = make_case(p, Distribution::Normal, seed);
    const Grads a = run_backward_on_device(*step, in, want);
    REQUIRE(verdict(p, a, want).empty());
    const auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
      return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
    };
    for (int rep = 0; rep < 3; ++rep) {
      const Grads b = run_backward_on_device(*step, in, want);
      if (step->backward_deterministic_dkdv) {
        REQUIRE(same(a.dk, b.dk));
        REQUIRE(same(a.dv, b.dv));
      }
      if (step->backward_deterministic_dq) REQUIRE(same(a.dq, b.dq));
      // What is not promised bitwise must still pass on every run.
      REQUIRE(verdict(p, b, want).empty());
    }
    // The deterministic mode (Problem::deterministic), where the step offers one: every
    // gradient bitwise the same, and still right.
    if (!step->backward_deterministic_mode) continue;
    fa::HostInputs in_det = in;
    in_det.problem.deterministic = true;
    const Problem& pd = in_det.problem;
    INFO("deterministic mode: " << pd.describe());
    const Grads c = run_backward_on_device(*step, in_det, want);
    REQUIRE(verdict(pd, c, want).empty());
    for (int rep = 0; rep < 3; ++rep) {
      const Grads d = run_backward_on_device(*step, in_det, want);
      REQUIRE(same(c.dq, d.dq));
      REQUIRE(same(c.dk, d.dk));
      REQUIRE(same(c.dv, d.dv));
    }
  }
}

// Masking at its edges, with values planted after drawing; the double reference and the plain
// oracle see the same values, and NaN/Inf must match element by element.
//  - NaN in K and V of the last key, causal: only the rows that see that key (the last rows)
//    may turn NaN; every other row's dQ stays finite, as the reference's does. A kernel that
//    multiplies a masked weight of 0 by the NaN fails here.
//  - dO = +Inf on the rows that see no key (N_q > N_kv, causal), in a Q tile shared with rows
//    that do see keys: their P is 0 and must not meet the Inf (0 · Inf is NaN); the gradients
//    are those of a finite dO.
TEST_CASE("backward numerics: NaN and Inf where the mask hides them", "[numerics]") {
  for (const StepInfo* step : backward_steps()) {
    if (!step->causal) continue;
    for (int d : dims_for(*step)) {
      const Plant nan_last_key = [](fa::HostInputs& in, std::vector<float>&) {
        const fa::Problem& p = in.problem;
        const fa::Strides s = p.kv_strides();
        const auto at = static_cast<std::size_t>((p.n_kv - 1) * s.row);  // head 0
        in.k[at + 3 % p.head_dim] = NAN;
        in.v[at + 2 % p.head_dim] = NAN;
      };
      check_case(*step, make_problem(1, 2, 2, 77, 77, d, true), Distribution::Normal, nan_last_key);
      if (step->gqa)
        check_case(*step, make_problem(1, 4, 2, 50, 77, d, true), Distribution::Normal,
                   nan_last_key);
      check_case(*step, make_problem(1, 2, 2, 100, 50, d, true), Distribution::Normal,
                 [](fa::HostInputs& in, std::vector<float>& d_o) {
                   const fa::Problem& p = in.problem;
                   const fa::Strides s = p.q_strides();
                   for (int h = 0; h < p.heads_q; ++h)
                     for (int i = 0; p.kv_end(i) == 0; ++i)  // rows 0 .. N_q - N_kv - 1
                       for (int x = 0; x < p.head_dim; ++x)
                         d_o[static_cast<std::size_t>(h * s.head + i * s.row + x)] = INFINITY;
                 });
    }
  }
}
