// test_going_further.cpp — the tests of the "going further" tasks, hidden until asked for.
//
// Each task extends a step beyond what the chapter builds (docs/instructors.md lists them).
// Its test case is hidden (a tag starting with "[."), so the suite that gates every step
// never runs it; it runs only when the student asks for it by its tag:
//
//   scripts/exercise.sh further 04-d96                    # builds test_04_flash_attention, runs it
//   build/bin/test_04_flash_attention "[04-d96]"          # the same, by hand
//   cmake -DFA_GOING_FURTHER=ON build                     # or: a ctest entry per task,
//   ctest --test-dir build -L going-further               #     going_further/<task>
//
// Every task's test fails until the step accepts the new problem (check_step) and computes it
// correctly: the same judge as test_steps.cpp (compare.h's tolerance policy against the double
// reference), on fresh poisoned outputs, with awkward shapes (tails, N_q ≠ N_kv, causal, GQA).
//
// Replay a failure: FA_SEED=<base seed printed in the failure> test_NN_slug "[tag]".
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tests/catch.hpp"
#include "tests/gpu_suite.h"

namespace {

using fa::Distribution;
using fa::DType;
using fa::Problem;
using fa::StepInfo;
using namespace fa::test;

/// The step with chapter number `number` in this program, or nullptr. A test program holds
/// one step (test_NN_slug, or the exercise program exercise_NN).
const StepInfo* linked_step(int number) {
  for (const StepInfo* s : fa::steps())
    if (s->number == number) return s;
  return nullptr;
}

/// The step a task extends; fails the test, saying which program to run, when it is absent.
const StepInfo& require_step(int number) {
  const StepInfo* s = linked_step(number);
  INFO("this program does not contain step "
       << (number < 10 ? "0" : "") << number
       << "; run the task in its test program, e.g. build/bin/test_" << (number < 10 ? "0" : "")
       << number << "_<slug> (steps here: " << fa::step_names() << ")");
  REQUIRE(s != nullptr);
  return *s;
}

/// Runs `step` on `p` (fresh inputs, poisoned outputs) and judges O and L against the double
/// reference with the tolerance of compare.h for p.dtype.
void check_task_case(const StepInfo& step, const Problem& p,
                     Distribution dist = Distribution::Normal) {
  const std::uint64_t seed = next_seed();
  INFO(step.name << ": " << p.describe() << " dist=" << fa::distribution_name(dist) << " case seed "
                 << seed << ", replay with FA_SEED=" << base_seed());
  const std::string accepted = fa::check_step(step, p);
  INFO("check_step: " << accepted);
  REQUIRE(accepted.empty());  // first the step must accept the problem ...
  const fa::HostInputs in = fa::make_inputs(p, dist, seed);
  const std::string e = verdict(p, run_on_device(step, in), expected_for(in));
  INFO(e);
  CHECK(e.empty());  // ... then compute it right
}

/// The shapes every task is checked on, for one head dim and dtype.
void check_task(const StepInfo& step, int d, DType dtype) {
  auto check = [&](const Problem& p, Distribution dist = Distribution::Normal) {
    check_task_case(step, with_dtype(p, dtype), dist);
  };
  for (bool causal : {false, true}) {
    if (causal && !step.causal) continue;
    for (int n : {1, 17, 64, 129, 1000})
      check(make_problem(n <= 129 ? 2 : 1, 2, 2, n, n, d, causal));
    for (auto [nq, nkv] : {std::pair{17, 129}, {129, 17}, {1, 1000}, {200, 64}})
      check(make_problem(1, 2, 2, nq, nkv, d, causal));
    if (step.gqa) check(make_problem(2, 6, 2, 129, 129, d, causal));
    check(make_problem(1, 2, 2, 333, 333, d, causal, fa::Layout::BHND));
    check(make_problem(1, 2, 2, 300, 300, d, causal), Distribution::Large);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Step 03
// ---------------------------------------------------------------------------------------

TEST_CASE("going further, step 03: fp16 and bf16 inputs, fp32 accumulation",
          "[.going-further][03-half]") {
  // Q, K, V and O in half precision (2 bytes per element: half the HBM traffic of every
  // tensor), S, P, m, ℓ and the accumulator in fp32. Judged by the 2× rule of compare.h.
  const StepInfo& step = require_step(3);
  for (DType t : {DType::F16, DType::BF16}) {
    check_task(step, 64, t);
    check_task(step, 128, t);
  }
}

// ---------------------------------------------------------------------------------------
// Step 04
// ---------------------------------------------------------------------------------------

TEST_CASE("going further, step 04: head dim 96", "[.going-further][04-d96]") {
  // d = 96 is not a power of two: a new tile configuration whose per-thread blocks and tile
  // loaders still divide evenly (or are taught to handle what does not).
  check_task(require_step(4), 96, DType::F32);
}

TEST_CASE("going further, step 04: head dim 256", "[.going-further][04-d256]") {
  // d = 256 doubles every tile along d: twice the shared memory and twice the O registers
  // of d = 128 per block, so the tile sizes must be chosen again.
  check_task(require_step(4), 256, DType::F32);
}

TEST_CASE("going further, step 04: fp16 and bf16 inputs, fp32 accumulation",
          "[.going-further][04-half]") {
  const StepInfo& step = require_step(4);
  for (DType t : {DType::F16, DType::BF16}) {
    check_task(step, 64, t);
    check_task(step, 128, t);
  }
}
